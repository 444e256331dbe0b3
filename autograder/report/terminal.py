"""The terminal report: the stage table, the failing checks with their diagnoses, the next step."""
from .. import messages as say
from ..feedback.advice import blocked_note
from ..feedback.sources import rel
from ..outcomes import plain
from ..results import Results, StageResult, StageStatus
from ..stages import BONUS, CATALOGUE, SHOWN_ORDER
from .bonus_policy import BONUS as BONUS_POLICY


def _plain(code: str, text: str) -> str:
    return text


def terminal(res: Results, verbose: bool = False, color: bool = False) -> str:
    def c(code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if color else text

    colors = {"passed": "32", "failed": "31", "not_started": "90", "blocked": "33"}
    lines = [say.REPORT_HEADING.format(submission=rel(res.submission), seed=res.seed), ""]
    stage, points, status = say.REPORT_COLUMNS
    lines.append(f"  {'#':>2}  {stage:<13} {points:>11}  {status}")
    for s in SHOWN_ORDER:
        sr = res.stages.get(s.name)
        if sr is None:
            continue
        if s is BONUS[0]:
            lines.append("      " + say.REPORT_BONUS_HEADING)
        status = say.STATUS_WORD[sr.status] + (" " + blocked_note(sr, res) if sr.blocked_by else "")
        n_pass = sum(r.passed for r in sr.checks)
        pts = f"{_num(sr.score)}/{_num(sr.max_score)}"
        lines.append(f"  {s.number:>2}  {s.name:<13} {pts:>11}  {c(colors[sr.status], status)}"
                     + say.REPORT_CHECKS.format(passed=n_pass, total=len(sr.checks)))
    core = [s for s in SHOWN_ORDER if s.name in res.stages and not s.bonus]
    bonus = [s for s in SHOWN_ORDER if s.name in res.stages and s.bonus]
    if core:
        lines.append(f"      {say.REPORT_TOTAL:<13} {_num(res.score) + '/' + _num(res.max_score):>11}")
    if bonus and BONUS_POLICY == "folded":  # the course counts them: the total the autograder gives
        lines.append(f"      {say.REPORT_BONUS:<13} {_num(res.bonus_score) + '/' + _num(res.bonus_max_score):>11}")
        lines.append(f"      {say.REPORT_WITH_BONUS:<13} "
                     f"{_num(res.score + res.bonus_score) + '/' + _num(res.max_score + res.bonus_max_score):>11}"
                     + say.REPORT_BONUS_FOLDED)
    elif bonus:
        lines.append(f"      {say.REPORT_BONUS:<13} {_num(res.bonus_score) + '/' + _num(res.bonus_max_score):>11}"
                     + say.REPORT_BONUS_APART)
    twins = [r for sr in res.stages.values() for r in sr.checks if r.check.twin]
    if twins:  # twins count here as the autograder counts them, marked as such
        failing = [r for r in twins if not r.passed]
        tail = (say.REPORT_TWINS_FAILING.format(count=len(failing), points=_num(sum(r.check.points for r in failing)))
                if failing else say.REPORT_TWINS_PASS)
        lines.append("      " + say.REPORT_TWINS.format(points=_num(sum(r.check.points for r in twins)),
                                                        count=len(twins), tail=tail))
    notes = [(sr.stage, r.note) for sr in res.stages.values() for r in sr.checks if r.note]
    if notes:
        lines.append("")
        lines.extend(f"  {stage}: {plain(note)}" for stage, note in notes)
    for sr in res.stages.values():
        lines.extend(failure_lines(sr, res, verbose, c))
    faults = [r for sr in res.stages.values() for r in sr.checks if r.forgiven]
    if faults:
        lines += ["", c("1", say.REPORT_KIT_FAULTS)]
        lines.extend(f"  ! {r.message}" for r in faults)
    if res.kept_note:
        lines += ["", res.kept_note]
    if res.ignored_note:
        lines += ["", res.ignored_note]
    if res.protections_off:
        lines += ["", say.REPORT_PROTECTIONS_OFF]
        lines.extend(f"  - {note}" for note in res.protections_off)
    first, *rest = text_lines(res.next_step, MESSAGE_LINES) or [""]
    lines += ["", c("1", say.REPORT_NEXT_STEP) + first, *(f"    {line}" for line in rest)]
    return "\n".join(lines)


MESSAGE_LINES = 20  # lines of one message shown unless verbose (an exception's message is the student's text)


def text_lines(text: str, limit: int | None) -> list[str]:
    """A message as lines to indent under its heading: plain text (outcomes.plain), no blank lines (a message
    the submission wrote cannot push the table off the screen or start a line of its own at the left margin,
    where it would read as the report's), `limit` lines at most (None: all)."""
    lines = [line for line in plain(text).splitlines() if line.strip()]
    if limit is not None and len(lines) > limit:
        lines = lines[:limit] + [say.REPORT_MORE_LINES.format(count=len(lines) - limit)]
    return lines


def shows_failures(sr: StageResult, verbose: bool) -> bool:
    """Whether the report lists this stage's failures (a stage not started only when verbose)."""
    return sr.status != StageStatus.PASSED and (verbose or sr.status != StageStatus.NOT_STARTED)


PRINTED_LINES = 12  # lines of a check's printed output shown unless verbose


def printed_lines(output: str, limit: int | None) -> list[str]:
    """What the student's code printed during a check, under the check, `limit` lines at most (None: all)."""
    if not output:
        return []
    lines = output.splitlines()
    shown = lines if limit is None else lines[:limit]
    out = ["      " + say.REPORT_PRINTED] + [f"      | {line}" for line in shown]
    if len(shown) < len(lines):
        out.append("      | " + say.REPORT_MORE_LINES.format(count=len(lines) - len(shown)))
    return out


def failure_details(sr: StageResult, verbose: bool, c=_plain,
                    printed: int | None = PRINTED_LINES) -> tuple[list[str], int]:
    """(the stage's diagnoses and its failing checks, 4 unless verbose, each with what the code printed
    during it, `printed` lines unless verbose; how many failing checks are left out)."""
    out = []
    for d in sr.diagnoses:
        m = CATALOGUE[d]
        out.append(f"  {c('1', say.REPORT_DIAGNOSIS.format(id=m.id))}"
                   + say.REPORT_DIAGNOSIS_TAIL.format(explanation=m.explanation, reread=m.reread))
    shown = 0
    for r in sorted(sr.checks, key=lambda r: r.diagnosis is None):
        if r.passed or r.forgiven:
            continue
        if r.not_run and not verbose and shown:
            continue
        shown += 1
        diag = f" [{r.diagnosis}]" if r.diagnosis else ""
        cite = say.REPORT_CHECK_CITE.format(cite=r.check.cite) if r.check.cite else ""
        out.append(f"  x {r.check.name}{diag}: {r.check.doc}{cite}")
        out.extend(f"      {line}" for line in text_lines(r.message, None if verbose else MESSAGE_LINES))
        out.extend(printed_lines(r.output, None if verbose else printed))
        if shown >= 4 and not verbose:
            return out, sum(not x.passed and not x.forgiven for x in sr.checks) - shown
    return out, 0


def failure_lines(sr: StageResult, res: Results, verbose: bool, c=_plain) -> list[str]:
    """A heading for a stage that did not pass, then its failure_details."""
    if not shows_failures(sr, verbose):
        return []
    out = ["", c("1", f"{sr.stage}: {say.STATUS_WORD[sr.status]}" + (" " + blocked_note(sr, res) if sr.blocked_by else ""))]
    details, rest = failure_details(sr, verbose, c)
    out += details
    if rest > 0:
        out.append(say.report_more_failing(rest))
    return out


def _num(x: float) -> str:
    return f"{x:g}"
