"""`make hint`: climb each stage's hint ladder (declared in its stage module) one rung per call.

The rung reached is remembered in `.hints.json` beside the submission folder. Hints never
print solution code; they point at the idea and the article section.
"""
import json
from pathlib import Path

from .sources import first_stub
from .stages import HINTS, STAGE, STAGES


def _state_path(submission: Path) -> Path:
    return submission.resolve().parent / ".hints.json"


def first_unfinished(submission: Path) -> str:
    """The first stage whose files still hold its stub (or the last graded status, if known)."""
    last = submission.resolve().parent / ".grade-state.json"
    if last.is_file():
        try:
            statuses = json.loads(last.read_text())
            for s in STAGES:
                if statuses.get(s.name, "passed") != "passed":
                    return s.name
        except (ValueError, AttributeError):
            pass
    for s in STAGES:
        if first_stub(submission, s.name):
            return s.name
    return STAGES[-1].name


def next_hint(submission: Path, stage: str | None = None) -> str:
    stage = stage or first_unfinished(submission)
    if stage not in STAGE:
        raise ValueError(f"unknown stage {stage}; stages: {', '.join(STAGE)}")
    path = _state_path(submission)
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        state = {}
    ladder = HINTS[stage]
    rung = min(int(state.get(stage, 0)), len(ladder) - 1)
    state[stage] = rung + 1
    try:
        path.write_text(json.dumps(state, indent=1))
    except OSError:
        pass
    more = "run `make hint` again for the next one" if rung + 1 < len(ladder) else "that was the last hint"
    return f"Hint {rung + 1}/{len(ladder)} for stage {STAGE[stage].number} ({stage}):\n  {ladder[rung]}\n({more})"
