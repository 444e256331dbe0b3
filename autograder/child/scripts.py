"""Calls on an object, as a small recorded script: construct a class, then call its methods and read its attributes
in order. A class-based stage declares `Function(name=..., target="module:Class", script="numpy")` (or "torch")
and its checks call `api.<name>(init_args, steps)`; the same script runs on the reference's class for
`ctx.ref.<name>`. So a stateful stage needs no driver of its own: the wire carries the script, and the answers
come back as plain values, one per step.

A step is a list:
    ["call", "method", [args...], {kwargs...}]          the method's return value
    ["call?", "method", [args...], {kwargs...}]         the same, or {"raised": "ValueError", "message": ...}
                                                        when it raises (the script goes on; a stub's
                                                        NotImplementedError still ends it)
    ["get", "attribute"]                                the attribute's value
A step that raises (other than a "call?") ends the script with that error, reported at the student's line.
"""
import importlib
import sys

from autograder.child import invariants


def _tensors(value):
    """numpy arrays (in lists and dicts too) as torch tensors: what a torch stage's methods take."""
    import numpy as np
    import torch

    if isinstance(value, np.ndarray):
        return torch.tensor(value)  # a copy in torch's own memory, as any call is handed (drivers._t)
    if isinstance(value, list):
        return [_tensors(v) for v in value]
    if isinstance(value, dict):
        return {k: _tensors(v) for k, v in value.items()}
    return value


def run(cls, init_args: list, steps: list, init_kwargs: dict | None = None, library: str = "numpy",
        call=None) -> list:
    """Construct `cls(*init_args, **init_kwargs)` and run `steps` on it; the list of each step's answer. `call`
    wraps each call the script makes (the child passes invariants.call, which notes an argument changed in place)."""
    call = call or (lambda fn, *a, **k: fn(*a, **k))
    convert = _tensors if library == "torch" else (lambda v: v)
    obj = call(cls, *convert(list(init_args)), **convert(dict(init_kwargs or {})))
    answers = []
    for step in steps:
        kind, name, *rest = step
        if kind == "get":
            answers.append(getattr(obj, name))
            continue
        args, kwargs = (convert(list(rest[0])) if rest else []), (convert(dict(rest[1])) if len(rest) > 1 else {})
        if kind == "call":
            answers.append(call(getattr(obj, name), *args, **kwargs))
        elif kind == "call?":
            try:
                answers.append(call(getattr(obj, name), *args, **kwargs))
            except NotImplementedError:  # a stub: the stage is not started, whatever the step allows
                raise
            except Exception as e:  # noqa: BLE001 - the step allows any error: which one is the check's to judge
                answers.append({"raised": type(e).__name__, "message": _said(e)})
        else:
            raise ValueError(f"a script step is 'call', 'call?' or 'get', not {kind!r}")
    return answers


def _said(error: BaseException) -> str:
    try:
        return str(error)[:500]
    except Exception:  # noqa: BLE001 - a message that cannot be read is no message
        return ""


def object_script(module: str, cls: str, init_args: list, steps: list, init_kwargs: dict | None = None,
                  library: str = "numpy", *, pkg: str) -> list:
    """In the child: the script on the submission's `module.cls`."""
    if library == "torch" and "torch" not in sys.modules:
        importlib.import_module("torch")
    found = getattr(importlib.import_module(f"{pkg}.{module}"), cls)
    return run(found, init_args, steps, init_kwargs, library, call=invariants.call)


def plain(value):
    """Tensors (in lists, tuples and dicts too) as numpy arrays: the reference's answers as the child's come back."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def on_reference(cls, library: str):
    """`ctx.ref.<name>(init_args, steps, init_kwargs=None)` for a script Function: the script on attn_ref's class."""
    def replay(init_args: list, steps: list, init_kwargs: dict | None = None) -> list:
        return plain(run(cls, init_args, steps, init_kwargs, library))
    return replay
