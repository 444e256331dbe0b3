"""Bonus stage: rotary position embedding (RoPE) of queries and keys."""
import numpy as np

from .masking import attention, causal_mask


def rotate(x: np.ndarray, offset: int = 0, base: float = 10000.0) -> np.ndarray:
    n, d = x.shape[-2], x.shape[-1]
    half = d // 2
    freqs = base ** (-2.0 * np.arange(half) / d)
    angles = (offset + np.arange(n))[:, None] * freqs[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    a, b = x[..., 0::2], x[..., 1::2]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def rope_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True) -> np.ndarray:
    n_q, n_k = q.shape[-2], k.shape[-2]
    q_rot = rotate(q, offset=n_k - n_q)
    k_rot = rotate(k)
    allowed = causal_mask(n_q, n_k) if causal else None
    out, _ = attention(q_rot, k_rot, v, allowed)
    return out


def rope_decode(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, cache: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    past = 0 if cache is None else cache[0].shape[-2]
    q_rot = rotate(q, offset=past)
    k_rot = rotate(k, offset=past)
    if cache is not None:
        k_rot = np.concatenate([cache[0], k_rot], axis=-2)
        v = np.concatenate([cache[1], v], axis=-2)
    t = q.shape[-2]
    out, _ = attention(q_rot, k_rot, v, causal_mask(t, past + t))
    return out, (k_rot, v)
