"""Reference grouped-query attention: a loop over query heads, each reading the columns of its
key/value group (the solutions repeat the key/value heads instead)."""
import numpy as np

from . import core

F64 = np.float64


def _check(n_heads, n_kv_heads):
    if n_kv_heads < 1 or n_heads % n_kv_heads != 0:
        raise ValueError("reference gqa: n_kv_heads must divide n_heads")


def repeat_kv(kv, n_rep):
    kv = np.asarray(kv, dtype=F64)
    n_kv = kv.shape[-3]
    return np.stack([kv[..., h // n_rep, :, :] for h in range(n_kv * n_rep)], axis=-3)


def _heads_out(x, w_q, w_k, w_v, n_heads, n_kv_heads, k_all=None, v_all=None, causal=True):
    """Per query head h: attention of x's queries against key/value group h // (n_heads // n_kv_heads)."""
    x = np.asarray(x, dtype=F64)
    w_q, w_k, w_v = (np.asarray(w, dtype=F64) for w in (w_q, w_k, w_v))
    d_head = x.shape[-1] // n_heads
    group = n_heads // n_kv_heads
    n_q = x.shape[-2]
    outs = []
    for h in range(n_heads):
        g = h // group
        q = np.einsum("...nd,de->...ne", x, w_q[:, h * d_head:(h + 1) * d_head])
        k = k_all[..., g, :, :] if k_all is not None else x @ w_k[:, g * d_head:(g + 1) * d_head]
        v = v_all[..., g, :, :] if v_all is not None else x @ w_v[:, g * d_head:(g + 1) * d_head]
        allowed = core.causal_allowed(n_q, k.shape[-2]) if causal else None
        outs.append(core.attention(q, k, v, allowed)[0])
    return np.concatenate(outs, axis=-1)


def grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, causal=True):
    _check(n_heads, n_kv_heads)
    return _heads_out(x, w_q, w_k, w_v, n_heads, n_kv_heads, causal=causal) @ np.asarray(w_o, dtype=F64)


def kv_heads(x, w_k, w_v, n_kv_heads):
    """(k, v), each [..., n_kv_heads, n, d_head]: what a grouped-query cache holds for the tokens x."""
    x = np.asarray(x, dtype=F64)
    return tuple(core.split_heads(x @ np.asarray(w, dtype=F64), n_kv_heads) for w in (w_k, w_v))


def gqa_decode(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, cache=None):
    _check(n_heads, n_kv_heads)
    k, v = kv_heads(x, w_k, w_v, n_kv_heads)
    if cache is not None:
        k = np.concatenate([np.asarray(cache[0], dtype=F64), k], axis=-2)
        v = np.concatenate([np.asarray(cache[1], dtype=F64), v], axis=-2)
    out = _heads_out(x, w_q, w_k, w_v, n_heads, n_kv_heads, k, v) @ np.asarray(w_o, dtype=F64)
    return out, (k, v)
