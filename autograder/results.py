"""The graded record: what every renderer reads (terminal, Gradescope JSON, HTML, watch screen, class
report, notebook cells). The grader fills it once; renderers neither parse its messages nor read the
submission. `Results.as_json()` is the record as plain data."""
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from . import messages as say
from .declarations import Check
from .sandbox.safe_files import Snapshot
from .stages import BY_NAME, mistakes_of

NIE = "NotImplementedError"


class CheckStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"  # it ran and the answer (or the run) was wrong
    NOT_RUN = "not_run"  # it could not run: a file missing or refused, an earlier hang, no fixture, the grader


class Failure(StrEnum):
    """Why a check did not pass: the student's code (wrong, raised, hung, crashed), the upload, or the grader."""
    WRONG = "wrong"  # an answer that differs from the expected one
    RAISED = "raised"  # the student's code raised (or broke the contract)
    TIMEOUT = "timeout"  # the student's code did not answer within the time limit
    CRASH = "crash"  # the child running the student's code died
    MISSING = "missing"  # a file of the stage is not in the submission
    REFUSED = "refused"  # a file of the stage cannot be used (not a regular file, the import rule)
    AFTER_ABORT = "after_abort"  # not run: an earlier check of the stage hung or crashed
    NO_FIXTURE = "no_fixture"  # the student repo has no recorded answer: the check needs the autograder
    UNREADABLE = "unreadable"  # the result came back in a form the check could not read
    NO_TORCH = "no_torch"  # torch could not be loaded in the child (the grader's environment)
    ENVIRONMENT = "environment"  # the child could not start, or lacks a package: the grader's environment
    HARNESS = "harness_error"  # the grading run itself broke (a dead fork server): run the grade again
    GRADER = "grader_error"  # the check's own code raised: the kit's bug, which costs the student nothing
    BUDGET = "budget"  # not run, or stopped: the whole grade's time budget ran out

    @property
    def environment(self) -> bool:
        """The grader's environment, not the student's code, kept the check from running."""
        return self in (Failure.NO_TORCH, Failure.ENVIRONMENT)

    @property
    def aborted(self) -> bool:
        """The student's code stopped: a hang or a crash."""
        return self in (Failure.TIMEOUT, Failure.CRASH)


class StageStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_STARTED = "not_started"
    BLOCKED = "blocked"


@dataclass(frozen=True)
class Where:
    """A place in the submission: file, function (when known) and line (when known)."""
    file: str
    function: str | None = None
    line: int | None = None


@dataclass
class Located:
    """The function found wrong on its own by fault localisation (autograder/feedback/localise.py): its stage, file,
    function, a line inside it, the inferred diagnosis (when the structure of the difference names one) and
    what was seen."""
    stage: str
    file: str
    function: str
    line: int
    diagnosis: str | None = None
    evidence: str = ""
    how: str = ""  # how the line was found, when the student should know (no values could be traced)
    steps: list = field(default_factory=list)  # the values followed: {label, line, function, got, want} per step

    @property
    def where(self) -> Where:
        return Where(self.file, self.function, self.line)


@dataclass
class CheckResult:
    check: Check
    status: CheckStatus
    message: str = ""  # the evidence; the diagnosis is `diagnosis`, never written in here
    failure: Failure | None = None
    diagnosis: str | None = None  # a catalogue id (inferred-* included), or several joined by '+' (made together)
    where: Where | None = None  # where the failure happened in the student's files
    error: dict | None = None  # the student's exception, if one ended the check
    origin: str | None = None  # the stage whose code raised it
    note: str = ""  # what a passing check measured (costs), shown in the report
    arrays: dict | None = None  # expected / got / bad cells of the first mismatch (HTML report)
    called: tuple[str, ...] = ()  # the names of the student's functions (and drivers) the check called
    output: str = ""  # what the student's code printed during the check (stdout and stderr, capped)
    kept_at: str = ""  # a measured check's pass taken back from an earlier grade of the same files: when (grade/kept.py)

    @property
    def passed(self) -> bool:
        return self.status == CheckStatus.PASSED

    @property
    def not_run(self) -> bool:
        return self.status == CheckStatus.NOT_RUN

    @property
    def diagnoses(self) -> list[str]:
        """The catalogue ids the diagnosis names ('a+b' is a and b)."""
        return [m.id for m in mistakes_of(self.diagnosis)]

    @property
    def forgiven(self) -> bool:
        """The kit's own check failed (Failure.GRADER): counted as passed, shown as the kit's bug."""
        return self.failure == Failure.GRADER

    @property
    def score(self) -> float:
        return self.check.points if self.passed or self.forgiven else 0.0

    @property
    def not_implemented(self) -> bool:
        return bool(self.error) and self.error.get("type") == NIE

    def as_json(self) -> dict:
        return {"stage": self.check.stage, "check": self.check.name, "status": str(self.status),
                "score": self.score, "max_score": self.check.points,
                "failure": str(self.failure) if self.failure else None, "diagnoses": self.diagnoses,
                "where": vars(self.where) if self.where else None, "message": self.message, "note": self.note,
                "output": self.output, "kept_at": self.kept_at or None}


@dataclass
class StageResult:
    stage: str
    checks: list[CheckResult]
    status: StageStatus = StageStatus.FAILED
    blocked_by: str | None = None

    @property
    def score(self) -> float:
        return sum(r.score for r in self.checks)

    @property
    def max_score(self) -> float:
        return float(sum(r.check.points for r in self.checks))

    @property
    def diagnoses(self) -> list[str]:
        """Catalogue ids named by this stage's failing checks, first seen first ('a+b' counts as a and b)."""
        return list(dict.fromkeys(i for r in self.checks for i in r.diagnoses))

    def as_json(self) -> dict:
        return {"stage": self.stage, "status": str(self.status), "blocked_by": self.blocked_by,
                "score": self.score, "max_score": self.max_score, "diagnoses": self.diagnoses,
                "checks": [r.as_json() for r in self.checks]}


@dataclass
class Results:
    submission: Path
    stages: dict[str, StageResult]
    seed: int
    seconds: float = 0.0
    next_step: str = ""  # the one thing to do next (advice.next_step), computed once by the grader
    pictures: dict = field(default_factory=dict)  # see autograder.report.pictures (only when asked for)
    protections_off: list[str] = field(default_factory=list)  # sandbox.protections: what this machine lacks
    ignored_files: list[str] = field(default_factory=list)  # .py files that are not stage modules (never run)
    located: dict[str, Located] = field(default_factory=dict)  # stage -> the function found wrong on its own
    files: dict[str, str] = field(default_factory=dict)  # stage file -> SHA-256 of the bytes graded (read once)
    # the bytes graded (sandbox.safe_files.Snapshot), for the feedback worked out from the record afterwards (the
    # next step's lines, watch's merged screen): never read from the folder again; not part of as_json
    snapshot: Snapshot | None = field(default=None, repr=False, compare=False)

    @property
    def kept_note(self) -> str:
        """The sentence every report gives about passes kept from an earlier grade ("" when none was)."""
        kept = [r for sr in self.stages.values() for r in sr.checks if r.kept_at]
        if not kept:
            return ""
        checks = ", ".join(f"{r.check.stage} ({r.check.name})" for r in kept)
        return say.KEPT_PASSES.format(checks=checks, at=min(r.kept_at for r in kept))

    @property
    def ignored_note(self) -> str:
        """The sentence every report gives about `ignored_files` ("" when there are none)."""
        if not self.ignored_files:
            return ""
        return say.IGNORED_FILES.format(files=", ".join(self.ignored_files))

    @property
    def core_stages(self) -> list[StageResult]:
        return [s for n, s in self.stages.items() if not BY_NAME[n].bonus]

    @property
    def bonus_stages(self) -> list[StageResult]:
        return [s for n, s in self.stages.items() if BY_NAME[n].bonus]

    @property
    def score(self) -> float:
        """The core score (out of stages.CORE_POINTS with every stage graded); bonus stages count apart."""
        return sum(s.score for s in self.core_stages)

    @property
    def max_score(self) -> float:
        return sum(s.max_score for s in self.core_stages)

    @property
    def bonus_score(self) -> float:
        return sum(s.score for s in self.bonus_stages)

    @property
    def bonus_max_score(self) -> float:
        return sum(s.max_score for s in self.bonus_stages)

    def as_json(self) -> dict:
        """The record as plain data (one object per stage, one per check)."""
        return {"submission": str(self.submission), "seed": self.seed, "seconds": round(self.seconds, 3),
                "score": self.score, "max_score": self.max_score, "bonus_score": self.bonus_score,
                "bonus_max_score": self.bonus_max_score, "next_step": self.next_step,
                "stages": [s.as_json() for s in self.stages.values()],
                "protections_off": self.protections_off, "ignored_files": self.ignored_files,
                "located": {n: vars(loc) for n, loc in self.located.items()}, "files": self.files}
