"""The watch screen: a progress bar over the core stages, the stages just graded, their failing
checks and diagnoses (the terminal report's lines for them), and the next step."""
from ..advice import STATUS_WORD, next_step
from ..grade import Results
from ..stages import STAGE, STAGES
from .terminal import failure_lines


def screen(res: Results, statuses: dict[str, str], graded: list[str], color: bool) -> str:
    core = [s for s in STAGES if not s.bonus]
    done = sum(statuses.get(s.name) == "passed" for s in core)
    bar = "#" * (3 * done) + "." * (3 * (len(core) - done))
    lines = [f"[{bar}] {done}/{len(core)} core stages pass   (watching; Ctrl-C to stop)", ""]
    for name in graded:
        sr = res.stages[name]
        lines.append(f"  stage {STAGE[name].number} {name}: {STATUS_WORD[sr.status]} ({sr.score:g}/{sr.max_score:g})")
    details = [line for sr in res.stages.values() for line in failure_lines(sr, res, verbose=False)
               if line.startswith(("  Diagnosis", "  x ", "      "))][:12]
    return "\n".join(lines + [""] + details + ["", "Next step: " + next_step(res)])
