"""Stage 3 checks: query, key and value projections."""
import numpy as np

from ..declarations import Edit, Function, Mistake, Probe, Stage
from ..evidence.compare import check_close
from ..evidence.probes import W1, W2, W3, X54, same_triple
from ..outcomes import Fail
from .common import randn, shape_str

STAGE = Stage(
    name="projections", number=3, points=8, files=("projections.py",), calls=(),
    reread='B "Trainable attention"',
    worked_points=1.0,
    functions=(
        Function(name="project_qkv", target="projections:project_qkv", reference="core:project_qkv"),
    ),
    intro="Learned query, key and value projections.",
    hints=(
        "Queries, keys and values are three different linear maps of the same tokens, with no bias. Article B, "
        "'Trainable attention'.",
        "Each is x times its weight matrix, with x on the left: [..., n, d_model] @ [d_model, d_k]. The @ "
        "operator already handles leading batch dimensions.",
    ),
    mistakes=(
        Mistake(id="qk-swapped", where="projections.py:project_qkv",
                explanation="queries and keys are swapped: q must come from W_Q and k from W_K",
                reread="Article B, 'Trainable attention'",
                evidence='check:_compare',
                mutant=(
                    Edit('projections.py',
                         'q = x @ w_q',
                         'q = x @ w_k'),
                    Edit('projections.py',
                         'k = x @ w_k',
                         'k = x @ w_q'),
                )),
    ),
    probes=(
        Probe(name="project_qkv", file="projections.py", function="project_qkv", args=(X54, W1, W2, W3),
              expected=lambda r: r.project_qkv(X54, W1, W2, W3), judge=same_triple),
    ),
)


def _compare(api, ctx, x, w_q, w_k, w_v):
    got = api.project_qkv(x, w_q, w_k, w_v)
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Fail(f"project_qkv should return (q, k, v); got {type(got).__name__}")
    want = ctx.ref.project_qkv(x, w_q, w_k, w_v)
    # named only when both are swapped: a k made with w_q beside a right q is another mistake
    both = all(np.shape(g) == np.shape(e) and np.allclose(np.asarray(g, dtype=float), e, rtol=1e-3, atol=1e-4)
               for g, e in ((got[0], want[1]), (got[1], want[0])))
    swapped = {"q": {"qk-swapped": want[1]}, "k": {"qk-swapped": want[0]}, "v": None} if both else \
        {"q": None, "k": None, "v": None}
    for name, g, e in zip("qkv", got, want):
        check_close(g, e, f"{name} from project_qkv", inputs=f"x {shape_str(x)}, w_{name} {list(e.shape[-1:])}",
                    mistakes=swapped[name])


@STAGE.check(points=2, kind="reference", rule="(d_v may differ from d_k)")
def reference_dv_differs(api, ctx):
    """q, k, v match the reference when d_v != d_k (and n = 1)"""
    rng = ctx.rng("proj")
    for n, d_model, d_k, d_v in [(5, 6, 3, 4), (1, 4, 2, 5), (4, 4, 4, 4)]:
        x = randn(rng, n, d_model)
        _compare(api, ctx, x, randn(rng, d_model, d_k), randn(rng, d_model, d_k), randn(rng, d_model, d_v))


@STAGE.check(points=2, kind="reference", rule="x [..., n, d_model]")
def reference_batch_fp32(api, ctx):
    """q, k, v match the reference with leading batch dimensions, in float32"""
    rng = ctx.rng("proj-batch")
    for lead in [(2,), (2, 3)]:
        x = randn(rng, *lead, 5, 8, dtype=np.float32)
        w = [randn(rng, 8, d, dtype=np.float32) for d in (4, 4, 6)]
        _compare(api, ctx, x, *w)


@STAGE.check(points=1, kind="property", visibility="public",
              rule="Returns q [..., n, d_k], k [..., n, d_k], v [..., n, d_v].")
def output_shapes(api, ctx):
    """q and k are [n, d_k], v is [n, d_v]"""
    x = np.ones((3, 4))
    got = api.project_qkv(x, np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 5)))
    shapes = [tuple(np.shape(t)) for t in got]
    if shapes != [(3, 2), (3, 2), (3, 5)]:
        raise Fail(f"for x [3, 4], w_q/w_k [4, 2], w_v [4, 5] the shapes are {shapes}, "
                   "expected q (3, 2), k (3, 2), v (3, 5)")
