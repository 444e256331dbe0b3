"""What changed at the parting line: a small family of one-step changes generated from the reference's own steps.

At the first line where the student's values part from the reference's (localise.first_parting), the student's
value is compared with each step of the same computation changed in one way: a mask inverted, shifted by one
diagonal, aligned top-left or transposed; a step left out (no mask, no scale); a reduction (a maximum, a sum, a
softmax) taken over another axis; another step where this one belongs (an operand swapped); the axes permuted;
a constant factor (sqrt(d_k), d_k, n); a square root or a square; a float16 rounding. The first change that
reproduces the student's value exactly (within the matching tolerance) is named; when none does, nothing is
(never a guess). Pure numpy on the steps (feedback/steps.py), so it runs in the parent and the student repo alike.
"""
import math
from typing import Iterator

import numpy as np

from .. import messages as say
from ..evidence.inference import rearranged

Steps = list[tuple[str, np.ndarray]]
MASK = "the mask (True = may attend)"
SCORES = ("the masked scores", "the scaled scores q k^T / sqrt(d_k)", "the scores", "x x^T")  # what a softmax takes
BARE = {"q", "k", "v"}  # steps named as a variable is: one holding another is an operand swapped
REDUCTIONS = {"the row maxima": np.max, "the row sums": np.sum}


def _eq(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal within the tracer's matching tolerance; -inf met by -inf or a large negative number."""
    g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    g, w = g.reshape([d for d in g.shape if d != 1]), w.reshape([d for d in w.shape if d != 1])
    if g.shape != w.shape or g.size == 0:
        return False
    with np.errstate(invalid="ignore"):
        g = np.where(np.isneginf(w) & (g <= -1e9), -np.inf, g)
        ok = np.where(np.isnan(w), np.isnan(g), np.where(np.isinf(w), g == w, np.abs(g - w) <= 1e-4 + 1e-3 * np.abs(w)))
    return bool(np.all(ok))


def _squeeze(a: np.ndarray) -> np.ndarray:
    return a.reshape([d for d in a.shape if d != 1])


def _step(steps: Steps, label: str) -> np.ndarray | None:
    return next((np.asarray(w, dtype=np.float64) for lb, w in steps if lb == label), None)


def _before(steps: Steps, label: str, choices: tuple[str, ...]) -> np.ndarray | None:
    """The last of `choices` that comes before `label` in the steps."""
    found = None
    for lb, w in steps:
        if lb == label:
            return found
        if lb in choices:
            found = np.asarray(w, dtype=np.float64)
    return found


def _softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = np.exp(s - np.max(s, axis=axis, keepdims=True))  # written unlike the solutions (the release)
        return shifted / shifted.sum(axis=axis, keepdims=True)


def _masked(s: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    return np.where(allowed, s, -np.inf)  # written unlike the solutions (the release is searched for them)


def _mask_changes(allowed: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """(words, changed mask) for a [n_q, n_k] causal mask: inverted, shifted, top-left, transposed."""
    n_q, n_k = allowed.shape[-2:]
    i, j = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    yield say.PART_MASK_INVERTED, ~allowed
    if np.array_equal(allowed, np.broadcast_to(j <= i + (n_k - n_q), allowed.shape)):
        if n_q != n_k:
            yield say.PART_MASK_TOP_LEFT.format(n_q=n_q, n_k=n_k, offset=n_k - n_q), \
                np.broadcast_to(j <= i, allowed.shape)
        yield say.PART_MASK_NEXT_KEY, \
            np.broadcast_to(j <= i + (n_k - n_q) + 1, allowed.shape)
        yield say.PART_MASK_OWN_KEY, \
            np.broadcast_to(j < i + (n_k - n_q), allowed.shape)
    if n_q == n_k:
        yield say.PART_MASK_TRANSPOSED, np.swapaxes(allowed, -1, -2)


def mask_relation(g: np.ndarray, label: str, steps: Steps) -> str | None:
    """A mask, the masked scores or the weights, made with a changed mask (or none)."""
    allowed = _step(steps, MASK)
    if allowed is None:
        return None
    allowed = allowed.astype(bool)
    scores = _before(steps, "the masked scores", SCORES[1:]) if _step(steps, "the masked scores") is not None \
        else None
    for words, m in _mask_changes(allowed):
        if label == MASK:
            cand = m
        elif label.startswith("the mask's complement"):
            cand = ~m
        elif label.startswith("the additive mask"):
            cand = np.where(m, 0.0, -np.inf)
        elif label == "the masked scores" and scores is not None:
            cand = _masked(scores, np.broadcast_to(m, scores.shape))
        elif label in ("the weights", "the softmax") and scores is not None:
            cand = _softmax(_masked(scores, np.broadcast_to(m, scores.shape)))
        else:
            continue
        if _eq(g, cand):
            return words
    if label in ("the weights", "the softmax") and scores is not None and _eq(g, _softmax(scores)):
        return say.PART_NO_MASK
    return None


def skipped_relation(g: np.ndarray, label: str, steps: Steps) -> str | None:
    """The weights with a step left out: no scale, no max shift leaves them equal, so the scale alone."""
    raw, scaled = _step(steps, "q k^T"), _step(steps, SCORES[1])
    if label not in ("the weights", "the masked scores") or raw is None or scaled is None:
        return None
    allowed = _step(steps, MASK)
    unscaled = raw if allowed is None else _masked(raw, np.broadcast_to(allowed.astype(bool), raw.shape))
    cand = _softmax(unscaled) if label == "the weights" else unscaled
    return say.PART_NO_SCALE if _eq(g, cand) else None


def reduction_relation(g: np.ndarray, label: str, steps: Steps) -> str | None:
    """A maximum, a sum, a shift or a softmax taken over another axis than the last."""
    if label in REDUCTIONS:
        src = _before(steps, label, ("their exponentials",) if label == "the row sums" else SCORES)
        make = REDUCTIONS[label]
    elif label in ("the weights", "the softmax"):
        src, make = _before(steps, "the row maxima", SCORES), None
    elif label in ("the scores minus the row maxima", "their exponentials"):
        src, make = _before(steps, "the row maxima", SCORES), np.max
    else:
        return None
    if src is None or src.ndim < 2:
        return None
    for axis in range(src.ndim - 1):
        with np.errstate(invalid="ignore", over="ignore"):
            if make is None:
                cand = _softmax(src, axis)
            else:
                cand = make(src, axis=axis, keepdims=True)
                if label == "the scores minus the row maxima":
                    cand = src - cand
                elif label == "their exponentials":
                    cand = np.exp(src - cand)
        other = say.PART_QUERIES_AXIS if axis == src.ndim - 2 else say.PART_LEADING_AXIS
        if _eq(g, cand) or (make is not None and label in REDUCTIONS and _eq(g, make(src, axis=axis))):
            how = say.PART_NORMALISED if make is None else say.PART_TAKEN
            return say.PART_OTHER_AXIS.format(how=how, axis=axis, which=other)
    if make is not None:  # over every axis at once: one maximum (or sum) for the whole array
        with np.errstate(invalid="ignore", over="ignore"):
            whole = make(src)
            cand = {"the scores minus the row maxima": lambda: src - whole,
                    "their exponentials": lambda: np.exp(src - whole)}.get(label, lambda: whole)()
        if np.ndim(g) == np.ndim(cand) and _eq(g, cand) and not _eq(g, make(src, axis=-1, keepdims=True)):
            return say.PART_WHOLE_ARRAY if label in REDUCTIONS else say.PART_WHOLE_MAX
    return None


def operand_relation(g: np.ndarray, label: str, steps: Steps) -> str | None:
    """Another step where this one belongs: the keys where the values go."""
    labels = [lb for lb, _ in steps]
    for lb, w in steps:
        if lb != label and _eq(g, w) and label in labels and labels.index(lb) < labels.index(label) \
                and not {lb, label} & BARE:
            return say.PART_LEFT_OUT.format(step=lb.removeprefix("the "))
        if lb != label and _eq(g, w):
            return say.PART_SWAPPED.format(other=lb.removeprefix("the "), step=label.removeprefix("the "))
    return None


def axes_relation(g: np.ndarray, want: np.ndarray) -> str | None:
    """The right numbers with the axes permuted (a transpose too many or too few)."""
    g, want = _squeeze(g), _squeeze(want)
    if want.ndim < 2 or want.ndim > 4 or np.unique(np.round(want, 6)).size < want.size // 2:
        return None
    found = rearranged(g, want, _eq)
    if found is None:
        return None
    perm, read_back = found
    if read_back:
        return say.PART_READ_BACK.format(perm=perm)
    swapped = sorted(a for a, b in enumerate(perm) if a != b)
    return (say.PART_AXES_SWAPPED.format(a=swapped[0], b=swapped[1])
            if len(swapped) == 2 else say.PART_AXES_ORDER.format(perm=perm))


# (the raw dot products, the same divided by sqrt(d_k)) as the reference's steps name them: d_k is read off a pair
SCALED_PAIRS = (("q k^T", SCORES[1]), ("the dot products q . k", "the dot products q . k / sqrt(d_k)"))


def factor_relation(g: np.ndarray, want: np.ndarray, steps: Steps) -> str | None:
    """A constant factor, named only when it is sqrt(d_k), d_k, n or their inverses."""
    finite = np.isfinite(want) & np.isfinite(g) if g.shape == want.shape else None
    if finite is None or not finite.any() or float(np.sum(want[finite] ** 2)) < 1e-12:
        return None
    a = float(np.sum(g[finite] * want[finite]) / np.sum(want[finite] ** 2))
    if abs(a - 1) < 1e-3 or not _eq(g, a * want):
        return None
    raw, scaled = next(((_step(steps, r), _step(steps, d)) for r, d in SCALED_PAIRS
                        if _step(steps, r) is not None and _step(steps, d) is not None), (None, None))
    names = {}
    if raw is not None and scaled is not None and float(np.sum(scaled ** 2)) > 1e-12:
        d_k = round(float(np.sum(raw * scaled) / np.sum(scaled ** 2)) ** 2)
        if np.array_equal(want, scaled):  # the scale itself: what q k^T was divided by
            divisor = math.sqrt(d_k) / a
            for name, v in ((say.PART_D_K.format(value=d_k), d_k), (say.PART_D_K_SQUARED.format(value=d_k ** 2), d_k ** 2),
                            (say.PART_INVERSE_SQRT.format(value=1 / math.sqrt(d_k)), 1 / math.sqrt(d_k))):
                if abs(divisor / v - 1) < 1e-3:
                    return say.PART_DIVISOR.format(name=name, right=math.sqrt(d_k))
            return None
        names.update({say.PART_SQRT_D_K.format(value=math.sqrt(d_k)): math.sqrt(d_k), say.PART_D_K.format(value=d_k): d_k})
    names.setdefault(say.PART_N.format(value=want.shape[-1]), want.shape[-1])
    for name, value in names.items():
        for inverse, v in ((False, value), (True, 1 / value)):
            if abs(a / v - 1) < 1e-3:
                return (say.PART_DIVIDED if inverse else say.PART_TIMES).format(name=name)
    return None


def power_relation(g: np.ndarray, want: np.ndarray, label: str) -> str | None:
    """The square root or the square of the right value: a standard deviation where a variance belongs."""
    if g.shape != want.shape or not np.all(np.isfinite(want)) or np.any(want < 0) or _eq(g, want) \
            or np.all(np.isin(want, (0.0, 1.0))):
        return None
    what = label.removeprefix("the ")
    if _eq(g, np.sqrt(want)):
        return say.PART_SQUARE_ROOT.format(step=what) + (say.PART_SQUARE_ROOT_VARIANCE if "variance" in label else "")
    if _eq(g, want ** 2):
        return say.PART_SQUARE.format(step=what) + (say.PART_SQUARE_DEVIATION if "deviation" in label else "")
    return None


def dtype_relation(g: np.ndarray, want: np.ndarray) -> str | None:
    if g.shape != want.shape or not np.all(np.isfinite(g)) or np.array_equal(g, want):
        return None
    rounded = want.astype(np.float16).astype(np.float64)
    return say.PART_FLOAT16 if np.array_equal(g.astype(np.float16), g) and \
        _eq(g, rounded) and np.allclose(g, rounded, rtol=2 ** -10, atol=1e-4) else None


def relation(value: np.ndarray, labels: list[str], steps: Steps) -> tuple[str, str] | None:
    """(the step's label, the words for what changed) of the first one-step change of a step named in `labels`
    (those of the value's shape, or the reductions for a value of no step's shape) that equals `value`."""
    g = np.asarray(value, dtype=np.float64)
    readings = (lambda lb: mask_relation(g, lb, steps), lambda lb: reduction_relation(g, lb, steps),
                lambda lb: skipped_relation(g, lb, steps), lambda lb: operand_relation(g, lb, steps),
                lambda lb: axes_relation(g, _step(steps, lb)), lambda lb: factor_relation(g, _step(steps, lb), steps),
                lambda lb: power_relation(g, _step(steps, lb), lb), lambda lb: dtype_relation(g, _step(steps, lb)))
    for read in readings:
        for label in labels:
            try:
                with np.errstate(all="ignore"):  # the student's values may overflow: never a warning on their screen
                    words = read(label)
            except (TypeError, ValueError, FloatingPointError, IndexError):
                words = None
            if words:
                return label, words
    return None


def in_words(line: int, name: str, label: str, words: str) -> str:
    """'line 14: your `weights` equal the reference's weights with the mask inverted (...)'"""
    shown = say.PART_RETURNED + name[len("return"):] if name.startswith("return") else name
    if words.startswith("the square"):
        return say.PART_LINE_IS.format(line=line, name=shown, words=words)
    if words.startswith(("holds ", "writes ")):
        return say.PART_LINE_DOES.format(line=line, name=shown, words=words)
    return say.PART_LINE_EQUALS.format(line=line, name=shown, step=label.removeprefix("the "), words=words)


def mutated_words(line: int, param: str) -> str:
    return say.PART_MUTATED.format(line=line, param=param)


def sdpa_difference(call: dict, causal: bool, dropout: float, training: bool) -> tuple[str, str] | None:
    """What one SDPA call (tracer.sdpa_effect) does other than the reference's, in words, and the argument that
    says it (is_causal, attn_mask, dropout_p or scale): the keys each query may see, its dropout, its scale; None
    when it agrees."""
    t_q, t_k, d = int(call.get("t_q", 0)), int(call.get("t_k", 0)), int(call.get("d", 1))
    i, j = np.arange(t_q)[:, None], np.arange(t_k)[None, :]
    want = j <= i + (t_k - t_q) if causal else np.ones((t_q, t_k), dtype=bool)
    allowed = np.asarray(call["allowed"], dtype=bool) if call.get("allowed") is not None else None
    if call.get("masked") and allowed is None:
        return None  # a mask it could not read: no claim
    seen = np.ones((t_q, t_k), dtype=bool) if allowed is None else allowed
    if call.get("is_causal"):
        seen = seen & (j <= i)
    if seen.shape == want.shape and not np.array_equal(seen, want):
        if not call.get("is_causal") and not call.get("masked"):
            return say.SDPA_NO_MASK, "is_causal"
        if call.get("is_causal") and not causal:
            return say.SDPA_CAUSAL_NOT_ASKED, "is_causal"
        if call.get("is_causal") and t_q != t_k:
            return say.SDPA_TOP_LEFT.format(t_q=t_q, t_k=t_k, offset=t_k - t_q), "is_causal"
        for words, m in _mask_changes(want) if causal else ():
            if np.array_equal(seen, m):
                return say.SDPA_MASK.format(words=words.removeprefix("with the mask ")), "attn_mask"
        if call.get("masked") and not call.get("is_causal") and causal:
            return say.SDPA_OTHER_KEYS.format(offset=t_k - t_q), "attn_mask"
        return None
    p = float(call.get("dropout_p", 0.0))
    if abs(p - dropout) > 1e-9:
        return (say.SDPA_DROPOUT_EVAL.format(p=p, training=training) if not training
                else say.SDPA_DROPOUT.format(p=p, dropout=dropout)), "dropout_p"
    scale = call.get("scale")
    if scale is not None and abs(scale * math.sqrt(d) - 1) > 1e-4:
        return say.SDPA_SCALE.format(scale=scale, right=1 / math.sqrt(d)), "scale"
    return None


def sdpa_relation(call: dict, causal: bool, dropout: float, training: bool) -> str | None:
    """sdpa_difference's words alone."""
    found = sdpa_difference(call, causal, dropout, training)
    return found[0] if found else None
