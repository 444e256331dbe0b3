"""Run the checks of each stage against a submission and decide each stage's status.

numpy stages and torch stages run in two child processes side by side; a hang or
crash costs its check and a fresh child takes the next one (a second ends the
stage: its remaining checks are not run). The parent compares every result; the
children only compute. The record (autograder/results.py) is filled here once,
localisation and the next step included.
"""
import os
import threading
import time
from pathlib import Path

import numpy as np

from .. import messages as say
from ..api import Context, ReferenceAPI, StudentAPI
from ..declarations import Check
from ..feedback import localise, repair
from ..feedback.advice import next_step
from ..feedback.sources import def_line_number, enclosing_function, loop_line, rel
from ..outcomes import (
    BudgetSpent,
    Fail,
    GraderBug,
    GraderEnvironment,
    MissingFixture,
    NeverLoaded,
    StudentAborted,
    StudentError,
    StudentTimeout,
    plain,
)
from ..results import NIE, CheckResult, CheckStatus, Failure, Results, StageResult, Where
from ..sandbox.runner import Worker, capped, close_launchers, prestart, protections
from ..sandbox.safe_files import Snapshot, UnusableFile, take
from ..stages import BY_NAME, STAGES, SUBMISSION_FILES, checks_to_run, child_kinds, mistakes_of, stage_of_file
from ..stages.common import imported_libraries, start_measurements
from ..stages.fixtures import Replayer, load
from . import kept
from .verdict import calls_own_code, check_at_fault, decide_status, grader_fault, loading_hung, origin_of

ABORTS_PER_STAGE = 2  # calls that hang or crash before a stage's remaining checks are not run
# the whole grade's time, under Gradescope's 10 minutes with a margin (ATTN_GRADE_BUDGET or --budget change it)
DEFAULT_BUDGET_S = 480.0


def grade_budget(budget: float | None = None) -> float:
    """The whole grade's budget in seconds: the one given, else ATTN_GRADE_BUDGET, else DEFAULT_BUDGET_S."""
    import os

    if budget is not None:
        return float(budget)
    try:
        return float(os.environ.get("ATTN_GRADE_BUDGET", DEFAULT_BUDGET_S))
    except ValueError:
        return DEFAULT_BUDGET_S


def where_of(error: dict, snap: Snapshot) -> Where | None:
    """The line that raised, with the function around it (read from the student's source, as the grade took it)."""
    if not error.get("file"):
        return None
    return Where(error["file"], enclosing_function(snap, error["file"], error.get("line")), error.get("line"))


def mistake_where(diagnosis: str, snap: Snapshot) -> Where | None:
    """The function the (first) diagnosed mistake is made in, with the line of its def."""
    found = [m for m in mistakes_of(diagnosis) if m.where]
    if not found:
        return None
    file, func = found[0].where.split(":")
    return Where(file, func or None, def_line_number(snap, file, func))


def describe_error(error: dict, snap: Snapshot, stage: str | None = None) -> str:
    where = say.ERROR_AT.format(where=f"{rel(snap.path(error['file']))}:{error['line']}") if error.get("file") else ""
    origin, first = stage_of_file(error.get("file")), error.get("entry")
    if stage and origin and error.get("file") not in BY_NAME[stage].files and first and first["file"] != error["file"]:
        # raised in an earlier stage's code that this stage's function called: say both
        where += say.ERROR_CALLED_FROM.format(number=BY_NAME[origin].number, stage=origin, function=first["function"],
                                              where=f"{rel(snap.path(first['file']))}:{first['line']}")
    if error["type"] == NIE:
        return say.ERROR_NOT_IMPLEMENTED.format(where=where, message=error["message"])
    if error["type"] == "ContractError":
        return say.ERROR_CONTRACT.format(message=error["message"])
    if error.get("in_grader"):
        return say.ERROR_IN_GRADER.format(type=error["type"], message=error["message"])
    return say.ERROR_RAISED.format(type=error["type"], message=error["message"], where=where)


def syntax_error_of(snap: Snapshot, file: str) -> dict | None:
    """The error a stage file's import raises when its source does not parse (as the child would report it), read
    here from the grader's snapshot (static_check.syntax_error, once per file): a stage whose own file does not
    parse keeps none of its points, even where its module was already loaded in the child from somewhere else
    (another module can put one in sys.modules)."""
    from ..sandbox.static_check import syntax_error

    try:
        found = syntax_error(snap.read_bytes(file), frozenset())
    except UnusableFile:
        return None
    if found is None:
        return None
    kind, msg, line = found
    return {"type": kind, "message": say.SYNTAX_ERROR_WHERE.format(message=msg, file=file, line=line), "file": file,
            "line": line}


def refused_why(snap: Snapshot, file: str) -> str | None:
    """Why the import and introspection rule refuses this stage file (static_check), or None."""
    from ..sandbox.static_check import describe, refusals

    try:
        found = refusals(snap.read_bytes(file), {f.removesuffix(".py") for f in SUBMISSION_FILES})
    except UnusableFile:
        return None
    return describe(file, found) if found else None


def run_stage(api: StudentAPI, ctx: Context, stage: str, public_only: bool = False, held: dict | None = None,
              keeper: "kept.Keeper | None" = None) -> list[CheckResult]:
    """The stage's checks, run on the grade's snapshot (`ctx.snapshot`): its files as the grade took them. `held`:
    passes of its measured checks kept from an earlier grade of the same files ({check id: Keeper.taken's}), taken
    instead of running them; with a `keeper`, a measured check's pass is kept for the next grade, and what it kept
    of one that ran and did not pass is dropped (grade/kept.py)."""
    results: list[CheckResult] = []
    snap = ctx.snapshot
    problems = {f: snap.problem(f) for f in BY_NAME[stage].files}
    missing = [f for f, p in problems.items() if p == "missing"]
    unusable = [f"{f} {p}" for f, p in problems.items() if p and p != "missing"]
    unusable += [refused_why(snap, f) for f, p in problems.items() if not p and refused_why(snap, f)]
    aborted, stopped, budget_out, environment = None, 0, False, None
    unparsed = next((e for f, p in problems.items() if not p and (e := syntax_error_of(snap, f))), None)
    worker = getattr(api, "worker", None)
    for c in checks_to_run(stage, public_only):
        api.called, api.printed = [], ""
        if environment:  # it will not start for the next check either
            results.append(not_run(c, environment, Failure.ENVIRONMENT))
            continue
        deadline = getattr(worker, "deadline", None)
        if not aborted and deadline is not None and time.monotonic() >= deadline:
            aborted = say.BUDGET_SPENT.format(budget=worker.budget_s)
            budget_out = True
        if missing:
            results.append(not_run(c, f"{', '.join(missing)} missing from the submission", Failure.MISSING))
            continue
        if unusable:
            results.append(not_run(c, "; ".join(unusable), Failure.REFUSED))
            continue
        if unparsed:
            results.append(failed(c, describe_error(unparsed, snap, stage), Failure.RAISED, error=unparsed,
                                  where=where_of(unparsed, snap), origin=origin_of(unparsed, stage)))
            continue
        if aborted:
            if budget_out:
                results.append(not_run(c, aborted, Failure.BUDGET))
            else:
                results.append(not_run(c, f"not run: {aborted}", Failure.AFTER_ABORT))
            continue
        if held and c.id in held:  # measured in an earlier grade of these same files: not run again
            results.append(CheckResult(c, CheckStatus.PASSED, note=held[c.id]["note"], called=held[c.id]["called"],
                                       kept_at=held[c.id]["at"]))
            continue
        measured_before = getattr(worker, "measurements", 0)
        try:
            with np.errstate(all="ignore"):  # student values may be NaN or inf; the checks say so in words
                note = c.fn(api, ctx.for_check(c.visibility))
            if os.environ.get(STRICT) and not c.measured and getattr(worker, "measurements", 0) > measured_before:
                raise GraderBug(f"check {c.id} took a measurement of fresh children: declare it "
                                "@STAGE.check(..., measured=True) (grade/kept.py keeps such a check's pass, and only such)")
            if os.environ.get(STRICT) and not calls_own_code(stage, api.called):
                raise GraderBug(f"check {c.id} passed without calling any code of {', '.join(BY_NAME[stage].files)}: "
                                "a stage's points are earned by its own files (stages.common: compute through them)")
            results.append(CheckResult(c, CheckStatus.PASSED, note=note if isinstance(note, str) else "",
                                       called=tuple(api.called)))
            if keeper and c.measured:
                keeper.keep(c, ctx.for_check(c.visibility).seed, results[-1].note, results[-1].called)
        except Fail as f:
            results.append(failed(c, str(f), Failure.WRONG, diagnosis=f.diagnosis, arrays=f.arrays,
                                  where=Where(*f.place) if f.place else mistake_where(f.diagnosis, snap),
                                  called=tuple(api.called)))
        except StudentError as e:
            results.append(failed(c, describe_error(e.info, snap, stage), Failure.RAISED, error=e.info,
                                  where=where_of(e.info, snap), origin=origin_of(e.info, stage),
                                  called=tuple(api.called)))
        except NeverLoaded as e:  # a file it needs hung in its body before: not loaded again, not waited for
            results.append(CheckResult(c, CheckStatus.NOT_RUN, f"not run: {e}", Failure.AFTER_ABORT,
                                       origin=origin_of({"file": e.file}, stage)))
        except StudentAborted as e:  # it costs this check; a fresh child takes the next one
            loading = getattr(e, "loading", None)
            stopped += 0 if loading else 1
            site, said = getattr(e, "where", None), str(e)
            if site and isinstance(e, StudentTimeout):  # the loop it was in, the same line every run
                line = loop_line(snap, site[0], site[1])
                said = said.replace(f"running {site[0]}:{site[1]},", f"running {site[0]}:{line},")
                site = (site[0], line, site[2])
            origin = origin_of({"file": site[0]}, stage) if site else None
            # twice: it will not finish; the rest of the stage is not run. Once where it hung running another stage's
            # code (this stage is blocked by that one, graded on its own). A module whose body never finished loading
            # is not loaded again (Worker._refuse_hung): the checks that need it are not run, the others are
            if stopped >= ABORTS_PER_STAGE or (origin and origin != stage and not loading):
                aborted = say.CHECK_ABORTED.format(said=said)
            results.append(failed(c, say.CHECK_DID_NOT_FINISH.format(said=said),
                                  Failure.TIMEOUT if isinstance(e, StudentTimeout) else Failure.CRASH,
                                  where=Where(site[0], site[2], site[1]) if site else None, called=tuple(api.called),
                                  origin=origin))
        except BudgetSpent as e:  # this check, and every one after it, are out of the grade's time
            aborted, budget_out = str(e), True
            results.append(not_run(c, str(e), Failure.BUDGET))
        except GraderEnvironment as e:
            environment = environment_message(str(e))
            results.append(not_run(c, environment, Failure.ENVIRONMENT))
        except MissingFixture as e:
            results.append(not_run(c, str(e), Failure.NO_FIXTURE))
        except GraderBug:  # the tests' strict mode (above): not a check's fault to be reported as one
            raise
        except Exception as e:
            if not check_at_fault(c, ctx, e):  # an odd value the student returned, which the check could not read
                results.append(failed(c, say.CHECK_UNREADABLE.format(type=type(e).__name__, error=e),
                                      Failure.UNREADABLE))
            elif os.environ.get(STRICT):  # the project's tests: a fault in a check fails loudly
                raise GraderBug(f"check {c.id} raised {type(e).__name__}: {e}") from e
            else:
                results.append(CheckResult(c, CheckStatus.NOT_RUN, grader_fault(c, e), Failure.GRADER))
        results[-1].output = capped(api.printed)
        if keeper and c.measured and results[-1].status == CheckStatus.FAILED:
            keeper.drop(c, ctx.for_check(c.visibility).seed)
    return results


STRICT = "ATTN_GRADER_STRICT"  # set by tests/conftest.py


def environment_message(what: str) -> str:
    """What a student reads when the grader's environment, not their code, kept checks from running."""
    return say.ENVIRONMENT.format(what=what)


def failed(check: Check, message: str, failure: Failure, **kw) -> CheckResult:
    return CheckResult(check, CheckStatus.FAILED, message, failure, **kw)


def not_run(check: Check, message: str, failure: Failure) -> CheckResult:
    return CheckResult(check, CheckStatus.NOT_RUN, message, failure)


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
          workers: dict | None = None, pictures: bool = False, budget: float | None = None,
          confirm: bool = True, keep: bool = False, fresh: bool = False) -> Results:
    """Grade `submission` (a folder with the stage modules). `stages` limits which stages run;
    public_only runs each hidden check as its public twin, keeping its points (the student repo, which has no
    reference: see stages.checks_to_run);
    a zygote (launchers.ForkServer) forks both children instead of starting new interpreters (batches; there the
    numpy child inherits the server's imported torch, unused), or one zygote per kind of child
    ({"numpy": ..., "torch": ...}: a regrade's numpy children fork from a server without torch);
    `workers` may hold already started {"numpy": Worker, "torch": Worker} (see prestart); with neither, the grade
    starts its own as `make grade` does (prestart: a fork server per side where forking is safe) and ends them.
    The submission's files are read once, into one safe_files.Snapshot (prestart's, where the workers hold one of
    this folder; else taken here), and that Snapshot is handed down to every reader: the workers' children, the
    static check, the checks (`ctx.snapshot`), localisation, the pointers, repair, the next step
    (`Results.snapshot`). Nothing reads the folder again during the grade;
    `budget` is the whole grade's time in seconds (grade_budget): past it, the checks left are not run;
    `confirm`: try the named change at the first failing stage's parting line as an edit (feedback/repair.py);
    `make watch` turns it off, its answer to a save must stay fast;
    `keep`: take back the passes of measured checks kept from earlier grades of the same files instead of
    measuring again, and keep this grade's (grade/kept.py: `make grade` and `make watch`; never Gradescope's,
    Classroom's or regrade's); with `fresh` too, measure every one again, and keep what this grade measured
    (`make grade FRESH=1`)."""
    t0 = time.monotonic()
    budget_s = grade_budget(budget)
    submission = Path(submission).resolve()
    own = None
    if not workers and zygote is None:  # every child a fork of a server that loaded numpy (torch) once
        own = workers = prestart(submission, child_kinds(stages), timeout)
    # what every part of this grade reads: with workers started ahead (prestart), the snapshot taken then
    snap = next((w.snapshot for w in (workers or {}).values()
                 if getattr(w, "snapshot", None) is not None and w.snapshot.folder == submission), None) \
        or take(submission)
    try:
        return _grade(snap, t0, budget_s, stages, seed, timeout, ref, mistakes, public_only, zygote,
                      workers, pictures, confirm, keep, fresh)
    finally:
        if own:
            close_launchers(own)


def _grade(snap: Snapshot, t0: float, budget_s: float, stages, seed, timeout, ref, mistakes, public_only,
           zygote, workers, pictures, confirm, keep=False, fresh=False) -> Results:
    if ref is None:
        ref, mistakes = reference()
        public_only = public_only or isinstance(ref, Replayer)  # no reference here: hidden checks run as twins
    ctx = Context(seed, ref, mistakes, snap, fixed_public=isinstance(ref, Replayer))
    wanted = [s for s in STAGES if stages is None or s.name in stages]
    groups = [[s.name for s in wanted if not s.torch], [s.name for s in wanted if s.torch]]
    found: dict[str, list[CheckResult]] = {}
    drawn: dict = {}
    located: dict = {}
    bugs: list[GraderBug] = []
    hung: dict[str, int] = {}  # the submission's files whose body never finished loading (runner.Worker.hung)
    held: dict[str, dict] = {}  # stage -> its measured checks' passes kept from an earlier grade (grade/kept.py)
    keeper = kept.Keeper(snap, public_only, timeout, fresh, kept.sides(workers, zygote)) if keep else None

    def none_run(name: str, why: str, failure: Failure) -> list[CheckResult]:
        return [not_run(c, why, failure) for c in checks_to_run(name, public_only)]

    def run_group(names: list[str], torch: bool) -> None:
        worker = (workers or {}).get("torch" if torch else "numpy") or \
            Worker(snap, timeout=timeout, reuse_memory=not torch,
                   zygote=zygote.get("torch" if torch else "numpy") if isinstance(zygote, dict) else zygote)
        worker.deadline, worker.budget_s = t0 + budget_s, budget_s
        worker.files = frozenset(SUBMISSION_FILES)  # what a child may load: the stages' files (prestart's workers too)
        worker.snapshot = snap  # the bytes its children are given: this grade's (prestart's workers hold it already)
        worker.hung = hung  # a file whose body hung in one child is not loaded again in the other either
        api = StudentAPI(worker)
        try:
            if worker.child is None:  # what the stages' files import of numpy and torch loads in the child's start
                worker.preload_libraries = imported_libraries(snap, [f.removesuffix(".py") for n in names
                                                                           for f in BY_NAME[n].files])
            # measurements in fresh children start now, beside the checks that follow (forked from the torch server
            # the moment it is ready, as the grading child is)
            for name in names:
                measured = [c for c in checks_to_run(name, public_only) if c.measured]
                held[name] = {c.id: k for c in measured if keeper and (k := keeper.taken(c, ctx.for_check(c.visibility).seed))}
                if not any(snap.problem(f) for f in BY_NAME[name].files) and len(held[name]) < len(measured):
                    start_measurements(api, BY_NAME[name], ctx.seed)
            if torch:
                try:
                    api.warmup(timeout=max(120.0, timeout))  # imports torch, nothing of the submission
                except BudgetSpent as e:
                    for name in names:
                        found[name] = none_run(name, str(e), Failure.BUDGET)
                    return
                except (StudentError, StudentAborted, GraderEnvironment) as e:
                    why = environment_message(str(e) if isinstance(e, GraderEnvironment) else
                                              say.NO_TORCH.format(error=e))
                    for name in names:
                        found[name] = none_run(name, why, Failure.NO_TORCH)
                    return
            environment = None
            for name in names:
                if environment:  # the child cannot start: the stages after it are not run either
                    found[name] = none_run(name, environment, Failure.ENVIRONMENT)
                    continue
                found[name] = run_stage(api, ctx, name, public_only, held.get(name), keeper)
                environment = next((r.message for r in found[name] if r.failure == Failure.ENVIRONMENT), None)
                if not environment and any(not r.passed for r in found[name]) and not loading_hung(found[name]):
                    # which function is wrong on its own (not asked where a module's body never finished loading)
                    try:
                        located.update(localise.located_for(api, ctx, name))
                    except BudgetSpent:
                        pass  # the grade's time is out: the stage's results stand without localisation
            if pictures and not torch and not environment:
                from ..report import pictures as pics

                drawn.update(pics.collect(api, ctx.ref))
        except GraderBug as e:  # the tests' strict mode: raised again once both children are done
            bugs.append(e)
        except Exception as e:  # noqa: BLE001 - the grader's own trouble (a dead fork server): say so, per check
            for name in names:
                if name not in found:
                    found[name] = none_run(name, f"not run: the grading run broke ({e}); grade again", Failure.HARNESS)
        finally:
            end = getattr(worker, "end_measurements", None)
            if end:
                end()
            worker.close()

    threads = [threading.Thread(target=run_group, args=(g, i == 1)) for i, g in enumerate(groups)
               if g or (i == 0 and pictures)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if bugs:
        raise bugs[0]
    done: dict[str, StageResult] = {}
    for s in wanted:
        sr = StageResult(s.name, found[s.name])
        localise.attach(sr, located.get(s.name), done)  # an inferred diagnosis on the first failure
        decide_status(sr, done, snap)
        done[s.name] = sr
    # the named change at the first failing stage's parting line, tried as an edit of a copy (feedback only), its
    # children forked from the grade's own servers where it has them
    if confirm:
        servers = zygote if zygote is not None else {k: w.launcher for k, w in (workers or {}).items()} or None
        repair.confirm_first(done, located, ctx, public_only, timeout, servers,
                             left_s=t0 + budget_s - time.monotonic())
    # files that are not stage modules (exercises/__init__.py is the kit's own package marker: not worth a line)
    ignored = sorted(plain(n) for n in [*snap.data, *snap.problems] if n not in (*SUBMISSION_FILES, "__init__.py"))
    res = Results(snap.folder, done, seed, pictures=drawn, protections_off=protections(), ignored_files=ignored,
                  located=located, files={n: h for n, h in snap.sha256.items() if n in SUBMISSION_FILES},
                  snapshot=snap)
    res.next_step = next_step(res)  # after localisation: the pointer is part of the step
    res.seconds = time.monotonic() - t0
    return res
