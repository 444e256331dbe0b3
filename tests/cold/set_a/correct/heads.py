"""Stage 6 (numpy part): several heads side by side."""
import numpy as np

from .masking import attention, causal_mask
from .projections import project_qkv


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    *lead, n, d_model = x.shape
    d_head = d_model // n_heads
    y = x.reshape(*lead, n, n_heads, d_head)
    return np.swapaxes(y, -3, -2)


def merge_heads(x: np.ndarray) -> np.ndarray:
    *lead, h, n, d_head = x.shape
    y = np.swapaxes(x, -3, -2)
    return y.reshape(*lead, n, h * d_head)


def multi_head_attention(
    x: np.ndarray,
    w_q: np.ndarray,
    w_k: np.ndarray,
    w_v: np.ndarray,
    w_o: np.ndarray,
    n_heads: int,
    causal: bool = True,
) -> np.ndarray:
    q, k, v = project_qkv(x, w_q, w_k, w_v)
    qh = split_heads(q, n_heads)
    kh = split_heads(k, n_heads)
    vh = split_heads(v, n_heads)
    n = x.shape[-2]
    allowed = causal_mask(n) if causal else None
    out, _ = attention(qh, kh, vh, allowed)
    return merge_heads(out) @ w_o
