# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Stage 6 (numpy part): several heads side by side.

Article B, "Multi-head attention" and "Code that matches the hand numbers".
"""
import numpy as np

from .masking import attention, causal_mask
from .projections import project_qkv


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """[..., n, d_model] -> [..., n_heads, n, d_head], head h = columns h*d_head:(h+1)*d_head."""
    *lead, n, d_model = x.shape
    d_head = d_model // n_heads
    x = x.reshape(*lead, n, n_heads, d_head)
    return np.swapaxes(x, -3, -2)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """Inverse of split_heads: [..., n_heads, n, d_head] -> [..., n, n_heads * d_head]."""
    *lead, n_heads, n, d_head = x.shape
    x = np.swapaxes(x, -3, -2)
    return x.reshape(*lead, n, n_heads * d_head)


def multi_head_attention(
    x: np.ndarray,
    w_q: np.ndarray,
    w_k: np.ndarray,
    w_v: np.ndarray,
    w_o: np.ndarray,
    n_heads: int,
    causal: bool = True,
) -> np.ndarray:
    """Concat(head_1, ..., head_h) W_O.

    x [..., n, d_model]; w_q, w_k, w_v, w_o [d_model, d_model]; head h owns columns
    h*d_head:(h+1)*d_head of w_q, w_k and w_v, with d_head = d_model // n_heads.
    causal=True lets token i attend to tokens j <= i. Returns [..., n, d_model].
    With causal=False, permuting the tokens permutes the outputs the same way.
    """
    q, k, v = project_qkv(x, w_q, w_k, w_v)
    q = split_heads(q, n_heads)
    k = split_heads(k, n_heads)
    v = split_heads(v, n_heads)
    n = x.shape[-2]
    allowed = causal_mask(n) if causal else None
    out, _ = attention(q, k, v, allowed)
    return merge_heads(out) @ w_o
