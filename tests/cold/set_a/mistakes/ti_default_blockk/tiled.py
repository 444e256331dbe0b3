"""Bonus stage: tiled attention with an online softmax (the FlashAttention forward, in numpy)."""
import numpy as np


def tiled_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True, block_q: int = 64, block_k: int = 128
) -> np.ndarray:
    n_q, d_k = q.shape
    n_k = k.shape[0]
    d_v = v.shape[1]
    if causal and n_q > n_k:
        raise ValueError("tiled_attention: a query row has no allowed key")
    shift = n_k - n_q
    scale = 1.0 / np.sqrt(d_k)
    out = np.empty((n_q, d_v), dtype=np.result_type(q, k, v))
    for qs in range(0, n_q, block_q):
        qe = min(qs + block_q, n_q)
        qb = q[qs:qe] * scale
        m = np.full(qe - qs, -np.inf)
        l = np.zeros(qe - qs)
        acc = np.zeros((qe - qs, d_v))
        k_stop = min(n_k, shift + qe) if causal else n_k
        for ks in range(0, k_stop, block_k):
            ke = min(ks + block_k, k_stop)
            s = qb @ k[ks:ke].T
            if causal:
                rows = shift + np.arange(qs, qe)[:, None]
                cols = np.arange(ks, ke)[None, :]
                s = np.where(cols <= rows, s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            alpha = np.exp(m - m_new)
            p = np.exp(s - m_new[:, None])
            l = l * alpha + p.sum(axis=1)
            acc = acc * alpha[:, None] + p @ v[ks:ke]
            m = m_new
        out[qs:qe] = acc / l[:, None]
    return out
