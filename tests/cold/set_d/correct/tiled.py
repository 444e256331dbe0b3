# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Bonus stage: tiled attention with an online softmax (the FlashAttention forward, in numpy).

The T x T score matrix is never stored: queries are processed block by block, and for each
query block the key blocks stream past while a running maximum m, a running sum l and an
unnormalised output acc are kept per query row. When a new block raises the maximum, the
old sum and accumulator are rescaled by exp(m_old - m_new). Article B, "What it costs as the
sequence grows" (FlashAttention computes attention in tiles).
Mask convention: causal with bottom-right alignment (query i sees keys j <= n_k - n_q + i).
"""
import numpy as np


def tiled_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True, block_q: int = 64, block_k: int = 64
) -> np.ndarray:
    """softmax(q k^T / sqrt(d_k)) v without the [n_q, n_k] matrix.

    q [n_q, d_k], k [n_k, d_k], v [n_k, d_v] -> [n_q, d_v]. Extra memory grows with the block
    sizes and n * d, not n_q * n_k: hold one block_q x block_k tile of scores at a time (a
    block_q x n_k strip per query block is not a tile). It is measured at three lengths n from
    512 to 4,096, drawn from the grade's seed (the shortest below 544, the longest from 3,072),
    causal, blocks of 256, counting every page the call touches (memory held before it too): it
    may grow at most 2.8x per doubling of n (the n x n scores make 4x), and never fall as n
    grows. Key blocks that the causal mask hides entirely are skipped:
    never read, so NaN values there never reach the output. The grader sets the values of the last
    keys to NaN: query blocks that never see those keys must come back finite and exact (a block read
    with all its weights 0 still gives 0 x NaN = NaN), and rows that do see them NaN (values are used
    as given).
    Raises ValueError if a query row has no allowed key (causal with n_q > n_k).
    """
    n_q, d_k = q.shape
    n_k = k.shape[0]
    d_v = v.shape[1]
    if causal and n_q > n_k:
        raise ValueError("tiled_attention: causal with n_q > n_k leaves a query with no key")
    scale = 1.0 / np.sqrt(d_k)
    shift = n_k - n_q  # query i sees keys j <= shift + i
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    out = np.empty((n_q, d_v), dtype=dtype)
    for qs in range(0, n_q, block_q):
        qe = min(qs + block_q, n_q)
        qb = q[qs:qe]
        m = np.full(qe - qs, -np.inf, dtype=dtype)
        l = np.zeros(qe - qs, dtype=dtype)
        acc = np.zeros((qe - qs, d_v), dtype=dtype)
        k_end = min(n_k, shift + qe) if causal else n_k
        for ks in range(0, k_end, block_k):
            ke = min(ks + block_k, k_end)
            s = (qb @ k[ks:ke].T) * scale
            if causal:
                i = np.arange(qs, qe)[:, None]
                j = np.arange(ks, ke)[None, :]
                s = np.where(j <= shift + i, s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            p = np.exp(s - m_new[:, None])
            alpha = np.exp(m - m_new)
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ v[ks:ke]
            m = m_new
        out[qs:qe] = acc / l[:, None]
    return out
