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
    block_q x n_k strip per query block is not a tile). It is measured at three lengths n from 512
    to 4,096, drawn from the grade's seed (the shortest below 544, the longest from 3,072),
    causal, block_q = block_k one of 64, 96, 128, 192, 256, 320 and d one of 8, 10, 12, 14, 16
    (drawn from the grade's seed too), counting every page the call touches (memory held before
    it too) and memory held before it that it lets go of: it may grow at most 2.8x per doubling
    of n (the n x n scores make 4x), and never fall as n grows; at the longest n it may add less
    than half the memory of the n x n scores (float64). Key blocks that the causal mask hides
    entirely are skipped: never read, so NaN values there never reach the output. The grader sets the values of the last
    keys to NaN: query blocks that never see those keys must come back finite and exact (a block read
    with all its weights 0 still gives 0 x NaN = NaN), and rows that do see them NaN (values are used
    as given).
    Raises ValueError if a query row has no allowed key (causal with n_q > n_k).
    """
    # BEGIN SOLUTION
    n_q, d_k = q.shape
    n_k, d_v = v.shape
    scale = 1.0 / np.sqrt(d_k)
    offset = n_k - n_q  # query i sits at position offset + i
    out = np.empty((n_q, d_v), dtype=np.result_type(q, k, v))
    for i0 in range(0, n_q, block_q):
        i1 = min(i0 + block_q, n_q)
        qb = q[i0:i1]  # [bq, d_k]
        m = np.full(i1 - i0, -np.inf)  # running max per row
        l = np.zeros(i1 - i0)  # running sum of exp(score - m)
        acc = np.zeros((i1 - i0, d_v))  # running sum of exp(score - m) * v
        last_key = offset + i1 - 1 if causal else n_k - 1  # the furthest key any row of this block sees
        for j0 in range(0, min(n_k, last_key + 1), block_k):
            j1 = min(j0 + block_k, n_k)
            s = (qb @ k[j0:j1].T) * scale  # [bq, bk]
            if causal:
                rows = offset + np.arange(i0, i1)[:, None]
                s = np.where(np.arange(j0, j1)[None, :] <= rows, s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))  # [bq]; -inf only while a row has seen no key
            safe = np.where(np.isneginf(m_new), 0.0, m_new)
            p = np.exp(s - safe[:, None])  # [bq, bk]; masked entries give exp(-inf) = 0
            alpha = np.exp(np.where(np.isneginf(m), -np.inf, m - safe))  # rescales the old sum and acc
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ v[j0:j1]  # [bq, d_v]
            m = m_new
        if np.any(l == 0):
            raise ValueError("tiled_attention: a query row has no allowed key")
        out[i0:i1] = acc / l[:, None]
    return out
    # END SOLUTION
