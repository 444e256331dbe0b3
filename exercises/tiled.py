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
    raise NotImplementedError("tiled: write this part of tiled_attention")
