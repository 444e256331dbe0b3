"""The names the checks call, on both sides: `StudentAPI(worker).softmax(x)` runs the submission's
`softmax.softmax(x)` in the child process (autograder.sandbox); `ReferenceAPI().softmax(x)` runs
attn_ref's. Both resolve a name through the Function its stage declares (autograder/stages).
"""
import functools
import importlib
import zlib

import numpy as np

from .stages import FUNCTIONS, TARGETS


class StudentAPI:
    """`called` lists the names called since it was last emptied (the grader empties it per check)."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.called: list[str] = []

    def __getattr__(self, name: str):
        if name not in TARGETS:
            raise AttributeError(name)
        self.called.append(name)
        return functools.partial(self.worker.call, TARGETS[name])

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
        setattr(self, name, fn)  # found once
        return fn


class Context:
    """What a check gets besides the API: seeded randomness, the reference and the known mistakes.

    Public checks always draw from seed 0, so their expected values can ship as fixtures;
    hidden checks draw from the grading seed.
    """

    def __init__(self, seed: int, ref, mistakes, submission) -> None:
        self.seed = seed
        self.ref = ref
        self.mistakes = mistakes
        self.submission = submission

    def for_check(self, visibility: str) -> "Context":
        return Context(0 if visibility == "public" else self.seed, self.ref, self.mistakes, self.submission)

    def rng(self, tag: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(tag.encode())])
