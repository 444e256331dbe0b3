# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Bonus stage: rotary position embedding (RoPE) of queries and keys.

Attention by itself ignores order: reorder the tokens and the outputs follow (Article B, "Where the
vectors come from", which names rotary encodings among the ways to add position). Rotary
embedding turns each query and key by angles that grow with its position, so the score of query
position m with key position p depends on the two vectors and on m - p alone. The values are not
turned: position enters through the scores only.
Mask convention: boolean, True = may attend; causal alignment is bottom-right.
"""
import numpy as np

from .masking import attention, causal_mask


def rotate(x: np.ndarray, offset: int = 0, base: float = 10000.0) -> np.ndarray:
    """Rotary embedding of x [..., n, d] (d even) -> [..., n, d]; row i sits at position offset + i.

    Rotate-half pairing: for j < d/2, feature j pairs with feature j + d/2, and at position p that
    pair (a, b) turns by the angle p * base ** (-2 * j / d) into (a cos - b sin, a sin + b cos).
    The base is 10,000 unless given. Position 0 is left as it is, and every row keeps its norm.
    """
    n, d = x.shape[-2], x.shape[-1]
    half = d // 2
    inv_freq = base ** (-2.0 * np.arange(half) / d)
    pos = offset + np.arange(n)
    angles = pos[:, None] * inv_freq[None, :]  # [n, d/2]
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def rope_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True) -> np.ndarray:
    """softmax(rotate(q) rotate(k)^T / sqrt(d_k)) v, with v as it is (values are not rotated).

    q [..., n_q, d_k], k [..., n_k, d_k], v [..., n_k, d_v] -> [..., n_q, d_v]. Key j sits at
    position j; the queries are the last n_q of the n_k positions, so query i sits at position
    n_k - n_q + i (the same alignment as the causal mask, applied when causal=True).
    Scores depend only on the distance between positions, not on where the pair sits.
    """
    n_q, n_k = q.shape[-2], k.shape[-2]
    q_rot = rotate(q, offset=n_k - n_q)
    k_rot = rotate(k, offset=0)
    allowed = causal_mask(n_q, n_k) if causal else None
    out, _ = attention(q_rot, k_rot, v, allowed)
    return out


def rope_decode(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, cache: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Causal attention for the next t tokens with rotary embedding, given a cache.

    q, k [..., t, d_k] and v [..., t, d_v]: the new tokens' queries, keys and values, not yet
    rotated. `cache` is None before the first call, then the cache the previous call returned:
    (k, v) [..., L, d_k] and [..., L, d_v] for the L tokens before, the keys already rotated.
    Returns (out [..., t, d_v], (k, v)) with all L + t tokens in the new cache.
    The new tokens sit at positions L to L + t - 1: rotate them with the offset L, not from 0.
    Fed in pieces, token by token or in chunks, the outputs equal rope_attention's with causal=True.
    """
    L = 0 if cache is None else cache[0].shape[-2]
    q_rot = rotate(q, offset=L)
    k_rot = rotate(k, offset=L)
    if cache is not None:
        k_rot = np.concatenate([cache[0], k_rot], axis=-2)
        v = np.concatenate([cache[1], v], axis=-2)
    t, n_k = q.shape[-2], k_rot.shape[-2]
    out, _ = attention(q_rot, k_rot, v, causal_mask(t, n_k))
    return out, (k_rot, v)
