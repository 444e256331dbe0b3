"""Stage 1 checks: softmax."""
import ast

import numpy as np

from ..child import seeded
from ..declarations import DEFAULTS_RULE, Edit, Function, Mistake, Probe, Stage
from ..evidence.compare import check_close
from ..evidence.diagnosis import diagnosed
from ..evidence.probes import S34, same_array
from ..outcomes import Fail
from ..sandbox.safe_files import UnusableFile
from .common import RAISED, expect_defaults, expect_value_error, over_baseline, randn, require_nontrivial, shape_str, unraised

MEMORY_SALT = (0,)  # the measured call's scores [rows, n]: a shape drawn from the grade's seed over
# seeded.SOFTMAX_RANGE (at most 32 x 512, 128 KiB), which reference_fp64 draws from too (salt 1)
LIBRARY_MIB = 64  # what one softmax call on them may add to its child's peak (loading torch adds ~190 MiB)

# rung 1 of the hint ladder of each mistake below, and the line that makes it (Mistake.line)
ASK = 'Which slice of the scores is each softmax taken over, and is it stable for large scores?'
MADE_ON = 'exp|sum'
STAGE = Stage(
    name="softmax", number=1, points=12, files=("softmax.py",), calls=(),
    reread='A "How the scores become shares"; B "Simple self-attention"',
    worked_points=0.5,
    functions=(
        Function(name="softmax", target="softmax:softmax", reference="core:softmax"),
        Function(name="softmax_memory_run", target="npdriver:softmax_memory_run", reads=("softmax.py",),
                 measured=MEMORY_SALT),
    ),
    intro="Turn a row of scores into weights that are positive and sum to one, stably.",
    hints=(
        "Softmax turns any row of scores into positive shares that add up to one: exponentiate, then divide by "
        "the row's total. Article A, 'How the scores become shares'.",
        "exp(1e4) is inf in floating point. Subtracting the same number from every score in a slice changes no "
        "ratio, so subtract the slice's maximum first (keepdims=True keeps the shapes broadcastable).",
        "exp(-inf) is exactly 0, which is how a masked entry gets no weight. But if the maximum of a slice is "
        "itself -inf, every entry is masked: check for that and raise ValueError before dividing 0 by 0.",
    ),
    mistakes=(
        Mistake(id="softmax-unstable", where="softmax.py:softmax",
                explanation="exp() of the raw scores overflows for large scores; subtract each slice's maximum "
                            "first (it cancels in the ratio)",
                reread="Article A, 'How the scores become shares'",
                question=ASK,
                line=MADE_ON,
                evidence='check:large_scores_stable',
                mutant=(
                    Edit('softmax.py',
                         '    e = np.exp(scores - top)  # same shape as scores; the largest entry becomes exp(0) = 1\n',
                         '    e = np.exp(scores)\n'),
                )),
        Mistake(id="softmax-wrong-axis", where="softmax.py:softmax",
                explanation="the weights are normalised along the wrong axis; each query's weights over the keys "
                            "(the `axis` argument) must sum to 1",
                reread="Article A, 'How the scores become shares'",
                question=ASK,
                line=MADE_ON,
                evidence='check:reference_fp64',
                mutant=(
                    Edit('softmax.py',
                         '    scores = np.asarray(scores)\n',
                         '    scores = np.asarray(scores)\n    axis = 0\n'),
                )),
        Mistake(id="softmax-no-exp", where="softmax.py:softmax",
                explanation="the scores are divided by their sum without exponentiating, which allows negative "
                            "weights and keeps them proportional to the raw scores",
                reread="Article B, 'Simple self-attention'",
                question=ASK,
                line=MADE_ON,
                evidence='check:reference_fp64',
                mutant=(
                    Edit('softmax.py',
                         '    e = np.exp(scores - top)  # same shape as scores; the largest entry becomes exp(0) = 1\n',
                         '    e = scores\n'),
                )),
        Mistake(id="softmax-fully-masked-silent", where="softmax.py:softmax",
                explanation="a slice that is entirely -inf came back as NaN or zeros; there is nothing to "
                            "normalise, so raise ValueError",
                reread="Article A, 'Hide forbidden positions before softmax'",
                question=ASK,
                line=MADE_ON,
                evidence='check:all_neginf_raises',
                mutant=(
                    Edit('softmax.py',
                         '    if np.any(np.isneginf(top)):\n',
                         '    if False:\n'),
                )),
    ),
    probes=(
        Probe(name="softmax", file="softmax.py", function="softmax", args=(S34,), expected=lambda r: r.softmax(S34),
              judge=same_array({"weights": True})),
    ),
)


@STAGE.check(points=0.5, kind="reference")
def reference_fp64(api, ctx):
    """matches the reference on random float64 scores, any shape, along every axis"""
    rng = ctx.rng("softmax-fp64")
    drawn = seeded.softmax_shape(ctx.seed, 1)  # a shape of the library check's range: its call is no odd one out
    for shape, axis in [((5,), -1), ((3, 7), -1), ((2, 3, 4), -1), ((4, 6), 0), ((2, 5, 3), 1), ((1, 1), -1), (drawn, -1)]:
        s = randn(rng, *shape, scale=3.0)
        M = ctx.mistakes
        check_close(api.softmax(s, axis=axis), ctx.ref.softmax(s, axis=axis),
                    f"softmax(scores, axis={axis})", inputs=shape_str(s),
                    mistakes=lambda: {"softmax-no-exp": M.softmax_no_exp(s, axis),
                                      "softmax-wrong-axis": M.softmax_other_axes(s, axis)})


@STAGE.check(points=1, kind="reference")
def reference_fp32(api, ctx):
    """matches the reference on float32 scores"""
    rng = ctx.rng("softmax-fp32")
    for shape in [(6,), (4, 9), (2, 3, 8)]:
        s = randn(rng, *shape, dtype=np.float32, scale=3.0)
        check_close(api.softmax(s), ctx.ref.softmax(s), "softmax(scores)", inputs=shape_str(s),
                    mistakes=lambda: {"softmax-no-exp": ctx.mistakes.softmax_no_exp(s),
                                      "softmax-wrong-axis": ctx.mistakes.softmax_other_axes(s)})


@STAGE.check(points=1.5, kind="property", visibility="public", cite="Article B, 'Code that matches the hand numbers'",
              rule="Stable for large scores (e.g. +-1e4)")
def large_scores_stable(api, ctx):
    """stays finite and exact for scores near +-1e4 (subtract the maximum first)"""
    s = np.array([[1e4, 1e4 - 1.0, 1e4 - 2.0], [-1e4, -1e4 + 2.0, -1e4 + 1.0], [1e4, 0.0, -1e4]])
    got = np.asarray(api.softmax(s), dtype=float)
    check_close(got, ctx.ref.softmax(s), "softmax of scores near +-1e4", inputs="[3, 3] float64, |scores| ~ 1e4",
                mistakes={"softmax-unstable": ctx.mistakes.softmax_unstable(s)})


@STAGE.check(points=0.5, kind="property", visibility="public",
              rule="weights that are positive and sum to 1 along `axis`")
def rows_sum_to_one(api, ctx):
    """every slice sums to 1 and every weight is >= 0"""
    s = randn(ctx.rng("softmax-sum"), 4, 5, 6, scale=4.0)
    require_nontrivial(api.softmax(s), api.softmax(2 * s), "softmax")
    for axis in (-1, 0):
        w = np.asarray(api.softmax(s, axis=axis), dtype=float)
        sums = w.sum(axis=axis)
        if not np.allclose(sums, 1.0, atol=1e-6) or (w < 0).any():
            raise Fail(f"softmax(axis={axis}): slice sums range {sums.min():.6g}..{sums.max():.6g} "
                       f"(min weight {w.min():.3g}); expected every slice to sum to 1 with no negative weight")


@STAGE.check(points=0.5, kind="property", visibility="public", cite="Article A, 'How the scores become shares'",
              rule="Adding the same number to every score in a slice leaves the weights unchanged.")
def shift_invariance(api, ctx):
    """adding the same number to every score changes nothing"""
    s = randn(ctx.rng("softmax-shift"), 3, 5)
    a = api.softmax(s)
    require_nontrivial(a, api.softmax(2 * s), "softmax")
    check_close(api.softmax(s + 7.5), a, "softmax(scores + 7.5) against softmax(scores)", inputs=shape_str(s))


@STAGE.check(points=1, kind="property", visibility="public", cite="Article A, 'Hide forbidden positions before softmax'",
              rule="A `-inf` entry gets weight exactly 0.")
def neginf_gets_zero(api, ctx):
    """a -inf score gets weight exactly 0 and the rest still sum to 1"""
    s = np.array([[0.3, -np.inf, 1.2, -np.inf], [-np.inf, -np.inf, -np.inf, 2.0]])
    w = np.asarray(api.softmax(s), dtype=float)
    if np.isnan(w).any():
        raise Fail(f"softmax with -inf entries gave NaN: {w.tolist()}")
    if not np.all(w[np.isneginf(s)] == 0.0):
        raise Fail(f"weights at -inf scores are {w[np.isneginf(s)].tolist()}, expected exactly 0")
    check_close(w, ctx.ref.softmax(s), "softmax with -inf entries", inputs="[2, 4] with -inf")


@STAGE.check(points=1, kind="property", visibility="public", cite="Article A, 'Hide forbidden positions before softmax'",
              rule="Raises ValueError when a slice along `axis` is entirely `-inf`")
def all_neginf_raises(api, ctx):
    """a slice that is entirely -inf raises ValueError (no weights to share)"""
    s = np.array([-np.inf, -np.inf, -np.inf])
    got = expect_value_error(lambda: api.softmax(s), "softmax of a row that is all -inf", of=(api, "softmax.py", "softmax"))
    if got is not RAISED:
        row = np.asarray(got, dtype=float).ravel()
        msg = f"softmax of a row that is all -inf returned {row.tolist()} instead of raising ValueError"
        if np.all(np.isnan(row)) or np.all(row == 0):
            raise diagnosed("softmax-fully-masked-silent", msg)
        raise unraised(api, "softmax.py", "softmax", msg)
    # the rule holds per slice: one all -inf slice among good ones raises too, along either axis
    mixed = np.array([[0.5, -np.inf, 1.0, 2.0], [-np.inf, -np.inf, -np.inf, -np.inf], [1.0, 0.0, -np.inf, 3.0]])
    for axis, s in ((-1, mixed), (0, mixed.T.copy())):
        what = (f"softmax(scores, axis={axis}) of a [{s.shape[0]}, {s.shape[1]}] array whose "
                f"{'row' if axis == -1 else 'column'} 1 is all -inf and the others are not")
        got = expect_value_error(lambda: api.softmax(s, axis=axis), what, of=(api, "softmax.py", "softmax"))
        if got is not RAISED:
            bad = np.asarray(got, dtype=float)
            bad = bad[1] if axis == -1 else bad[:, 1]
            raise unraised(api, "softmax.py", "softmax", f"{what} returned {bad.tolist()} for that slice instead of "
                           "raising ValueError: test each slice along `axis` (its maximum is -inf), not the whole array")


@STAGE.check(points=1, kind="property", visibility="public",
              rule="Write it with numpy alone: softmax.py, and any stage module it imports, may not import scipy, "
                   "torch, jax or tensorflow, not even unused. A call that loads one anyway, under whatever name, "
                   "fails too: the grader measures the memory of one call in a child of its own.", measured=True)
def no_library_softmax(api, ctx):
    """written with numpy, not a library softmax (scipy, torch), in softmax.py and the modules it loads"""
    from ..sandbox.static_check import loaded_files
    from . import SUBMISSION_FILES

    s = np.array([0.0, 1.0, 2.0])
    check_close(api.softmax(s), ctx.ref.softmax(s), "softmax([0, 1, 2])")
    sources = {}
    for file in SUBMISSION_FILES:
        try:
            sources[file] = ctx.snapshot.read_bytes(file)
        except UnusableFile:
            continue
    loaded = loaded_files(sources, "softmax") | {"softmax.py"}
    for file in sorted(loaded, key=lambda f: (f != "softmax.py", f)):  # its own lines first
        try:
            tree = ast.parse(sources[file])
        except (KeyError, SyntaxError) as e:
            raise Fail(f"could not read {file}: {e}") from None
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in ("scipy", "torch", "jax", "tensorflow"):
                    via = "" if file == "softmax.py" else f" (softmax.py imports it, so softmax could use {n})"
                    raise Fail(f"{file} line {node.lineno} imports {n}{via}: write softmax with numpy yourself")
    # what the import statements do not show (a module imported at run time under a computed name): one call run
    # alone in a fresh child, its peak read by the grader against a child that drew the same scores without calling
    # (a baseline kept between grades drew its shape at seed 0: at most 128 KiB apart, beside a 64 MiB allowance)
    rows, n = seeded.softmax_shape(ctx.seed, *MEMORY_SALT)
    r, extra, _ = over_baseline(api, "softmax_memory_run", ctx.seed)
    if list(r["shape"]) != [rows, n]:
        raise Fail(f"softmax of scores [{rows}, {n}] returned shape {r['shape']}; expected [{rows}, {n}]")
    scores = seeded.scores(rows, n, ctx.seed)
    check_close(np.asarray(r["out"]), ctx.ref.softmax(scores), "softmax(scores) (the memory check's call)",
                inputs=f"scores [{rows}, {n}]")
    if extra is None:
        return "the memory of a softmax call: not measured (this system does not report a process's peak)"
    if extra > LIBRARY_MIB * 2**20:
        raise Fail(f"one softmax call on scores [{rows}, {n}] ({rows * n * 8 // 1024} KiB) raised its process's peak "
                   f"memory by {extra / 2**20:.0f} MiB: it loaded a library while it ran (importing torch adds about "
                   "190 MiB), which the import statements do not show. Write softmax with numpy yourself")


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    written = api.softmax(np.array([0.0, 1.0]))  # a stub's defaults earn nothing: the stage must work first
    expect_defaults(api, {"softmax:softmax": {"axis": "-1"}}, written)
