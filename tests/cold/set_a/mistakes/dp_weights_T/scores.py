"""Stage 2: dot products as scores, and attention with no learned weights."""
import numpy as np

from .softmax import softmax


def dot_scores(x: np.ndarray) -> np.ndarray:
    return x @ x.T


def simple_self_attention(x: np.ndarray) -> np.ndarray:
    weights = softmax(dot_scores(x), axis=-1)
    return weights.T @ x
