"""Stage 1: a numerically stable softmax."""
import numpy as np


def softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    s = np.asarray(scores)
    top = np.max(s, axis=axis, keepdims=True)
    if np.any(np.isneginf(top)):
        raise ValueError("softmax: a slice is entirely -inf")
    s -= top
    e = np.exp(s)
    total = np.sum(e, axis=axis, keepdims=True)
    return e / total
