"""Checks of the stage declarations, run when the stages are imported: a declaration that does not
hold together fails at once, with the stage and the field named, instead of grading wrongly later.

Always: unique names and numbers, known `calls` to earlier stages, points equal to the sum of the
checks, unique check names and mistake ids, every mistake with its evidence, every core stage with at
least one of the articles' numbers. Where the full repo is present (solutions/ and attn_ref/ beside the
package): every mistake with its one-edit mutant, whose text occurs once in its solution file,
each `mistakes:` evidence function exists, each mistake's `where` names a function or `Class.method` of
its file, and each check's rule sentence is in the stage's docstrings
or is one of the kit-wide rules of the student README.
"""
import ast
import importlib
import re
from pathlib import Path

from ..declarations import DEFAULTS_RULE, REFERENCE_RULE, WORKED_RULE, Stage
from ..outcomes import DeclarationError

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
KIT_RULES = {WORKED_RULE, DEFAULTS_RULE, REFERENCE_RULE}


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _docstrings(text: str) -> str:
    tree = ast.parse(text)
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    return " ".join(_norm(ast.get_docstring(n) or "") for n in nodes)


def defined_at(source: str, name: str) -> int | None:
    """The line of `def name` or `class name` in `source`: a top-level function or class, `Class.method`, or a bare
    method name (the first top-level class that defines it). None where nothing is defined under that name."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None

    def child(body: list, part: str):
        return next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)

    head, _, method = name.partition(".")
    found = child(tree.body, head)
    if found is None and not method:  # a bare method name
        found = next((m for c in tree.body if isinstance(c, ast.ClassDef) for m in [child(c.body, head)] if m), None)
    if found is not None and method:
        found = child(found.body, method) if isinstance(found, ast.ClassDef) else None
    return found.lineno if found is not None else None


def _fail(stage: Stage, field: str, why: str) -> None:
    raise DeclarationError(f"stage {stage.name!r} (autograder/stages/), field `{field}`: {why}")


def check_declarations(stages: list[Stage], solutions: Path | None = SOLUTIONS, extra_rules: set[str] = frozenset(),
                       mutants: bool | None = None) -> None:
    """Raise DeclarationError for the first thing in `stages` that does not hold together. `mutants`: whether
    each mistake must carry its mutant (by default where the solutions are: the release strips the mutants
    from the stage modules it ships, since their text is solution code)."""
    if mutants is None:
        mutants = solutions is not None and solutions.is_dir()
    seen_names, seen_numbers, seen_ids = {}, {}, {}
    for s in stages:
        if not s.name.isidentifier() or s.name in seen_names:
            _fail(s, "name", "not a unique identifier")
        if s.number in seen_numbers:
            _fail(s, "number", f"{s.number} is also stage {seen_numbers[s.number]!r}'s")
        seen_names[s.name], seen_numbers[s.number] = s, s.name
        for c in s.calls:
            if c not in seen_names:
                _fail(s, "calls", f"{c!r} is not an earlier stage")
        total = sum(c.points for c in s.checks)
        if abs(total - s.points) > 1e-9:
            _fail(s, "points", f"declared {s.points}, but its checks add up to {total:g}")
        names = [c.name for c in s.checks]
        if len(set(names)) != len(names):
            _fail(s, "checks", f"two checks share a name: {sorted({n for n in names if names.count(n) > 1})}")
        if not s.bonus and not any(c.kind == "worked" for c in s.checks):
            _fail(s, "worked_points", "a core stage checks at least one of the articles' numbers "
                                      "(stages/article_numbers.py)")
        for f in s.functions:
            module = f.target.split(":")[0]
            if module not in ("driver", "npdriver") and f"{module}.py" not in s.files:
                _fail(s, "functions", f"{f.name} runs {f.target}, which is not in the stage's files {s.files}")
            if f.script and f.script not in ("numpy", "torch"):
                _fail(s, "functions", f"{f.name}: script is 'numpy' or 'torch' (the arrays its steps take), "
                                      f"not {f.script!r}")
            source = solutions / f"{module}.py" if solutions is not None and f.script else None
            if source is not None and source.is_file() and defined_at(source.read_text(), f.target.split(":")[1]) is None:
                _fail(s, "functions", f"{f.name}: solutions/{module}.py defines no class {f.target.split(':')[1]!r}")
        for i, m in enumerate(s.mistakes):
            if m.id in seen_ids:
                _fail(s, f"mistakes[{i}].id", f"{m.id!r} is also declared by stage {seen_ids[m.id]!r}")
            seen_ids[m.id] = s.name
            _mistake(s, i, m, solutions, mutants)
        for p in s.probes:
            if p.file not in s.files:
                _fail(s, "probes", f"probe {p.name} reads {p.file}, not one of the stage's files {s.files}")
            path = solutions / p.file if solutions is not None else None
            if path is not None and path.is_file() and defined_at(path.read_text(), p.function) is None:
                _fail(s, "probes", f"probe {p.name}: solutions/{p.file} defines no function or method "
                                   f"{p.function!r} (write 'function' or 'Class.method')")
    if solutions is not None and solutions.is_dir():
        for s in stages:
            _rules(s, solutions, extra_rules)


def _mistake(s: Stage, i: int, m, solutions: Path | None, mutants: bool) -> None:
    field = f"mistakes[{i}] ({m.id})"
    kind, _, target = m.evidence.partition(":")
    if kind == "check":  # a check of the stage, or a function of its module that its checks use
        module = importlib.import_module(s.module) if s.module else None
        if target not in {c.name for c in s.checks} and not callable(getattr(module, target, None)):
            _fail(s, f"{field}.evidence", f"no check or function named {target!r} in this stage's module")
    elif kind == "mistakes":
        try:
            found = importlib.import_module("attn_ref.mistakes")
        except ImportError:  # the student repo: the reference is not shipped
            found = None
        if found is not None and not callable(getattr(found, target, None)):
            _fail(s, f"{field}.evidence", f"attn_ref.mistakes has no function {target!r}")
    else:
        _fail(s, f"{field}.evidence", "say what recognises it: 'check:<check name>' or 'mistakes:<function>'")
    if m.where:  # "file.py:function" or "file.py:Class.method": what the next step opens
        file, _, name = m.where.partition(":")
        if file not in s.files:
            _fail(s, f"{field}.where", f"{file!r} is not one of the stage's files {s.files}")
        path = solutions / file if solutions is not None else None
        if name and path is not None and path.is_file() and defined_at(path.read_text(), name) is None:
            _fail(s, f"{field}.where", f"solutions/{file} defines no function or method {name!r} "
                                       "(write 'file.py:function' or 'file.py:Class.method')")
    if mutants and not m.mutant:
        _fail(s, f"{field}.mutant", "each mistake comes with the one edit of the solutions that makes it")
    for e in m.mutant:
        path = solutions / e.file if solutions is not None else None
        if path is not None and path.is_file():
            n = path.read_text().count(e.old)
            if n != 1:
                _fail(s, f"{field}.mutant", f"{e.old!r} occurs {n} times in solutions/{e.file} (once is needed)")


def _rules(s: Stage, solutions: Path, extra_rules: set[str]) -> None:
    docs = " ".join(_docstrings((solutions / f).read_text()) for f in s.files if (solutions / f).is_file())
    if not docs:
        return
    for c in s.checks:
        if c.rule in KIT_RULES or c.rule in extra_rules:
            continue
        if _norm(c.rule) not in docs:
            _fail(s, f"checks[{c.name}].rule", f"{c.rule!r} is not in the docstrings of {', '.join(s.files)}")
