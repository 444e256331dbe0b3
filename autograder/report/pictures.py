"""The matrices the HTML report draws, for the articles' four-token sentence "she saw the cat":
the student's attention weights beside the reference's, the causal mask, and the keys each
KV-cache decode step reads. Computed through the same API as the checks (student code runs in
its child; a picture whose code fails carries the error instead)."""
import numpy as np

from ..outcomes import StudentAborted, StudentError
from ..stages.article_numbers import K1, Q1, V1, WK2, WQ2, WV2, X

TOKENS = ["she", "saw", "the", "cat"]
Q2, K2, V2 = X @ WQ2, X @ WK2, X @ WV2


def _weights(api, q, k, v, mask):
    out = api.attention(q, k, v, mask)
    return np.asarray(out[1], dtype=float)


def _cache_reads(api, steps: int = 6) -> np.ndarray:
    """Row t: which of the cached keys decode step t (one query, t + 1 keys) may read."""
    grid = np.zeros((steps, steps))
    for t in range(steps):
        grid[t, : t + 1] = np.asarray(api.causal_mask(1, t + 1), dtype=float)[0]
    return grid


PICTURES = [
    # name, what it shows, how to compute it from an API, axis labels (rows, columns)
    ("dot_products", "softmax(X X^T): plain dot-product weights (Article B, 'Simple self-attention')",
     lambda api: np.asarray(api.softmax(np.asarray(api.dot_scores(X), dtype=float)), dtype=float), (TOKENS, TOKENS)),
    ("projections", "softmax(Q K^T / sqrt 2): trained projections, no mask (Article B, 'Weights and output')",
     lambda api: _weights(api, Q1, K1, V1, None), (TOKENS, TOKENS)),
    ("causal", "the same with the causal mask (Article B, 'Causal attention')",
     lambda api: _weights(api, Q1, K1, V1, np.asarray(api.causal_mask(4))), (TOKENS, TOKENS)),
    ("head2", "head 2 of the multi-head example, causal (Article B, 'Multi-head attention')",
     lambda api: _weights(api, Q2, K2, V2, np.asarray(api.causal_mask(4))), (TOKENS, TOKENS)),
    ("mask", "causal_mask(3, 6): three new queries over six keys (bottom-right alignment)",
     lambda api: np.asarray(api.causal_mask(3, 6), dtype=float), ([f"q{i}" for i in range(3)], [f"k{j}" for j in range(6)])),
    ("cache", "KV cache: the keys each decode step reads (causal_mask(1, t + 1) for t = 0..5)",
     _cache_reads, ([f"step {t}" for t in range(6)], [f"k{j}" for j in range(6)])),
]


def collect(api, ref) -> dict:
    """name -> {"title", "labels", "student" (or None), "reference", "error"}."""
    out = {}
    for name, title, compute, labels in PICTURES:
        item = {"title": title, "labels": labels, "student": None, "reference": compute(ref), "error": None}
        try:
            item["student"] = np.asarray(compute(api), dtype=float)
        except (StudentError, StudentAborted, ValueError, TypeError, IndexError) as e:
            item["error"] = str(e)[:300]
        out[name] = item
    return out

