"""Bonus stage checks: tiled online-softmax attention, the backward pass, dropout, costs."""
import numpy as np

from ..compare import Fail, check_close
from ..diagnosis import diagnosed
from ..registry import check
from .common import RAISED, expect_value_error, randn, shape_str

# ---- tiled ------------------------------------------------------------------------------------


@check("tiled", 3, "reference")
def tiled_reference_blocks(api, ctx):
    """equals the reference for many block sizes, blocks that do not divide n, n_q != n_k, causal or not"""
    rng = ctx.rng("tiled")
    cases = [(10, 10, 3, 4, True), (7, 12, 4, 5, True), (9, 9, 64, 64, False), (1, 9, 2, 2, True),
             (13, 20, 5, 7, False), (16, 16, 1, 1, True), (20, 20, 8, 3, True)]
    for n_q, n_k, bq, bk, causal in cases:
        q, k, v = randn(rng, n_q, 4), randn(rng, n_k, 4), randn(rng, n_k, 3)
        check_close(api.tiled_attention(q, k, v, causal, bq, bk), ctx.ref.tiled_attention(q, k, v, causal),
                    f"tiled_attention(causal={causal}, block_q={bq}, block_k={bk})",
                    inputs=f"q {shape_str(q)}, k {shape_str(k)}",
                    mistakes=lambda: ctx.mistakes.tiled_variants(q, k, v, causal, bq, bk))


@check("tiled", 1.5, "reference", "public")
def tiled_large_scores(api, ctx):
    """stays exact when the scores reach +-1e4 and the running maximum jumps between blocks"""
    rng = ctx.rng("tiled-large")
    q, k, v = randn(rng, 12, 4, scale=60.0), randn(rng, 12, 4, scale=60.0), randn(rng, 12, 2)
    k[9] *= 3  # a late key with a much larger score: the maximum grows in a later block
    check_close(api.tiled_attention(q, k, v, True, 4, 4), ctx.ref.tiled_attention(q, k, v, True),
                "tiled_attention with scores near +-1e4", inputs="q, k [12, 4] x 60, blocks of 4",
                mistakes=lambda: ctx.mistakes.tiled_variants(q, k, v, True, 4, 4))


@check("tiled", 1.5, "property", "public")
def tiled_memory_linear(api, ctx):
    """peak memory (tracemalloc) grows linearly with n, not with n^2"""
    (small, shape), (large, _) = (api.tiled_peak_memory(n) for n in (512, 1024))
    if list(shape) != [512, 16]:
        raise Fail(f"tiled_attention of q, k, v [512, 16] returned shape {shape}; expected [512, 16]")
    ratio = large / max(small, 1)
    if ratio > 2.8 or large > 1024 * 1024 * 8 / 4:
        raise Fail(f"peak memory {small / 1024:.0f} KiB at n=512 and {large / 1024:.0f} KiB at n=1024 "
                   f"(x{ratio:.2f}); linear growth gives about x2, an n x n matrix x4 "
                   f"({1024 * 1024 * 8 / 2**20:.0f} MiB at n=1024)")


@check("tiled", 2, "property", "public")
def tiled_skips_hidden_blocks(api, ctx):
    """with a causal mask, key blocks entirely in the future of a query block are not read"""
    r = api.tiled_key_rows(256, 64)
    if r["read"] == 0:
        raise Fail("no key block was read by slicing k[j0:j1]; slice the keys block by block")
    if r["read"] > 0.7 * r["all"]:
        raise Fail(f"read {r['read']} key rows in all; reading every block for every query block is {r['all']}, "
                   f"and skipping the blocks the causal mask hides needs about {r['all'] * 10 // 16}")


@check("tiled", 1, "property", "public")
def tiled_row_without_keys_raises(api, ctx):
    """a query row with no allowed key (n_q > n_k, causal) raises ValueError instead of returning NaN"""
    q, k, v = np.ones((4, 2)), np.ones((2, 2)), np.ones((2, 2))
    got = expect_value_error(lambda: api.tiled_attention(q, k, v, True, 2, 2), "tiled_attention with n_q > n_k")
    if got is not RAISED:
        out = np.asarray(got, dtype=float)
        msg = f"rows with no allowed key returned {out.tolist()} instead of raising ValueError"
        raise diagnosed("tiled-masked-row-nan" if np.isnan(out).any() else None, msg)


# ---- backward ---------------------------------------------------------------------------------


def _grads(api, ctx, q, k, v, g, causal, inputs):
    got = api.attention_backward(q, k, v, g, causal)
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Fail(f"attention_backward should return (dq, dk, dv); got {type(got).__name__}")
    want = ctx.ref.attention_backward(q, k, v, g, causal)
    for i, name in enumerate(("dq", "dk", "dv")):
        check_close(got[i], want[i], name, inputs=inputs,
                    mistakes=lambda i=i: _part(ctx.mistakes.backward_variants(q, k, v, g, causal), i, want[i]))


def _part(variants: dict, i: int, want) -> dict:
    """The i-th gradient of each mistake, keeping only mistakes that change that gradient."""
    return {m: [c[i] for c in cands] for m, cands in variants.items()
            if any(not np.allclose(c[i], want, atol=1e-6) for c in cands)}


@check("backward", 4, "reference")
def backward_reference(api, ctx):
    """dq, dk, dv match the reference: causal or not, n_q != n_k, d_v != d_k"""
    rng = ctx.rng("backward")
    for n_q, n_k, d_k, d_v, causal in [(4, 4, 3, 3, True), (3, 6, 4, 2, True), (5, 5, 2, 4, False), (1, 3, 2, 2, True)]:
        q, k, v, g = randn(rng, n_q, d_k), randn(rng, n_k, d_k), randn(rng, n_k, d_v), randn(rng, n_q, d_v)
        _grads(api, ctx, q, k, v, g, causal, f"q {shape_str(q)}, k {shape_str(k)}, causal={causal}")


@check("backward", 3, "property", "public")
def backward_finite_differences(api, ctx):
    """dq, dk, dv agree with central finite differences of the forward pass"""
    rng = ctx.rng("backward-fd")
    q, k, v, g = randn(rng, 3, 2), randn(rng, 4, 2), randn(rng, 4, 2), randn(rng, 3, 2)
    got = api.attention_backward(q, k, v, g, True)
    eps = 1e-6
    for i, (name, x) in enumerate((("dq", q), ("dk", k), ("dv", v))):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            plus, minus = [a.copy() for a in (q, k, v)], [a.copy() for a in (q, k, v)]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            f = [float(np.sum(ctx.ref.attention(*t, ctx.ref.causal_mask(3, 4))[0] * g)) for t in (plus, minus)]
            num[idx] = (f[0] - f[1]) / (2 * eps)
        check_close(got[i], num, f"{name} against finite differences", rtol=1e-4, atol=1e-6,
                    inputs="q [3, 2], k [4, 2], causal",
                    mistakes=lambda i=i, num=num: _part(ctx.mistakes.backward_variants(q, k, v, g, True), i, num))


@check("backward", 3, "property", "public")
def backward_masked_keys_get_no_gradient(api, ctx):
    """a key and value that no query with a gradient may see get exactly zero gradient"""
    rng = ctx.rng("backward-mask")
    q, k, v, g = randn(rng, 2, 3), randn(rng, 5, 3), randn(rng, 5, 2), randn(rng, 2, 2)
    g[1] = 0.0  # queries sit at positions 3 and 4; only query 1 (no gradient) may see key 4
    dq, dk, dv = (np.asarray(x, dtype=float) for x in api.attention_backward(q, k, v, g, True))
    if not all(np.all(np.isfinite(x)) for x in (dq, dk, dv)):
        raise Fail("the gradients contain NaN or inf (masked scores must contribute exactly 0)")
    if dk[4].any() or dv[4].any():
        raise Fail(f"key 4 is hidden from query 0 and query 1 has no gradient, yet dk[4] = {dk[4].tolist()} and "
                   f"dv[4] = {dv[4].tolist()}; a masked weight is exactly 0 and passes no gradient")
    check_close(dv, ctx.ref.attention_backward(q, k, v, g, True)[2], "dv", inputs="q [2, 3], k [5, 3], causal")


# ---- dropout ----------------------------------------------------------------------------------


@check("dropout", 1, "property", "public", cite="Article B, 'Causal attention'")
def dropout_identity_in_eval(api, ctx):
    """training=False returns the weights unchanged, whatever p"""
    w = np.random.default_rng(0).random((6, 7))
    got = np.asarray(api.dropout_probe(w, 0.5, 1, False), dtype=float)
    if got.shape != w.shape or not np.array_equal(got, w):
        raise diagnosed("dropout-in-eval" if got.shape == w.shape and (got == 0).mean() > 0.2 else None,
                        "attention_dropout(training=False) changed the weights; dropout is off at inference")
    got = np.asarray(api.dropout_probe(w, 0.0, 1, True), dtype=float)
    if not np.array_equal(got, w):
        raise Fail("attention_dropout(p=0, training=True) changed the weights")


@check("dropout", 1.5, "property", "public")
def dropout_kept_fraction(api, ctx):
    """in training, each weight survives with probability 1 - p"""
    w = np.ones((300, 300))
    for p in (0.1, 0.3):
        got = np.asarray(api.dropout_probe(w, p, 7, True), dtype=float)
        kept = float((got != 0).mean())
        sigma = np.sqrt(p * (1 - p) / w.size)
        if abs(kept - (1 - p)) > 6 * sigma:
            bad = "dropout-keep-p" if abs(kept - p) <= 6 * sigma else None
            raise diagnosed(bad, f"with p={p} the kept fraction is {kept:.4f}; expected {1 - p:.2f} (+- {6 * sigma:.4f})")


@check("dropout", 1.5, "property", "public")
def dropout_survivors_rescaled(api, ctx):
    """survivors are divided by 1 - p, so each weight keeps its expected value"""
    w = np.random.default_rng(2).random((200, 200))
    p = 0.25
    got = np.asarray(api.dropout_probe(w, p, 11, True), dtype=float)
    kept = got != 0
    if np.allclose(got[kept], w[kept]):
        raise diagnosed("dropout-not-inverted", "the surviving weights were not divided by 1 - p: the expected "
                        "weight shrinks by the factor 1 - p")
    check_close(got[kept], w[kept] / (1 - p), "surviving weights against w / (1 - p)")
    mean_ratio = got.mean() / w.mean()
    if abs(mean_ratio - 1) > 0.02:
        raise Fail(f"the mean weight changed by x{mean_ratio:.3f} under dropout; expected about x1")


@check("dropout", 1, "property", "public")
def dropout_uses_the_rng(api, ctx):
    """the same generator seed gives the same mask; another seed gives another"""
    w = np.ones((20, 20))
    a, b, c = (np.asarray(api.dropout_probe(w, 0.5, s, True)) for s in (3, 3, 4))
    if not np.array_equal(a, b):
        raise Fail("two calls with generators seeded alike gave different masks: draw from the rng you are given")
    if np.array_equal(a, c):
        raise Fail("generators with different seeds gave the same mask: draw from the rng you are given")


# ---- costs ------------------------------------------------------------------------------------


@check("costs", 1.5, "reference")
def costs_reference(api, ctx):
    """score_count and kv_cache_floats match the formulas for random sizes"""
    rng = ctx.rng("costs")
    for _ in range(5):
        n, h, layers, kvh, d, b = (int(x) for x in rng.integers(1, [5000, 32, 48, 16, 256, 8]))
        got, want = api.score_count(n, h), ctx.ref.score_count(n, h)
        if int(got) != want:
            raise diagnosed("costs-scores-not-squared" if int(got) == n * h else None,
                            f"score_count({n}, {h}) = {got}; expected {want}")
        got, want = api.kv_cache_floats(n, layers, kvh, d, b), ctx.ref.kv_cache_floats(n, layers, kvh, d, b)
        if int(got) != want:
            bad = ctx.mistakes.costs_variants(n, layers, kvh, d, b)
            found = next((m for m, x in bad.items() if int(got) == x), None)
            raise diagnosed(found, f"kv_cache_floats({n}, {layers}, {kvh}, {d}, {b}) = {got}; expected {want}")


@check("costs", 1.5, "property", "public", cite="Article B, 'What it costs as the sequence grows'")
def costs_match_your_cache(api, ctx):
    """kv_cache_floats equals what your own KVCache allocates"""
    for batch, h, max_len, d in [(1, 12, 1024, 64), (2, 4, 100, 16)]:
        mine = int(api.kv_cache_numel(batch, h, max_len, d))
        claimed = int(api.kv_cache_floats(max_len, 1, h, d, batch))
        if mine != claimed:
            bad = ctx.mistakes.costs_variants(max_len, 1, h, d, batch)
            found = next((m for m, x in bad.items() if claimed == x), None)
            raise diagnosed(found, f"kv_cache_floats({max_len}, 1, {h}, {d}, {batch}) = {claimed}, but your "
                            f"KVCache({batch}, {h}, {max_len}, {d}) holds {mine} numbers")
