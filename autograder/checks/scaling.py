"""Stage 4 checks: scaled scores and the variance experiment."""
import numpy as np

from ..compare import Fail, check_close
from ..registry import check
from .common import randn, shape_str

S = "scaling"


@check(S, 2, "reference")
def reference(api, ctx):
    """scaled_scores matches the reference (n_q != n_k, several d_k, float32)"""
    rng = ctx.rng("scaled")
    for n_q, n_k, d_k, dt in [(3, 5, 4, np.float64), (4, 4, 16, np.float64), (1, 6, 9, np.float64),
                              (5, 2, 64, np.float32)]:
        q, k = randn(rng, n_q, d_k, dtype=dt), randn(rng, n_k, d_k, dtype=dt)
        check_close(api.scaled_scores(q, k), ctx.ref.scaled_scores(q, k), "scaled_scores(q, k)",
                    inputs=f"q {shape_str(q)}, k {shape_str(k)}", mistakes=lambda: ctx.mistakes.scaling_variants(q, k))


@check(S, 1, "reference")
def reference_batch(api, ctx):
    """scaled_scores works with leading batch dimensions"""
    rng = ctx.rng("scaled-batch")
    q, k = randn(rng, 2, 3, 4, 8), randn(rng, 2, 3, 6, 8)
    check_close(api.scaled_scores(q, k), ctx.ref.scaled_scores(q, k), "scaled_scores(q, k)",
                inputs=f"q {shape_str(q)}, k {shape_str(k)}", mistakes=lambda: ctx.mistakes.scaling_variants(q, k))


@check(S, 1, "property", "public", cite="Article A, 'Why divide by the square root?'")
def variance_theory(api, ctx):
    """var(q.k) is near d_k and var(q.k / sqrt(d_k)) near 1, for other d_k and seeds"""
    for d_k, seed in [(8, 11), (128, 12)]:
        n = 5000
        se = np.sqrt((2 * d_k**2 + 6 * d_k) / n)
        raw = float(api.score_variance(d_k, n, seed, False))
        scaled = float(api.score_variance(d_k, n, seed, True))
        if abs(raw - d_k) > 5 * se:
            raise Fail(f"score_variance({d_k}, seed={seed}) = {raw:.3f}; theory says {d_k} (+- {5 * se:.2f})")
        if abs(scaled - 1.0) > 5 * se / d_k:
            raise Fail(f"score_variance({d_k}, seed={seed}, scaled=True) = {scaled:.4f}; theory says 1 "
                       f"(+- {5 * se / d_k:.3f})")


@check(S, 1, "property", "public")
def variance_seeded(api, ctx):
    """the same seed gives the same estimate; another seed gives another"""
    a = float(api.score_variance(16, 2000, 5, False))
    b = float(api.score_variance(16, 2000, 5, False))
    c = float(api.score_variance(16, 2000, 6, False))
    if a != b:
        raise Fail(f"score_variance(16, 2000, seed=5) gave {a} then {b}: use np.random.default_rng(seed)")
    if a == c:
        raise Fail("score_variance gave the same estimate for seeds 5 and 6: the seed is ignored")
