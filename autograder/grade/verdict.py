"""The rules that decide a check's and a stage's verdict, and who is at fault: the student's stage, an earlier stage
it was handed bad values by, or the kit's own check. Functions of the graded record and the submission's source,
testable without running a grade (the loop, grade/__init__.py, applies them)."""
import re
import traceback
from pathlib import Path

import numpy as np

from .. import KIT_VERSION
from .. import messages as say
from ..api import Context, ReplayAPI
from ..declarations import Check
from ..feedback.sources import reached_files
from ..outcomes import CannotReplay, Fail
from ..results import NIE, CheckResult, Failure, StageResult, StageStatus
from ..sandbox.safe_files import Snapshot
from ..stages import BY_NAME, FUNCTIONS, STAGES, mistakes_of, stage_of_file

_STAGE_PREFIX = re.compile(r"^\s*(\w+):")


def origin_of(error: dict, stage: str) -> str | None:
    """The stage a student exception belongs to: a 'stage:' prefix in a stub's message, else the file's
    stage (the stage being graded, for a file it shares with others, such as module.py)."""
    if error.get("type") == NIE:
        m = _STAGE_PREFIX.match(error.get("message") or "")
        if m and m.group(1) in BY_NAME:
            return m.group(1)
    if error.get("file") in BY_NAME[stage].files:
        return stage
    return stage_of_file(error.get("file"))


def reached_stages(snap: Snapshot, called: tuple[str, ...]) -> set[str]:
    """The stages whose code the called functions can run: followed through the student's own source as the
    grade took it (which functions each one uses, and what it imports), so a stage is blamed only if it was
    reached."""
    files: set[str] = set()
    for name in called:
        for file, func in FUNCTIONS[name].code() if name in FUNCTIONS else []:
            files |= reached_files(snap, file, func)
    return {s.name for s in STAGES if files & set(s.files)}


def calls_own_code(stage: str, called) -> bool:
    """Whether the names a check called run code of `stage`'s own files (declarations.Function.code): a check that
    passes on other stages' functions alone would keep its points for a stage whose files do not even load."""
    own = set(BY_NAME[stage].files)
    return any(file in own for name in called if name in FUNCTIONS for file, _ in FUNCTIONS[name].code())


def loading_hung(results: list[CheckResult]) -> bool:
    """Whether a check of the stage timed out in a module's body (its import never finished): every call would."""
    return any(r.failure == Failure.TIMEOUT and r.where and r.where.function == "<module>" for r in results)


def check_at_fault(c: Check, ctx: Context, error: Exception) -> bool:
    """True when the check's own code, not the student's answer, raised `error`: the kind of error no
    returned value can cause (a name or import the check's code lacks), or the same error again when the
    reference's answers stand in for the student's (api.ReplayAPI). Where the reference cannot stand in
    (drivers) or answers differently, the student's value stays the likely cause."""
    if isinstance(error, (NameError, ImportError)):  # a SyntaxError here comes from parsing the submission's source
        return True
    try:
        with np.errstate(all="ignore"):
            c.fn(ReplayAPI(ctx.ref), ctx.for_check(c.visibility))
    except CannotReplay:
        return False
    except Exception as again:  # noqa: BLE001 - any failure of the replay is evidence, never a crash
        return type(again) is type(error) and not isinstance(again, Fail)
    return False


def grader_fault(c: Check, error: Exception) -> str:
    """What the student reads for a fault in the kit's own check: not their code, nothing lost, what to report."""
    frame = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    try:  # the kit's file, named from the kit's root: never to be read as the student's file of the same name
        where = Path(frame.filename).resolve().relative_to(Path(__file__).resolve().parents[2]) if frame else None
    except ValueError:
        where = Path(frame.filename).name
    place = say.GRADER_FAULT_PLACE.format(where=where, line=frame.lineno) if frame else ""
    return say.GRADER_FAULT.format(check=c.id, type=type(error).__name__, error=error, place=place,
                                   version=KIT_VERSION)


def root_of(stage: str, stages: dict[str, StageResult], reached: set[str] | None = None) -> str:
    """Follow 'blocked by' back to the stage that fails on its own, as far as the failing code reaches."""
    seen = set()
    while stages[stage].status == StageStatus.BLOCKED and stages[stage].blocked_by and stage not in seen:
        if reached is not None and stages[stage].blocked_by not in reached:
            break
        seen.add(stage)
        stage = stages[stage].blocked_by
    return stage


def decide_status(sr: StageResult, done: dict[str, StageResult], snap: Snapshot) -> None:
    fails = [r for r in sr.checks if not r.passed and not r.forgiven]
    if not fails:
        sr.status = StageStatus.PASSED
        return
    if any(r.failure == Failure.MISSING for r in fails):
        sr.status = StageStatus.NOT_STARTED if all(r.not_run for r in sr.checks) else StageStatus.FAILED
        return
    passed_any = any(r.passed for r in sr.checks)
    if not passed_any and all(r.not_implemented for r in fails) and any(r.origin == sr.stage for r in fails):
        sr.status = StageStatus.NOT_STARTED
        return
    unfinished = {n for n, s in done.items() if s.status != StageStatus.PASSED}
    others = [r.origin for r in fails if r.origin and r.origin != sr.stage and r.origin in unfinished]
    named = {m.stage for r in fails for m in mistakes_of(r.diagnosis)}
    if not others and named and sr.stage not in named:  # the evidence names an earlier stage's mistake
        others = [s for s in named if s in unfinished]
    reached = None

    def passed_on_inputs(r) -> bool:  # raised inside a stage that passes on its own: it was handed bad inputs
        return r.origin is not None and r.origin != sr.stage and r.origin in done and r.origin not in unfinished

    if not others and not named and all((r.error is None or passed_on_inputs(r)) and not r.not_run for r in fails):
        # wrong numbers, and a stage it uses is wrong: blocked by it only if every failing check ran its code
        reached = set.intersection(*(reached_stages(snap, r.called) for r in fails))
        # the stages it declares it calls first, then any other its failing code reached (a bonus stage that
        # reaches a core stage through one that passes: gqa through heads to masking's offset mask)
        others = [d for d in (*BY_NAME[sr.stage].calls, *(s.name for s in STAGES))
                  if d != sr.stage and d in unfinished and d in reached]
    if others:
        sr.status = StageStatus.BLOCKED
        sr.blocked_by = root_of(others[0], done, reached)
        return
    sr.status = StageStatus.FAILED
