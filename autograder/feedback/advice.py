"""What to do next, from the results: the next step (computed once by the grader, kept in Results), the
blocked-by note and the words for a diagnosis. Renderers (autograder/report) show these; they do not compute
the next step."""
from .. import messages as say
from ..declarations import DEFAULTS_RULE
from ..evidence.inference import INFERRED_IDS
from ..outcomes import plain
from ..results import Failure, Results, StageResult
from ..stages import BONUS, CATALOGUE, FUNCTIONS, SHOWN_ORDER, STAGES, mistakes_of, numbers
from . import localise
from .repair import repair_of
from .sources import deciding_line, def_line, first_stub, rel, unread_parameter

STATUS_WORD = say.STATUS_WORD  # the renderers read it here, beside blocked_note


def blocked_note(sr: StageResult, res: Results) -> str:
    """'by softmax (softmax-no-exp)': the blocking stage and what it was diagnosed with."""
    ids = res.stages[sr.blocked_by].diagnoses if sr.blocked_by in res.stages else []
    return say.BLOCKED_BY.format(stage=sr.blocked_by) + (say.BLOCKED_IDS.format(ids=", ".join(ids)) if ids else "")


def diagnosis_text(diagnosis: str) -> str:
    """The catalogue's words for a diagnosis (two at once for 'a+b'): 'id: explanation (reread section)'."""
    found = mistakes_of(diagnosis)
    if len(found) == 1:
        return say.DIAGNOSIS_ONE.format(id=found[0].id, explanation=found[0].explanation, reread=found[0].reread)
    return (say.DIAGNOSIS_MANY.format(diagnosis=diagnosis, count=len(found))
            + say.DIAGNOSIS_MANY_JOIN.join(say.DIAGNOSIS_MANY_EACH.format(id=m.id, explanation=m.explanation,
                                                                        reread=m.reread) for m in found))


def _where(res: Results, stage, first, stub) -> str:
    """file:line for a failing check: the line that raised, else the stage's stub, else the def of the
    first of the stage's functions the check called (a module check points at module.py, not heads.py)."""
    if first.error and first.error.get("file"):  # the `if` that decided to raise, where the student's code raised
        line = deciding_line(res.snapshot, first.error["file"], first.error["line"])
        return f"{rel(res.submission / first.error['file'])}:{line}"
    if first.failure in (Failure.TIMEOUT, Failure.WRONG) and first.where and first.where.line:
        # the line a hung call was running; the line a check placed its fault at (the `if` above a raise not made)
        return f"{rel(res.submission / first.where.file)}:{first.where.line}"
    if stub:
        return f"{rel(stub[0])}:{stub[1]}"
    for name in first.called:
        for file, func in FUNCTIONS[name].code() if name in FUNCTIONS else []:
            if file in stage.files:  # a driver builds the file's class: no name points at that class
                return def_line(res.snapshot, f"{file}:{func or ''}")
    return rel(res.submission / stage.files[0])


def _mistake_line(res: Results, m) -> str:
    """file:line of a catalogued mistake found without a located line: the first line of its function that makes
    the kind of value it is about (Mistake.line), else the function's def line."""
    file, _, function = m.where.partition(":")
    line = localise.first_match(res.snapshot, file, function, m.line) if m.line else None
    return f"{rel(res.submission / file)}:{line}" if line else def_line(res.snapshot, m.where)


def _unread(res: Results, stage, first) -> dict | None:
    """{where, function, param} for a parameter that a function of the stage the failing check called never reads,
    where the check's words name it (`causal`, `training`, `seed`): an argument ignored (sources.unread_parameter)."""
    said = f"{first.check.doc} {first.check.rule} {plain(first.message)}"
    for name in first.called:
        for file, func in FUNCTIONS[name].code() if name in FUNCTIONS else []:
            found = unread_parameter(res.snapshot, file, func, said) if file in stage.files and func else None
            if found:
                return {"where": f"{rel(res.submission / file)}:{found[1]}", "function": func, "param": found[0]}
    return None


def located_here(res: Results, stage: str):
    """The localised wrong function of `stage` (Results.located, autograder/feedback/localise.py), when it is the
    stage's own."""
    loc = res.located.get(stage)
    return loc if loc is not None and loc.stage == stage else None


def loc_text(res: Results, loc) -> str:
    """'in causal_mask, at exercises/masking.py:23'"""
    how = f" ({loc.how})" if getattr(loc, "how", "") else ""
    return say.STEP_IN_FUNCTION.format(function=loc.function, where=f"{rel(res.submission / loc.file)}:{loc.line}",
                                       how=how)


def parting_words(loc) -> str | None:
    """What changed at the parting line, in words tied to it (feedback/relations.py), when one change names it."""
    steps = getattr(loc, "steps", None) or []
    return steps[-1].get("relation") if steps and isinstance(steps[-1], dict) else None


def repaired(loc) -> str:
    """' Confirmed: with ... on line 14, the failing masking check passes.' where an edit of a copy confirmed the
    parting line's change (feedback/repair.py), else ''."""
    found = repair_of(loc)
    return say.STEP_REPAIRED.format(said=found["said"][0].upper() + found["said"][1:]) if found else ""


def next_step(res: Results, statuses: dict[str, str] | None = None) -> str:
    """The one thing to do next. `statuses` (watch) holds every stage's latest status: when the stages
    just graded pass, it points at the first stage still failing elsewhere. The lines it names are read from the
    files as the grade took them (`res.snapshot`), never from the folder."""
    core_done = all(sr.status == "passed" for sr in res.core_stages)
    faults = [(sr.stage, r) for sr in res.stages.values() for r in sr.checks if r.failure and r.failure.environment]
    if faults:  # nothing of the student's can be fixed about it: say what is wrong with the grader's environment
        stages = ", ".join(dict.fromkeys(name for name, _ in faults))
        return say.STEP_ENVIRONMENT.format(stages=stages, message=faults[0][1].message.removeprefix("not run: "))
    for s in SHOWN_ORDER:  # the core stages first, whatever their numbers
        if s.bonus and not core_done:
            break
        sr = res.stages.get(s.name)
        if sr is None or sr.status == "passed":
            continue
        head = say.STEP_STAGE.format(number=s.number, name=s.name)
        if sr.status == "blocked":
            return say.STEP_BLOCKED.format(head=head, note=blocked_note(sr, res), blocker=sr.blocked_by)
        stub = first_stub(res.snapshot, s.name)
        if sr.status == "not_started":
            missing = [f for f in s.files if res.snapshot.problem(f) == "missing"]
            if missing:
                return say.STEP_MISSING_FILES.format(head=head, files=", ".join(rel(res.submission / f) for f in missing),
                                                     verb="is" if len(missing) == 1 else "are")
            where = f"{rel(stub[0])}:{stub[1]}" if stub else rel(res.submission / s.files[0])
            return say.STEP_START.format(head=head, where=where)
        first = next(r for r in sr.checks if not r.passed)
        if first.failure == Failure.REFUSED:  # none of the file ran: what to change is the refused line itself
            return say.STEP_REFUSED.format(head=head, message=plain(first.message).removeprefix("not run: "))
        if first.failure == Failure.TIMEOUT and first.where and first.where.function == "<module>":
            return say.STEP_LOADING_HUNG.format(head=head, file=rel(res.submission / first.where.file),
                                                line=first.where.line)
        off = next((r for r in sr.checks if not r.passed and r.check.rule == DEFAULTS_RULE
                    and r.failure == Failure.WRONG and r.where and r.where.line), None)
        if off is not None:  # a default that is not the contract's: its line, before what it makes go wrong elsewhere
            return say.STEP_DEFAULT.format(head=head, where=f"{rel(res.submission / off.where.file)}:{off.where.line}",
                                           message=plain(off.message), rule=DEFAULTS_RULE)
        loc = located_here(res, s.name)  # the function found wrong on its own, and a line in it
        if sr.diagnoses:  # the mistake's own function, even where the first failure surfaced elsewhere
            m = CATALOGUE[sr.diagnoses[0]]
            where = loc_text(res, loc) if loc else \
                say.STEP_AT.format(where=_mistake_line(res, m) if m.where else _where(res, s, first, stub))
            named = "" if m.id in INFERRED_IDS else f"{m.id}, "  # an inferred id is the kit's tag: the words alone
            return say.STEP_DIAGNOSED.format(head=head, where=where, named=named, explanation=m.explanation,
                                             repaired=repaired(loc), reread=m.reread)
        if loc:  # what went wrong there: an exception (a syntax error, say) or a wrong value
            what = (say.STEP_RAISES.format(type=first.error.get("type"),
                                           message=plain(str(first.error.get("message", "")))[:160])
                    if first.error else parting_words(loc) or say.STEP_OWN_OUTPUT_WRONG)
            return say.STEP_LOCATED.format(head=head, where=loc_text(res, loc), check=first.check.name,
                                           doc=first.check.doc, what=what, repaired=repaired(loc))
        unread = _unread(res, s, first)
        if unread is not None:
            return say.STEP_UNREAD.format(head=head, check=first.check.name, doc=first.check.doc, **unread)
        return say.STEP_CHECK.format(head=head, check=first.check.name, doc=first.check.doc,
                                     where=_where(res, s, first, stub))
    graded = [s for s in STAGES if s.name in res.stages]
    failing = [s for s in STAGES if (statuses or {}).get(s.name, "passed") != "passed" and s.name not in res.stages]
    if failing:
        s = failing[0]
        return say.STEP_STILL_FAILING.format(number=s.number, name=s.name, status=STATUS_WORD[statuses[s.name]],
                                             file=rel(res.submission / s.files[0]))
    if len(graded) < len(STAGES) and statuses is None:  # `make grade STAGE=...`: what comes next, not "submit"
        later = [s for s in STAGES if s.number > graded[-1].number and (not s.bonus or graded[-1].bonus)]
        these = ", ".join(s.name for s in graded)
        after = say.STEP_NEXT_STAGE.format(number=later[0].number, name=later[0].name) if later else ""
        return say.STEP_SOME_PASS.format(these=these, verb="passes" if len(graded) == 1 else "pass", after=after)
    if not core_done:
        return say.STEP_CORE_PASS.format(numbers=numbers(BONUS))
    return say.STEP_ALL_PASS


SUBMIT = say.SUBMIT


def handed_in(step: str) -> str:
    """The next step on a page that goes back to a student after they handed their work in (Gradescope, a regrade):
    no advice to package it."""
    return step.replace(SUBMIT, "")
