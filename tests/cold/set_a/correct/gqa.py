"""Bonus stage: grouped-query and multi-query attention, and a decode step with a smaller cache."""
import numpy as np

from .heads import merge_heads, split_heads
from .masking import attention, causal_mask
from .projections import project_qkv


def repeat_kv(kv: np.ndarray, n_rep: int) -> np.ndarray:
    return np.repeat(kv, n_rep, axis=-3)


def _groups(n_heads: int, n_kv_heads: int) -> int:
    if n_kv_heads <= 0 or n_heads % n_kv_heads != 0:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    return n_heads // n_kv_heads


def grouped_query_attention(
    x: np.ndarray,
    w_q: np.ndarray,
    w_k: np.ndarray,
    w_v: np.ndarray,
    w_o: np.ndarray,
    n_heads: int,
    n_kv_heads: int,
    causal: bool = True,
) -> np.ndarray:
    n_rep = _groups(n_heads, n_kv_heads)
    q, k, v = project_qkv(x, w_q, w_k, w_v)
    qh = split_heads(q, n_heads)
    kh = repeat_kv(split_heads(k, n_kv_heads), n_rep)
    vh = repeat_kv(split_heads(v, n_kv_heads), n_rep)
    n = x.shape[-2]
    allowed = causal_mask(n) if causal else None
    out, _ = attention(qh, kh, vh, allowed)
    return merge_heads(out) @ w_o


def gqa_decode(
    x: np.ndarray,
    w_q: np.ndarray,
    w_k: np.ndarray,
    w_v: np.ndarray,
    w_o: np.ndarray,
    n_heads: int,
    n_kv_heads: int,
    cache: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    n_rep = _groups(n_heads, n_kv_heads)
    q, k, v = project_qkv(x, w_q, w_k, w_v)
    qh = split_heads(q, n_heads)
    kh = split_heads(k, n_kv_heads)
    vh = split_heads(v, n_kv_heads)
    if cache is not None:
        kh = np.concatenate([cache[0], kh], axis=-2)
        vh = np.concatenate([cache[1], vh], axis=-2)
    t = x.shape[-2]
    total = kh.shape[-2]
    out, _ = attention(qh, repeat_kv(kh, n_rep), repeat_kv(vh, n_rep), causal_mask(t, total))
    return merge_heads(out) @ w_o, (kh, vh)
