# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Bonus stage: attention dropout, inverted, on the weights.

Article B, "Causal attention": during training a random fraction of the weights is removed and
the rest are rescaled; at inference nothing changes.
"""
import numpy as np


def attention_dropout(weights: np.ndarray, p: float, rng: np.random.Generator, training: bool) -> np.ndarray:
    """Zero each weight with probability p and divide the survivors by (1 - p), so every weight
    keeps its expected value. Returns `weights` unchanged when not training (or p == 0).
    Draw the mask with one rng.random(weights.shape) call: a weight is dropped where its draw is
    below p. `weights` itself is left as it was: when training, the result is a new array."""
    if not training or p == 0:
        return weights
    keep = rng.random(weights.shape) >= p
    return np.where(keep, weights / (1.0 - p), 0.0)
