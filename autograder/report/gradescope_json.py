"""Gradescope's results.json: one test per check, written in Markdown, stage summaries in extra_data.

Gradescope shows students `output` and each test's `output`, never `extra_data`."""
import json
import re
from pathlib import Path

from .. import messages as say
from ..feedback.advice import STATUS_WORD, diagnosis_text
from ..outcomes import plain
from ..results import CheckResult, Results, StageResult, StageStatus
from ..stages import BY_NAME, SHOWN_ORDER

# Gradescope's visibility values: of the hidden checks (`make autograder HIDDEN_VISIBILITY=...`)
GRADESCOPE_VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
DEFAULT_HIDDEN_VISIBILITY = "visible"  # Gradescope hides a student's total while any test is hidden
# the bonus stages: "apart" (the score is the core points; the bonus checks show, worth 0 in tests[]) or
# "folded" (their points count in the score and in tests[]); the same choice in every channel's build
BONUS_POLICIES = ("apart", "folded")
DEFAULT_BONUS_POLICY = "apart"
_INLINE = re.compile(r"([\\`*_\[\]<>#|~])")  # emphasis, links, html, headings, tables, strike-through
_BULLET = re.compile(r"^(\s*)([-+])(?=\s)", re.M)  # what would start a list
_NUMBERED = re.compile(r"^(\s*\d+)\.(?=\s)", re.M)


def md_text(text: str) -> str:
    """`text` as a Markdown paragraph: its `code spans` kept, every other Markdown character escaped."""
    text = plain(text)
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: no code spans at all
        parts = [text]
    out = "".join(f"`{p}`" if i % 2 else _INLINE.sub(r"\\\1", p) for i, p in enumerate(parts))
    return _NUMBERED.sub(r"\1\\.", _BULLET.sub(r"\1\\\2", out)).replace("\n", "  \n")


def md_block(text: str) -> str:
    """`text` verbatim in a fenced block, the fence longer than any run of backticks inside."""
    text = plain(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def check_output(r: CheckResult, sr: StageResult) -> str:
    """A check's message in Markdown: what it checks, the diagnosis, then the evidence verbatim."""
    c = r.check
    if r.passed:
        return say.GRADESCOPE_PASSED + (say.GRADESCOPE_NOTE.format(note=md_text(r.note)) if r.note else "")
    if r.forgiven:
        return md_text(r.message)
    blocked = say.STATUS_WORD["blocked"] + " " + say.BLOCKED_BY.format(stage=sr.blocked_by)
    parts = [blocked if sr.status == StageStatus.BLOCKED else "", md_text(c.doc)]
    if r.diagnosis:
        parts.append(say.GRADESCOPE_DIAGNOSIS.format(diagnosis=md_text(diagnosis_text(r.diagnosis))))
    if r.message:
        parts.append(md_block("\n".join(r.message.splitlines())))
    if r.output:
        parts += [say.PRINTED_HEADING, md_block(r.output)]
    if c.cite:
        parts.append(md_text(say.GRADESCOPE_SEE.format(cite=c.cite)))
    return "\n\n".join(p for p in parts if p)


def summary(res: Results, notes: list[str] = (), bonus_policy: str = DEFAULT_BONUS_POLICY) -> str:
    """The top-level output in Markdown: the total (as the score counts it under `bonus_policy`), the stage
    table, notes on the upload, the next step."""
    rows = [f"| {s.number} | {s.name}{say.BONUS_MARK if s.bonus else ''} | {sr.score:g}/{sr.max_score:g} | "
            f"{STATUS_WORD[sr.status]}{' ' + say.BLOCKED_BY.format(stage=sr.blocked_by) if sr.blocked_by else ''} |"
            for s in SHOWN_ORDER if (sr := res.stages.get(s.name))]
    if bonus_policy == "folded" and res.bonus_max_score:
        total = say.GRADESCOPE_TOTAL_FOLDED.format(
            total=res.score + res.bonus_score, max_total=res.max_score + res.bonus_max_score, score=res.score,
            max_score=res.max_score, bonus=res.bonus_score, max_bonus=res.bonus_max_score)
    else:
        total = say.GRADESCOPE_TOTAL.format(score=res.score, max_score=res.max_score) + (
            say.GRADESCOPE_BONUS_APART.format(bonus=res.bonus_score, max_bonus=res.bonus_max_score)
            if res.bonus_max_score else "")
    head = " | ".join(("#", *say.REPORT_COLUMNS))
    parts = [total, f"| {head} |\n|---|---|---|---|\n" + "\n".join(rows)]
    notes = [*notes, *([res.ignored_note] if res.ignored_note else []), *([res.kept_note] if res.kept_note else [])]
    if notes:
        parts.append("\n".join(f"- {md_text(n)}" for n in notes))
    parts.append(say.GRADESCOPE_NEXT_STEP + md_text(res.next_step))
    return "\n\n".join(parts)


def test_entry(r: CheckResult, sr: StageResult, index: int, hidden_visibility: str,
               bonus_policy: str = DEFAULT_BONUS_POLICY) -> dict:
    c = r.check
    number = BY_NAME[c.stage].number
    counted = bonus_policy == "folded" or not BY_NAME[c.stage].bonus  # apart, a bonus check is worth 0 here
    return {
        "name": say.GRADESCOPE_TEST_NAME.format(number=number, stage=c.stage, name=c.name)
        + ("" if counted else say.GRADESCOPE_BONUS_APART_TEST.format(points=c.points)),
        "number": f"{number}.{index}",
        "score": r.score if counted else 0.0,
        "max_score": c.points if counted else 0.0,
        "status": "passed" if r.passed or r.forgiven else "failed",  # Gradescope knows only these two
        "output": check_output(r, sr),
        "output_format": "md",
        "tags": [c.stage, c.kind],
        "visibility": "visible" if c.visibility == "public" else hidden_visibility,
        "extra_data": {"stage": c.stage, "check": c.name, "kind": c.kind, "visibility": c.visibility,
                       "diagnosis": r.diagnosis, "worked_id": c.worked_id, "check_status": str(r.status),
                       "failure": str(r.failure) if r.failure else None,
                       "where": vars(r.where) if r.where else None, "message": r.message},
    }


def results_json(res: Results, hidden_visibility: str = DEFAULT_HIDDEN_VISIBILITY, notes: list[str] = (),
                 bonus_policy: str = DEFAULT_BONUS_POLICY) -> dict:
    """Gradescope's format. `hidden_visibility` is when students see the hidden checks; `notes` (what the
    upload held twice, what was ignored) lead the summary; `bonus_policy` (BONUS_POLICIES) whether the
    bonus counts. Either way the score is the sum of the tests' scores."""
    assert hidden_visibility in GRADESCOPE_VISIBILITIES, hidden_visibility
    assert bonus_policy in BONUS_POLICIES, bonus_policy
    tests = [test_entry(r, sr, i, hidden_visibility, bonus_policy) for sr in res.stages.values()
             for i, r in enumerate(sr.checks, 1)]
    return {
        "score": res.score + (res.bonus_score if bonus_policy == "folded" else 0.0),
        "execution_time": round(res.seconds, 3),
        "output": summary(res, notes, bonus_policy),
        "output_format": "md",
        "test_output_format": "md",
        "visibility": "visible",  # each test sets its own; the summary is always shown
        "stdout_visibility": "hidden",  # the grader's log is for the course staff
        "tests": tests,
        "extra_data": {  # stored for the staff, never shown to students
            "seed": res.seed,
            "bonus": {"score": res.bonus_score, "max_score": res.bonus_max_score, "policy": bonus_policy},
            "ignored_files": res.ignored_files,  # .py files handed in beside the stage modules, never run
            "stages": {n: {"score": s.score, "max_score": s.max_score, "status": str(s.status),
                           "blocked_by": s.blocked_by} for n, s in res.stages.items()},
        },
    }


def as_text(res: Results) -> str:
    return json.dumps(results_json(res), indent=2) + "\n"


def write_json(res: Results, path: Path) -> None:
    Path(path).write_text(as_text(res))
