"""Comparisons that fail with a message saying what, where and by how much."""
import numpy as np

from .. import messages as say
from ..outcomes import Fail
from .diagnosis import diagnose
from .inference import infer

RTOL, ATOL = 1e-4, 1e-5  # fp32 tolerance used by every reference check unless it says otherwise
EAGER_MISTAKES = False  # set while recording fixtures: compute every mistake variant, failing or not


def fmt(a, decimals: int = 4) -> str:
    a = np.asarray(a)
    if a.ndim == 0:
        return np.format_float_positional(float(a), precision=decimals, trim="-") if a.dtype.kind == "f" else str(a)
    with np.printoptions(precision=decimals, suppress=True, threshold=24, edgeitems=3, linewidth=200):
        return np.array2string(a, separator=", ")


def as_array(got, what: str) -> np.ndarray:
    try:
        a = np.asarray(got)
    except Exception:  # noqa: BLE001
        raise Fail(say.CLOSE_NOT_ARRAY.format(what=what, type=type(got).__name__)) from None
    if a.dtype.kind not in "fiub":
        raise Fail(say.CLOSE_NOT_FLOAT.format(what=what, type=type(got).__name__, dtype=a.dtype))
    return a


def index_str(idx) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def describe_position(idx, shape) -> str:
    """'row 1, column 2' for the last two axes, with any leading (batch) index."""
    if len(idx) >= 2:
        lead = say.CLOSE_BATCH_INDEX.format(index=index_str(idx[:-2])) if len(idx) > 2 else ""
        return say.CLOSE_ROW_COLUMN.format(lead=lead, row=int(idx[-2]), column=int(idx[-1]))
    return say.CLOSE_POSITION.format(index=index_str(idx))


def check_close(got, expected, what: str, rtol: float = RTOL, atol: float = ATOL, inputs: str = "",
                mistakes: dict | None = None, ignore_nan_in_mistakes: bool = False) -> None:
    """Raise Fail unless `got` matches `expected` elementwise (same shape, finite where expected is).

    `mistakes` maps catalogue ids to what that mistake would return (or is a function that
    builds that map, called only when the check fails); a failure whose output matches one of
    them carries that id as its diagnosis.
    """
    if callable(mistakes) and EAGER_MISTAKES:
        mistakes = mistakes()
    try:
        _check_close(got, expected, what, rtol, atol, inputs)
    except Fail as f:
        found = diagnose(got, expected, mistakes() if callable(mistakes) else mistakes, ignore_nan_in_mistakes)
        arrays = _view(got, expected, atol, rtol)
        reading = None if found else infer(got, expected)  # the structure, in numbers (no id here)
        raise Fail(str(f) + (say.CLOSE_READING.format(reading=reading[1]) if reading else ""), diagnosis=found,
                   arrays=arrays) from None


def _view(got, expected, atol: float, rtol: float) -> dict | None:
    """The last two axes of the first batch entry (up to 12 x 12), for a table with the bad cells marked."""
    try:
        g, e = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if g.shape != e.shape or g.ndim == 0:
        return None
    while g.ndim > 2:
        g, e = g[0], e[0]
    g, e = np.atleast_2d(g)[:12, :12], np.atleast_2d(e)[:12, :12]
    with np.errstate(invalid="ignore"):
        bad = ~np.where(np.isinf(e), g == e, np.abs(g - e) <= atol + rtol * np.abs(e))
    return {"expected": e.tolist(), "got": g.tolist(), "bad": bad.tolist()}


def _check_close(got, expected, what: str, rtol: float, atol: float, inputs: str) -> None:
    ctx = say.CLOSE_INPUT.format(inputs=inputs) if inputs else ""
    g = as_array(got, what)
    e = np.asarray(expected, dtype=np.float64)
    if g.shape != e.shape:
        raise Fail(say.CLOSE_SHAPE.format(what=what, got=tuple(g.shape), expected=tuple(e.shape), input=ctx))
    g = g.astype(np.float64)
    bad_nan = np.isnan(g) & ~np.isnan(e)
    if bad_nan.any():
        idx = np.argwhere(bad_nan)[0]
        raise Fail(say.CLOSE_NAN.format(what=what, where=describe_position(idx, g.shape), count=int(bad_nan.sum()),
                                        expected=fmt(e[tuple(idx)]), input=ctx))
    both_inf = np.isinf(e) & (g == e)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(both_inf, 0.0, np.abs(g - e))
    err = np.where(np.isnan(err), np.inf, err)
    limit = atol + rtol * np.abs(np.where(np.isinf(e), 0.0, e))
    bad = err > limit
    if bad.any():
        idx = np.unravel_index(np.argmax(np.where(bad, err, -1.0)), g.shape) if g.ndim else ()
        where = describe_position(idx, g.shape) if g.ndim else say.CLOSE_THE_VALUE
        row = ""
        if g.ndim >= 2:
            row = say.CLOSE_ROW.format(expected=fmt(e[tuple(idx[:-1])]), got=fmt(g[tuple(idx[:-1])]))
        raise Fail(say.CLOSE_DIFFER.format(what=what, bad=int(bad.sum()), size=bad.size, where=where,
                                           expected=fmt(e[idx]), got=fmt(g[idx]), error=float(err[idx]),
                                           allowed=float(limit[idx]), row=row, input=ctx))


def check_printed(got, printed, decimals: int, what: str) -> None:
    """Compare at the precision the article printed: |got - printed| <= half a unit in the last place."""
    g = as_array(got, what).astype(np.float64)
    p = np.asarray(printed, dtype=np.float64)
    if g.shape != p.shape:
        raise Fail(say.CLOSE_SHAPE.format(what=what, got=tuple(g.shape), expected=tuple(p.shape), input=""))
    half = 0.5 * 10.0 ** (-decimals) + 1e-9
    bad = ~(np.abs(g - p) <= half)
    if bad.any():
        raise Fail(say.PRINTED_DIFFER.format(what=what, printed=fmt(p, decimals), got=fmt(g, decimals + 2),
                                             decimals=decimals, rounded=fmt(np.round(g, decimals), decimals)))


def check_within(got, printed, tol: float, what: str) -> None:
    """Compare an estimate with the printed one within a stated tolerance (sampling error)."""
    g = as_array(got, what).astype(np.float64)
    p = np.asarray(printed, dtype=np.float64)
    if g.shape != p.shape or not np.all(np.abs(g - p) <= tol):
        raise Fail(say.WITHIN_DIFFER.format(what=what, printed=fmt(p, 2), got=fmt(g, 2), tol=fmt(tol, 3)))


def variance_stderr(d_k: int, n_pairs: int, scaled: bool = False) -> float:
    """Standard error of the sample variance of q.k over n_pairs standard-normal pairs: var((q.k)^2) is
    2 d_k^2 + 6 d_k, so the error is sqrt((2 d_k^2 + 6 d_k) / n); of q.k / sqrt(d_k), that over d_k."""
    se = np.sqrt((2 * d_k**2 + 6 * d_k) / n_pairs)
    return se / d_k if scaled else se
