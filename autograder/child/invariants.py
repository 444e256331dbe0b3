"""What holds around every call of a student function, whatever the check: the arrays and tensors
the grader passed in hold the same values afterwards.

The worker (and each driver, for the calls it makes itself) calls student code through `call`,
which notes in `CHANGED` every argument the call modified in place; the worker sends that list back
with the reply and the parent turns it into a failed check. A submission could skip the note, but
that only loses what correct code loses nothing by.
"""
import inspect
import sys

CHANGED: list[dict] = []  # {"function", "argument"} for each argument modified since the request began
ALIASED: list[dict] = []  # {"function", "argument"}: the call returned that numpy argument itself, or a view of it


def _snapshot(value):
    """A copy of an array or tensor argument (None for anything else: numbers, generators, caches)."""
    if hasattr(value, "detach") and hasattr(value, "clone"):  # a torch tensor (torch is not imported here)
        return value.detach().clone()
    if type(value).__module__ == "numpy" and hasattr(value, "tobytes") and hasattr(value, "copy"):
        return value.copy()
    return None


def _same(before, after) -> bool:
    if getattr(before, "shape", None) != getattr(after, "shape", None) or before.dtype != after.dtype:
        return False
    if hasattr(before, "detach"):
        return bool(before.equal(after.detach()))
    return before.tobytes() == after.tobytes()  # bytes: a NaN in the input compares equal to itself


def _names(fn, args: tuple) -> list[str]:
    """The parameter name each positional argument binds to ("argument 3" where it cannot be read)."""
    try:  # a module's parameters are its forward's (its __call__ takes *args)
        params = [p for p in inspect.signature(getattr(fn, "forward", fn)).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i].name if i < len(params) else f"argument {i + 1}" for i in range(len(args))]


def call(fn, *args, **kwargs):
    """fn(*args, **kwargs), noting in CHANGED each array or tensor argument that differs afterwards."""
    named = list(zip(_names(fn, args), args)) + list(kwargs.items())
    kept = [(name, value, _snapshot(value)) for name, value in named]
    out = fn(*args, **kwargs)
    label = f"{type(fn).__name__}.forward" if hasattr(fn, "forward") else getattr(fn, "__qualname__", "the function")
    for name, value, before in kept:
        if before is not None and not _same(before, value):
            CHANGED.append({"function": label, "argument": name})
    _note_aliases(label, named, out)
    return out


def _note_aliases(label: str, named: list, out) -> None:
    """Note each numpy argument whose memory a returned array shares (for the checks of "a new array")."""
    np = sys.modules.get("numpy")
    outs = out if isinstance(out, tuple) else (out,)
    if np is None:
        return
    for name, value in named:
        if isinstance(value, np.ndarray) and any(isinstance(o, np.ndarray) and np.may_share_memory(o, value)
                                                 for o in outs):
            ALIASED.append({"function": label, "argument": name})
