"""Bonus stage 14: rotary position embedding (RoPE) of queries and keys, with and without a cache."""
import numpy as np

from ..declarations import DEFAULTS_RULE, Edit, Function, Mistake, Probe, Stage
from ..evidence.compare import check_close
from ..evidence.probes import same_array
from ..outcomes import Fail
from .common import expect_defaults, randn, require_nontrivial, shape_str

X58R = np.random.default_rng(37).normal(size=(5, 8))

STAGE = Stage(
    name="rope", number=14, points=5, files=("rope.py",), calls=("masking",),
    reread='rotary position embedding of q and k; B "Where the vectors come from"',
    bonus=True,
    functions=(
        Function(name="rotate", target="rope:rotate", reference="rope:rotate"),
        Function(name="rope_attention", target="rope:rope_attention", reference="rope:rope_attention"),
        Function(name="rope_decode", target="rope:rope_decode", reference="rope:rope_decode"),
    ),
    intro="Bonus: rotary position embedding, which turns queries and keys by angles that grow with the position, so "
          "that scores see how far apart two tokens are.",
    hints=(
        "Attention alone cannot tell the order of the tokens (Article B, 'Where the vectors come from'). Rotary "
        "embedding turns pairs of features of each query and key by an angle proportional to its position; the "
        "dot product of two turned vectors depends on the difference of the angles only.",
        "Pair feature j with feature j + d/2 (the two halves of the vector), not 2j with 2j + 1. Pair j turns by "
        "position * base ** (-2j / d): build an [n, d/2] table of angles, then (a, b) -> (a cos - b sin, "
        "a sin + b cos).",
        "Only q and k are turned; v is used as it is. When decoding, the new tokens are not at position 0: they "
        "come after the L cached ones, so rotate them with offset L (the cached keys were turned at their own "
        "positions already).",
    ),
    mistakes=(
        Mistake(id="rope-interleaved", where="rope.py:rotate",
                explanation="features are paired as neighbours (2j, 2j + 1), the interleaved convention; this kit's "
                            "contract pairs feature j with feature j + d/2 (rotate-half)",
                reread="the docstring of rope.py",
                question="Which two features of a vector of width 8 does your code turn together as pair 0, and which "
                         "does the docstring pair?",
                line="0::2|1::2|::2|half|stack|concatenate",
                evidence="mistakes:rotate_interleaved",
                mutant=(
                    Edit("rope.py",
                         "a, b = x[..., :half], x[..., half:]",
                         "a, b = x[..., 0::2], x[..., 1::2]"),
                    Edit("rope.py",
                         "return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)",
                         "return np.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(x.shape)"),
                )),
        Mistake(id="rope-rotates-v", where="rope.py:rope_attention",
                explanation="the values are rotated too; rotary embedding turns only queries and keys, so that "
                            "position enters through the scores, and the values are averaged as they are",
                reread="the docstring of rope.py",
                question="Which of q, k and v does your code pass through rotate?",
                line="rotate",
                evidence="mistakes:rope_attention_variants",
                mutant=(
                    Edit("rope.py",
                         "out, _ = attention(q, k, v, allowed)  # [..., n_q, d_v]",
                         "out, _ = attention(q, k, rotate(v), allowed)  # [..., n_q, d_v]"),
                )),
        Mistake(id="rope-no-offset", where="rope.py:rope_decode",
                explanation="each decode call rotates its new tokens from position 0, as if they started the "
                            "sequence; they come after the L cached tokens, so rotate them with offset L",
                reread="the docstring of rope.py",
                question="At which position does your decode step put the first new token when the cache already "
                         "holds 4 tokens?",
                line="rotate|offset",
                evidence="mistakes:rope_decode_variants",
                mutant=(
                    Edit("rope.py",
                         "q, k = rotate(q, offset=L), rotate(k, offset=L)",
                         "q, k = rotate(q), rotate(k)"),
                )),
    ),
    probes=(
        Probe(name="rotate", file="rope.py", function="rotate", args=(X58R, 3),
              expected=lambda r: r.rotate(X58R, 3), judge=same_array()),
    ),
)


@STAGE.check(points=1, kind="reference")
def rotate_reference(api, ctx):
    """rotate matches the reference: offsets, another base, batch dims, n = 1, float32"""
    rng = ctx.rng("rope-rotate")
    for shape, offset, base, dt in [((6, 8), 0, 10000.0, np.float64), ((2, 3, 5, 4), 7, 10000.0, np.float64),
                                    ((1, 16), 1000, 10000.0, np.float64), ((4, 6), 3, 500.0, np.float64),
                                    ((3, 9, 8), 2, 10000.0, np.float32)]:
        x = randn(rng, *shape, dtype=dt)
        check_close(api.rotate(x, offset, base), ctx.ref.rotate(x, offset, base),
                    f"rotate(x, offset={offset}, base={base:g})", inputs=shape_str(x),
                    mistakes=lambda: {"rope-interleaved": ctx.mistakes.rotate_interleaved(x, offset, base)})


@STAGE.check(points=0.5, kind="property", visibility="public", rule="every row keeps its norm")
def rotate_keeps_norms(api, ctx):
    """rotation changes the vectors but keeps each row's length"""
    rng = ctx.rng("rope-norms")
    x = randn(rng, 2, 7, 8)
    got = np.asarray(api.rotate(x, 5), dtype=float)
    require_nontrivial(got, x, "rotate(x, offset=5) against x itself")
    check_close(np.linalg.norm(got, axis=-1), np.linalg.norm(x, axis=-1), "the norms of the rows of rotate(x, 5)",
                inputs=shape_str(x))


@STAGE.check(points=1, kind="property", visibility="public", cite="Article B, 'Where the vectors come from'",
              rule="Scores depend only on the distance between positions, not on where the pair sits.")
def scores_depend_on_distance_only(api, ctx):
    """the same query and key at positions m and p give a score that depends on m - p only"""
    rng = ctx.rng("rope-distance")
    n, d = 6, 8
    q0, k0 = randn(rng, d), randn(rng, d)
    qs = np.asarray(api.rotate(np.tile(q0, (n, 1))), dtype=float)  # q0 at positions 0..5
    ks = np.asarray(api.rotate(np.tile(k0, (n, 1))), dtype=float)
    s = qs @ ks.T  # s[m, p]: q0 at m against k0 at p
    for lag in range(-(n - 1), n):
        diag = np.diagonal(s, offset=-lag)  # entries with m - p = lag
        if np.ptp(diag) > 1e-4 * (1 + np.abs(diag).max()):
            raise Fail(f"the same query and key, {lag} positions apart, score {np.round(diag, 4).tolist()} at "
                       "different places in the sequence; with rotary embedding the score depends on the distance "
                       "only")
    if np.ptp(np.diagonal(s[::-1])) < 1e-6:
        raise Fail("the score of the same query and key is the same at every distance: the rotation does not "
                   "depend on the position")
    shifted = np.asarray(api.rotate(np.tile(q0, (n, 1)), 40), dtype=float) @ np.asarray(
        api.rotate(np.tile(k0, (n, 1)), 40), dtype=float).T
    check_close(shifted, s, "the scores with both q and k moved 40 positions on (offset=40) against offset 0")


@STAGE.check(points=1, kind="reference")
def rope_attention_reference(api, ctx):
    """rope_attention matches the reference: causal or not, n_q != n_k, d_v != d_k, batch dims"""
    rng = ctx.rng("rope-attention")
    for lead, n_q, n_k, d_k, d_v, causal in [((), 5, 5, 8, 4, True), ((2,), 3, 7, 4, 6, True),
                                             ((), 6, 6, 6, 2, False), ((2, 2), 1, 4, 8, 8, True)]:
        q, k, v = randn(rng, *lead, n_q, d_k), randn(rng, *lead, n_k, d_k), randn(rng, *lead, n_k, d_v)
        check_close(api.rope_attention(q, k, v, causal), ctx.ref.rope_attention(q, k, v, causal),
                    f"rope_attention(causal={causal})", inputs=f"q {shape_str(q)}, k {shape_str(k)}, v {shape_str(v)}",
                    mistakes=lambda: ctx.mistakes.rope_attention_variants(q, k, v, causal))


@STAGE.check(points=1, kind="property", visibility="hidden",
              rule="Fed in pieces, token by token or in chunks, the outputs equal rope_attention's with causal=True.")
def rope_decode_equals_full(api, ctx):
    """decoding token by token and in chunks (rotated with the cache's offset) equals the full rope_attention"""
    rng = ctx.rng("rope-decode")
    for lead, d_k, d_v, chunks in [((), 8, 4, [1] * 5), ((2, 3), 4, 6, [3, 1, 2]), ((), 6, 6, [2, 4])]:
        T = sum(chunks)
        q, k, v = randn(rng, *lead, T, d_k), randn(rng, *lead, T, d_k), randn(rng, *lead, T, d_v)
        outs, cache, start = [], None, 0
        for t in chunks:
            sl = (Ellipsis, slice(start, start + t), slice(None))
            out, cache = api.rope_decode(q[sl], k[sl], v[sl], cache)
            outs.append(np.asarray(out, dtype=float))
            start += t
        check_close(np.concatenate(outs, axis=-2), ctx.ref.rope_attention(q, k, v, True),
                    f"rope_decode fed in chunks {chunks}, against rope_attention on the whole sequence",
                    inputs=f"q {shape_str(q)}, v {shape_str(v)}",
                    mistakes=lambda: ctx.mistakes.rope_decode_variants(q, k, v, chunks))


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    x = np.ones((2, 4))
    written = api.rotate(x), api.rope_attention(x, x, x), api.rope_decode(x, x, x)  # a stub earns nothing here
    expect_defaults(api, {"rope:rotate": {"offset": "0", "base": "10000.0"},
                          "rope:rope_attention": {"causal": "True"}, "rope:rope_decode": {"cache": "None"}}, written)
