"""Every number that Article A or B prints about a calculation, as a check.

Each entry computes its quantity through an API object (the student's functions
in a child process, or the reference's) and is compared at the printed precision.
Article A: shared/articles/000 "Attention from First Principles: One Complete Calculation".
Article B: shared/articles/001 "Transformer attention from first principles".
"""
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

A, B = "A", "B"

# -- Article B's four-token example ("A sentence small enough to finish on paper") ------------
X = np.array([[0.9, 0.1, -0.3, 0.2], [0.2, 0.8, 0.4, -0.5], [-0.4, 0.1, 0.9, 0.3], [0.3, -0.6, 0.2, 0.8]])
SHE, SAW, THE, CAT = 0, 1, 2, 3
WQ1 = np.array([[0.1, 0.3], [0.7, -0.9], [0.3, -0.7], [-0.9, 0.7]])
WK1 = np.array([[0.9, -0.9], [0.6, -0.3], [-0.9, 0.7], [0.2, -0.4]])
WV1 = np.array([[0.5, -0.2], [0.1, 0.6], [-0.3, 0.4], [0.7, 0.1]])
WQ2 = np.array([[-0.6, -0.2], [-0.2, -0.8], [0.8, 0.6], [0.9, 0.8]])
WK2 = np.array([[0.9, -0.7], [0.8, 0.3], [0.4, 0.0], [-0.9, -0.9]])
WV2 = np.array([[0.2, 0.4], [-0.5, 0.3], [0.6, -0.1], [0.1, -0.6]])
WO = np.array([[0.5, -0.1, 0.3, 0.2], [0.1, 0.6, -0.2, 0.4], [-0.3, 0.2, 0.5, 0.1], [0.2, 0.3, 0.1, -0.4]])
# both heads side by side: head h owns columns 2h:2h+2 (the multi_head_attention contract)
WQ, WK, WV = (np.concatenate(p, axis=1) for p in ((WQ1, WQ2), (WK1, WK2), (WV1, WV2)))
Q1, K1, V1 = X @ WQ1, X @ WK1, X @ WV1  # head 1's inputs, used as given data by later stages
TRIL4 = np.tril(np.ones((4, 4), dtype=bool))

# -- Article A's single query ("Follow one query through three steps") -----------------------
# The text prints q = (1, 0) and the numbers that follow; the figure holds the keys and values.
# These keys and values reproduce every printed number (scores 1/sqrt2, 0, 1/sqrt2; v1, v2 from
# the masked output); v3 is not pinned down by the text and is our choice.
A_Q = np.array([[1.0, 0.0]])
A_K = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
A_V = np.array([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
A_SCORES = A_Q @ A_K.T / np.sqrt(2.0)  # [1, 3]


def pair_exp(api, s) -> np.ndarray:
    """exp(s) read off a softmax alone: softmax([s, 0]) = [e^s, 1] / (e^s + 1), so e^s is their ratio."""
    s = np.asarray(s, dtype=np.float64)
    w = np.asarray(api.softmax(np.stack([s, np.zeros_like(s)], axis=-1), axis=-1), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return w[..., 0] / w[..., 1]


def module_weights():
    """Article B's two heads as CausalSelfAttention state: qkv.weight [3C, C] (q, k, v rows), out.weight [C, C]."""
    return np.concatenate([WQ, WK, WV], axis=1).T.copy(), WO.T.copy()


def _module_cat(api):
    qkv_w, out_w = module_weights()
    return api.module_forward(X[None], qkv_w, out_w, 2)[0, CAT]


def _fused_head1(api):
    out = api.fused_attention(Q1[None, None], K1[None, None], V1[None, None], causal=True)
    return np.asarray(out)[0, 0, [SAW, CAT]]


@dataclass(frozen=True)
class Worked:
    id: str
    stage: str
    article: str
    section: str
    quantity: str
    expected: Any
    precision: Any  # decimals printed (int), or {"sampling_error": tol} for a random estimate
    compute: Callable[[Any], Any]

    def as_json(self) -> dict:
        return {"id": self.id, "stage": self.stage, "article": self.article, "section": self.section,
                "quantity": self.quantity, "expected": self.expected, "precision": self.precision}


def _variance(d_k: int, scaled: bool, printed: float) -> Worked:
    # standard error of a sample variance of q.k over 20000 pairs: sqrt((2 d^2 + 6 d) / n);
    # the article's estimate and the student's are independent, so allow 4 SE of their difference.
    se = np.sqrt((2 * d_k**2 + 6 * d_k) / 20000) / (d_k if scaled else 1)
    tol = round(float(4 * np.sqrt(2) * se), 3)
    name = "var(q.k / sqrt(d_k))" if scaled else "var(q.k)"
    return Worked(f"B-variance-{'scaled' if scaled else 'raw'}-{d_k}", "scaling", B, "Scores, now with a divide",
                  f"{name} for d_k = {d_k} over 20,000 random pairs", printed, {"sampling_error": tol},
                  lambda api: api.score_variance(d_k, 20000, 0, scaled))


WORKED: list[Worked] = [
    # ---- softmax ---------------------------------------------------------------------------
    Worked("A-softmax-shifted-exps", "softmax", A, "How the scores become shares",
           "exponentials after subtracting the largest score (as ratios of weights)", [1.0, 0.4931, 1.0], 4,
           lambda api: (lambda w: w / w.max())(np.asarray(api.softmax(A_SCORES[0]), dtype=float))),
    Worked("A-softmax-weights", "softmax", A, "How the scores become shares",
           "weights for the three positions", [0.4011, 0.1978, 0.4011], 4, lambda api: api.softmax(A_SCORES[0])),
    Worked("B-softmax-saw-exps", "softmax", B, "Simple self-attention",
           "exponentials of the 'saw' scores", [1.04, 2.97, 1.23, 0.48], 2,
           lambda api: pair_exp(api, (X @ X.T)[SAW])),
    Worked("B-softmax-saw-sum", "softmax", B, "Simple self-attention",
           "sum of the 'saw' exponentials", 5.73, 2, lambda api: pair_exp(api, (X @ X.T)[SAW]).sum()),
    Worked("B-softmax-saw-weights", "softmax", B, "Simple self-attention",
           "softmax of the 'saw' scores", [0.18, 0.52, 0.22, 0.08], 2, lambda api: api.softmax((X @ X.T)[SAW])),
    Worked("B-softmax-2-1-0-m1", "softmax", B, "Simple self-attention",
           "softmax of [2, 1, 0, -1]", [0.64, 0.24, 0.09, 0.03], 2,
           lambda api: api.softmax(np.array([2.0, 1.0, 0.0, -1.0]))),
    Worked("B-softmax-ratio-20", "softmax", B, "Simple self-attention",
           "largest over smallest weight of softmax([2, 1, 0, -1])", 20, 0,
           lambda api: (lambda w: w.max() / w.min())(np.asarray(api.softmax(np.array([2.0, 1.0, 0.0, -1.0]))))),
    Worked("B-softmax-times-8", "softmax", B, "Scores, now with a divide",
           "softmax of 8 * [2, 1, 0, -1]", [1.00, 0.00, 0.00, 0.00], 2,
           lambda api: api.softmax(8 * np.array([2.0, 1.0, 0.0, -1.0]))),
    Worked("B-softmax-zeroed-mask", "softmax", B, "Causal attention",
           "weights of 'the' when its masked score is set to 0 instead of -inf (the mistake)",
           [0.39, 0.22, 0.15, 0.23], 2,
           lambda api: api.softmax(np.where(TRIL4[THE], (Q1 @ K1.T / np.sqrt(2))[THE], 0.0))),
    # ---- dot products ------------------------------------------------------------------------
    Worked("B-dot-examples", "dot_products", B, "The one idea",
           "a.b and a.c for a = [0.9, 0.1], b = [0.8, 0.2], c = [-0.3, 0.9]", [0.74, -0.18], 2,
           lambda api: np.asarray(api.dot_scores(np.array([[0.9, 0.1], [0.8, 0.2], [-0.3, 0.9]])))[0, 1:]),
    Worked("B-dot-saw-row", "dot_products", B, "Simple self-attention",
           "row 'saw' of X X^T", [0.04, 1.09, 0.21, -0.74], 2, lambda api: np.asarray(api.dot_scores(X))[SAW]),
    Worked("B-simple-saw-output", "dot_products", B, "Simple self-attention",
           "softmax(X X^T) X, row 'saw'", [0.21, 0.41, 0.36, -0.09], 2,
           lambda api: np.asarray(api.simple_self_attention(X))[SAW]),
    # ---- projections -------------------------------------------------------------------------
    Worked("B-query-saw", "projections", B, "Trainable attention", "query of 'saw'", [1.15, -1.29], 2,
           lambda api: api.project_qkv(X, WQ1, WK1, WV1)[0][SAW]),
    Worked("B-key-she", "projections", B, "Trainable attention", "key of 'she'", [1.18, -1.13], 2,
           lambda api: api.project_qkv(X, WQ1, WK1, WV1)[1][SHE]),
    Worked("B-key-saw", "projections", B, "Trainable attention", "key of 'saw'", [0.20, 0.06], 2,
           lambda api: api.project_qkv(X, WQ1, WK1, WV1)[1][SAW]),
    # ---- scaling -----------------------------------------------------------------------------
    Worked("B-raw-scores-saw", "scaling", B, "Scores, now with a divide",
           "unscaled scores 'saw'.'she' and 'saw'.'the' (your scaled scores times sqrt 2)", [2.81, -2.29], 2,
           lambda api: np.asarray(api.scaled_scores(Q1, K1))[SAW, [SHE, THE]] * np.sqrt(2)),
    Worked("B-sqrt-dk", "scaling", B, "Scores, now with a divide",
           "the divisor sqrt(d_k) for d_k = 2 (raw over scaled score)", 1.414, 3,
           lambda api: (Q1 @ K1.T)[SAW, SHE] / np.asarray(api.scaled_scores(Q1, K1))[SAW, SHE]),
    Worked("B-scaled-saw-row", "scaling", B, "Scores, now with a divide",
           "scaled scores of 'saw'", [1.99, 0.11, -1.62, 0.16], 2, lambda api: np.asarray(api.scaled_scores(Q1, K1))[SAW]),
    Worked("B-scaled-the-row", "scaling", B, "Causal attention",
           "unmasked scaled scores of 'the'", [0.53, -0.02, -0.40, 0.12], 2,
           lambda api: np.asarray(api.scaled_scores(Q1, K1))[THE]),
    _variance(2, False, 2.01), _variance(2, True, 1.01),
    _variance(64, False, 64.66), _variance(64, True, 1.01),
    _variance(512, False, 510.36), _variance(512, True, 1.00),
    # ---- masking and single-head attention ---------------------------------------------------
    Worked("A-attention-weights", "masking", A, "How the scores become shares",
           "attention weights of q = (1, 0), all positions allowed", [0.4011, 0.1978, 0.4011], 4,
           lambda api: api.attention(A_Q, A_K, A_V)[1][0]),
    Worked("A-masked-weights", "masking", A, "Hide forbidden positions before softmax",
           "weights with position 3 hidden", [0.6698, 0.3302, 0.0], 4,
           lambda api: api.attention(A_Q, A_K, A_V, np.array([[True, True, False]]))[1][0]),
    Worked("A-masked-output", "masking", A, "Hide forbidden positions before softmax",
           "output with position 3 hidden", [1.3395, 0.6605], 4,
           lambda api: api.attention(A_Q, A_K, A_V, np.array([[True, True, False]]))[0][0]),
    Worked("B-unmasked-saw-weights", "masking", B, "Weights and output",
           "unmasked weights of 'saw'", [0.75, 0.11, 0.02, 0.12], 2, lambda api: api.attention(Q1, K1, V1)[1][SAW]),
    Worked("B-unmasked-saw-output", "masking", B, "Weights and output",
           "unmasked output of 'saw'", [0.55, -0.12], 2, lambda api: api.attention(Q1, K1, V1)[0][SAW]),
    Worked("B-unmasked-cat-the", "masking", B, "Weights and output",
           "unmasked weight of 'cat' on 'the'", 0.67, 2, lambda api: api.attention(Q1, K1, V1)[1][CAT, THE]),
    Worked("B-causal-the-exps", "masking", B, "Causal attention",
           "exponentials of the allowed scaled scores of 'the'", [1.70, 0.98, 0.67], 2,
           lambda api: pair_exp(api, np.asarray(api.scaled_scores(Q1, K1))[THE, :3])),
    Worked("B-causal-the-sum", "masking", B, "Causal attention",
           "their sum", 3.35, 2, lambda api: pair_exp(api, np.asarray(api.scaled_scores(Q1, K1))[THE, :3]).sum()),
    Worked("B-causal-the-weights", "masking", B, "Causal attention",
           "causal weights of 'the'", [0.51, 0.29, 0.20, 0.0], 2,
           lambda api: api.attention(Q1, K1, V1, api.causal_mask(4))[1][THE]),
    Worked("B-code-weights-3", "masking", B, "Code that matches the hand numbers",
           "weights[3] printed by the NumPy code", [0.0298, 0.1493, 0.6738, 0.1471], 4,
           lambda api: api.attention(Q1, K1, V1, api.causal_mask(4))[1][CAT]),
    Worked("B-code-out-1", "masking", B, "Code that matches the hand numbers",
           "out[1] printed by the NumPy code", [0.5605, -0.1183], 4,
           lambda api: api.attention(Q1, K1, V1, api.causal_mask(4))[0][SAW]),
    # ---- heads -------------------------------------------------------------------------------
    Worked("B-heads-cat-concat", "heads", B, "Multi-head attention",
           "'cat': head 1 then head 2, concatenated (multi_head_attention with W_O = I)",
           [-0.10, 0.39, -0.02, 0.33], 2,
           lambda api: np.asarray(api.multi_head_attention(X, WQ, WK, WV, np.eye(4), 2, True))[CAT]),
    Worked("B-heads-cat-output", "heads", B, "Multi-head attention",
           "'cat' after the output projection W_O", [0.06, 0.34, -0.09, 0.00], 2,
           lambda api: np.asarray(api.multi_head_attention(X, WQ, WK, WV, WO, 2, True))[CAT]),
    Worked("B-module-cat-output", "heads", B, "Code that matches the hand numbers",
           "CausalSelfAttention loaded with the two heads' weights: 'cat'", [0.06, 0.34, -0.09, 0.00], 2,
           _module_cat),
    Worked("B-gpt2-shapes", "heads", B, "Multi-head attention",
           "GPT-2 small (d_model 768, 12 heads of 64): qkv.weight and out.weight shapes",
           [2304, 768, 768, 768], 0,
           lambda api: (lambda s: s["qkv.weight"] + s["out.weight"])(api.module_shapes(768, 12))),
    # ---- KV cache ----------------------------------------------------------------------------
    Worked("B-gpt2-cache-floats", "kv_cache", B, "What it costs as the sequence grows",
           "floats a KV cache holds per layer, 2 n d_model, for GPT-2 small's 1,024-token context",
           1572864, 0, lambda api: api.kv_cache_numel(1, 12, 1024, 64)),
    # ---- bonus: tiled, costs ----------------------------------------------------------------
    Worked("B-tiled-matches-code", "tiled", B, "Code that matches the hand numbers",
           "the causal output of head 1 computed in tiles of 2 x 2: rows 'saw' and 'cat'",
           [[0.5605, -0.1183], [-0.1044, 0.3944]], 4,
           lambda api: np.asarray(api.tiled_attention(Q1, K1, V1, True, 2, 2))[[SAW, CAT]]),
    Worked("B-scores-128k", "costs", B, "What it costs as the sequence grows",
           "scores per head at 128k tokens, in billions ('about 16 billion')", 16, 0,
           lambda api: int(api.score_count(128_000, 1)) / 1e9),
    Worked("B-gpt2-cache-floats-per-layer", "costs", B, "What it costs as the sequence grows",
           "kv_cache_floats for one layer of GPT-2 small (12 heads of 64) at 1,024 tokens: 2 n d_model",
           1572864, 0, lambda api: api.kv_cache_floats(1024, 1, 12, 64)),
    # ---- fused -------------------------------------------------------------------------------
    Worked("B-fused-matches-code", "fused", B, "Code that matches the hand numbers",
           "the fused causal call on head 1: rows 'saw' and 'cat'", [[0.5605, -0.1183], [-0.1044, 0.3944]], 4,
           _fused_head1),
]

BY_ID = {w.id: w for w in WORKED}
assert len(BY_ID) == len(WORKED), "worked ids must be unique"
