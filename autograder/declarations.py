"""The records a stage is declared with (Stage, Function, Mistake) and the Check each of its
check functions becomes. It imports nothing from the package but the leaf `messages`, so any module may use it.

A stage module (autograder/stages/<name>.py) opens with `STAGE = Stage(name=..., ...)` and then
registers its checks with `@STAGE.check(points=..., kind=..., visibility=...)`.
"""
import inspect
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from .messages import DEFAULTS_RULE as DEFAULTS_RULE
from .messages import INPUTS_RULE as INPUTS_RULE
from .messages import REFERENCE_RULE as REFERENCE_RULE
from .messages import WORKED_RULE as WORKED_RULE

KINDS = ("worked", "reference", "property")
VISIBILITIES = ("public", "hidden")
# The kit-wide rules (their sentences: messages.py) are read here beside the records that name them.


@dataclass(frozen=True)
class Function:
    """A name the checks call: `api.<name>` runs `target` in the student's child process,
    `ctx.ref.<name>` runs `reference` in attn_ref (when a check needs the reference's answer)."""

    name: str
    target: str  # "module:function" in the submission, or "driver:<name>" / "npdriver:<name>" (child/)
    reference: str | None = None  # "module:function" inside the attn_ref package
    reads: tuple[str, ...] = ()  # for a driver: the submission files whose code it runs
    # a driver that measures: the arguments of its one call, run alone in a fresh child whose peak memory and CPU
    # time the grader reads, beside a baseline child that runs the same driver with baseline=True (the grader's own
    # code); both start as soon as the stage's child is ready (stages.common.start_measurements)
    measured: tuple = ()
    # a measurement whose CPU time is compared with its baseline's: that baseline child runs in every grade, beside it
    timed: bool = False
    # "numpy" or "torch": `target` names a class ("module:Class"), and `api.<name>(init_args, steps, init_kwargs)`
    # constructs it and runs the steps on it, a recorded script (child/scripts.py), in that library's arrays
    script: str = ""

    def code(self) -> list[tuple[str, str | None]]:
        """(submission file, function) pairs this name runs: the student's function itself, or for a
        driver each file it reads (function None: whatever in the file it builds)."""
        module, func = self.target.split(":")
        if module in ("driver", "npdriver"):
            return [(read, None) for read in self.reads]
        return [(f"{module}.py", func)]


class Edit(NamedTuple):
    """One textual edit of a solution module: `old` (which must occur once) becomes `new`."""

    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Mistake:
    """A known mistake, named in feedback only when a check's evidence matches it.

    `evidence` says what recognises it: "mistakes:<function>" (attn_ref.mistakes, or the stage's own reference
    module in attn_ref, computes the mistaken
    output, compared with the student's) or "check:<check>" (that check of the stage reads it off the
    student's behaviour). `mutant` is the one edit of the solutions that makes it (the tests make it and
    expect this id). `question` opens its hint ladder; `line` is a pattern for the line that makes it."""

    id: str
    explanation: str
    reread: str  # the article section (or docstring) to read again
    where: str = ""  # "file.py:function" to open
    stage: str = ""  # the stage that declares it (filled in when the stages are collected)
    evidence: str = ""
    mutant: tuple[Edit, ...] = ()
    question: str = ""  # rung 1 of its hint ladder (feedback/hint_ladders.py), asked about `where`
    line: str = ""  # a regular expression for the line inside `where` that makes the wrong value


@dataclass
class Check:
    stage: str
    name: str
    points: float
    kind: str  # worked | reference | property
    visibility: str  # public | hidden (hidden needs attn_ref)
    fn: Callable
    doc: str = ""
    cite: str = ""
    worked_id: str | None = None
    rule: str = ""  # the sentence of the contract it enforces, as the student reads it (stub docstring or README)
    twin: bool = False  # a hidden check run on the public seed-0 inputs, for its points (see stages.checks_to_run)
    measured: bool = False  # it runs the submission in fresh children it measures (a cost rule): grade/kept.py

    @property
    def id(self) -> str:
        return f"{self.stage}/{self.name}"


@dataclass(frozen=True)
class Probe:
    """A small fixed call of one student function whose right answer the reference gives, so that fault
    localisation (feedback/localise.py) can tell which function is wrong on its own."""

    name: str  # the api name called
    file: str
    function: str
    args: tuple
    expected: Callable  # ref -> the right answer
    judge: Callable  # (got, want, ref) -> None when right, else (diagnosis id or None, evidence[, line pattern])
    stage: str = ""  # filled in when the stages are collected
    prime: Callable | None = None  # ref -> None: asks the reference the further answers `judge` needs


@dataclass(frozen=True)
class Stage:
    """Everything about one stage, in one place: see autograder/stages/__init__.py."""

    name: str
    number: int
    points: int
    files: tuple[str, ...]  # every submission module this stage is written in
    calls: tuple[str, ...] = ()  # earlier stages whose functions it uses
    torch: bool = False  # needs torch (runs in the torch child)
    bonus: bool = False  # graded apart from the core points
    reread: str = ""  # the articles' sections to reread (the READMEs' stage tables)
    functions: tuple[Function, ...] = ()  # what its checks call, on the student's side and the reference's
    intro: str = ""  # one or two sentences that open the stage in the notebook editions
    hints: tuple[str, ...] = ()  # `make hint`'s ladder, from a nudge to a near-answer
    mistakes: tuple[Mistake, ...] = ()  # its catalogue of known mistakes
    worked_points: float = 0.0  # points of each article number checked in this stage (article_numbers.py)
    probes: tuple[Probe, ...] = ()  # what localisation calls, in order (feedback/localise.py)
    module: str = ""  # the stage module that declares it (filled in when the stages are collected)
    checks: list[Check] = field(default_factory=list, compare=False, hash=False, repr=False)

    @property
    def column(self) -> str:
        """Its column's name in the CSV files: a bonus stage says so (its points are apart from the core total)."""
        return f"{self.name} (bonus)" if self.bonus else self.name

    def check(self, points: float, kind: str, visibility: str = "hidden", cite: str = "", rule: str = "",
              measured: bool = False):
        """Register `fn(api, ctx)` as a check of this stage: it raises outcomes.Fail (or lets a
        student error through) to fail, and may return a note to show when it passes. `rule` is the
        sentence of the stage's docstrings (or the student README) that the check enforces. `measured`: it
        takes the stage's measurements (Function.measured, common.AHEAD), so its pass may be kept between grades
        of the same files (grade/kept.py)."""
        assert kind in KINDS and visibility in VISIBILITIES, (kind, visibility)
        rule = rule or {"reference": REFERENCE_RULE, "worked": WORKED_RULE}.get(kind, "")
        assert rule, "a property check names the sentence it enforces (rule=...)"

        def deco(fn: Callable) -> Callable:
            # its title: the docstring's first paragraph as one line (a title wrapped over two lines stays whole)
            doc = " ".join(inspect.cleandoc(fn.__doc__).split("\n\n")[0].split()) if fn.__doc__ else fn.__name__
            self.checks.append(Check(self.name, fn.__name__, points, kind, visibility, fn, doc, cite, rule=rule,
                                     measured=measured))
            return fn

        return deco
