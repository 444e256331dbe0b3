"""Stage 4: scaled scores, and why the scale is 1/sqrt(d_k)."""
import numpy as np


def scaled_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    d_k = q.shape[-1]
    raw = q @ np.swapaxes(k, -1, -2)
    return raw / np.sqrt(d_k)


def score_variance(d_k: int, n_pairs: int = 20000, seed: int = 0, scaled: bool = False) -> float:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((n_pairs, d_k))
    k = rng.standard_normal((n_pairs, d_k))
    dots = np.sum(q * k, axis=1)
    if scaled:
        dots = dots / np.sqrt(d_k)
    return float(np.var(dots))
