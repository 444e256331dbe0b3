"""Places in the student's files: the stub a stage still holds, the line of a function's def,
and paths shown relative to where the student runs the grader. Every function here reads the files from the
snapshot it is handed (sandbox.safe_files.Snapshot: the grade's), never from a path."""
import ast
import os
import re
from pathlib import Path

from ..sandbox.safe_files import Snapshot
from ..stages import BY_NAME, SUBMISSION_FILES
from ..stages.validate import defined_at
from ..submission import SHOWN

_STUB = re.compile(r"raise NotImplementedError\(\s*[\"'](\w+):")


def first_stub(snap: Snapshot, stage: str) -> tuple[Path, int] | None:
    """file:line of the first stub that belongs to `stage` (a `raise NotImplementedError("stage: ...")`); the path
    is where the snapshot read the file."""
    for name in BY_NAME[stage].files:
        text = snap.read_text(name)
        if text is None:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            m = _STUB.search(line)
            if m and m.group(1) == stage:
                return snap.path(name), i
    return None


def rel(path: Path) -> str:
    """As the student uploaded it where known, else relative to the working directory when inside it, else absolute."""
    if Path(path) in SHOWN:
        return SHOWN[Path(path)]
    try:
        r = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if r.startswith("..") else r


def def_line_number(snap: Snapshot, name: str, func: str | None) -> int | None:
    """The line of `def func` or `class func` in the file (`Class.method` too, or a bare method name); with no
    func, its first class (else its first def)."""
    text = snap.read_text(name) or ""
    if func:
        return defined_at(text, func) or next((i for i, line in enumerate(text.splitlines(), 1)
                                                if re.match(rf"\s*(def|class) {func}\b", line)), None)
    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        if re.match(r"class \w", line):
            return i
    for i, line in enumerate(lines, 1):
        if re.match(r"def \w", line):
            return i
    return None


def def_line(snap: Snapshot, where: str) -> str:
    """'softmax.py:softmax' -> 'exercises/softmax.py:9' (the line of that def or class), or the file alone.
    With no name ('module.py:'), the file's first class (else its first def)."""
    name, func = where.split(":")
    line = def_line_number(snap, name, func)
    return f"{rel(snap.path(name))}:{line}" if line else rel(snap.path(name))


def enclosing_function(snap: Snapshot, name: str, line: int | None) -> str | None:
    """The innermost function (or class) of the file whose body holds `line`."""
    tree = _parse(snap, name) if line else None
    found = None
    for node in ast.walk(tree) if tree else []:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                node.lineno <= line <= (node.end_lineno or node.lineno):
            if found is None or node.lineno >= found.lineno:
                found = node
    return found.name if found else None


def loop_line(snap: Snapshot, name: str, line: int | None) -> int | None:
    """The header line of the innermost loop whose body holds `line` in the file (else `line`): where a call that
    ran out of time was caught is wherever its loop happened to be (`while True:` or its body, from run to run);
    the loop is the same every time."""
    tree = _parse(snap, name) if line else None
    found = None
    for node in ast.walk(tree) if tree else []:
        if isinstance(node, (ast.While, ast.For, ast.AsyncFor)) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if found is None or node.lineno >= found.lineno:
                found = node
    return found.lineno if found else line


def deciding_line(snap: Snapshot, name: str, line: int | None) -> int | None:
    """For a `raise` the student wrote inside an `if` (or `elif`) body, the line of that test: what decided to raise
    is the condition, not the raise (else `line`)."""
    tree = _parse(snap, name) if line else None
    for node in ast.walk(tree) if tree else []:
        if isinstance(node, ast.If) and any(isinstance(b, ast.Raise) and b.lineno == line for b in node.body):
            return node.lineno
    return line


SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")  # its positional order


def argument_line(snap: Snapshot, name: str, line: int, argument: str) -> int | None:
    """For the scaled_dot_product_attention call on `line`, the line that made the value passed as `argument`: the
    last assignment before the call, in the same function, to the name passed (`p = dropout_p` two lines up, then
    `dropout_p=p`). None where the call writes the value itself (`~mask`, `p if training else 0.0`), passes a
    parameter as it came, or leaves the argument out: the call's own line is then the one to change."""
    tree = _parse(snap, name)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)
             and (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) == "scaled_dot_product_attention"] \
        if tree else []
    if not calls:
        return None
    call = calls[-1]
    value = next((k.value for k in call.keywords if k.arg == argument), None)
    if value is None and SDPA_PARAMETERS.index(argument) < len(call.args):
        value = call.args[SDPA_PARAMETERS.index(argument)]
    read = {value.id} if isinstance(value, ast.Name) else set()  # `~mask`, `p if training else 0`: the call's own
    home = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            and f.lineno <= call.lineno <= (f.end_lineno or f.lineno)]
    if not read or not home:
        return None
    made = [n.lineno for n in ast.walk(min(home, key=lambda f: (f.end_lineno or f.lineno) - f.lineno))
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and n.lineno < call.lineno
            and read & {t.id for t in ast.walk(n) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}]
    return max(made) if made else None


def _parse(snap: Snapshot, name: str) -> ast.Module | None:
    try:
        return ast.parse(snap.read_text(name) or "")
    except (SyntaxError, ValueError):
        return None


def _imported_names(tree: ast.Module, files: set[str]) -> dict[str, tuple[str, str | None]]:
    """name -> (submission file, function or None for a module), for imports of the other stage modules."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.module and f"{node.module}.py" in files:  # from .masking import attention
                out.update({a.asname or a.name: (f"{node.module}.py", a.name) for a in node.names})
            elif node.level and not node.module:  # from . import masking
                out.update({a.asname or a.name: (f"{a.name}.py", None) for a in node.names if f"{a.name}.py" in files})
        elif isinstance(node, ast.Import):
            out.update({a.asname or a.name: (f"{a.name}.py", None) for a in node.names if f"{a.name}.py" in files})
    return out


def reached_files(snap: Snapshot, file: str, function: str | None) -> set[str]:
    """The submission files whose code `file:function` can run (function None: the whole file), following
    the names it uses into the same file's functions and the other stage modules it imports."""
    files, seen, todo = set(SUBMISSION_FILES), set(), [(file, function)]
    trees: dict[str, ast.Module | None] = {}
    while todo:
        item = todo.pop()
        if item in seen:
            continue
        seen.add(item)
        name, func = item
        if name not in trees:
            trees[name] = _parse(snap, name)
        tree = trees[name]
        if tree is None:
            continue
        imported = _imported_names(tree, files)
        defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        body = tree if func is None or func not in defs else defs[func]
        used = {n.id for n in ast.walk(body) if isinstance(n, ast.Name)}
        used |= {n.value.id for n in ast.walk(body) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
        for u in used:
            if u in imported:
                todo.append(imported[u])
            elif u in defs and u != func:
                todo.append((name, u))
    return {name for name, _ in seen}


RANDOM_SOURCES = r"default_rng|RandomState|Generator\(|manual_seed|np\.random\.seed"  # what a seed is for


def function_node(tree: ast.AST, name: str) -> ast.FunctionDef | None:
    """The def of `name`: a function, or `Class.method` (the method inside that class)."""
    owner, _, name = name.rpartition(".")
    if owner:
        tree = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == owner), None)
        if tree is None:
            return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def unread_parameter(snap: Snapshot, name: str, function: str, said: str) -> tuple[str, int] | None:
    """(parameter, line) for a parameter of `function` (top-level, or `Class.method`) in file `name` that its body
    never reads, when `said` (the failing check's words) names it: the line is the one body line that makes what
    the parameter is about (a call whose name holds the parameter's, `causal_mask(n)` for `causal`; a random
    generator for `seed`), else the parameter's own line. None where every parameter named is read."""
    tree = _parse(snap, name)
    node = function_node(tree, function) if tree else None
    if node is None:
        return None
    read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    params = [a for a in node.args.args + node.args.kwonlyargs if a.arg not in ("self", "cls")]
    for a in params:
        if a.arg in read or not re.search(rf"\b{re.escape(a.arg)}\b", said):
            continue
        lines = (snap.read_text(name) or "").splitlines()
        docstring = isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
        start = (node.body[0].end_lineno or node.body[0].lineno) + 1 if docstring else node.body[0].lineno
        body = range(start, (node.end_lineno or node.body[-1].lineno) + 1)
        about = RANDOM_SOURCES if a.arg == "seed" else rf"\w*{re.escape(a.arg)}\w*\("
        hits = [i for i in body if re.search(about, lines[i - 1].split("#")[0])]
        return a.arg, hits[0] if len(hits) == 1 else a.lineno
    return None
