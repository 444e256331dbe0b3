"""Stage 4 checks: scaled scores and the variance experiment."""
import numpy as np

from ..declarations import DEFAULTS_RULE, Edit, Function, Mistake, Probe, Stage
from ..evidence.compare import check_close, variance_stderr
from ..evidence.probes import K54, Q34, same_array
from ..outcomes import Fail
from .common import expect_defaults, randn, shape_str

# rung 1 of the hint ladder of each mistake below, and the line that makes it (Mistake.line)
ASK = 'What exactly are the raw scores divided by, and which dimension does that number come from?'
MADE_ON = 'sqrt|\\*\\*|/'
STAGE = Stage(
    name="scaling", number=4, points=10, files=("scaling.py",), calls=(),
    reread='A "Why divide by the square root?"; B "Scores, now with a divide"',
    worked_points=0.5,
    functions=(
        Function(name="scaled_scores", target="scaling:scaled_scores", reference="core:scaled_scores"),
        Function(name="score_variance", target="scaling:score_variance", reference="core:score_variance"),
    ),
    intro="Divide the scores by the square root of d_k, and see why with an experiment.",
    hints=(
        "The dot product of two d_k-dimensional vectors with unit-variance entries has variance d_k; dividing by "
        "sqrt(d_k) brings it back to 1. Article A, 'Why divide by the square root?'.",
        "For q [..., n_q, d_k] and k [..., n_k, d_k], swap the last two axes of k (not .T, which reverses every "
        "axis of a batched array) and divide by the square root of q's last dimension.",
        "For score_variance: draw q and k of shape [n_pairs, d_k] from np.random.default_rng(seed), take the "
        "row-wise dot products, optionally divide them, and return their variance as a float.",
    ),
    mistakes=(
        Mistake(id="scale-missing", where="scaling.py:scaled_scores",
                explanation="the scores are not divided by sqrt(d_k), so their spread grows with d_k and softmax "
                            "saturates",
                reread="Article A, 'Why divide by the square root?'",
                question=ASK,
                line=MADE_ON,
                evidence='mistakes:scaling_variants',
                mutant=(
                    Edit('scaling.py',
                         '    return (q @ np.swapaxes(k, -1, -2)) / np.sqrt(d_k)',
                         '    return q @ np.swapaxes(k, -1, -2)'),
                )),
        Mistake(id="scale-by-dk", where="scaling.py:scaled_scores",
                explanation="the scores are divided by d_k instead of sqrt(d_k), which shrinks them too much as "
                            "d_k grows",
                reread="Article B, 'Scores, now with a divide'",
                question=ASK,
                line=MADE_ON,
                evidence='mistakes:scaling_variants',
                mutant=(
                    Edit('scaling.py',
                         '    return (q @ np.swapaxes(k, -1, -2)) / np.sqrt(d_k)',
                         '    return (q @ np.swapaxes(k, -1, -2)) / d_k'),
                )),
        Mistake(id="scale-wrong-dim", where="scaling.py:scaled_scores",
                explanation="the square root is taken of the wrong size (a sequence length or d_v); it must be "
                            "d_k, the width of a query or key",
                reread="Article A, 'Why divide by the square root?'",
                question=ASK,
                line=MADE_ON,
                evidence='mistakes:scaling_variants',
                mutant=(
                    Edit('scaling.py',
                         '    d_k = q.shape[-1]\n',
                         '    d_k = k.shape[-2]\n'),
                )),
    ),
    probes=(
        Probe(name="scaled_scores", file="scaling.py", function="scaled_scores", args=(Q34, K54),
              expected=lambda r: r.scaled_scores(Q34, K54), judge=same_array({"d_k": 4, "n_q": 3, "n_k": 5})),
    ),
)


@STAGE.check(points=1.5, kind="reference")
def reference(api, ctx):
    """scaled_scores matches the reference (float64 and float32 inputs, n_q != n_k and several d_k among them)"""
    rng = ctx.rng("scaled")
    for n_q, n_k, d_k, dt in [(3, 5, 4, np.float64), (4, 4, 16, np.float64), (1, 6, 9, np.float64),
                              (5, 2, 64, np.float32)]:
        q, k = randn(rng, n_q, d_k, dtype=dt), randn(rng, n_k, d_k, dtype=dt)
        check_close(api.scaled_scores(q, k), ctx.ref.scaled_scores(q, k), "scaled_scores(q, k)",
                    inputs=f"q {shape_str(q)}, k {shape_str(k)}", mistakes=lambda: ctx.mistakes.scaling_variants(q, k))


@STAGE.check(points=1, kind="reference",
              rule="q [..., n_q, d_k], k [..., n_k, d_k] -> scores [..., n_q, n_k] = q k^T / sqrt(d_k).")
def reference_batch(api, ctx):
    """scaled_scores works with leading batch dimensions"""
    rng = ctx.rng("scaled-batch")
    q, k = randn(rng, 2, 3, 4, 8), randn(rng, 2, 3, 6, 8)
    check_close(api.scaled_scores(q, k), ctx.ref.scaled_scores(q, k), "scaled_scores(q, k)",
                inputs=f"q {shape_str(q)}, k {shape_str(k)}", mistakes=lambda: ctx.mistakes.scaling_variants(q, k))


@STAGE.check(points=1, kind="property", visibility="public", cite="Article A, 'Why divide by the square root?'",
              rule="Theory: d_k unscaled, 1 scaled.")
def variance_theory(api, ctx):
    """var(q.k) is near d_k and var(q.k / sqrt(d_k)) near 1, for other d_k and seeds"""
    for d_k, seed in [(8, 11), (128, 12)]:
        n = 5000
        se = variance_stderr(d_k, n)
        raw = float(api.score_variance(d_k, n, seed, False))
        scaled = float(api.score_variance(d_k, n, seed, True))
        if abs(raw - d_k) > 5 * se:
            raise Fail(f"score_variance({d_k}, seed={seed}) = {raw:.3f}; theory says {d_k} (+- {5 * se:.2f})")
        if abs(scaled - 1.0) > 5 * se / d_k:
            raise Fail(f"score_variance({d_k}, seed={seed}, scaled=True) = {scaled:.4f}; theory says 1 "
                       f"(+- {5 * se / d_k:.3f})")


@STAGE.check(points=1, kind="property", visibility="public",
              rule="Draws `n_pairs` pairs of d_k-dimensional vectors from np.random.default_rng(seed).")
def variance_seeded(api, ctx):
    """the same seed gives the same estimate; another seed gives another"""
    a = float(api.score_variance(16, 2000, 5, False))
    b = float(api.score_variance(16, 2000, 5, False))
    c = float(api.score_variance(16, 2000, 6, False))
    if a != b:
        raise Fail(f"score_variance(16, 2000, seed=5) gave {a} then {b}: use np.random.default_rng(seed)")
    if a == c:
        raise Fail("score_variance gave the same estimate for seeds 5 and 6: the seed is ignored")


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    written = api.score_variance(2, 100)  # a stub's defaults earn nothing: the stage must work first
    expect_defaults(api, {"scaling:score_variance": {"n_pairs": "20000", "seed": "0", "scaled": "False"}}, written)
