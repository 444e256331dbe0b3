"""The names the checks call, on both sides: `StudentAPI(worker).softmax(x)` runs the submission's
`softmax.softmax(x)` in the child process (autograder.sandbox.runner); `ReferenceAPI().softmax(x)` runs
attn_ref's. Both resolve a name through the Function its stage declares (autograder/stages).
"""
import functools
import importlib
import zlib

import numpy as np

from . import messages as say
from .child import scripts
from .declarations import INPUTS_RULE
from .outcomes import CannotReplay, Fail
from .stages import FUNCTIONS, TARGETS


def inputs_changed(changed: list[dict]) -> str:
    """The failure of a call that modified the caller's arrays in place, naming each argument."""
    by_function: dict[str, list[str]] = {}
    for c in changed:
        names = by_function.setdefault(str(c["function"]), [])
        if str(c["argument"]) not in names:
            names.append(str(c["argument"]))
    said = "; ".join((say.INPUTS_CHANGED_MANY if len(a) > 1 else say.INPUTS_CHANGED_ONE).format(
        function=fn, names=", ".join(f"`{n}`" for n in a)) for fn, a in by_function.items())
    return say.INPUTS_CHANGED.format(said=said, rule=INPUTS_RULE)


class StudentAPI:
    """`called` lists the names called since it was last emptied, `printed` what those calls printed (the
    grader empties both per check)."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.called: list[str] = []
        self.printed = ""

    def __getattr__(self, name: str):
        if name not in TARGETS:
            raise AttributeError(name)
        self.called.append(name)
        f = FUNCTIONS.get(name)
        if f is not None and f.script:  # a class run through a recorded script (child/scripts.py)
            return functools.partial(self._script, *f.target.split(":"), f.script)
        return functools.partial(self._call, TARGETS[name])

    def _script(self, module: str, cls: str, library: str, init_args: list, steps: list,
                init_kwargs: dict | None = None) -> list:
        return self._call("script:object_script", module, cls, init_args, steps, init_kwargs, library)

    def _call(self, target: str, *args, **kwargs):
        """The child's answer; a failure when the call modified an argument in place, whatever it returned."""
        try:
            value = self.worker.call(target, *args, **kwargs)
        finally:  # a call that raised, hung or crashed may have printed the very clue
            self.printed += getattr(self.worker, "printed", "")
        if getattr(self.worker, "changed", None):
            raise Fail(inputs_changed(self.worker.changed))
        return value

    def traced(self, name: str, *args):
        """(value, trace) of `name` called with the child's tracer on (child/tracer.py): the arrays each line
        of the submission made; the trace is None when none came back."""
        self.called.append(name)
        try:
            value = self.worker.call(TARGETS[name], *args, trace=True)
        finally:
            self.printed += getattr(self.worker, "printed", "")
        return value, getattr(self.worker, "trace", None)

    def measure(self, name: str, *args, **kwargs):
        """(value, peak bytes) of `name` run alone in a fresh child (sandbox.Worker.measure)."""
        self.called.append(name)
        return self.worker.measure(TARGETS[name], *args, **kwargs)


class ReferenceAPI:
    """attn_ref's function for every declared name that has one (ImportError where attn_ref is absent)."""

    def __init__(self) -> None:
        importlib.import_module("attn_ref")

    def __getattr__(self, name: str):
        ref = FUNCTIONS[name].reference if name in FUNCTIONS else None
        if ref is None:
            raise AttributeError(f"no reference declared for {name}")
        module, func = ref.split(":")
        fn = getattr(importlib.import_module(f"attn_ref.{module}"), func)
        if FUNCTIONS[name].script:  # a class: the same recorded script runs on it
            fn = scripts.on_reference(fn, FUNCTIONS[name].script)
        setattr(self, name, fn)  # found once
        return fn


class ReplayAPI:
    """The reference standing in for the student, to tell a check's own fault from the student's
    (grade.verdict.check_at_fault): each name with a declared reference answers with it; a name without one
    (a driver, which runs student code in ways only a child can) raises CannotReplay."""

    def __init__(self, ref) -> None:
        self.ref = ref
        self.called: list[str] = []

    def __getattr__(self, name: str):
        if name not in FUNCTIONS or FUNCTIONS[name].reference is None:
            raise CannotReplay(name)
        self.called.append(name)
        return getattr(self.ref, name)

    def measure(self, name: str, *args, **kwargs):
        raise CannotReplay(name)


class Context:
    """What a check gets besides the API: seeded randomness, the reference, the known mistakes, and the
    submission's files as the grade took them (`snapshot`, a sandbox.safe_files.Snapshot: a check that parses the
    student's source asks it, `ctx.snapshot.read_bytes("softmax.py")`, never a path).

    Where the expected values come from recorded fixtures (the student repo: `fixed_public`), public
    checks draw from seed 0, the seed the fixtures were recorded with. Where the reference is at hand
    (the autograder, the full repo) every check draws from the grading seed, so there is no answer
    that could be looked up in the fixtures the release ships.
    """

    def __init__(self, seed: int, ref, mistakes, snapshot, fixed_public: bool = False) -> None:
        self.seed = seed
        self.ref = ref
        self.mistakes = mistakes
        self.snapshot = snapshot  # the submission's files as the grade took them (sandbox.safe_files.Snapshot)
        self.fixed_public = fixed_public

    def for_check(self, visibility: str) -> "Context":
        seed = 0 if visibility == "public" and self.fixed_public else self.seed
        return Context(seed, self.ref, self.mistakes, self.snapshot, self.fixed_public)

    def rng(self, tag: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(tag.encode())])
