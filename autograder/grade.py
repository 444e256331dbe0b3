"""Run the checks of each stage against a submission and decide each stage's status.

numpy stages and torch stages run in two child processes side by side; a hang or
crash ends that stage (its remaining checks are not run) and a fresh child takes
the next stage. The parent compares every result; the children only compute.
"""
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import localise
from .api import Context, ReferenceAPI, StudentAPI
from .fixtures import Replayer, load
from .outcomes import Fail, MissingFixture, StudentAborted, StudentError
from .registry import Check
from .safe_files import UnusableFile, problem, read_bytes
from .sandbox import Worker, protections
from .sources import reached_files, rel
from .stages import FUNCTIONS, STAGE, STAGES, SUBMISSION_FILES, checks_to_run, mistakes_of, stage_of_file

NIE = "NotImplementedError"
ABORTS_PER_STAGE = 2  # calls that hang or crash before a stage's remaining checks are not run
_STAGE_PREFIX = re.compile(r"^\s*(\w+):")


@dataclass
class CheckResult:
    check: Check
    passed: bool
    message: str = ""
    error: dict | None = None  # the student's exception, if one ended the check
    origin: str | None = None  # the stage whose code raised it
    diagnosis: str | None = None
    not_run: bool = False
    note: str = ""  # what a passing check measured (costs), shown in the report
    arrays: dict | None = None  # expected / got / bad cells of the first mismatch (HTML report)
    called: tuple[str, ...] = ()  # the names of the student's functions (and drivers) the check called

    @property
    def score(self) -> float:
        return self.check.points if self.passed else 0.0

    @property
    def not_implemented(self) -> bool:
        return bool(self.error) and self.error.get("type") == NIE


@dataclass
class StageResult:
    stage: str
    checks: list[CheckResult]
    status: str = "failed"  # passed | failed | not_started | blocked
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
        return list(dict.fromkeys(m.id for r in self.checks for m in mistakes_of(r.diagnosis)))


@dataclass
class Results:
    submission: Path
    stages: dict[str, StageResult]
    seed: int
    seconds: float = 0.0
    pictures: dict = field(default_factory=dict)  # see autograder.pictures (only when asked for)
    protections_off: list[str] = field(default_factory=list)  # sandbox.protections: what this machine lacks
    ignored_files: list[str] = field(default_factory=list)  # .py files that are not stage modules (never run)
    located: dict = field(default_factory=dict)  # issue 23 hook: stage -> localise.Located (the wrong function)

    def _core(self, bonus: bool) -> list[StageResult]:
        return [s for n, s in self.stages.items() if STAGE[n].bonus == bonus]

    @property
    def score(self) -> float:
        """The core score (out of 100 with every stage graded); bonus stages count apart."""
        return sum(s.score for s in self._core(False))

    @property
    def max_score(self) -> float:
        return sum(s.max_score for s in self._core(False))

    @property
    def bonus_score(self) -> float:
        return sum(s.score for s in self._core(True))

    @property
    def bonus_max_score(self) -> float:
        return sum(s.max_score for s in self._core(True))


def origin_of(error: dict, stage: str) -> str | None:
    """The stage a student exception belongs to: a 'stage:' prefix in a stub's message, else the file's
    stage (the stage being graded, for a file it shares with others, such as module.py)."""
    if error.get("type") == NIE:
        m = _STAGE_PREFIX.match(error.get("message") or "")
        if m and m.group(1) in STAGE:
            return m.group(1)
    if error.get("file") in STAGE[stage].files:
        return stage
    return stage_of_file(error.get("file"))


def reached_stages(submission: Path, called: tuple[str, ...]) -> set[str]:
    """The stages whose code the called functions can run: followed through the student's own source
    (which functions each one uses, and what it imports), so a stage is blamed only if it was reached."""
    files: set[str] = set()
    for name in called:
        for file, func in FUNCTIONS[name].code() if name in FUNCTIONS else []:
            files |= reached_files(submission, file, func)
    return {s.name for s in STAGES if files & set(s.files)}


def explain(diagnosis: str) -> str:
    """The catalogue's line for a diagnosis (two at once for 'a+b'), put in front of the check's message."""
    found = mistakes_of(diagnosis)
    if len(found) == 1:
        return f"diagnosis {found[0].id}: {found[0].explanation} (reread {found[0].reread})\n"
    return (f"diagnosis {diagnosis}: {len(found)} mistakes at once, and the output matches them together: "
            + "; and ".join(f"{m.id}, {m.explanation} (reread {m.reread})" for m in found) + "\n")


def describe_error(error: dict, submission: Path, stage: str | None = None) -> str:
    where = f" at {rel(submission / error['file'])}:{error['line']}" if error.get("file") else ""
    origin, first = stage_of_file(error.get("file")), error.get("entry")
    if stage and origin and error.get("file") not in STAGE[stage].files and first and first["file"] != error["file"]:
        # raised in an earlier stage's code that this stage's function called: say both
        where += (f", in stage {STAGE[origin].number} ({origin})'s code, called from your {first['function']} "
                  f"at {rel(submission / first['file'])}:{first['line']}")
    if error["type"] == NIE:
        return f"not implemented yet{where} ({error['message']})"
    if error["type"] == "ContractError":
        return f"does not follow the contract: {error['message']}"
    if error.get("in_grader"):
        return (f"the grader could not use your objects: {error['type']}: {error['message']} (raised in the "
                "grader's own code while using them, not on a line of yours; check the names and types the "
                "docstring asks for)")
    return f"raised {error['type']}: {error['message']}{where}"


def refused_why(submission: Path, file: str) -> str | None:
    """Why the import and introspection rule refuses this stage file (static_check), or None."""
    from .static_check import describe, refusals

    try:
        found = refusals(read_bytes(submission / file), {f.removesuffix(".py") for f in SUBMISSION_FILES})
    except UnusableFile:
        return None
    return describe(file, found) if found else None


def run_stage(api: StudentAPI, ctx: Context, stage: str, submission: Path,
              public_only: bool = False) -> list[CheckResult]:
    results: list[CheckResult] = []
    problems = {f: problem(submission / f) for f in STAGE[stage].files}
    missing = [f for f, p in problems.items() if p == "missing"]
    unusable = [f"{f} {p}" for f, p in problems.items() if p and p != "missing"]
    unusable += [refused_why(submission, f) for f, p in problems.items() if not p and refused_why(submission, f)]
    aborted, stopped = None, 0
    for c in checks_to_run(stage, public_only):
        api.called = []
        if missing:
            results.append(CheckResult(c, False, f"{', '.join(missing)} missing from the submission", not_run=True))
            continue
        if unusable:
            results.append(CheckResult(c, False, "; ".join(unusable), not_run=True))
            continue
        if aborted:
            results.append(CheckResult(c, False, f"not run: {aborted}", not_run=True))
            continue
        try:
            with np.errstate(all="ignore"):  # student values may be NaN or inf; the checks say so in words
                note = c.fn(api, ctx.for_check(c.visibility))
            results.append(CheckResult(c, True, note=note if isinstance(note, str) else ""))
        except Fail as f:
            results.append(CheckResult(c, False, explain(f.diagnosis) + str(f) if f.diagnosis else str(f),
                                       diagnosis=f.diagnosis, arrays=f.arrays, called=tuple(api.called)))
        except StudentError as e:
            results.append(CheckResult(c, False, describe_error(e.info, submission, stage), error=e.info,
                                       origin=origin_of(e.info, stage), called=tuple(api.called)))
        except StudentAborted as e:  # it costs this check; a fresh child takes the next one
            stopped += 1
            if stopped >= ABORTS_PER_STAGE:  # twice: it will not finish; the rest of the stage is not run
                aborted = f"an earlier check of this stage did not finish ({e})"
            results.append(CheckResult(c, False, f"your code did not finish: {e}"))
        except MissingFixture as e:
            results.append(CheckResult(c, False, str(e), not_run=True))
        except Exception as e:  # noqa: BLE001 - an odd return value the check could not read
            results.append(CheckResult(c, False, f"could not read your result: {type(e).__name__}: {e}"))
    return results


def _root(stage: str, stages: dict[str, StageResult], reached: set[str] | None = None) -> str:
    """Follow 'blocked by' back to the stage that fails on its own, as far as the failing code reaches."""
    seen = set()
    while stages[stage].status == "blocked" and stages[stage].blocked_by and stage not in seen:
        if reached is not None and stages[stage].blocked_by not in reached:
            break
        seen.add(stage)
        stage = stages[stage].blocked_by
    return stage


def decide_status(sr: StageResult, done: dict[str, StageResult], submission: Path) -> None:
    fails = [r for r in sr.checks if not r.passed]
    if not fails:
        sr.status = "passed"
        return
    if any(r.not_run and "missing" in r.message for r in fails):
        sr.status = "not_started" if all(r.not_run for r in sr.checks) else "failed"
        return
    passed_any = any(r.passed for r in sr.checks)
    if not passed_any and all(r.not_implemented for r in fails) and any(r.origin == sr.stage for r in fails):
        sr.status = "not_started"
        return
    unfinished = {n for n, s in done.items() if s.status != "passed"}
    others = [r.origin for r in fails if r.origin and r.origin != sr.stage and r.origin in unfinished]
    named = {m.stage for r in fails for m in mistakes_of(r.diagnosis)}
    if not others and named and sr.stage not in named:  # the evidence names an earlier stage's mistake
        others = [s for s in named if s in unfinished]
    reached = None
    if not others and not named and all(r.error is None and not r.not_run for r in fails):
        # wrong numbers, and a stage it uses is wrong: blocked by it only if every failing check ran its code
        reached = set.intersection(*(reached_stages(submission, r.called) for r in fails))
        others = [d for d in STAGE[sr.stage].calls if d in unfinished and d in reached]
    if others:
        sr.status = "blocked"
        sr.blocked_by = _root(others[0], done, reached)
        return
    sr.status = "failed"


def reference():
    """(ref, mistakes): attn_ref where it exists (full repo, autograder), else the release's fixtures."""
    try:
        ref = ReferenceAPI()
        from attn_ref import mistakes
    except ImportError:
        store = load()
        return Replayer("ref", store), Replayer("mistakes", store)
    return ref, mistakes


def grade(submission: Path, stages: list[str] | None = None, seed: int = 0, timeout: float = 10.0,
          ref=None, mistakes=None, public_only: bool = False, zygote=None,
          workers: dict | None = None, pictures: bool = False) -> Results:
    """Grade `submission` (a folder with the stage modules). `stages` limits which stages run;
    public_only runs each hidden check as its public twin, for no points (the student repo, which has no
    reference: see stages.checks_to_run);
    a zygote (launchers.ForkServer) forks both children instead of starting new interpreters (batches;
    there the numpy child inherits the server's imported torch, unused);
    `workers` may hold already started {"numpy": Worker, "torch": Worker} (see prestart)."""
    t0 = time.monotonic()
    submission = Path(submission).resolve()
    if ref is None:
        ref, mistakes = reference()
        public_only = public_only or isinstance(ref, Replayer)  # no reference here: hidden checks run as twins
    ctx = Context(seed, ref, mistakes, submission, fixed_public=isinstance(ref, Replayer))
    wanted = [s for s in STAGES if stages is None or s.name in stages]
    groups = [[s.name for s in wanted if not s.torch], [s.name for s in wanted if s.torch]]
    found: dict[str, list[CheckResult]] = {}
    drawn: dict = {}
    located: dict = {}

    def not_run(name: str, why: str) -> list[CheckResult]:
        return [CheckResult(c, False, why, not_run=True) for c in checks_to_run(name, public_only)]

    def run_group(names: list[str], torch: bool) -> None:
        worker = (workers or {}).get("torch" if torch else "numpy") or \
            Worker(submission, timeout=timeout, zygote=zygote, reuse_memory=not torch)
        api = StudentAPI(worker)
        try:
            if torch:
                try:
                    api.warmup(timeout=max(120.0, timeout))
                except (StudentError, StudentAborted) as e:
                    for name in names:
                        found[name] = not_run(name, f"torch could not be loaded: {e}")
                    return
            for name in names:
                found[name] = run_stage(api, ctx, name, submission, public_only)
                if any(not r.passed for r in found[name]):  # issue 23 hook: which function is wrong on its own
                    located.update(localise.located_for(api, ctx, name, submission))
            if pictures and not torch:
                from . import pictures as pics

                drawn.update(pics.collect(api, ctx.ref))
        except Exception as e:  # noqa: BLE001 - the grader's own trouble (a dead fork server): say so, per check
            for name in names:
                if name not in found:
                    found[name] = not_run(name, f"not run: the grader failed ({e})")
        finally:
            worker.close()

    threads = [threading.Thread(target=run_group, args=(g, i == 1)) for i, g in enumerate(groups)
               if g or (i == 0 and pictures)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done: dict[str, StageResult] = {}
    for s in wanted:
        sr = StageResult(s.name, found[s.name])
        localise.attach(sr, located.get(s.name), done)  # issue 23 hook: an inferred diagnosis on the first failure
        decide_status(sr, done, submission)
        done[s.name] = sr
    ignored = sorted(p.name for p in submission.glob("*.py") if p.name not in SUBMISSION_FILES)
    return Results(submission, done, seed, time.monotonic() - t0, pictures=drawn, protections_off=protections(),
                   ignored_files=ignored, located=located)
