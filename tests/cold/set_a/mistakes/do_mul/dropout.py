"""Bonus stage: attention dropout, inverted, on the weights."""
import numpy as np


def attention_dropout(weights: np.ndarray, p: float, rng: np.random.Generator, training: bool) -> np.ndarray:
    if not training or p == 0:
        return weights
    drop = rng.random(weights.shape) < p
    if p >= 1:
        return np.zeros_like(weights)
    return np.where(drop, 0.0, weights * (1.0 - p)).astype(weights.dtype, copy=False)
