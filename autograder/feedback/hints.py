"""`make hint`: climb each stage's hint ladder (declared in its stage module) one rung per call.

It follows the latest run of any kind (`make grade`, `make grade STAGE=...`, `make watch`), which
each leave `.grade-state.json` beside the submission folder: the first stage of that run that did not
pass, never one that passes. When that run named a mistake, its hint comes first. The rung reached
is remembered in `.hints.json`. Hints never print solution code; they point at the idea and the
article section.
"""
import json
from pathlib import Path

from .. import messages as say
from ..sandbox.safe_files import take
from ..stages import BY_NAME, CATALOGUE, HINTS, STAGES
from .hint_ladders import ladder as ladder_of
from .repair import repair_of
from .sources import first_stub


def _state_path(submission: Path) -> Path:
    return submission.resolve().parent / ".hints.json"


def _grade_state_path(submission: Path) -> Path:
    return submission.resolve().parent / ".grade-state.json"


def remember_run(res) -> None:
    """Keep what a run found (every stage's latest status and diagnoses, and which stages it graded)."""
    path = _grade_state_path(res.submission)
    state = load_grade_state(res.submission)
    state["statuses"].update({n: s.status for n, s in res.stages.items()})
    state["diagnoses"].update({n: s.diagnoses for n, s in res.stages.items()})
    state["last"] = list(res.stages)
    for name in res.stages:  # a confirmed edit (feedback/repair.py): the last rung of that stage's ladder
        found = repair_of(res.located.get(name))
        if found:
            state["repairs"][name] = found
        else:
            state["repairs"].pop(name, None)
    try:
        path.write_text(json.dumps(state, indent=1))
    except OSError:
        pass


def load_grade_state(submission: Path) -> dict:
    try:
        state = json.loads(_grade_state_path(submission).read_text())
    except (OSError, ValueError):
        state = {}
    return {"statuses": dict(state.get("statuses", {})), "diagnoses": dict(state.get("diagnoses", {})),
            "last": list(state.get("last", [])), "repairs": dict(state.get("repairs", {}))}


def edit_rung(submission: Path, stage: str) -> list[str]:
    """The last rung, where the latest run confirmed an edit of the parting line: the edit itself."""
    found = load_grade_state(submission)["repairs"].get(stage)
    if not isinstance(found, dict) or not {"file", "line", "before", "after", "said"} <= set(found):
        return []
    after = "; ".join(part.strip() for part in str(found["after"]).splitlines())  # a copy's line added: one line
    return [say.HINT_EDIT.format(file=found["file"], line=found["line"], before=found["before"], after=after,
                                 said=found["said"])]


def first_unfinished(submission: Path) -> str | None:
    """The first stage of the latest run that did not pass; else the first known not to pass; else the
    first whose files still hold its stub. None when every stage graded so far passes."""
    state = load_grade_state(submission)
    statuses = state["statuses"]
    for names in (state["last"], [s.name for s in STAGES]):
        for s in STAGES:
            if s.name in names and statuses.get(s.name, "passed") != "passed":
                return s.name
    if statuses and all(statuses.get(s.name) == "passed" for s in STAGES):
        return None
    snap = take(submission)  # `make hint`, outside a grade: the folder as it is now
    for s in STAGES:
        if first_stub(snap, s.name) and statuses.get(s.name) != "passed":
            return s.name
    return None


def upcoming(submission: Path, stage: str, diagnoses: list[str] | None = None) -> dict:
    """The rung `make hint STAGE=stage` gives next, without climbing to it: {"rung": k (from 1), "of": n,
    "text", "mistake": the catalogue id its ladder is about, or None for the stage's general ladder}.
    `diagnoses` are the mistakes the run named in that stage (default: the latest run's, as `make hint` reads)."""
    state = _load(_state_path(submission))
    rungs = state.get("diagnosis_rungs", {})
    if diagnoses is None:
        diagnoses = load_grade_state(submission)["diagnoses"].get(stage, [])
    # each diagnosis has its own ladder (autograder/feedback/hint_ladders.py); a new one starts at its first rung
    named = [d for d in diagnoses if d in CATALOGUE and rungs.get(d, 0) < len(ladder_of(CATALOGUE[d]))]
    if named:  # the mistake the last run named, before the general ladder
        m = CATALOGUE[named[0]]
        steps = ladder_of(m)
        rung = rungs.get(m.id, 0)
        return {"rung": rung + 1, "of": len(steps), "text": steps[rung], "mistake": m.id}
    ladder = HINTS[stage] + edit_rung(submission, stage)  # the edit itself only ever as the last rung
    rung = min(int(state.get(stage, 0)), len(ladder) - 1)
    return {"rung": rung + 1, "of": len(ladder), "text": ladder[rung], "mistake": None}


def next_hint(submission: Path, stage: str | None = None) -> str:
    stage = stage or first_unfinished(submission)
    if stage is None:
        return say.HINT_NONE_NEEDED
    if stage not in BY_NAME:
        raise ValueError(say.HINT_UNKNOWN_STAGE.format(stage=stage, stages=", ".join(BY_NAME)))
    hint = upcoming(submission, stage)
    path = _state_path(submission)
    state = _load(path)
    rung, last = hint["rung"], hint["rung"] >= hint["of"]
    if hint["mistake"]:  # climb that mistake's ladder
        state.setdefault("diagnosis_rungs", {})[hint["mistake"]] = rung
        _save(path, state)
        more = say.HINT_MORE_GENERAL if last else say.HINT_MORE
        return say.HINT_FOR_MISTAKE.format(rung=rung, of=hint["of"], number=BY_NAME[stage].number, stage=stage,
                                           mistake=hint["mistake"], text=hint["text"], more=more)
    state[stage] = rung
    _save(path, state)
    more = say.HINT_LAST if last else say.HINT_MORE
    return say.HINT_FOR_STAGE.format(rung=rung, of=hint["of"], number=BY_NAME[stage].number, stage=stage,
                                     text=hint["text"], more=more)


def _load(path: Path) -> dict:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _save(path: Path, state: dict) -> None:
    try:
        path.write_text(json.dumps(state, indent=1))
    except OSError:
        pass
