"""The watch screen: a progress bar over the core stages and the whole kit's total (from every stage's
latest result), the stages just graded, their failing checks and diagnoses (the terminal report's lines
for them), and the next step, drawn once per save."""
from .. import messages as say
from ..feedback.advice import STATUS_WORD, blocked_note
from ..results import Results, StageStatus
from ..stages import BY_NAME, CORE
from .terminal import failure_details, shows_failures, text_lines


def screen(res: Results, kit: dict, graded: list[str], color: bool, pending: list[str] = ()) -> str:
    """`kit` holds every stage's latest StageResult (this run's included); `pending` the stages still
    being graded (shown as such, and updated in place when their verdict comes). The next step is
    res.next_step, which watch computed from the whole kit's statuses."""
    core = CORE
    done = sum(kit[s.name].status == "passed" for s in core if s.name in kit)
    bar = "#" * (3 * done) + "." * (3 * (len(core) - done))
    score = sum(kit[s.name].score for s in core if s.name in kit)
    top = sum(kit[s.name].max_score for s in core if s.name in kit)
    lines = [say.WATCH_TOP.format(bar=bar, done=done, total=len(core), score=score, top=top), ""]
    for name in graded:
        sr = res.stages.get(name)
        if sr is None:
            lines.append(say.WATCH_STAGE_GRADING.format(number=BY_NAME[name].number, name=name) if name in pending else "")
            continue
        blocked = f" {blocked_note(sr, res)}" if sr.status == StageStatus.BLOCKED and sr.blocked_by else ""
        lines.append(say.WATCH_STAGE.format(number=BY_NAME[name].number, name=name, status=STATUS_WORD[sr.status],
                                            blocked=blocked, score=sr.score, max_score=sr.max_score))
    details = [line for sr in res.stages.values() if shows_failures(sr, verbose=False)
               for line in failure_details(sr, verbose=False, printed=4)[0]][:16]
    step = ((say.WATCH_GRADING_USERS if res.stages else say.WATCH_GRADING) if pending else res.next_step)
    first, *rest = text_lines(step, 4) or [""]
    off = [say.WATCH_MACHINE.format(note=note) for note in res.protections_off]
    return "\n".join(fit(line) for line in lines + [""] + details + ["", say.REPORT_NEXT_STEP + first]
                     + [f"    {line}" for line in rest] + off)


WIDTH = 80  # a line longer than the terminal wraps, and the redraw over the old screen then overlaps


def fit(line: str, width: int = WIDTH) -> str:
    """The line wrapped to the terminal's width (continuations indented as the line is)."""
    import textwrap

    if len(line) < width:
        return line
    indent = " " * (len(line) - len(line.lstrip()))
    return "\n".join(textwrap.wrap(line, width - 1, subsequent_indent=indent + "  ", break_long_words=True,
                                    break_on_hyphens=False)) or line
