# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Stage 5: masks and the full single-head attention.

Article A, "Hide forbidden positions before softmax"; Article B, "Causal attention".
Mask convention: boolean, True = may attend.
"""
import numpy as np

from .scaling import scaled_scores
from .softmax import softmax


def causal_mask(n_q: int, n_k: int | None = None) -> np.ndarray:
    """Boolean [n_q, n_k] mask, True = may attend.

    The queries are the *last* n_q of the n_k positions (bottom-right alignment),
    so query i may see keys j <= n_k - n_q + i. n_k defaults to n_q (lower triangle).
    """
    if n_k is None:
        n_k = n_q
    i = np.arange(n_q)[:, None]
    j = np.arange(n_k)[None, :]
    return j <= (n_k - n_q) + i


def apply_mask(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Put -inf where `allowed` is False. scores [..., n_q, n_k]; allowed broadcasts to it.

    Raises ValueError if some query row has no allowed key at all (each row counts on its own;
    a key that no query may see is fine). `scores` itself is left as it was: the result is a new array.
    """
    allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), scores.shape)
    if np.any(~np.any(allowed, axis=-1)):
        raise ValueError("apply_mask: a query row has no allowed key")
    return np.where(allowed, scores, -np.inf)


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """softmax(q k^T / sqrt(d_k), masked) v.

    q [..., n_q, d_k], k [..., n_k, d_k], v [..., n_k, d_v], allowed bool [n_q, n_k] or
    broadcastable to [..., n_q, n_k] (True = may attend; None = everything allowed).
    Returns (out [..., n_q, d_v], weights [..., n_q, n_k]).
    A forbidden key gets weight exactly 0, each query's weights sum to 1, and with a causal mask
    changing later tokens never changes earlier outputs.
    """
    scores = scaled_scores(q, k)
    if allowed is not None:
        scores = apply_mask(scores, allowed)
    weights = softmax(scores, axis=-1)
    out = weights @ v
    return out, weights
