"""Matching a wrong answer against the known mistakes (each stage declares its catalogue).

A diagnosis is named only on evidence: the student's output matches what attn_ref.mistakes
computes for that mistake on the same input, and does not match the correct answer (or, for
cost mistakes, a FLOP or memory measurement shows it).
"""
import numpy as np

from ..outcomes import Fail

MATCH_RTOL, MATCH_ATOL = 1e-3, 1e-4  # a mistake "matches" at a looser tolerance than a pass (fp32 inputs)


def diagnosed(mistake_id: str | None, message: str, arrays: dict | None = None) -> Fail:
    """A Fail naming a mistake that a measurement showed (or a plain one for None); the grader
    puts the mistake's explanation from the catalogue in front of the message."""
    return Fail(message, diagnosis=mistake_id, arrays=arrays)


def close(got, want, ignore_nan_in_want: bool = False) -> bool:
    try:
        g = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    w = np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        return False
    if ignore_nan_in_want:
        keep = ~np.isnan(w)
        if not keep.any():
            return False
        g, w = g[keep], w[keep]
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(g, w, rtol=MATCH_RTOL, atol=MATCH_ATOL, equal_nan=True))


def diagnose(got, want, variants: dict | None, ignore_nan_in_want: bool = False) -> str | None:
    """The id of the first mistake whose output `got` matches while it does not match `want`."""
    if not variants or close(got, want):
        return None
    for mistake_id, cands in variants.items():
        for c in cands if isinstance(cands, list) else [cands]:
            if close(got, c, ignore_nan_in_want):
                return mistake_id
    return None
