"""`make watch`: re-grade whenever a stage file is saved, only the stages that file can affect.

Polls the files' modification times (no extra dependency), clears the screen, and shows a
progress bar over the stages, the affected stage's result and diagnosis, and the next step.
Ctrl-C leaves cleanly.
"""
import sys
import time
from pathlib import Path

from .stages import STAGE, STAGES

CLEAR = "\033[2J\033[H"
HOME, ERASE = "\033[H", "\033[J"  # back to the top (the screen is redrawn over itself), and clear what is left below


def dependents(stage: str) -> set[str]:
    """The stage and every stage that calls it, directly or not."""
    out, changed = {stage}, True
    while changed:
        changed = False
        for s in STAGES:
            if s.name not in out and out & set(s.calls):
                out.add(s.name)
                changed = True
    return out


def affected_stages(changed: set[str]) -> list[str]:
    """Stages to re-grade when these file names changed, in stage order."""
    hit: set[str] = set()
    for s in STAGES:
        if changed & set(s.files):
            hit |= dependents(s.name)
    return [s.name for s in STAGES if s.name in hit]


def snapshot(folder: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in folder.glob("*.py")}


def watch(folder: Path, interval: float = 0.3, timeout: float = 10.0, color: bool = False, out=sys.stdout) -> int:
    from .grade import Results, grade
    from .hints import remember_run
    from .report.watch_screen import screen

    kit: dict = {}  # every stage's latest StageResult, for the whole-kit line
    seen: dict[str, float] = {}
    try:
        while True:
            now = snapshot(folder)
            changed = {n for n, t in now.items() if seen.get(n) != t}
            if changed:
                stages = [s.name for s in STAGES] if not seen else affected_stages(changed)
                seen = now
                # the numpy stages first (their verdict comes in a fraction of a second), then the torch
                # stages the change reaches: one screen, whose lines are updated in place
                phases = [p for p in ([n for n in stages if not STAGE[n].torch], [n for n in stages if STAGE[n].torch])
                          if p]
                merged: Results | None = None
                for i, phase in enumerate(phases):
                    res = grade(folder, phase, timeout=timeout)
                    kit.update(res.stages)
                    found = {**(merged.stages if merged else {}), **res.stages}
                    merged = Results(res.submission, {n: found[n] for n in stages if n in found}, res.seed)
                    pending = [n for p in phases[i + 1:] for n in p]
                    out.write((CLEAR if i == 0 else HOME) + screen(merged, kit, stages, color, pending) + ERASE + "\n")
                    out.flush()
                remember_run(merged)
            time.sleep(interval)
    except KeyboardInterrupt:
        out.write("\nstopped watching.\n")
        return 0
