"""Bonus stage 10: the backward pass of attention by hand."""
import numpy as np

from ..declarations import DEFAULTS_RULE, Edit, Function, Mistake, Stage
from ..evidence.compare import check_close
from ..outcomes import Fail
from .common import expect_defaults, randn, shape_str

STAGE = Stage(
    name="backward", number=10, points=10, files=("backward.py",), calls=(),
    reread='dq, dk, dv by hand, against the reference and finite differences',
    bonus=True,
    functions=(
        Function(name="attention_backward", target="backward:attention_backward", reference="core:attention_backward"),
    ),
    intro="Bonus: the gradients dq, dk, dv by hand.",
    hints=(
        "Go backwards through out = P v, P = softmax(S), S = q k^T / sqrt(d_k): one product rule at a time.",
        "dv and dP come straight from out = P v. For the softmax, each weight in a row depends on every score in "
        "that row: the Jacobian is diag(p) - p p^T, not diag(p).",
        "That Jacobian applied to a row of dP is p * (dP - sum(dP * p)). Then dq and dk follow from S, each with "
        "the same 1/sqrt(d_k) the forward pass used.",
    ),
    mistakes=(
        Mistake(id="backward-diagonal-softmax", where="backward.py:attention_backward",
                explanation="the softmax Jacobian was applied as if it were diagonal (dS = P * dP); every weight "
                            "depends on every score of its row, so subtract rowsum(dP * P) first",
                reread="the docstring of backward.py",
                evidence='mistakes:backward_variants',
                mutant=(
                    Edit('backward.py',
                         'ds = p * (dp - np.sum(dp * p, axis=1, keepdims=True))',
                         'ds = p * dp'),
                )),
        Mistake(id="backward-missing-scale", where="backward.py:attention_backward",
                explanation="dq or dk lacks the 1/sqrt(d_k) that the forward pass applied to the scores",
                reread="Article A, 'Why divide by the square root?'",
                evidence='mistakes:backward_variants',
                mutant=(
                    Edit('backward.py',
                         'dq = ds @ k / np.sqrt(d_k)',
                         'dq = ds @ k'),
                )),
    ),
)

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


@STAGE.check(points=3.5, kind="reference")
def backward_reference(api, ctx):
    """dq, dk, dv match the reference: causal or not, n_q != n_k, d_v != d_k"""
    rng = ctx.rng("backward")
    for n_q, n_k, d_k, d_v, causal in [(4, 4, 3, 3, True), (3, 6, 4, 2, True), (5, 5, 2, 4, False), (1, 3, 2, 2, True)]:
        q, k, v, g = randn(rng, n_q, d_k), randn(rng, n_k, d_k), randn(rng, n_k, d_v), randn(rng, n_q, d_v)
        _grads(api, ctx, q, k, v, g, causal, f"q {shape_str(q)}, k {shape_str(k)}, causal={causal}")


@STAGE.check(points=3, kind="property", visibility="public",
              rule="Gradients of sum(out * d_out) for out = attention(q, k, v).")
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


@STAGE.check(points=3, kind="property", visibility="public",
              rule="Masked entries have P = 0, so they pass no gradient.")
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


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    # a stub's defaults earn nothing: the stage must work first
    written = api.attention_backward(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)))
    expect_defaults(api, {"backward:attention_backward": {"causal": "True"}}, written)
