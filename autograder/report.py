"""The terminal report and the Gradescope-format results.json."""
import json
import os
import re
from pathlib import Path

from .diagnosis import CATALOGUE
from .grade import Results, StageResult
from .registry import STAGE, STAGES

STATUS_WORD = {"passed": "passed", "failed": "failed", "not_started": "not started", "blocked": "blocked"}
_STUB = re.compile(r"raise NotImplementedError\(\s*[\"'](\w+):")


def first_stub(submission: Path, stage: str) -> tuple[Path, int] | None:
    """file:line of the first stub that belongs to `stage` (a `raise NotImplementedError("stage: ...")`)."""
    files = list(STAGE[stage].files) + (["module.py"] if stage in ("kv_cache", "fused") else [])
    for name in files:
        path = submission / name
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines, 1):
            m = _STUB.search(line)
            if m and m.group(1) == stage:
                return path, i
    return None


def rel(path: Path) -> str:
    """Relative to the working directory when inside it, else absolute."""
    try:
        r = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if r.startswith("..") else r


def def_line(submission: Path, where: str) -> str:
    """'softmax.py:softmax' -> 'exercises/softmax.py:9' (the line of that def), or the file alone."""
    name, func = where.split(":")
    path = submission / name
    try:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(rf"\s*def {func}\(", line):
                return f"{rel(path)}:{i}"
    except OSError:
        pass
    return rel(path)


def blocked_note(sr: StageResult, res: Results) -> str:
    """'by softmax (softmax-no-exp)': the blocking stage and what it was diagnosed with."""
    ids = res.stages[sr.blocked_by].diagnoses if sr.blocked_by in res.stages else []
    return f"by {sr.blocked_by}" + (f" ({', '.join(ids)})" if ids else "")


def next_step(res: Results) -> str:
    core_done = all(sr.status == "passed" for n, sr in res.stages.items() if not STAGE[n].bonus)
    for s in STAGES:
        if s.bonus and not core_done:
            break
        sr = res.stages.get(s.name)
        if sr is None or sr.status == "passed":
            continue
        head = f"stage {s.number} ({s.name})"
        if sr.status == "blocked":
            return f"{head} is blocked {blocked_note(sr, res)}: fix {sr.blocked_by} first (see above)."
        stub = first_stub(res.submission, s.name)
        if sr.status == "not_started":
            where = f"{rel(stub[0])}:{stub[1]}" if stub else rel(res.submission / s.files[0])
            return f"start {head}: open {where} and replace the stub. `make hint` gives a nudge."
        first = next(r for r in sr.checks if not r.passed)
        if first.error and first.error.get("file"):
            where = f"{rel(res.submission / first.error['file'])}:{first.error['line']}"
        elif stub:
            where = f"{rel(stub[0])}:{stub[1]}"
        else:
            where = rel(res.submission / s.files[0])
        if sr.diagnoses:
            m = CATALOGUE[sr.diagnoses[0]]
            if not (first.error and first.error.get("file")) and m.where:
                where = def_line(res.submission, m.where)
            return f"fix {head} at {where}: {m.id}, {m.explanation}. Reread {m.reread}."
        return f"fix {head}, check '{first.check.name}' ({first.check.doc}), at {where}. `make hint` gives a nudge."
    if not core_done:
        return "the core stages pass. Run `make submit`; the bonus stages (9-12) are there if you want more."
    return "every stage passes. Run `make submit` to package your work."


def terminal(res: Results, verbose: bool = False, color: bool = False) -> str:
    def c(code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if color else text

    colors = {"passed": "32", "failed": "31", "not_started": "90", "blocked": "33"}
    lines = [f"Grading {rel(res.submission)}  (seed {res.seed})", ""]
    lines.append(f"  {'#':>2}  {'stage':<13} {'points':>11}  status")
    for s in STAGES:
        sr = res.stages.get(s.name)
        if sr is None:
            continue
        if s.bonus and s.number == min(b.number for b in STAGES if b.bonus):
            lines.append("      bonus stages")
        status = STATUS_WORD[sr.status] + (" " + blocked_note(sr, res) if sr.blocked_by else "")
        n_pass = sum(r.passed for r in sr.checks)
        pts = f"{_num(sr.score)}/{_num(sr.max_score)}"
        lines.append(f"  {s.number:>2}  {s.name:<13} {pts:>11}  {c(colors[sr.status], status)}"
                     f"  ({n_pass}/{len(sr.checks)} checks)")
    core = [s for s in STAGES if s.name in res.stages and not s.bonus]
    bonus = [s for s in STAGES if s.name in res.stages and s.bonus]
    if core:
        lines.append(f"      {'total':<13} {_num(res.score) + '/' + _num(res.max_score):>11}")
    if bonus:
        lines.append(f"      {'bonus':<13} {_num(res.bonus_score) + '/' + _num(res.bonus_max_score):>11}"
                     "  (apart from the core points)")
    full = sum(s.points for s in core + bonus)
    shown = res.max_score + res.bonus_max_score
    if shown < full:
        lines.append(f"      (public checks only: the other {_num(full - shown)} of {full} points are "
                     "hidden checks, run by the autograder when you submit)")
    notes = [(sr.stage, r.note) for sr in res.stages.values() for r in sr.checks if r.note]
    if notes:
        lines.append("")
        lines.extend(f"  {stage}: {note}" for stage, note in notes)
    for sr in res.stages.values():
        lines.extend(_failures(sr, res, verbose, c))
    lines += ["", c("1", "Next step: ") + next_step(res)]
    return "\n".join(lines)


def _failures(sr: StageResult, res: Results, verbose: bool, c) -> list[str]:
    if sr.status in ("passed",) or (sr.status == "not_started" and not verbose):
        return []
    out = ["", c("1", f"{sr.stage}: {STATUS_WORD[sr.status]}" + (" " + blocked_note(sr, res) if sr.blocked_by else ""))]
    for d in sr.diagnoses:
        m = CATALOGUE[d]
        out.append(f"  {c('1', 'Diagnosis ' + m.id)}: {m.explanation}. Reread {m.reread}.")
    shown = 0
    for r in sorted(sr.checks, key=lambda r: r.diagnosis is None):
        if r.passed:
            continue
        if r.not_run and not verbose and shown:
            continue
        shown += 1
        diag = f" [{r.diagnosis}]" if r.diagnosis else ""
        cite = f" (reread {r.check.cite})" if r.check.cite and not r.passed else ""
        out.append(f"  x {r.check.name}{diag}: {r.check.doc}{cite}")
        for line in r.message.splitlines():
            if not line.startswith("diagnosis "):  # already said once, above
                out.append(f"      {line}")
        if shown >= 4 and not verbose:
            rest = sum(not x.passed for x in sr.checks) - shown
            if rest > 0:
                out.append(f"  ... and {rest} more failing checks (--verbose shows them)")
            break
    return out


def _num(x: float) -> str:
    return f"{x:g}"


def results_json(res: Results) -> dict:
    """Gradescope's results.json: one test per check, stage summaries in extra_data."""
    tests = []
    for sr in res.stages.values():
        for r in sr.checks:
            c = r.check
            output = ("passed" + (f". {r.note}" if r.note else "")) if r.passed else r.message
            if sr.status == "blocked" and not r.passed:
                output = f"blocked by {sr.blocked_by}: {output}"
            tests.append({
                "name": f"{STAGE[c.stage].number}. {c.stage}: {c.name}",
                "score": c.points if r.passed else 0.0,
                "max_score": c.points,
                "status": "passed" if r.passed else "failed",
                "output": output + (f"\nSee {c.cite}." if c.cite and not r.passed else ""),
                "visibility": "visible" if c.visibility == "public" else "after_published",
                "extra_data": {"stage": c.stage, "check": c.name, "kind": c.kind, "visibility": c.visibility,
                               "diagnosis": r.diagnosis, "worked_id": c.worked_id},
            })
    return {
        "score": res.score,  # the core points; the bonus is reported apart
        "execution_time": round(res.seconds, 3),
        "output": f"{_num(res.score)}/{_num(res.max_score)}. Next step: {next_step(res)}",
        "tests": tests,
        "extra_data": {
            "seed": res.seed,
            "bonus": {"score": res.bonus_score, "max_score": res.bonus_max_score},
            "stages": {n: {"score": s.score, "max_score": s.max_score, "status": s.status,
                           "blocked_by": s.blocked_by} for n, s in res.stages.items()},
        },
    }


def write_json(res: Results, path: Path) -> None:
    Path(path).write_text(json.dumps(results_json(res), indent=2) + "\n")
