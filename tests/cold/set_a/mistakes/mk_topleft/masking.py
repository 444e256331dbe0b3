"""Stage 5: masks and the full single-head attention. Mask convention: True = may attend."""
import numpy as np

from .scaling import scaled_scores
from .softmax import softmax


def causal_mask(n_q: int, n_k: int | None = None) -> np.ndarray:
    if n_k is None:
        n_k = n_q
    rows = np.arange(n_q)[:, None]
    cols = np.arange(n_k)[None, :]
    return cols <= rows


def apply_mask(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), scores.shape)
    if not np.all(np.any(allowed, axis=-1)):
        raise ValueError("apply_mask: a query row has no allowed key")
    return np.where(allowed, scores, -np.inf)


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    s = scaled_scores(q, k)
    if allowed is not None:
        s = apply_mask(s, allowed)
    weights = softmax(s, axis=-1)
    out = weights @ v
    return out, weights
