"""Stage 5 checks: causal masks, apply_mask and single-head attention."""
import numpy as np

from ..declarations import DEFAULTS_RULE, Edit, Function, Mistake, Probe, Stage
from ..evidence.compare import check_close
from ..evidence.diagnosis import diagnosed
from ..evidence.probes import CAUSAL36, K64, Q34, S36, V62, same_mask, same_masked, same_pair
from ..outcomes import Fail, StudentError
from .common import expect_defaults, expect_value_error, randn, require_nontrivial, shape_str

# rung 1 of the hint ladder of each mistake below, and the line that makes it (Mistake.line)
ASK = 'For query i, which keys j may it see? Write the rule out for a 3 x 5 mask by hand.'
MADE_ON = '<=|>=|<|>|tril|triu|where'
STAGE = Stage(
    name="masking", number=5, points=16, files=("masking.py",), calls=("softmax", "scaling"),
    reread='A "Hide forbidden positions before softmax"; B "Causal attention"',
    worked_points=0.5,
    functions=(
        Function(name="causal_mask", target="masking:causal_mask", reference="api:causal_mask"),
        Function(name="apply_mask", target="masking:apply_mask", reference="core:apply_mask"),
        Function(name="attention", target="masking:attention", reference="core:attention"),
    ),
    intro="Masks (True = may attend) and single-head attention.",
    hints=(
        "A forbidden position must get weight exactly 0 and the others must still sum to 1, so the mask acts on "
        "the scores, before softmax. Article A, 'Hide forbidden positions before softmax'.",
        "Set forbidden scores to -inf (not 0: exp(0) is 1). For the causal mask, compare a column of query "
        "indices with a row of key indices; broadcasting builds the whole [n_q, n_k] table.",
        "With fewer queries than keys, the queries are the last n_q positions: query i sits at position n_k - n_q "
        "+ i and may see every key up to and including that position.",
    ),
    mistakes=(
        Mistake(id="mask-zero-not-neginf", where="masking.py:apply_mask",
                explanation="forbidden scores are set to 0, and exp(0) = 1 still gives them weight; set them to "
                            "-inf",
                reread="Article B, 'Causal attention'",
                question=ASK,
                line=MADE_ON,
                evidence='check:apply_mask_reference',
                mutant=(
                    Edit('masking.py',
                         'return np.where(allowed, scores, -np.inf)',
                         'return np.where(allowed, scores, 0.0)'),
                )),
        Mistake(id="mask-after-softmax", where="masking.py:attention",
                explanation="weights are zeroed after softmax, so the rows no longer sum to 1; mask the scores "
                            "before softmax",
                reread="Article A, 'Hide forbidden positions before softmax'",
                question=ASK,
                line=MADE_ON,
                evidence='mistakes:attention_variants',
                mutant=(
                    Edit('masking.py',
                             '    if allowed is not None:\n'
                             '        scores = apply_mask(scores, allowed)\n'
                             '    weights = softmax(scores, axis=-1)  # [..., n_q, n_k]\n',
                             '    weights = softmax(scores, axis=-1)\n'
                             '    if allowed is not None:\n'
                             '        weights = weights * allowed\n'),
                )),
        Mistake(id="mask-future-visible", where="masking.py:causal_mask",
                explanation="the mask lets queries see later positions (upper triangle); token i may only see "
                            "keys j <= i",
                reread="Article B, 'Causal attention'",
                question=ASK,
                line=MADE_ON,
                evidence='mistakes:mask_variants',
                mutant=(
                    Edit('masking.py',
                         '    return j <= i + (n_k - n_q)  # [n_q, n_k]',
                         '    return j >= i + (n_k - n_q)'),
                )),
        Mistake(id="mask-excludes-self", where="masking.py:causal_mask",
                explanation="the mask hides each token from itself; the diagonal is allowed (j <= i, not j < i)",
                reread="Article B, 'Causal attention'",
                question=ASK,
                line=MADE_ON,
                evidence='mistakes:mask_variants',
                mutant=(
                    Edit('masking.py',
                         '    return j <= i + (n_k - n_q)  # [n_q, n_k]',
                         '    return j < i + (n_k - n_q)'),
                )),
        Mistake(id="mask-top-left", where="masking.py:causal_mask",
                explanation="with fewer queries than keys the mask is aligned top-left; the queries are the last "
                            "n_q positions, so query i sees keys j <= n_k - n_q + i",
                reread="Article B, 'Causal attention'",
                question=ASK,
                line=MADE_ON,
                evidence='mistakes:mask_variants',
                mutant=(
                    Edit('masking.py',
                         '    return j <= i + (n_k - n_q)  # [n_q, n_k]',
                         '    return j <= i'),
                )),
        Mistake(id="mask-inverted", where="masking.py:apply_mask",
                explanation="the mask is read the wrong way round: True means the key may be attended to, so -inf "
                            "goes where `allowed` is False",
                reread="Article B, 'Causal attention'",
                question=ASK,
                line=MADE_ON,
                evidence='check:apply_mask_reference',
                mutant=(
                    Edit('masking.py',
                         'return np.where(allowed, scores, -np.inf)',
                         'return np.where(allowed, -np.inf, scores)'),
                )),
        Mistake(id="linear-attention", where="masking.py:attention",
                explanation="softmax is missing: the output is (q k^T) v, a different mechanism, not a weighted "
                            "average",
                reread="Article A, 'A transparent reference implementation'",
                question='Where do the weights become a weighted average?',
                evidence='mistakes:attention_variants',
                mutant=(
                    Edit('masking.py',
                         '    return weights @ v, weights  #',
                         '    return q @ (np.swapaxes(k, -1, -2) @ v) / np.sqrt(q.shape[-1]), weights  #'),
                )),
    ),
    probes=(
        Probe(name="causal_mask", file="masking.py", function="causal_mask", args=(4,),
              expected=lambda r: r.causal_mask(4), judge=same_mask),
        Probe(name="causal_mask", file="masking.py", function="causal_mask", args=(3, 6),
              expected=lambda r: r.causal_mask(3, 6), judge=same_mask),
        Probe(name="apply_mask", file="masking.py", function="apply_mask", args=(S36, CAUSAL36),
              expected=lambda r: r.apply_mask(S36, CAUSAL36), judge=same_masked),
        Probe(name="attention", file="masking.py", function="attention", args=(Q34, K64, V62, CAUSAL36),
              expected=lambda r: r.attention(Q34, K64, V62, CAUSAL36), judge=same_pair({"d_k": 4, "n_q": 3, "n_k": 6})),
    ),
)


def same_pair(got, what: str):
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Fail(f"{what} should return (out, weights); got {type(got).__name__}")
    return got


def _attention_case(api, ctx, q, k, v, allowed, inputs: str) -> None:
    """Output first, then weights, each against the reference and the known mistakes."""
    out, w = same_pair(api.attention(q, k, v, allowed), "attention")
    ref_out, ref_w = ctx.ref.attention(q, k, v, allowed)
    def variants(part: int):
        return lambda: {m: [p[part] for p in pairs] for m, pairs in ctx.mistakes.attention_variants(q, k, v, allowed).items()}

    check_close(out, ref_out, "attention output", inputs=inputs, mistakes=variants(0))
    check_close(w, ref_w, "attention weights", inputs=inputs, mistakes=variants(1))


@STAGE.check(points=1.5, kind="reference", visibility="public", cite="Article B, 'Causal attention'",
              rule="so query i may see keys j <= n_k - n_q + i")
def causal_mask_reference(api, ctx):
    """causal_mask is bool, lower-triangular, and aligned bottom-right when n_q != n_k"""
    for args in [(4,), (1,), (3, 3), (2, 5), (1, 6), (4, 7)]:
        got = np.asarray(api.causal_mask(*args))
        want = ctx.ref.causal_mask(*args)
        if got.dtype != bool:
            raise Fail(f"causal_mask{args} has dtype {got.dtype}; expected bool (True = may attend)")
        if got.shape != want.shape:
            raise Fail(f"causal_mask{args} has shape {got.shape}, expected {want.shape}")
        variants = ctx.mistakes.mask_variants(*args)
        if not np.array_equal(got, want):
            i, j = np.argwhere(got != want)[0]
            found = [m for m, masks in variants.items()
                     if any(np.array_equal(got, x) for x in masks)]
            raise diagnosed(found[0] if found else None,
                            f"causal_mask{args}: query {i} {'may' if got[i, j] else 'may not'} see key {j}, "
                            f"but it {'may' if want[i, j] else 'may not'} (query i sees keys j <= n_k - n_q + i)."
                            f"\nexpected:\n{want.astype(int)}\ngot:\n{got.astype(int)}",
                            arrays={"expected": want.astype(int).tolist(), "got": got.astype(int).tolist(),
                                    "bad": (got != want).tolist()})


@STAGE.check(points=1, kind="reference", rule="Put -inf where `allowed` is False.")
def apply_mask_reference(api, ctx):
    """apply_mask puts -inf exactly where the mask is False and leaves the rest alone"""
    rng = ctx.rng("apply")
    s = randn(rng, 2, 4, 5)
    allowed = rng.random((4, 5)) < 0.6
    allowed[:, 0] = True
    got = np.asarray(api.apply_mask(s, allowed), dtype=float)
    want = ctx.ref.apply_mask(s, allowed)
    if got.shape == want.shape:  # a huge negative number (e.g. -1e30) works as well as -inf
        got = np.where(~np.broadcast_to(allowed, got.shape) & (got <= -1e9), -np.inf, got)
    check_close(got, want, "apply_mask(scores, allowed)",
                inputs=f"scores {shape_str(s)}, allowed [4, 5] broadcast over the batch",
                mistakes={"mask-zero-not-neginf": np.where(allowed, s, 0.0),
                          "mask-inverted": np.where(allowed, -np.inf, s)})
    api.apply_mask(s, np.ones((4, 5), dtype=bool))  # nothing to mask: still a new array, never `scores` itself
    if getattr(api.worker, "aliased", None):
        raise Fail("with nothing to mask, apply_mask returned `scores` itself (or a view of it): the docstring "
                   "promises a new array, so that a caller who changes the result never changes its scores")


@STAGE.check(points=1, kind="property", visibility="public", cite="Article A, 'Hide forbidden positions before softmax'",
              rule="Raises ValueError if some query row has no allowed key at all")
def apply_mask_empty_row_raises(api, ctx):
    """a query row with no allowed key raises ValueError"""
    allowed = np.array([[True, False], [False, False]])
    expect_value_error(lambda: api.apply_mask(np.zeros((2, 2)), allowed), "apply_mask with a row of no allowed key",
                       returned_ok=False, of=(api, "masking.py", "apply_mask"))
    # per row: one empty row among good ones, in one batch entry of [2, 3, 4] scores, raises too
    batched = np.ones((2, 3, 4), dtype=bool)
    batched[1, 2] = False
    expect_value_error(lambda: api.apply_mask(np.zeros((2, 3, 4)), batched),
                       "apply_mask of [2, 3, 4] scores whose mask has no allowed key in row 2 of batch entry 1 "
                       "(every other row has all keys)", returned_ok=False, of=(api, "masking.py", "apply_mask"))
    # and only a row counts: a key no query may see (an empty column) is allowed
    column = np.array([[True, False], [True, False]])
    try:
        api.apply_mask(np.zeros((2, 2)), column)
    except StudentError as e:
        if e.info["type"] == "NotImplementedError":
            raise
        raise Fail(f"apply_mask with allowed {column.tolist()} (every row has a key; key 1 is seen by no query) "
                   f"raised {e.info['type']}: {e.info['message']}; only a row with no allowed key is an "
                   "error") from None


@STAGE.check(points=2, kind="reference")
def attention_reference(api, ctx):
    """attention matches the reference: random masks, n_q != n_k, d_v != d_k, batch dims, n = 1, float32"""
    rng = ctx.rng("attn")
    cases = [((), 4, 4, 3, 3, np.float64), ((), 3, 6, 4, 5, np.float64), ((2,), 5, 5, 8, 2, np.float64),
             ((2, 3), 2, 7, 4, 4, np.float32), ((), 1, 1, 2, 3, np.float64)]
    for lead, n_q, n_k, d_k, d_v, dt in cases:
        q, k = randn(rng, *lead, n_q, d_k, dtype=dt), randn(rng, *lead, n_k, d_k, dtype=dt)
        v = randn(rng, *lead, n_k, d_v, dtype=dt)
        allowed = rng.random((n_q, n_k)) < 0.5
        allowed[np.arange(n_q), rng.integers(0, n_k, n_q)] = True
        _attention_case(api, ctx, q, k, v, allowed, f"q {shape_str(q)}, k {shape_str(k)}, v {shape_str(v)}, random mask")


@STAGE.check(points=1, kind="reference", rule="None = everything allowed")
def attention_no_mask(api, ctx):
    """allowed=None lets every query see every key"""
    rng = ctx.rng("attn-none")
    q, k, v = randn(rng, 3, 4), randn(rng, 5, 4), randn(rng, 5, 2)
    _attention_case(api, ctx, q, k, v, None, f"q {shape_str(q)}, k {shape_str(k)}, allowed=None")


@STAGE.check(points=1, kind="reference")
def attention_large_scores(api, ctx):
    """stays exact when the scores reach +-1e4 (float64)"""
    rng = ctx.rng("attn-large")
    q, k, v = randn(rng, 4, 4, scale=70.0), randn(rng, 4, 4, scale=70.0), randn(rng, 4, 3)
    allowed = ctx.ref.causal_mask(4)
    _attention_case(api, ctx, q, k, v, allowed, "q, k [4, 4] x 70: scores near +-1e4, causal")


@STAGE.check(points=1, kind="property", visibility="public", cite="Article B, 'Causal attention'",
              rule="A forbidden key gets weight exactly 0")
def masked_weights_exactly_zero(api, ctx):
    """forbidden positions get weight exactly 0"""
    rng = ctx.rng("attn-zero")
    q, k, v = randn(rng, 5, 3), randn(rng, 5, 3), randn(rng, 5, 3)
    allowed = ctx.ref.causal_mask(5)
    _, w = same_pair(api.attention(q, k, v, allowed), "attention")
    w = np.asarray(w, dtype=float)
    if w.shape != (5, 5):
        raise Fail(f"weights have shape {w.shape}, expected (5, 5)")
    leak = w[~allowed]
    if not np.all(leak == 0.0):
        i, j = np.argwhere((w != 0) & ~allowed)[0]
        raise Fail(f"query {i} puts weight {w[i, j]:.4g} on future key {j}; forbidden weights must be exactly 0")


@STAGE.check(points=0.5, kind="property", visibility="public", rule="each query's weights sum to 1")
def weights_sum_to_one(api, ctx):
    """every query's weights sum to 1, masked or not"""
    rng = ctx.rng("attn-sum")
    q, k, v = randn(rng, 4, 3), randn(rng, 6, 3), randn(rng, 6, 2)
    _, w = same_pair(api.attention(q, k, v, ctx.ref.causal_mask(4, 6)), "attention")
    sums = np.asarray(w, dtype=float).sum(-1)
    if not np.allclose(sums, 1.0, atol=1e-6):
        raise Fail(f"row sums of the weights are {np.round(sums, 4).tolist()}, expected all 1")


@STAGE.check(points=1, kind="property", visibility="public", cite="Article B, 'Causal attention'",
              rule="changing later tokens never changes earlier outputs")
def future_does_not_leak(api, ctx):
    """with a causal mask, changing later tokens never changes earlier outputs"""
    rng = ctx.rng("attn-future")
    q, k, v = randn(rng, 6, 4), randn(rng, 6, 4), randn(rng, 6, 3)
    allowed = np.asarray(api.causal_mask(6))
    out, _ = same_pair(api.attention(q, k, v, allowed), "attention")
    k2, v2 = k.copy(), v.copy()
    k2[4:], v2[4:] = randn(rng, 2, 4), randn(rng, 2, 3)
    out2, _ = same_pair(api.attention(q, k2, v2, allowed), "attention")
    require_nontrivial(np.asarray(out)[4:], np.asarray(out2)[4:], "attention on tokens 4-5")
    check_close(np.asarray(out2)[:4], np.asarray(out)[:4],
                "outputs of tokens 0-3 after changing the keys/values of tokens 4-5 (they must not move)")


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    written = api.causal_mask(2)  # a stub's defaults earn nothing: the stage must work first
    expect_defaults(api, {"masking:causal_mask": {"n_k": "None"}, "masking:attention": {"allowed": "None"}}, written)
