# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Bonus stage: grouped-query and multi-query attention, and a decode step with a smaller cache.

Several query heads share one key/value head. With n_heads query heads and n_kv_heads key/value
heads, the query heads fall into n_kv_heads groups of n_rep = n_heads // n_kv_heads consecutive
heads, and group g reads key/value head g. n_kv_heads = n_heads is ordinary multi-head attention
(Article B, "Multi-head attention"); n_kv_heads = 1 is multi-query attention, one shared key/value
head. Only the key/value heads are cached, so the cache is n_rep times smaller than the
2 x n x d_model numbers per layer of the multi-head layout (Article B, "What it costs as the
sequence grows").
Mask convention: boolean, True = may attend; causal alignment is bottom-right.
"""
import numpy as np

from .heads import merge_heads, split_heads
from .masking import attention, causal_mask
from .projections import project_qkv


def repeat_kv(kv: np.ndarray, n_rep: int) -> np.ndarray:
    """[..., n_kv_heads, n, d_head] -> [..., n_kv_heads * n_rep, n, d_head].

    Each key/value head is repeated n_rep times in place: head g becomes heads g*n_rep to
    (g+1)*n_rep - 1, so query head h reads key/value head h // n_rep (heads 0, 0, 1, 1 for two
    heads repeated twice, not 0, 1, 0, 1).
    """
    if n_rep == 1:
        return kv
    return np.repeat(kv, n_rep, axis=-3)


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
    """Attention with n_heads query heads that share n_kv_heads key/value heads.

    x [..., n, d_model]; w_q, w_o [d_model, d_model]; w_k, w_v [d_model, n_kv_heads * d_head] with
    d_head = d_model // n_heads: key/value head g owns columns g*d_head:(g+1)*d_head of w_k and w_v,
    as query head h owns those columns of w_q. Query head h reads key/value head
    h // (n_heads // n_kv_heads). Returns [..., n, d_model], Concat(head_1, ..., head_h) W_O.
    With n_kv_heads = n_heads this is multi_head_attention; with n_kv_heads = 1 every query head
    reads the same single key/value head (multi-query attention).
    Raises ValueError unless n_kv_heads divides n_heads.
    """
    if n_kv_heads <= 0 or n_heads % n_kv_heads != 0:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    n_rep = n_heads // n_kv_heads
    q, k, v = project_qkv(x, w_q, w_k, w_v)
    q = split_heads(q, n_heads)
    k = repeat_kv(split_heads(k, n_kv_heads), n_rep)
    v = repeat_kv(split_heads(v, n_kv_heads), n_rep)
    n = x.shape[-2]
    allowed = causal_mask(n) if causal else None
    out, _ = attention(q, k, v, allowed)
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
    """The next t tokens x [..., t, d_model] of a causal grouped-query attention, given a cache.

    Weights as in grouped_query_attention. `cache` is None before the first call, then the cache
    the previous call returned: (k, v), each [..., n_kv_heads, L, d_head], the keys and values of the
    L tokens before x. Returns (out [..., t, d_model], (k, v)), where the new k and v hold all L + t
    tokens. The cache holds the n_kv_heads key/value heads as projected, before any repeat, so it
    is n_heads // n_kv_heads times smaller than a multi-head cache.
    The t queries are the last t of the L + t positions (bottom-right causal alignment).
    Fed in pieces, token by token or in chunks, the outputs equal grouped_query_attention's.
    """
    if n_kv_heads <= 0 or n_heads % n_kv_heads != 0:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    n_rep = n_heads // n_kv_heads
    q, k, v = project_qkv(x, w_q, w_k, w_v)
    q = split_heads(q, n_heads)
    k = split_heads(k, n_kv_heads)
    v = split_heads(v, n_kv_heads)
    if cache is not None:
        k = np.concatenate([cache[0], k], axis=-2)
        v = np.concatenate([cache[1], v], axis=-2)
    t, n_k = q.shape[-2], k.shape[-2]
    out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), causal_mask(t, n_k))
    return merge_heads(out) @ w_o, (k, v)
