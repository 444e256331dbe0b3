# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Stage 4: scaled scores, and why the scale is 1/sqrt(d_k).

Article A, "Why divide by the square root?"; Article B, "Scores, now with a divide".
"""
import numpy as np


def scaled_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """q [..., n_q, d_k], k [..., n_k, d_k] -> scores [..., n_q, n_k] = q k^T / sqrt(d_k)."""
    d_k = q.shape[-1]
    return (q @ np.swapaxes(k, -1, -2)) / np.sqrt(d_k)


def score_variance(d_k: int, n_pairs: int = 20000, seed: int = 0, scaled: bool = False) -> float:
    """Estimate var(q . k) for q, k with independent standard-normal entries.

    Draws `n_pairs` pairs of d_k-dimensional vectors from np.random.default_rng(seed).
    With scaled=True the variance of q . k / sqrt(d_k) is estimated instead.
    Theory: d_k unscaled, 1 scaled.
    """
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n_pairs, d_k))
    k = rng.standard_normal((n_pairs, d_k))
    dots = np.sum(q * k, axis=-1)
    if scaled:
        dots = dots / np.sqrt(d_k)
    return float(np.var(dots))
