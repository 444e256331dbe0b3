"""The stages: one module per stage, each opening with its declaration (`STAGE = Stage(...)`)
followed by its checks. Everything else is collected here from those declarations, and the
declarations are validated here, when the package is imported (validate.py says what is checked).

Stage order is the declared `number`; a module in this folder that declares a STAGE is a stage,
so adding a stage means adding its module here, its solution module and its reference function.
The articles' numbers (autograder/stages/article_numbers.py) lead each stage's checks.
"""
import dataclasses
import importlib
import pkgutil

from ..declarations import Check, Function, Mistake, Stage
from ..evidence.inference import INFERRED
from .validate import check_declarations


def _discover() -> list[Stage]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        stage = getattr(module, "STAGE", None)
        if isinstance(stage, Stage):
            object.__setattr__(stage, "module", module.__name__)
            found.append(stage)
    found.sort(key=lambda s: s.number)
    for s in found:  # each probe knows its stage
        object.__setattr__(s, "probes", tuple(dataclasses.replace(p, stage=s.name) for p in s.probes))
    return found


def _worked_checks(stage: Stage) -> list[Check]:
    from .article_numbers import WORKED, as_check

    return [as_check(w, stage.worked_points) for w in WORKED if w.stage == stage.name]


STAGES: list[Stage] = _discover()
BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
for _s in STAGES:
    _s.checks[:0] = _worked_checks(_s)  # the articles' numbers lead each stage
check_declarations(STAGES)
CHECKS: list[Check] = [c for s in STAGES for c in s.checks]
CORE: list[Stage] = [s for s in STAGES if not s.bonus]
BONUS: list[Stage] = [s for s in STAGES if s.bonus]
SHOWN_ORDER: list[Stage] = CORE + BONUS  # reports list the core stages, then the bonus ones
CORE_POINTS = sum(s.points for s in CORE)
BONUS_POINTS = sum(s.points for s in BONUS)
FUNCTIONS: dict[str, Function] = {f.name: f for s in STAGES for f in s.functions}
# a helper every stage may call (loads torch early), besides the functions the stages declare
TARGETS: dict[str, str] = {"warmup": "driver:warmup",
                           **{n: f.target for n, f in FUNCTIONS.items()}}
CATALOGUE: dict[str, Mistake] = {m.id: dataclasses.replace(m, stage=s.name) for s in STAGES for m in s.mistakes}
# the inferred diagnoses (autograder/evidence/inference.py) join the catalogue, so every place that names a
# mistake by id (explanations, reread sections, "Diagnosis <id>: ...") treats them alike; they belong to no stage
CATALOGUE.update({m.id: m for m in INFERRED})
HINTS: dict[str, list[str]] = {s.name: list(s.hints) for s in STAGES}


def _reach(name: str) -> set[str]:
    out, todo = set(), [name]
    while todo:
        s = todo.pop()
        if s not in out:
            out.add(s)
            todo.extend(BY_NAME[s].calls)
    return out


# derived from `calls`: the stage with every stage it calls, directly or not; and every stage that calls it
# (what a change to its files can affect). Both in stage order, the stage itself included.
USES: dict[str, list[str]] = {s.name: [d.name for d in STAGES if d.name in _reach(s.name)] for s in STAGES}
DEPENDANTS: dict[str, list[str]] = {s.name: [d.name for d in STAGES if s.name in USES[d.name]] for s in STAGES}
SUBMISSION_FILES: list[str] = sorted({f for s in STAGES for f in s.files})


def numbers(stages: list[Stage], to: str = "-") -> str:
    """'9-12' (or with to=' to ', '9 to 12') for consecutive stage numbers, else '9, 11, 12'."""
    ns = sorted(s.number for s in stages)
    if len(ns) > 1 and ns == list(range(ns[0], ns[-1] + 1)):
        return f"{ns[0]}{to}{ns[-1]}"
    return ", ".join(map(str, ns))


def mistakes_of(diagnosis: str | None) -> list[Mistake]:
    """The catalogue entries a diagnosis names: one id, or several joined by '+' (mistakes made together)."""
    return [CATALOGUE[i] for i in diagnosis.split("+")] if diagnosis else []


def checks_to_run(stage: str, public_only: bool) -> list[Check]:
    """The checks of `stage`, in order. Where the reference is absent (the student repo, public_only),
    each hidden check runs as its public twin: the same check on the seed-0 inputs, answered from the
    recorded fixtures; so every kind of mistake shows locally, while the autograder re-checks the same
    things on inputs the student never saw. A twin keeps its points: the local total counts
    it as the autograder would, so a stage that fails never shows full points; reports mark it a twin."""
    out = []
    for c in BY_NAME[stage].checks:
        if c.visibility == "public" or not public_only:
            out.append(c)
        else:
            out.append(dataclasses.replace(c, visibility="public", twin=True))
    return out


def stage_of_file(filename: str | None) -> str | None:
    """The first stage written in a submission file (module.py belongs to heads, kv_cache and fused)."""
    for s in STAGES:
        if filename in s.files:
            return s.name
    return None


def child_kinds(names: list[str] | None) -> list[str]:
    """The children a grade of these stages (None: all) needs, "torch" first (its start is the longest): what
    sandbox.runner.prestart starts ahead."""
    known = STAGES if names is None else [BY_NAME[n] for n in names if n in BY_NAME]
    return [k for k in ("torch", "numpy") if any(s.torch == (k == "torch") for s in known)] or ["numpy"]
