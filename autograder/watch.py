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
    from .grade import grade
    from .report.watch_screen import screen

    statuses: dict[str, str] = {}
    seen: dict[str, float] = {}
    try:
        while True:
            now = snapshot(folder)
            changed = {n for n, t in now.items() if seen.get(n) != t}
            if changed:
                stages = [s.name for s in STAGES] if not seen else affected_stages(changed)
                seen = now
                # first the numpy stages (fast feedback), then any torch stage the change reaches
                for phase in ([n for n in stages if not STAGE[n].torch], [n for n in stages if STAGE[n].torch]):
                    if not phase:
                        continue
                    res = grade(folder, phase, timeout=timeout)
                    statuses.update({n: s.status for n, s in res.stages.items()})
                    out.write(CLEAR + screen(res, statuses, phase, color) + "\n")
                    out.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        out.write("\nstopped watching.\n")
        return 0
