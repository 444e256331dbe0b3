"""Every number that Article A or B prints about a calculation, in article order, each naming its stage.

Each entry computes its quantity through an API object (the student's functions
in a child process, or the reference's) and is compared at the printed precision.
Article A is "Attention from First Principles: One Complete Calculation"; Article B, "Transformer
attention from first principles" (krishparekhdev.com/blog/attention).
"""
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .. import messages as say
from ..declarations import WORKED_RULE, Check
from ..evidence.compare import check_printed, check_within, variance_stderr

A, B = "A", "B"
# the sections of each article the kit sends a student to (a check's citation, a diagnosis's "reread", a worked
# number's section): their headings as the articles print them; tests/test_reference.py holds every citation to these
SECTIONS: dict[str, tuple[str, ...]] = {
    A: ("How the scores become shares", "Hide forbidden positions before softmax",
        "A transparent reference implementation", "What self-attention does and does not mean",
        "Why divide by the square root?"),
    B: ("The one idea", "Simple self-attention", "Trainable attention", "Scores, now with a divide",
        "Weights and output", "Causal attention", "Multi-head attention", "Code that matches the hand numbers",
        "What it costs as the sequence grows", "Where the vectors come from"),
}

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


def _causal_exps(api) -> np.ndarray:
    """The exponentials of the scaled scores of 'the' after the causal mask, read through the student's masking
    functions (causal_mask, apply_mask): the masked position's is e^-inf = 0, so the row's sum is the three left's."""
    masked = api.apply_mask(np.asarray(api.scaled_scores(Q1, K1)), api.causal_mask(4))  # [4, 4]
    return pair_exp(api, np.asarray(masked, dtype=np.float64)[THE])  # [4]


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
    # the article's estimate and the student's are independent, so allow 4 SE of their difference
    se = variance_stderr(d_k, 20000, scaled)
    tol = round(float(4 * np.sqrt(2) * se), 3)
    name = "var(q.k / sqrt(d_k))" if scaled else "var(q.k)"
    return Worked(id=f"B-variance-{'scaled' if scaled else 'raw'}-{d_k}", stage="scaling", article=B,
                  section="Scores, now with a divide",
                  quantity=f"{name} for d_k = {d_k} over 20,000 random pairs",
                  expected=printed, precision={"sampling_error": tol},
                  compute=lambda api: api.score_variance(d_k, 20000, 0, scaled))


WORKED: list[Worked] = [
    # ---- softmax ---------------------------------------------------------------------------
    Worked(id="A-softmax-shifted-exps", stage="softmax", article=A, section="How the scores become shares",
           quantity="exponentials after subtracting the largest score (as ratios of weights)",
           expected=[1.0, 0.4931, 1.0], precision=4,
           compute=lambda api: (lambda w: w / w.max())(np.asarray(api.softmax(A_SCORES[0]), dtype=float))),
    Worked(id="A-softmax-weights", stage="softmax", article=A, section="How the scores become shares",
           quantity="weights for the three positions", expected=[0.4011, 0.1978, 0.4011], precision=4,
           compute=lambda api: api.softmax(A_SCORES[0])),
    Worked(id="B-softmax-saw-exps", stage="softmax", article=B, section="Simple self-attention",
           quantity="exponentials of the 'saw' scores", expected=[1.04, 2.97, 1.23, 0.48], precision=2,
           compute=lambda api: pair_exp(api, (X @ X.T)[SAW])),
    Worked(id="B-softmax-saw-sum", stage="softmax", article=B, section="Simple self-attention",
           quantity="sum of the 'saw' exponentials", expected=5.73, precision=2,
           compute=lambda api: pair_exp(api, (X @ X.T)[SAW]).sum()),
    Worked(id="B-softmax-saw-weights", stage="softmax", article=B, section="Simple self-attention",
           quantity="softmax of the 'saw' scores", expected=[0.18, 0.52, 0.22, 0.08], precision=2,
           compute=lambda api: api.softmax((X @ X.T)[SAW])),
    Worked(id="B-softmax-2-1-0-m1", stage="softmax", article=B, section="Simple self-attention",
           quantity="softmax of [2, 1, 0, -1]", expected=[0.64, 0.24, 0.09, 0.03], precision=2,
           compute=lambda api: api.softmax(np.array([2.0, 1.0, 0.0, -1.0]))),
    Worked(id="B-softmax-ratio-20", stage="softmax", article=B, section="Simple self-attention",
           quantity="largest over smallest weight of softmax([2, 1, 0, -1])", expected=20, precision=0,
           compute=lambda api: (lambda w: w.max() / w.min())(np.asarray(api.softmax(np.array([2.0, 1.0, 0.0, -1.0]))))),
    Worked(id="B-softmax-times-8", stage="softmax", article=B, section="Scores, now with a divide",
           quantity="softmax of 8 * [2, 1, 0, -1]", expected=[1.00, 0.00, 0.00, 0.00], precision=2,
           compute=lambda api: api.softmax(8 * np.array([2.0, 1.0, 0.0, -1.0]))),
    Worked(id="B-softmax-zeroed-mask", stage="softmax", article=B, section="Causal attention",
           quantity="weights of 'the' when its masked score is set to 0 instead of -inf (the mistake)",
           expected=[0.39, 0.22, 0.15, 0.23], precision=2,
           compute=lambda api: api.softmax(np.where(TRIL4[THE], (Q1 @ K1.T / np.sqrt(2))[THE], 0.0))),
    # ---- dot products ------------------------------------------------------------------------
    Worked(id="B-dot-examples", stage="dot_products", article=B, section="The one idea",
           quantity="a.b and a.c for a = [0.9, 0.1], b = [0.8, 0.2], c = [-0.3, 0.9]",
           expected=[0.74, -0.18], precision=2,
           compute=lambda api: np.asarray(api.dot_scores(np.array([[0.9, 0.1], [0.8, 0.2], [-0.3, 0.9]])))[0, 1:]),
    Worked(id="B-dot-saw-row", stage="dot_products", article=B, section="Simple self-attention",
           quantity="row 'saw' of X X^T", expected=[0.04, 1.09, 0.21, -0.74], precision=2,
           compute=lambda api: np.asarray(api.dot_scores(X))[SAW]),
    Worked(id="B-simple-saw-output", stage="dot_products", article=B, section="Simple self-attention",
           quantity="softmax(X X^T) X, row 'saw'", expected=[0.21, 0.41, 0.36, -0.09], precision=2,
           compute=lambda api: np.asarray(api.simple_self_attention(X))[SAW]),
    # ---- projections -------------------------------------------------------------------------
    Worked(id="B-query-saw", stage="projections", article=B, section="Trainable attention",
           quantity="query of 'saw'", expected=[1.15, -1.29], precision=2,
           compute=lambda api: api.project_qkv(X, WQ1, WK1, WV1)[0][SAW]),
    Worked(id="B-key-she", stage="projections", article=B, section="Trainable attention",
           quantity="key of 'she'", expected=[1.18, -1.13], precision=2,
           compute=lambda api: api.project_qkv(X, WQ1, WK1, WV1)[1][SHE]),
    Worked(id="B-key-saw", stage="projections", article=B, section="Trainable attention",
           quantity="key of 'saw'", expected=[0.20, 0.06], precision=2,
           compute=lambda api: api.project_qkv(X, WQ1, WK1, WV1)[1][SAW]),
    # ---- scaling -----------------------------------------------------------------------------
    Worked(id="B-raw-scores-saw", stage="scaling", article=B, section="Scores, now with a divide",
           quantity="unscaled scores 'saw'.'she' and 'saw'.'the' (your scaled scores times sqrt 2)",
           expected=[2.81, -2.29], precision=2,
           compute=lambda api: np.asarray(api.scaled_scores(Q1, K1))[SAW, [SHE, THE]] * np.sqrt(2)),
    Worked(id="B-sqrt-dk", stage="scaling", article=B, section="Scores, now with a divide",
           quantity="the divisor sqrt(d_k) for d_k = 2 (raw over scaled score)", expected=1.414, precision=3,
           compute=lambda api: (Q1 @ K1.T)[SAW, SHE] / np.asarray(api.scaled_scores(Q1, K1))[SAW, SHE]),
    Worked(id="B-scaled-saw-row", stage="scaling", article=B, section="Scores, now with a divide",
           quantity="scaled scores of 'saw'", expected=[1.99, 0.11, -1.62, 0.16], precision=2,
           compute=lambda api: np.asarray(api.scaled_scores(Q1, K1))[SAW]),
    Worked(id="B-scaled-the-row", stage="scaling", article=B, section="Causal attention",
           quantity="unmasked scaled scores of 'the'", expected=[0.53, -0.02, -0.40, 0.12], precision=2,
           compute=lambda api: np.asarray(api.scaled_scores(Q1, K1))[THE]),
    _variance(2, False, 2.01), _variance(2, True, 1.01),
    _variance(64, False, 64.66), _variance(64, True, 1.01),
    _variance(512, False, 510.36), _variance(512, True, 1.00),
    # ---- masking and single-head attention ---------------------------------------------------
    Worked(id="A-attention-weights", stage="masking", article=A, section="How the scores become shares",
           quantity="attention weights of q = (1, 0), all positions allowed",
           expected=[0.4011, 0.1978, 0.4011], precision=4,
           compute=lambda api: api.attention(A_Q, A_K, A_V)[1][0]),
    Worked(id="A-masked-weights", stage="masking", article=A, section="Hide forbidden positions before softmax",
           quantity="weights with position 3 hidden", expected=[0.6698, 0.3302, 0.0], precision=4,
           compute=lambda api: api.attention(A_Q, A_K, A_V, np.array([[True, True, False]]))[1][0]),
    Worked(id="A-masked-output", stage="masking", article=A, section="Hide forbidden positions before softmax",
           quantity="output with position 3 hidden", expected=[1.3395, 0.6605], precision=4,
           compute=lambda api: api.attention(A_Q, A_K, A_V, np.array([[True, True, False]]))[0][0]),
    Worked(id="B-unmasked-saw-weights", stage="masking", article=B, section="Weights and output",
           quantity="unmasked weights of 'saw'", expected=[0.75, 0.11, 0.02, 0.12], precision=2,
           compute=lambda api: api.attention(Q1, K1, V1)[1][SAW]),
    Worked(id="B-unmasked-saw-output", stage="masking", article=B, section="Weights and output",
           quantity="unmasked output of 'saw'", expected=[0.55, -0.12], precision=2,
           compute=lambda api: api.attention(Q1, K1, V1)[0][SAW]),
    Worked(id="B-unmasked-cat-the", stage="masking", article=B, section="Weights and output",
           quantity="unmasked weight of 'cat' on 'the'", expected=0.67, precision=2,
           compute=lambda api: api.attention(Q1, K1, V1)[1][CAT, THE]),
    Worked(id="B-causal-the-exps", stage="masking", article=B, section="Causal attention",
           quantity="exponentials of the allowed scaled scores of 'the'", expected=[1.70, 0.98, 0.67], precision=2,
           compute=lambda api: _causal_exps(api)[:3]),
    Worked(id="B-causal-the-sum", stage="masking", article=B, section="Causal attention",
           quantity="their sum", expected=3.35, precision=2,
           compute=lambda api: _causal_exps(api).sum()),
    Worked(id="B-causal-the-weights", stage="masking", article=B, section="Causal attention",
           quantity="causal weights of 'the'", expected=[0.51, 0.29, 0.20, 0.0], precision=2,
           compute=lambda api: api.attention(Q1, K1, V1, api.causal_mask(4))[1][THE]),
    Worked(id="B-code-weights-3", stage="masking", article=B, section="Code that matches the hand numbers",
           quantity="weights[3] printed by the NumPy code", expected=[0.0298, 0.1493, 0.6738, 0.1471], precision=4,
           compute=lambda api: api.attention(Q1, K1, V1, api.causal_mask(4))[1][CAT]),
    Worked(id="B-code-out-1", stage="masking", article=B, section="Code that matches the hand numbers",
           quantity="out[1] printed by the NumPy code", expected=[0.5605, -0.1183], precision=4,
           compute=lambda api: api.attention(Q1, K1, V1, api.causal_mask(4))[0][SAW]),
    # ---- heads -------------------------------------------------------------------------------
    Worked(id="B-heads-cat-concat", stage="heads", article=B, section="Multi-head attention",
           quantity="'cat': head 1 then head 2, concatenated (multi_head_attention with W_O = I)",
           expected=[-0.10, 0.39, -0.02, 0.33], precision=2,
           compute=lambda api: np.asarray(api.multi_head_attention(X, WQ, WK, WV, np.eye(4), 2, True))[CAT]),
    Worked(id="B-heads-cat-output", stage="heads", article=B, section="Multi-head attention",
           quantity="'cat' after the output projection W_O", expected=[0.06, 0.34, -0.09, 0.00], precision=2,
           compute=lambda api: np.asarray(api.multi_head_attention(X, WQ, WK, WV, WO, 2, True))[CAT]),
    Worked(id="B-module-cat-output", stage="heads", article=B, section="Code that matches the hand numbers",
           quantity="CausalSelfAttention loaded with the two heads' weights: 'cat'",
           expected=[0.06, 0.34, -0.09, 0.00], precision=2,
           compute=_module_cat),
    Worked(id="B-gpt2-shapes", stage="heads", article=B, section="Multi-head attention",
           quantity="GPT-2 small (d_model 768, 12 heads of 64): qkv.weight and out.weight shapes",
           expected=[2304, 768, 768, 768], precision=0,
           compute=lambda api: (lambda s: s["qkv.weight"] + s["out.weight"])(api.module_shapes(768, 12))),
    # ---- KV cache ----------------------------------------------------------------------------
    Worked(id="B-gpt2-cache-floats", stage="kv_cache", article=B, section="What it costs as the sequence grows",
           quantity="floats a KV cache holds per layer, 2 n d_model, for GPT-2 small's 1,024-token context",
           expected=1572864, precision=0,
           compute=lambda api: api.kv_cache_numel(1, 12, 1024, 64)),
    # ---- bonus: tiled, costs ----------------------------------------------------------------
    Worked(id="B-tiled-matches-code", stage="tiled", article=B, section="Code that matches the hand numbers",
           quantity="the causal output of head 1 computed in tiles of 2 x 2: rows 'saw' and 'cat'",
           expected=[[0.5605, -0.1183], [-0.1044, 0.3944]], precision=4,
           compute=lambda api: np.asarray(api.tiled_attention(Q1, K1, V1, True, 2, 2))[[SAW, CAT]]),
    Worked(id="B-scores-128k", stage="costs", article=B, section="What it costs as the sequence grows",
           quantity="scores per head at 128k tokens, in billions ('about 16 billion')", expected=16, precision=0,
           compute=lambda api: int(api.score_count(128_000, 1)) / 1e9),
    Worked(id="B-gpt2-cache-floats-per-layer", stage="costs", article=B, section="What it costs as the sequence grows",
           quantity="kv_cache_floats for one layer of GPT-2 small (12 heads of 64) at 1,024 tokens: 2 n d_model",
           expected=1572864, precision=0,
           compute=lambda api: api.kv_cache_floats(1024, 1, 12, 64)),
    # ---- fused -------------------------------------------------------------------------------
    Worked(id="B-fused-matches-code", stage="fused", article=B, section="Code that matches the hand numbers",
           quantity="the fused causal call on head 1: rows 'saw' and 'cat'",
           expected=[[0.5605, -0.1183], [-0.1044, 0.3944]], precision=4,
           compute=_fused_head1),
]

BY_ID = {w.id: w for w in WORKED}


def as_check(w: Worked, points: float) -> Check:
    """The check that compares the student's value of `w` with the article's, at the printed precision."""

    def fn(api, ctx):
        got = w.compute(api)
        what = say.WORKED_WHAT.format(quantity=w.quantity, article=w.article, section=w.section)
        if isinstance(w.precision, dict):
            check_within(got, w.expected, w.precision["sampling_error"], what)
        else:
            check_printed(got, w.expected, w.precision, what)

    fn.__name__ = "worked_" + w.id.replace("-", "_").lower()
    return Check(w.stage, fn.__name__, points, "worked", "public", fn,
                 doc=say.WORKED_TITLE.format(article=w.article, section=w.section, quantity=w.quantity),
                 cite=say.WORKED_CITE.format(article=w.article, section=w.section), worked_id=w.id, rule=WORKED_RULE)
assert len(BY_ID) == len(WORKED), "worked ids must be unique"
