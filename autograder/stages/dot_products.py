"""Stage 2 checks: dot products and simple self-attention."""
import numpy as np

from ..declarations import Function, Probe, Stage
from ..evidence.compare import check_close
from ..evidence.probes import X32, same_array
from ..outcomes import Fail
from .common import randn, require_nontrivial, shape_str

STAGE = Stage(
    name="dot_products", number=2, points=8, files=("scores.py",), calls=("softmax",),
    reread='B "The one idea", "Simple self-attention"',
    worked_points=1.0,
    functions=(
        Function(name="dot_scores", target="scores:dot_scores", reference="core:dot_scores"),
        Function(name="simple_self_attention", target="scores:simple_self_attention", reference="core:simple_self_attention"),
    ),
    intro="Scores as dot products, and attention with no learned weights.",
    hints=(
        "The score between tokens i and j is their dot product; all of them at once form an n x n matrix. Article "
        "B, 'Simple self-attention'.",
        "One matrix product of x with its own transpose gives every pair. Then each row of weights (your softmax, "
        "along the last axis) mixes the rows of x.",
    ),
    probes=(
        Probe(name="dot_scores", file="scores.py", function="dot_scores", args=(X32,),
              expected=lambda r: r.dot_scores(X32), judge=same_array()),
        Probe(name="simple_self_attention", file="scores.py", function="simple_self_attention", args=(X32,),
              expected=lambda r: r.simple_self_attention(X32), judge=same_array()),
    ),
)


@STAGE.check(points=1, kind="reference")
def dot_scores_reference(api, ctx):
    """dot_scores matches the reference (float64 and float32 inputs, n = 1 and n != d among them)"""
    rng = ctx.rng("dot")
    for n, d, dt in [(5, 3, np.float64), (1, 4, np.float64), (3, 8, np.float32), (7, 2, np.float64)]:
        x = randn(rng, n, d, dtype=dt)
        check_close(api.dot_scores(x), ctx.ref.dot_scores(x), "dot_scores(x)", inputs=shape_str(x))


@STAGE.check(points=0.5, kind="property", visibility="public", rule="entry (i, j) = x_i . x_j")
def dot_scores_symmetric(api, ctx):
    """the Gram matrix is symmetric with squared norms on the diagonal"""
    x = randn(ctx.rng("dot-sym"), 4, 3)
    g = np.asarray(api.dot_scores(x), dtype=float)
    if g.shape != (4, 4):
        raise Fail(f"dot_scores of x [4, 3] has shape {g.shape}, expected (4, 4)")
    check_close(g, g.T, "dot_scores(x) against its transpose")
    check_close(np.diag(g), (x * x).sum(-1), "the diagonal of dot_scores(x) (each row's squared length)")


@STAGE.check(points=1.5, kind="reference")
def simple_attention_reference(api, ctx):
    """simple_self_attention matches the reference (float64 and float32 inputs, n = 1 among them)"""
    rng = ctx.rng("simple")
    for n, d, dt in [(4, 4, np.float64), (6, 3, np.float64), (1, 5, np.float64), (5, 8, np.float32)]:
        x = randn(rng, n, d, dtype=dt)
        check_close(api.simple_self_attention(x), ctx.ref.simple_self_attention(x),
                    "simple_self_attention(x)", inputs=shape_str(x))


@STAGE.check(points=0.5, kind="property", visibility="public", rule="each row becomes a weighted average of all rows")
def simple_single_token(api, ctx):
    """with one token, the output is that token (its only weight is 1)"""
    x = np.array([[0.3, -1.2, 2.0]])
    check_close(api.simple_self_attention(x), x, "simple_self_attention of one token", inputs="[1, 3]")


@STAGE.check(points=0.5, kind="property", visibility="public", rule="each row becomes a weighted average of all rows")
def simple_weights_sum_to_one(api, ctx):
    """each output row is an average: a column of ones in x comes out as ones"""
    x = np.concatenate([randn(ctx.rng("simple-sum"), 5, 3), np.ones((5, 1))], axis=1)
    out = np.asarray(api.simple_self_attention(x), dtype=float)
    if out.shape != x.shape:
        raise Fail(f"simple_self_attention of x [5, 4] returned shape {out.shape}")
    check_close(out[:, -1], np.ones(5), "the output's last column, for x whose last column is all ones "
                "(each row's weights must sum to 1)", inputs="[5, 4] float64")


@STAGE.check(points=1, kind="property", visibility="public", cite="Article A, 'What self-attention does and does not mean'",
              rule="Permuting the rows of x permutes the rows of the output the same way.")
def permutation_equivariance(api, ctx):
    """permuting the tokens permutes the outputs the same way"""
    rng = ctx.rng("perm")
    x = randn(rng, 6, 4)
    perm = rng.permutation(6)
    out = np.asarray(api.simple_self_attention(x), dtype=float)
    require_nontrivial(out, api.simple_self_attention(2 * x), "simple_self_attention")
    check_close(api.simple_self_attention(x[perm]), out[perm],
                f"simple_self_attention(x[perm]) against simple_self_attention(x)[perm], perm={perm.tolist()}")
