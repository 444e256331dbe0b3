"""`make watch`: re-grade whenever a stage file is saved, only the stages that file can affect.

Polls the files' modification times (no extra dependency), clears the screen, and shows a
progress bar over the stages, the affected stage's result and diagnosis, and the next step.
Ctrl-C leaves cleanly.
"""
import sys
import time
from pathlib import Path

from .registry import STAGE, STAGES

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
        if changed & set(s.files) or ("module.py" in changed and s.name in ("kv_cache", "fused")):
            hit |= dependents(s.name)
    return [s.name for s in STAGES if s.name in hit]


def snapshot(folder: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in folder.glob("*.py")}


def screen(res, statuses: dict[str, str], graded: list[str], color: bool) -> str:
    from .report import STATUS_WORD, next_step, terminal

    core = [s for s in STAGES if not s.bonus]
    done = sum(statuses.get(s.name) == "passed" for s in core)
    bar = "#" * (3 * done) + "." * (3 * (len(core) - done))
    lines = [f"[{bar}] {done}/{len(core)} core stages pass   (watching; Ctrl-C to stop)", ""]
    for name in graded:
        sr = res.stages[name]
        lines.append(f"  stage {STAGE[name].number} {name}: {STATUS_WORD[sr.status]} ({sr.score:g}/{sr.max_score:g})")
    body = terminal(res, color=color).split("\n")
    details = [line for line in body if line.startswith(("  Diagnosis", "  x ", "      "))][:12]
    return "\n".join(lines + [""] + details + ["", "Next step: " + next_step(res)])


def watch(folder: Path, interval: float = 0.3, timeout: float = 10.0, color: bool = False, out=sys.stdout) -> int:
    from .grade import grade

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
