"""What a notebook's test cell calls (nbgrader and otter editions): grade one stage of the
modules the notebook wrote, with the same sandboxed grader, and return the points.

The stage's report is printed to stdout; nbgrader takes the returned number as the cell's
partial credit. Student code still runs only in child processes, but the notebook's own kernel
is the student's, so a notebook can patch this function: see the README's trust table.
"""
import atexit
import os
from pathlib import Path

from .feedback.advice import STATUS_WORD, diagnosis_text
from .grade import grade as _grade
from .report.terminal import terminal
from .results import CheckResult
from .sandbox.runner import start_server

_servers: dict = {}  # this kernel's fork servers, {"numpy": ..., "torch": ...}: see grade below


def grade(folder: Path, stages: list[str], seed: int, public_only: bool = False):
    """grade.grade of `stages`, its children forked from fork servers this kernel keeps from one test cell to the
    next (the ones `make grade` starts for its one grade): a notebook grades a stage per cell, and starting torch's
    server again for each cell took most of the notebook's grading time. Each grade's children are fresh forks,
    reading the folder as it is now (the cells above rewrite it), as in `make watch`."""
    if not _servers or not all(s.alive() for s in _servers.values() if s is not None):  # none yet, or one died
        _end_servers()
        _servers.update({kind: start_server(kind) for kind in ("numpy", "torch")})
    zygote = {kind: s for kind, s in _servers.items() if s is not None}
    return _grade(folder, stages, seed=seed, public_only=public_only, zygote=zygote or None)


@atexit.register
def _end_servers() -> None:
    for server in _servers.values():
        if server is not None:
            server.close()
    _servers.clear()


def grade_stage(stage: str, folder: str = "submission", public_only: bool = False, hidden: bool | None = None) -> float:
    """Points earned by `stage`, graded once. The student's copy (hidden False, or public_only) runs the
    public checks and the hidden ones' seed-0 twins and prints the full report; at autograding (hidden
    True: nbgrader puts that line back between its hidden-test markers) the hidden checks run on the
    course's inputs and only the public checks' failures and the score are printed, so feedback reveals
    nothing of the hidden checks."""
    if hidden is not None:
        public_only = not hidden
    seed = int(os.environ.get("ATTN_GRADE_SEED", "0"))
    res = grade(Path(folder), [stage], seed=seed, public_only=public_only)
    sr = res.stages[stage]
    if public_only:
        print(terminal(res))
    else:
        for r in sr.checks:
            if not r.passed and r.check.visibility == "public":
                print(f"{r.check.name}: {check_text(r)}")
        hidden_failed = sum(1 for r in sr.checks if not r.passed and r.check.visibility != "public")
        if hidden_failed:
            print(f"{hidden_failed} hidden check(s) failed")
        print(f"stage {stage}: {sr.score:g}/{sr.max_score:g} with the hidden checks ({STATUS_WORD[sr.status]})")
    return float(sr.score)


_cache: dict = {}


def check_passed(stage: str, check: str, folder: str = "submission") -> bool:
    """Whether one check of `stage` passes (otter's test cases, one per check). The stage is graded
    once per kernel and remembered; hidden checks run only where the reference is (the autograder: grade
    decides, see grade.reference)."""
    if stage not in _cache:
        seed = int(os.environ.get("ATTN_GRADE_SEED", "0"))
        _cache[stage] = grade(Path(folder), [stage], seed=seed).stages[stage]
    found = [r for r in _cache[stage].checks if r.check.name == check]
    if found and not found[0].passed:
        print(check_text(found[0]) if found[0].check.visibility == "public" else "a hidden check failed")
    return bool(found) and found[0].passed


def check_text(r: CheckResult) -> str:
    """A failing check's diagnosis (when named) and its evidence."""
    return (f"diagnosis {diagnosis_text(r.diagnosis)}\n" if r.diagnosis else "") + r.message
