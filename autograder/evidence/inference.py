"""Diagnosis by inference, beside the catalogue.

The catalogue (each stage's `mistakes`) names a wrong answer only when it equals a mistake someone
wrote down. When none matches, the structure of the difference can still say what happened: which
sums are 1, the factor between two sets of log-weights, the pattern a mask's zeros draw, the
resolution of the error, a permutation that maps the right answer onto the wrong one. Each reading
here returns (id, evidence in numbers) or None, and claims an id only when the evidence fits
exactly (within the matching tolerance); correct output never reaches these functions.
"""
import itertools
import math

import numpy as np

from .. import messages as say
from ..declarations import Mistake

TOL = 1e-3  # how exactly a structure must fit before it is claimed (relative, fp32 inputs)

INFERRED: tuple[Mistake, ...] = tuple(  # their words: messages.INFERRED_WORDS
    Mistake(id=i, where=where, line=line, **say.INFERRED_WORDS[i]) for i, where, line in (
        ('inferred-softmax-axis', 'softmax.py:softmax', 'sum\\(|axis'),
        ('inferred-normalised-everything', 'softmax.py:softmax', 'sum\\('),
        ('inferred-temperature', 'scaling.py:scaled_scores', 'sqrt|\\*\\*|/'),
        ('inferred-scaled-after-softmax', 'masking.py:attention', 'softmax\\('),
        ('inferred-mask-pattern', 'masking.py:causal_mask', '<=|>=|<|>|tril|triu'),
        ('inferred-low-precision', 'softmax.py:softmax', 'float16|half|bfloat16|astype'),
        ('inferred-layout', 'heads.py:split_heads', 'reshape|swapaxes|transpose|view|permute'),
        ('inferred-no-output-projection', 'module.py:forward', '^\\s*return\\b'),
        ('inferred-cache-contents', 'kv_cache.py:append', '\\.append\\(|cache\\.|\\]\\s*='),
    )
)
INFERRED_IDS = {m.id for m in INFERRED}


def _close(a, b, tol: float = TOL) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if b.ndim == 0:
        b = np.broadcast_to(b, a.shape)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=tol, atol=tol * 0.1, equal_nan=False))


def _arrays(got, want):
    try:
        g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return (g, w) if g.size and np.all(np.isfinite(w)) else None


def _is_weights(w: np.ndarray) -> bool:
    return w.ndim >= 1 and bool(np.all(w >= 0)) and _close(w.sum(-1), 1.0, 1e-6)


def normalisation(got, want):
    """Weights whose 1-sums run along another axis, or over everything at once."""
    pair = _arrays(got, want)
    if pair is None or not _is_weights(pair[1]) or pair[0].shape != pair[1].shape or pair[0].ndim < 2:
        return None
    g, _ = pair
    if _close(g.sum(-1), 1.0, 1e-5):
        return None
    rows = np.round(g.sum(-1).ravel()[:3], 4).tolist()
    for ax in range(g.ndim - 1):
        if _close(g.sum(ax), 1.0, 1e-5):
            which = say.READ_AXIS_QUERIES if ax == g.ndim - 2 else say.READ_AXIS_BATCH
            return "inferred-softmax-axis", say.READ_AXIS.format(axis=ax, ndim=g.ndim, which=which, rows=rows)
    if _close(g.sum(axis=(-2, -1)), 1.0, 1e-5):
        return "inferred-normalised-everything", say.READ_EVERYTHING.format(n_q=g.shape[-2], n_k=g.shape[-1], rows=rows)
    return None


def _divisor_name(divisor: float, facts: dict) -> str | None:
    """What a divisor of the raw scores corresponds to, given d_k and the lengths."""
    d_k, n_q, n_k = facts.get("d_k"), facts.get("n_q"), facts.get("n_k")
    names = {"1 (no scaling at all)": 1.0}
    if d_k:
        names[f"1/sqrt(d_k) = 1/sqrt({d_k}) (a multiplication where a division belongs)"] = 1 / math.sqrt(d_k)
        names.update({f"d_k = {d_k}": d_k, f"d_k**2 = {d_k ** 2}": d_k ** 2, f"d_k**1.5 = {d_k ** 1.5:g}": d_k ** 1.5})
        if facts.get("n_heads"):
            dm = d_k * facts["n_heads"]
            names[f"sqrt(d_model) = sqrt({dm})"] = math.sqrt(dm)
    for n, label in ((n_k, "n_k"), (n_q, "n_q")):
        if n and n != d_k:
            names.setdefault(f"sqrt({label}) = sqrt({n})", math.sqrt(n))
    for name, value in names.items():
        if d_k and abs(value - math.sqrt(d_k)) < 1e-9:
            continue
        if abs(divisor / value - 1) < 1e-3:
            return name
    return None


def temperature(got, want, facts: dict, weights: bool):
    """A constant factor between the student's and the reference's scores (or centred log-weights)."""
    pair = _arrays(got, want)
    if pair is None or pair[0].shape != pair[1].shape or not facts.get("d_k"):
        return None
    g, w = pair
    if weights:
        if not (_is_weights(g) and _is_weights(w)) or np.any(g <= 0) or np.any(w <= 0):
            return None
        g = np.log(g) - np.log(g).mean(-1, keepdims=True)
        w = np.log(w) - np.log(w).mean(-1, keepdims=True)
    if float(np.sum(w * w)) < 1e-12:
        return None
    a = float(np.sum(g * w) / np.sum(w * w))
    if abs(a - 1) < 1e-3 or a <= 0 or not _close(g, a * w):
        return None
    divisor = math.sqrt(facts["d_k"]) / a
    name = _divisor_name(divisor, facts)
    if name is None:
        return None
    what = say.READ_LOG_WEIGHTS if weights else say.READ_SCORES
    return "inferred-temperature", say.READ_TEMPERATURE.format(what=what, factor=a, divisor=divisor, name=name,
                                                               right=math.sqrt(facts["d_k"]))


def after_softmax(got, want):
    """Weights that are the right ones times a factor per row (a scale applied after softmax)."""
    pair = _arrays(got, want)
    if pair is None or pair[0].shape != pair[1].shape or not _is_weights(pair[1]):
        return None
    g, w = pair
    c = g.sum(-1, keepdims=True)
    if np.all(np.abs(c - 1) < 1e-2) or np.any(c <= 0) or not _close(g, w * c):  # a real factor, not rounding
        return None
    vals = np.unique(np.round(c.ravel(), 4))[:3].tolist()
    return "inferred-scaled-after-softmax", say.READ_AFTER_SOFTMAX.format(sums=vals)


def describe_pattern(allowed: np.ndarray) -> str:
    """The rule a boolean [n_q, n_k] mask follows, in words ('query i sees keys j <= i+1'), or its rows."""
    n_q, n_k = allowed.shape
    if not allowed.any() or allowed.all():  # every offset past the edge gives it: no rule can be read from it
        return say.READ_NO_KEY if not allowed.any() else say.READ_EVERY_KEY
    i, j = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    for s in range(-n_k, n_k + 1):
        term = f"i{s:+d}" if s else "i"
        for rule, mask in ((f"j <= {term}", j <= i + s), (f"j < {term}", j < i + s),
                           (f"j >= {term}", j >= i + s), (f"j > {term}", j > i + s)):
            if np.array_equal(allowed, mask):
                return say.READ_SEES.format(rule=rule)
    if np.array_equal(allowed, allowed.T) and n_q == n_k:
        return say.READ_SYMMETRIC + str(allowed.astype(int).tolist())
    return say.READ_ROWS + str(allowed.astype(int).tolist())


def mask_pattern(got, want):
    """A boolean mask against the right one: the rule the student's mask follows."""
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape or g.ndim != 2 or g.dtype != bool or np.array_equal(g, w):
        return None
    n_q, n_k = w.shape
    right = say.READ_SEES.format(rule=f"j <= i{n_k - n_q:+d}" if n_k != n_q else "j <= i")
    extra = ""
    if n_q == n_k and np.array_equal(g, w.T):
        extra = say.READ_TRANSPOSED
    elif np.array_equal(g, ~w):
        extra = say.READ_INVERTED
    return "inferred-mask-pattern", say.READ_MASK.format(n_q=n_q, n_k=n_k, says=describe_pattern(g), extra=extra,
                                                         right=right)


def low_precision(got, want):
    """An error at the resolution of float16 or bfloat16, with every value on that type's grid."""
    pair = _arrays(got, want)
    if pair is None or pair[0].shape != pair[1].shape or not np.all(np.isfinite(pair[0])):
        return None
    g, w = pair
    err = float(np.max(np.abs(g - w) / np.maximum(np.abs(w), 1e-3)))
    if not 1e-6 < err < 5e-2:
        return None
    for name, eps in (("float16", 2.0 ** -11), ("bfloat16", 2.0 ** -8)):
        if name == "float16":
            on_grid = np.array_equal(g.astype(np.float16).astype(np.float64), g)
        else:
            bits = g.astype(np.float32).view(np.uint32)
            on_grid = bool(np.all(bits & 0xFFFF == 0))
        if on_grid and err <= 16 * eps:  # the input rounded too: a few units of the last place
            return ("inferred-low-precision", f"every value you return is a {name} number, and the largest "
                    f"relative error, {err:.2g}, is {name}'s resolution ({eps:.2g})")
    return None


def rearranged(g: np.ndarray, w: np.ndarray, close=None) -> tuple[tuple[int, ...], bool] | None:
    """(perm, read back) when `g` is `w` with its axes permuted by perm (read back: in perm's memory order,
    reshaped to g's shape); None when no permutation (identity aside) gives it."""
    close = close or _close
    for perm in itertools.permutations(range(w.ndim)):
        if perm == tuple(range(w.ndim)):
            continue
        moved = np.transpose(w, perm)
        if moved.shape == g.shape and close(g, moved):
            return perm, False
        if moved.size == g.size and close(g, moved.reshape(g.shape)):
            return perm, True
    return None


def layout(got, want):
    """The right numbers rearranged: a permutation of the axes, read back in the expected shape."""
    pair = _arrays(got, want)
    if pair is None or pair[0].size != pair[1].size or pair[1].ndim < 2 or pair[1].ndim > 5:
        return None
    g, w = pair
    if np.unique(np.round(w, 6)).size < w.size // 2:  # too many equal entries to tell arrangements apart
        return None
    found = rearranged(g, w)
    if found is None:
        return None
    perm, read_back = found
    if not read_back:
        return ("inferred-layout", f"your output is the right one with its axes in the order {perm} (a "
                "transpose or swapaxes too many or too few)")
    return ("inferred-layout", f"your output holds the right numbers, but in the memory order of the axes "
            f"{perm} read back as shape {tuple(g.shape)}: a reshape where the axes had to be swapped first")


def infer(got, want, facts: dict | None = None, mask: bool = False) -> tuple[str, str] | None:
    """The first reading that fits: (inferred id, evidence), or None."""
    facts = facts or {}
    if mask:
        return mask_pattern(got, want)
    readings = [lambda: normalisation(got, want), lambda: after_softmax(got, want),
                lambda: temperature(got, want, facts, weights=facts.get("weights", False)),
                lambda: low_precision(got, want), lambda: layout(got, want)]
    for read in readings:
        try:
            found = read()
        except (TypeError, ValueError, FloatingPointError):
            found = None
        if found:
            return found
    return None
