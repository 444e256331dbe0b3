"""What to do next, from the results: the next step and the blocked-by note. Renderers (autograder/report)
show these; they do not compute them."""
from .grade import Results, StageResult
from .sources import def_line, first_stub, rel
from .stages import CATALOGUE, STAGE, STAGES

STATUS_WORD = {"passed": "passed", "failed": "failed", "not_started": "not started", "blocked": "blocked"}


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
