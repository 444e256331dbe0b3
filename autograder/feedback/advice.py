"""What to do next, from the results: the next step (computed once by the grader, kept in Results), the
blocked-by note and the words for a diagnosis. Renderers (autograder/report) show these; they do not compute
the next step."""
from ..declarations import DEFAULTS_RULE
from ..evidence.inference import INFERRED_IDS
from ..outcomes import plain
from ..results import Failure, Results, StageResult
from ..stages import BONUS, CATALOGUE, FUNCTIONS, SHOWN_ORDER, STAGES, mistakes_of, numbers
from .repair import repair_of
from .sources import deciding_line, def_line, first_stub, rel

STATUS_WORD = {"passed": "passed", "failed": "failed", "not_started": "not started", "blocked": "blocked"}


def blocked_note(sr: StageResult, res: Results) -> str:
    """'by softmax (softmax-no-exp)': the blocking stage and what it was diagnosed with."""
    ids = res.stages[sr.blocked_by].diagnoses if sr.blocked_by in res.stages else []
    return f"by {sr.blocked_by}" + (f" ({', '.join(ids)})" if ids else "")


def diagnosis_text(diagnosis: str) -> str:
    """The catalogue's words for a diagnosis (two at once for 'a+b'): 'id: explanation (reread section)'."""
    found = mistakes_of(diagnosis)
    if len(found) == 1:
        return f"{found[0].id}: {found[0].explanation} (reread {found[0].reread})"
    return (f"{diagnosis}: {len(found)} mistakes at once, and the output matches them together: "
            + "; and ".join(f"{m.id}, {m.explanation} (reread {m.reread})" for m in found))


def _where(res: Results, stage, first, stub) -> str:
    """file:line for a failing check: the line that raised, else the stage's stub, else the def of the
    first of the stage's functions the check called (a module check points at module.py, not heads.py)."""
    if first.error and first.error.get("file"):  # the `if` that decided to raise, where the student's code raised
        line = deciding_line(res.snapshot, first.error["file"], first.error["line"])
        return f"{rel(res.submission / first.error['file'])}:{line}"
    if first.failure == Failure.TIMEOUT and first.where and first.where.line:  # the line a hung call was running
        return f"{rel(res.submission / first.where.file)}:{first.where.line}"
    if stub:
        return f"{rel(stub[0])}:{stub[1]}"
    for name in first.called:
        for file, func in FUNCTIONS[name].code() if name in FUNCTIONS else []:
            if file in stage.files:  # a driver builds the file's class: no name points at that class
                return def_line(res.snapshot, f"{file}:{func or ''}")
    return rel(res.submission / stage.files[0])


def located_here(res: Results, stage: str):
    """The localised wrong function of `stage` (Results.located, autograder/feedback/localise.py), when it is the
    stage's own."""
    loc = res.located.get(stage)
    return loc if loc is not None and loc.stage == stage else None


def loc_text(res: Results, loc) -> str:
    """'in causal_mask, at exercises/masking.py:23'"""
    how = f" ({loc.how})" if getattr(loc, "how", "") else ""
    return f"in {loc.function}, at {rel(res.submission / loc.file)}:{loc.line}{how}"


def parting_words(loc) -> str | None:
    """What changed at the parting line, in words tied to it (feedback/relations.py), when one change names it."""
    steps = getattr(loc, "steps", None) or []
    return steps[-1].get("relation") if steps and isinstance(steps[-1], dict) else None


def repaired(loc) -> str:
    """' Confirmed: with ... on line 14, the failing masking check passes.' where an edit of a copy confirmed the
    parting line's change (feedback/repair.py), else ''."""
    found = repair_of(loc)
    return f" {found['said'][0].upper()}{found['said'][1:]}." if found else ""


def next_step(res: Results, statuses: dict[str, str] | None = None) -> str:
    """The one thing to do next. `statuses` (watch) holds every stage's latest status: when the stages
    just graded pass, it points at the first stage still failing elsewhere. The lines it names are read from the
    files as the grade took them (`res.snapshot`), never from the folder."""
    core_done = all(sr.status == "passed" for sr in res.core_stages)
    faults = [(sr.stage, r) for sr in res.stages.values() for r in sr.checks if r.failure and r.failure.environment]
    if faults:  # nothing of the student's can be fixed about it: say what is wrong with the grader's environment
        stages = ", ".join(dict.fromkeys(name for name, _ in faults))
        return f"stages {stages} were not graded: {faults[0][1].message.removeprefix('not run: ')}"
    for s in SHOWN_ORDER:  # the core stages first, whatever their numbers
        if s.bonus and not core_done:
            break
        sr = res.stages.get(s.name)
        if sr is None or sr.status == "passed":
            continue
        head = f"stage {s.number} ({s.name})"
        if sr.status == "blocked":
            return f"{head} is blocked {blocked_note(sr, res)}: fix {sr.blocked_by} first (see above)."
        stub = first_stub(res.snapshot, s.name)
        if sr.status == "not_started":
            missing = [f for f in s.files if res.snapshot.problem(f) == "missing"]
            if missing:
                return (f"start {head}: {', '.join(rel(res.submission / f) for f in missing)} "
                        f"{'is' if len(missing) == 1 else 'are'} not in the submission; put the starter file back "
                        "and replace its stub. `make hint` gives a nudge.")
            where = f"{rel(stub[0])}:{stub[1]}" if stub else rel(res.submission / s.files[0])
            return f"start {head}: open {where} and replace the stub. `make hint` gives a nudge."
        first = next(r for r in sr.checks if not r.passed)
        if first.failure == Failure.REFUSED:  # none of the file ran: what to change is the refused line itself
            return f"fix {head}: {plain(first.message).removeprefix('not run: ')}."
        if first.failure == Failure.TIMEOUT and first.where and first.where.function == "<module>":
            return (f"fix {head}: {rel(res.submission / first.where.file)} never finished loading: line "
                    f"{first.where.line}, outside any function, was still running when the time ran out (a loop "
                    "that never ends?). `make hint` gives a nudge.")
        off = next((r for r in sr.checks if not r.passed and r.check.rule == DEFAULTS_RULE
                    and r.failure == Failure.WRONG and r.where and r.where.line), None)
        if off is not None:  # a default that is not the contract's: its line, before what it makes go wrong elsewhere
            return (f"fix {head} at {rel(res.submission / off.where.file)}:{off.where.line}: {plain(off.message)}. "
                    f"{DEFAULTS_RULE}. `make hint` gives a nudge.")
        loc = located_here(res, s.name)  # the function found wrong on its own, and a line in it
        if sr.diagnoses:  # the mistake's own function, even where the first failure surfaced elsewhere
            m = CATALOGUE[sr.diagnoses[0]]
            where = loc_text(res, loc) if loc else \
                "at " + (def_line(res.snapshot, m.where) if m.where else _where(res, s, first, stub))
            named = "" if m.id in INFERRED_IDS else f"{m.id}, "  # an inferred id is the kit's tag: the words alone
            return f"fix {head} {where}: {named}{m.explanation}.{repaired(loc)} Reread {m.reread}."
        if loc:  # what went wrong there: an exception (a syntax error, say) or a wrong value
            what = (f"your code raises {first.error.get('type')} ({plain(str(first.error.get('message', '')))[:160]})"
                    if first.error else parting_words(loc) or "that function's own output is wrong")
            return (f"fix {head} {loc_text(res, loc)}: check '{first.check.name}' ({first.check.doc}) fails and "
                    f"{what}.{repaired(loc)} `make hint` gives a nudge.")
        where = _where(res, s, first, stub)
        return f"fix {head}, check '{first.check.name}' ({first.check.doc}), at {where}. `make hint` gives a nudge."
    graded = [s for s in STAGES if s.name in res.stages]
    failing = [s for s in STAGES if (statuses or {}).get(s.name, "passed") != "passed" and s.name not in res.stages]
    if failing:
        s = failing[0]
        return (f"the stages just graded pass; stage {s.number} ({s.name}) is still "
                f"{STATUS_WORD[statuses[s.name]]}: open {rel(res.submission / s.files[0])} and save it to grade it again.")
    if len(graded) < len(STAGES) and statuses is None:  # `make grade STAGE=...`: what comes next, not "submit"
        later = [s for s in STAGES if s.number > graded[-1].number and (not s.bonus or graded[-1].bonus)]
        these = ", ".join(s.name for s in graded)
        after = (f" Next: stage {later[0].number} ({later[0].name}), `make grade STAGE={later[0].name}`."
                 if later else "")
        return f"{these} {'passes' if len(graded) == 1 else 'pass'}.{after} Run `make grade` to see the whole kit."
    if not core_done:
        return f"the core stages pass.{SUBMIT} The bonus stages ({numbers(BONUS)}) are there if you want more."
    return f"every stage passes.{SUBMIT}"


SUBMIT = " Run `make submit` to package your work."


def handed_in(step: str) -> str:
    """The next step on a page that goes back to a student after they handed their work in (Gradescope, a regrade):
    no advice to package it."""
    return step.replace(SUBMIT, "")
