# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Stage 1: a numerically stable softmax.

Article A, "How the scores become shares"; Article B, "Simple self-attention".
"""
import numpy as np


def softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Turn scores into weights that are positive and sum to 1 along `axis`.

    scores: any shape, any float dtype; `-inf` marks a forbidden entry.
    Returns an array of the same shape. A `-inf` entry gets weight exactly 0.
    Raises ValueError when a slice along `axis` is entirely `-inf`
    (there is nothing to share the weight among); each slice counts on its own, so one such
    slice among good ones raises too.
    `scores` itself is left as it was: the weights are a new array.
    Stable for large scores (e.g. +-1e4): the slice maximum is subtracted first,
    which changes no ratio because the common factor cancels.
    Adding the same number to every score in a slice leaves the weights unchanged.
    Write it with numpy alone: softmax.py, and any stage module it imports, may not import scipy,
    torch, jax or tensorflow, not even unused.
    A call that loads one anyway, under whatever name, fails too: the grader measures the memory of
    one call in a child of its own.
    """
    scores = np.asarray(scores)
    if np.any(np.all(np.isneginf(scores), axis=axis)):
        raise ValueError("softmax: a slice is entirely -inf")
    m = np.max(scores, axis=axis, keepdims=True)
    e = np.exp(scores - m)
    return e / np.sum(e, axis=axis, keepdims=True)
