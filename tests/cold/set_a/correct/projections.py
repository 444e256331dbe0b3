"""Stage 3: learned query, key and value projections."""
import numpy as np


def project_qkv(
    x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q = x @ w_q
    k = x @ w_k
    v = x @ w_v
    return q, k, v
