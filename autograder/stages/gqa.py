"""Bonus stage 13: grouped-query and multi-query attention, and decoding with a smaller cache."""
import numpy as np

from ..declarations import DEFAULTS_RULE, Edit, Function, Mistake, Probe, Stage
from ..evidence.compare import check_close
from ..evidence.diagnosis import diagnosed
from ..evidence.probes import same_array
from ..outcomes import Fail
from .common import RAISED, expect_defaults, expect_value_error, randn, require_nontrivial, shape_str, unraised

_R = np.random.default_rng(31)
KV2 = _R.normal(size=(2, 3, 2))  # two key/value heads, three positions
X48 = _R.normal(size=(4, 8))
WQ8, WO8 = _R.normal(size=(8, 8)) / 3, _R.normal(size=(8, 8)) / 3
WK4, WV4 = _R.normal(size=(8, 4)) / 3, _R.normal(size=(8, 4)) / 3  # 2 key/value heads of d_head 2
X28, X38 = _R.normal(size=(2, 8)), _R.normal(size=(3, 8))  # two new tokens after a prefix of three
CACHE3 = tuple((X38 @ w).reshape(3, 2, 2).transpose(1, 0, 2) for w in (WK4, WV4))  # the prefix's [2, 3, 2] k and v


def decode_step(got, want, ref):
    """Judge of gqa_decode(two new tokens, a cache of three): its output, then the cache it hands back."""
    said = "gqa_decode of 2 new tokens (n_heads=4, n_kv_heads=2) after a cache of 3"
    try:
        out, (k, v) = got
    except (TypeError, ValueError):
        return None, f"{said} returned {type(got).__name__}, not (out, (k, v))"
    k_all, v_all = ref.gqa_decode(X28, WQ8, WK4, WV4, WO8, 4, 2, CACHE3)[1]
    if np.shape(out) != np.shape(want) or not np.allclose(out, want, atol=1e-6):
        return None, f"{said}: the output is wrong"
    if any(np.shape(a) != np.shape(b) or not np.allclose(a, b, atol=1e-6) for a, b in ((k, k_all), (v, v_all))):
        return None, f"{said}: the cache handed back does not hold the 5 positions' key/value heads [2, 5, 2]"
    return None


STAGE = Stage(
    name="gqa", number=13, points=5, files=("gqa.py",), calls=("heads",),
    reread='query heads sharing key/value heads; B "Multi-head attention", "What it costs as the sequence grows"',
    bonus=True,
    functions=(
        Function(name="repeat_kv", target="gqa:repeat_kv", reference="gqa:repeat_kv"),
        Function(name="grouped_query_attention", target="gqa:grouped_query_attention",
                 reference="gqa:grouped_query_attention"),
        Function(name="gqa_decode", target="gqa:gqa_decode", reference="gqa:gqa_decode"),
    ),
    intro="Bonus: grouped-query attention, where several query heads share one key/value head, and a decode step "
          "whose cache keeps only the shared heads.",
    hints=(
        "Split the queries into n_heads heads and the keys and values into n_kv_heads heads, exactly as "
        "split_heads does; then give each query head the key/value head of its group. Article B, 'Multi-head "
        "attention'.",
        "Group g is the n_rep = n_heads // n_kv_heads consecutive query heads g*n_rep ... (g+1)*n_rep - 1. To line "
        "the key/value heads up with them, repeat each key/value head n_rep times in place (np.repeat along the "
        "head axis), not the whole stack n_rep times over.",
        "In the decode step, append the new keys and values to the cache while they still have n_kv_heads heads, "
        "and repeat only what you hand to attention: the saving of grouped-query attention is the smaller cache. "
        "Article B, 'What it costs as the sequence grows'.",
    ),
    mistakes=(
        Mistake(id="gqa-tile-not-repeat", where="gqa.py:repeat_kv",
                explanation="the key/value heads are repeated as a whole stack (0, 1, 0, 1) instead of each head in "
                            "place (0, 0, 1, 1), so query head h reads key/value head h % n_kv_heads instead of "
                            "h // (n_heads // n_kv_heads)",
                reread="the docstring of gqa.py",
                question="For n_heads = 4 and n_kv_heads = 2, which key/value head does query head 1 read in your "
                         "code, and which should it?",
                line="repeat|tile|concatenate|stack",
                evidence="mistakes:gqa_tiled",
                mutant=(
                    Edit("gqa.py",
                         "return np.repeat(kv, n_rep, axis=-3)",
                         "return np.concatenate([kv] * n_rep, axis=-3)"),
                )),
        Mistake(id="gqa-cache-after-repeat", where="gqa.py:gqa_decode",
                explanation="the decode step caches the key/value heads after repeating them, so the cache holds "
                            "n_heads heads and is no smaller than a multi-head cache; cache the n_kv_heads heads "
                            "and repeat only what attention reads",
                reread="Article B, 'What it costs as the sequence grows'",
                question="How many heads does the k your decode step returns have, and how many does the contract "
                         "ask for?",
                line="repeat_kv|concatenate",
                evidence="check:gqa_cache_holds_kv_heads",
                mutant=(
                    Edit("gqa.py",
                         "split_heads(v, n_kv_heads)  # [..., n_kv_heads, t, d_head]",
                         "split_heads(v, n_kv_heads)\n"
                         "    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # [..., n_heads, t, d_head]"),
                    Edit("gqa.py",
                         "out, _ = attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), allowed)  # [..., n_heads, "
                         "t, d_head]",
                         "out, _ = attention(q, k, v, allowed)"),
                )),
    ),
    probes=(
        Probe(name="repeat_kv", file="gqa.py", function="repeat_kv", args=(KV2, 2),
              expected=lambda r: r.repeat_kv(KV2, 2), judge=same_array()),
        Probe(name="grouped_query_attention", file="gqa.py", function="grouped_query_attention",
              args=(X48, WQ8, WK4, WV4, WO8, 4, 2),
              expected=lambda r: r.grouped_query_attention(X48, WQ8, WK4, WV4, WO8, 4, 2), judge=same_array()),
        Probe(name="gqa_decode", file="gqa.py", function="gqa_decode", args=(X28, WQ8, WK4, WV4, WO8, 4, 2, CACHE3),
              expected=lambda r: r.gqa_decode(X28, WQ8, WK4, WV4, WO8, 4, 2, CACHE3)[0], judge=decode_step),
    ),
)


def _weights(rng, d_model, n_heads, n_kv_heads, dt=np.float64):
    """w_q, w_k, w_v, w_o for n_heads query heads and n_kv_heads key/value heads."""
    d_kv = n_kv_heads * (d_model // n_heads)
    s = d_model**-0.5
    return (randn(rng, d_model, d_model, dtype=dt, scale=s), randn(rng, d_model, d_kv, dtype=dt, scale=s),
            randn(rng, d_model, d_kv, dtype=dt, scale=s), randn(rng, d_model, d_model, dtype=dt, scale=s))


@STAGE.check(points=0.5, kind="reference")
def repeat_kv_reference(api, ctx):
    """repeat_kv repeats each key/value head in place: batch dims, n_rep = 1, one head"""
    rng = ctx.rng("repeat-kv")
    for shape, n_rep in [((2, 5, 3), 2), ((2, 3, 4, 2), 3), ((4, 2, 3), 1), ((1, 3, 2), 4)]:
        x = randn(rng, *shape)
        check_close(api.repeat_kv(x, n_rep), ctx.ref.repeat_kv(x, n_rep), f"repeat_kv(kv, n_rep={n_rep})",
                    inputs=shape_str(x), mistakes={"gqa-tile-not-repeat": ctx.mistakes.repeat_kv_tiled(x, n_rep)})


@STAGE.check(points=1, kind="reference")
def gqa_reference(api, ctx):
    """grouped_query_attention matches the reference: groups of 2 and 3, causal or not, batch dims, n = 1, float32"""
    rng = ctx.rng("gqa")
    for lead, n, d_model, h, kv, causal, dt in [((), 5, 8, 4, 2, True, np.float64),
                                                ((2,), 4, 12, 6, 2, False, np.float32),
                                                ((), 1, 8, 4, 2, True, np.float64),
                                                ((), 6, 12, 6, 3, True, np.float64)]:
        x = randn(rng, *lead, n, d_model, dtype=dt)
        w = _weights(rng, d_model, h, kv, dt)
        check_close(api.grouped_query_attention(x, *w, h, kv, causal),
                    ctx.ref.grouped_query_attention(x, *w, h, kv, causal),
                    f"grouped_query_attention(n_heads={h}, n_kv_heads={kv}, causal={causal})", inputs=shape_str(x),
                    mistakes=lambda: {"gqa-tile-not-repeat": ctx.mistakes.gqa_tiled(x, *w, h, kv, causal)})


@STAGE.check(points=0.5, kind="property", visibility="public", cite="Article B, 'Multi-head attention'",
              rule="With n_kv_heads = n_heads this is multi_head_attention")
def gqa_equals_multi_head(api, ctx):
    """with n_kv_heads = n_heads, grouped-query attention is your multi_head_attention"""
    rng = ctx.rng("gqa-mha")
    x = randn(rng, 5, 8)
    w = _weights(rng, 8, 4, 4)
    got = api.grouped_query_attention(x, *w, 4, 4, True)
    require_nontrivial(got, api.grouped_query_attention(2 * x, *w, 4, 4, True), "grouped_query_attention")
    check_close(got, api.multi_head_attention(x, *w, 4, True),
                "grouped_query_attention(n_kv_heads = n_heads = 4) against your multi_head_attention",
                inputs=shape_str(x))


@STAGE.check(points=0.5, kind="property", visibility="public",
              rule="with n_kv_heads = 1 every query head reads the same single key/value head (multi-query attention)")
def gqa_multi_query_shares_one_head(api, ctx):
    """with n_kv_heads = 1 (multi-query), each query head attends to the one shared key/value head"""
    rng = ctx.rng("gqa-mqa")
    n, d_model, h = 5, 8, 4
    x = randn(rng, n, d_model)
    w_q, w_k, w_v, w_o = _weights(rng, d_model, h, 1)
    d_head = d_model // h
    allowed = ctx.ref.causal_mask(n)
    heads = []
    for i in range(h):  # every query head against the same keys x @ w_k and values x @ w_v
        out, _ = api.attention(x @ w_q[:, i * d_head:(i + 1) * d_head], x @ w_k, x @ w_v, allowed)
        heads.append(np.asarray(out, dtype=float))
    loop = np.concatenate(heads, axis=-1) @ w_o
    check_close(api.grouped_query_attention(x, w_q, w_k, w_v, w_o, h, 1, True), loop,
                "grouped_query_attention(n_kv_heads=1) against a loop of your attention() over the query heads, "
                "all with the one key/value head", inputs=shape_str(x))


@STAGE.check(points=0.5, kind="property", visibility="public", rule="Raises ValueError unless n_kv_heads divides n_heads.")
def gqa_needs_a_divisor(api, ctx):
    """n_kv_heads that does not divide n_heads raises ValueError"""
    rng = ctx.rng("gqa-divisor")
    x = randn(rng, 3, 12)
    w_q, w_o = randn(rng, 12, 12), randn(rng, 12, 12)
    w_k, w_v = randn(rng, 12, 9), randn(rng, 12, 9)  # 3 key/value heads of d_head 3, for 4 query heads
    got = expect_value_error(lambda: api.grouped_query_attention(x, w_q, w_k, w_v, w_o, 4, 3),
                             "grouped_query_attention(n_heads=4, n_kv_heads=3)", returned_ok=True,
                             of=(api, "gqa.py", "grouped_query_attention"))
    if got is not RAISED:
        raise unraised(api, "gqa.py", "grouped_query_attention",
                       f"grouped_query_attention(n_heads=4, n_kv_heads=3) returned an array of shape "
                       f"{list(np.shape(got))}; 3 does not divide 4, so the query heads cannot be split into equal "
                       "groups: raise ValueError")


def _decode(api, x, w, h, kv, chunks):
    """Feed x to gqa_decode in `chunks`; the outputs side by side, and the cache after each call."""
    outs, caches, cache, start = [], [], None, 0
    for t in chunks:
        out, cache = api.gqa_decode(x[..., start:start + t, :], *w, h, kv, cache)
        outs.append(np.asarray(out, dtype=float))
        caches.append(cache)
        start += t
    return np.concatenate(outs, axis=-2), caches


@STAGE.check(points=1, kind="property", visibility="hidden", cite="Article B, 'What it costs as the sequence grows'",
              rule="Fed in pieces, token by token or in chunks, the outputs equal grouped_query_attention's.")
def gqa_decode_equals_full(api, ctx):
    """decoding token by token and in chunks equals the full causal grouped-query attention"""
    rng = ctx.rng("gqa-decode")
    for lead, d_model, h, kv, chunks in [((), 8, 4, 2, [1] * 5), ((2,), 12, 6, 3, [3, 1, 2]), ((), 8, 4, 1, [2, 2])]:
        x = randn(rng, *lead, sum(chunks), d_model)
        w = _weights(rng, d_model, h, kv)
        got, _ = _decode(api, x, w, h, kv, chunks)
        check_close(got, ctx.ref.grouped_query_attention(x, *w, h, kv, True),
                    f"gqa_decode(n_heads={h}, n_kv_heads={kv}) fed in chunks {chunks}, against the full causal "
                    "grouped_query_attention", inputs=shape_str(x),
                    mistakes=lambda: {"gqa-tile-not-repeat": ctx.mistakes.gqa_tiled(x, *w, h, kv, True)})


@STAGE.check(points=0.5, kind="property", visibility="public", cite="Article B, 'What it costs as the sequence grows'",
              rule="The cache holds the n_kv_heads key/value heads as projected, before any repeat, so it is "
                   "n_heads // n_kv_heads times smaller than a multi-head cache.")
def gqa_cache_holds_kv_heads(api, ctx):
    """the decode cache holds n_kv_heads heads (n_heads // n_kv_heads times smaller than multi-head's)"""
    rng = ctx.rng("gqa-cache")
    B, d_model, h, kv, chunks = 2, 12, 6, 2, [3, 2]
    d_head = d_model // h
    x = randn(rng, B, sum(chunks), d_model)
    w = _weights(rng, d_model, h, kv)
    _, caches = _decode(api, x, w, h, kv, chunks)
    L = 0
    for t, cache in zip(chunks, caches):
        L += t
        if not isinstance(cache, (tuple, list)) or len(cache) != 2:
            raise Fail(f"gqa_decode returned {type(cache).__name__} as its cache; expected the pair (k, v)")
        want = [B, kv, L, d_head]
        for name, got in zip("kv", cache):
            shape = list(np.shape(got))
            if shape == [B, h, L, d_head]:
                raise diagnosed("gqa-cache-after-repeat", f"after {L} tokens the cached {name} is {shape}: "
                                f"{h} heads, the repeated ones; expected {want}, the {kv} key/value heads")
            if shape != want:
                raise Fail(f"after {L} tokens the cached {name} is {shape}; expected {want} "
                           "([..., n_kv_heads, L, d_head])")
        k_want, v_want = (ctx.ref.split_heads(x[:, :L] @ w_kv, kv) for w_kv in (w[1], w[2]))  # not repeated
        check_close(cache[0], k_want, f"the cached k after {L} tokens", inputs=shape_str(x))
        check_close(cache[1], v_want, f"the cached v after {L} tokens", inputs=shape_str(x))
    n = sum(chunks)
    mine = 2 * B * kv * n * d_head
    return (f"your cache holds {mine} numbers for {B} x {n} tokens; a multi-head cache, 2 x n x d_model per "
            f"sequence and layer (Article B), would hold {2 * B * n * d_model}: {h // kv} times more")


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    x, w = np.ones((2, 4)), [np.eye(4)] * 4
    written = api.grouped_query_attention(x, *w, 2, 2), api.gqa_decode(x, *w, 2, 2)  # a stub earns nothing here
    expect_defaults(api, {"gqa:grouped_query_attention": {"causal": "True"}, "gqa:gqa_decode": {"cache": "None"}},
                    written)
