# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Stage 3: learned query, key and value projections.

Article A, "Do the same calculation for every token"; Article B, "Trainable attention".
"""
import numpy as np


def project_qkv(
    x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Project tokens into queries, keys and values (no bias).

    x [..., n, d_model]; w_q, w_k [d_model, d_k]; w_v [d_model, d_v] (d_v may differ from d_k).
    Returns q [..., n, d_k], k [..., n, d_k], v [..., n, d_v].
    """
    q = x @ w_q
    k = x @ w_k
    v = x @ w_v
    return q, k, v
