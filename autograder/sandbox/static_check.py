"""What a stage module may use, checked on its source before any of it runs.

The stage modules compute attention: they need numpy, torch, math, typing and each other (plus a few
pure helpers of the standard library, such as dataclasses). Whatever could reach the grader that
measures them, the files of the machine or the interpreter's insides is refused, with the line and
the rule: other imports (os, sys, importlib, inspect, gc, ctypes, threading, tracemalloc, ...),
the builtins that open files or run strings as code, frame and dunder attributes that lead out of
the module, and the file and extension corners of numpy and torch. The rule is the student README's
"What your code may use" (RULE below, word for word). Whoever starts the grader (never the code it
grades: children inherit no such variable, and the check runs in the parent) can switch it off with
ATTN_STATIC_CHECK=off, which the tests do to prove the sandbox beneath it holds on its own.
"""
import ast
import functools
import os
import threading
from dataclasses import dataclass

from .. import messages as say
from ..child.guard import ALLOWED_MODULES
from ..child.guard import RULE as _RULE

# the same rule the run-time guard enforces (autograder/child/guard.py), and when each side applies it
RULE = _RULE + say.RULE_WHEN
# the builtins the rule names (files, strings run as code, globals and frames), refused where a name refers to the
# builtin itself: a parameter or a local called `vars` or `input` is the module's own name, not the builtin
REFUSED_NAMES = {"eval", "exec", "compile", "__import__", "open", "globals", "locals", "vars", "breakpoint",
                 "__builtins__", "__loader__", "__spec__"}
# attributes, on any object: numpy's and torch's file, process and extension parts, frames, code objects
REFUSED_ATTRIBUTES = {
    "tofile", "fromfile", "dump", "dumps", "save", "savez", "savez_compressed", "savetxt", "load", "loadtxt",
    "genfromtxt", "fromregex", "memmap", "open_memmap", "ctypes", "ctypeslib", "f2py", "DataSource", "npyio",
    "from_file", "hub", "multiprocessing", "cpp_extension", "load_library", "_C", "classes", "library", "package",
    "distributed", "serialization", "storage", "untyped_storage", "data_ptr", "gi_frame", "gi_code", "cr_frame",
    "ag_frame", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next", "co_code",
    # the machinery the grader measures with: torch's function and dispatch modes, its FLOP counter
    "overrides", "_python_dispatch", "_pop_mode_temporarily", "_get_current_function_mode", "flop_counter",
    "_disable_current_modes", "_C"}
ALLOWED_DUNDERS = {"__init__", "__call__", "__name__", "__class__", "__len__", "__repr__", "__str__", "__doc__",
                   "__getitem__", "__setitem__", "__iter__", "__next__", "__enter__", "__exit__", "__post_init__",
                   "__qualname__", "__module__", "__annotations__"}
ATTRIBUTE_BUILTINS = {"getattr", "setattr", "delattr", "hasattr"}


@dataclass(frozen=True)
class Refusal:
    line: int
    what: str  # e.g. "import os"

    def __str__(self) -> str:
        return say.REFUSED_LINE.format(line=self.line, what=self.what)


def _module_allowed(name: str, own: set[str]) -> bool:
    top = name.split(".")[0]
    if top in own:
        return True
    if top not in ALLOWED_MODULES:
        return False
    return not (set(name.split(".")[1:]) & REFUSED_ATTRIBUTES)


def _relative_hint(module: str, own: set[str]) -> str:
    """For an import of a stage module through the folder's name (`from exercises.softmax import softmax`, which
    the grader's copy of the folder does not have): how to write it so that it works there too."""
    parts = module.split(".")
    stage = next((p for p in parts[1:] if p in own), None)
    return say.REFUSED_RELATIVE.format(stage=stage) if stage else ""


def _once_per_file(compute):
    """`compute(source, own)` once per process for each distinct file: every child of a grade, and every
    measurement, reads the same bytes, often at the same moment (hence the lock). A long regrade forgets
    them past 4,096 files rather than grow without bound. What it returns is shared: callers never change it."""
    seen: dict = {}
    lock = threading.Lock()

    @functools.wraps(compute)
    def once(source: bytes | str, own: set[str]):
        key = (source, frozenset(own))
        with lock:
            if key not in seen:
                if len(seen) > 4096:
                    seen.clear()
                seen[key] = compute(source, own)
            return seen[key]
    return once


@_once_per_file
def syntax_error(source: bytes | str, own: set[str]) -> tuple[str, str, int | None] | None:
    """(type, message, line) of the SyntaxError a file's import would raise (or its IndentationError), or None where it parses."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(source)
    except SyntaxError as e:
        return type(e).__name__, e.msg, e.lineno
    except ValueError:  # null bytes: the import reports those itself
        return None
    return None


def refusals(source: bytes | str, own: set[str]) -> list[Refusal]:
    """What in `source` the rule refuses (empty: the module may run). `own` names the submission's
    modules (importable by name or relatively). A file that does not parse is left to the grader, which
    says where the syntax error is."""
    if os.environ.get("ATTN_STATIC_CHECK") == "off":  # the operator's switch, to test the sandbox beneath it
        return []
    return list(_refusals(source, own))


@_once_per_file
def _refusals(source: bytes | str, own: set[str]) -> tuple[Refusal, ...]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    found: list[Refusal] = []

    def refuse(node: ast.AST, what: str) -> None:
        found.append(Refusal(getattr(node, "lineno", 0), what))

    libraries = _library_names(tree)
    builtins_used = {id(n) for n in _builtin_uses(tree, REFUSED_NAMES)}
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else node.targets if isinstance(node, ast.Delete) else []
        for target in targets:
            root = _root_name(target) if isinstance(target, (ast.Attribute, ast.Subscript)) else None
            if root in libraries:  # np.allclose = ..., torch.Tensor.foo = ...: changing the libraries themselves
                refuse(node, say.REFUSED_LIBRARY_OWN.format(what=say.REFUSED_CHANGING.format(target=ast.unparse(target))))
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _module_allowed(alias.name, own):
                    refuse(node, f"import {alias.name}" + _relative_hint(alias.name, own))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from .masking import attention: the submission's own modules
                if node.module and node.module.split(".")[0] not in own:
                    statement = f"from {'.' * node.level}{node.module} import {', '.join(a.name for a in node.names)}"
                    refuse(node, say.REFUSED_NOT_STAGE.format(statement=statement, module=node.module.split(".")[0]))
                continue
            module = node.module or ""
            names = [f"{module}.{a.name}" for a in node.names]
            if not _module_allowed(module, own) or any(not _module_allowed(n, own) for n in names):
                refuse(node, f"from {module} import {', '.join(a.name for a in node.names)}" + _relative_hint(module, own))
        elif isinstance(node, ast.Name) and id(node) in builtins_used:
            refuse(node, f"{node.id}")
        elif isinstance(node, ast.Attribute):
            attr = node.attr
            on_self = isinstance(node.value, ast.Name) and node.value.id == "self"  # self.storage: the module's own
            if attr in REFUSED_ATTRIBUTES and not on_self:
                refuse(node, f".{attr}")
            elif attr.startswith("__") and attr.endswith("__") and attr not in ALLOWED_DUNDERS:
                refuse(node, f".{attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_BUILTINS:
            name = node.args[1] if len(node.args) > 1 else None
            if node.func.id in ("setattr", "delattr") and node.args and _root_name(node.args[0]) in libraries:
                refuse(node, say.REFUSED_LIBRARY_OWN.format(what=f"{node.func.id}() on {ast.unparse(node.args[0])}"))
            if isinstance(name, (ast.Name, ast.Attribute, ast.Subscript)):
                pass  # getattr(self, name): a name the code holds, e.g. looping over its own fields
            elif not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                refuse(node, say.REFUSED_BUILT_NAME.format(function=node.func.id))
            elif name.value in REFUSED_ATTRIBUTES or (name.value.startswith("__") and name.value not in ALLOWED_DUNDERS):
                refuse(node, f"{node.func.id}(..., {name.value!r})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "/proc/" in node.value:
            refuse(node, say.REFUSED_PROC)
    return tuple(sorted(found, key=lambda r: r.line))


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _own_nodes(scope: ast.AST):
    """The nodes of one scope: its body, down to (and including) nested defs, lambdas and classes, whose insides
    are their own scopes. A nested def's decorators and defaults are counted with it (a close enough reading)."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def _bound(scope: ast.AST) -> set[str]:
    """The names a scope binds: parameters, assignment and loop targets, imports, defs, `as` names."""
    names: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = scope.args
        names |= {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None}
    for node in _own_nodes(scope):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
    return names


def _builtin_uses(tree: ast.Module, wanted: set[str]) -> list[ast.Name]:
    """The uses of a name in `wanted` that no enclosing scope of the module binds: the builtin itself."""
    found: list[ast.Name] = []

    def visit(scope: ast.AST, outer: set[str]) -> None:
        known = outer | _bound(scope)
        for node in _own_nodes(scope):
            if isinstance(node, ast.Name) and node.id in wanted and node.id not in known:
                found.append(node)
            elif isinstance(node, _SCOPES):
                visit(node, known)

    visit(tree, set())
    return found


def _root_name(node: ast.AST) -> str | None:
    """The name an attribute or subscript chain starts from: `np` for np.linalg.norm, None for a call's result."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


@_once_per_file
def library_imports(source: bytes | str, own: set[str]) -> tuple[frozenset[str], frozenset[str]]:
    """(the modules of numpy and torch a source imports that the rule allows: `torch` itself (a numpy child has not
    loaded it), `torch.nn.attention.bias`, and for `from torch.nn import functional` also `torch.nn.functional`,
    which may be a module; the submission's own
    modules it imports, by name or relatively). Both empty where it does not parse. A grader loads the first ones
    in a child's start (sandbox.runner.Worker.preload_libraries): never one the rule refuses."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return frozenset(), frozenset()
    libraries, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or "", *(f"{node.module}.{a.name}" if node.module else a.name for a in node.names)]
        else:
            continue
        libraries |= {n for n in names if n.split(".")[0] in ("numpy", "torch") and _module_allowed(n, own)}
        modules |= {n.split(".")[0] for n in names if n.split(".")[0] in own}
    return frozenset(libraries), frozenset(modules)


def loaded_files(sources: dict[str, bytes], module: str) -> set[str]:
    """The submission files importing `module` loads: its own and every stage module it imports, directly or
    through another (by name or relatively), read from `sources` ({file name: bytes})."""
    own = {f.removesuffix(".py") for f in sources if f.endswith(".py")}
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen or name not in own:
            continue
        seen.add(name)
        todo.extend(library_imports(sources[name + ".py"], own)[1])
    return {name + ".py" for name in seen}


def _library_names(tree: ast.Module) -> set[str]:
    """The names a module binds to numpy, torch or the standard library: `np`, `F`, `nn`, `Tensor`, `math`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names |= {a.asname or a.name for a in node.names}
    return names


def describe(file: str, found: list[Refusal]) -> str:
    """The message for a refused file: where, what, and where the rule is written."""
    shown = "; ".join(str(r) for r in found[:3]) + (say.REFUSED_MORE.format(count=len(found) - 3) if len(found) > 3 else "")
    return say.REFUSED_FILE.format(file=file, shown=shown)


def vet(folder, files: list[str]) -> dict[str, str]:
    """Make a sandbox's copy of a submission safe to import, before any of it has been: files that are not
    stage modules are removed, and a refused module is replaced by one that raises ImportError with the
    reason. Returns {file: why} for what it changed."""
    from pathlib import Path

    own, changed = {f.removesuffix(".py") for f in files}, {}
    for path in sorted(Path(folder).glob("*.py")):
        if path.name not in files:
            path.unlink()
            changed[path.name] = say.NOT_A_STAGE_MODULE
            continue
        found = refusals(path.read_bytes(), own)
        if found:
            why = describe(path.name, found)
            # raised on the first refused line, so that a traceback (and the next step) points where it is
            path.write_text("\n" * (max(min(r.line for r in found), 1) - 1) + f"raise ImportError({why!r})\n")
            changed[path.name] = why
    return changed


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local names of imported modules and objects: {"F": "torch.nn.functional", "float32": "torch.float32"}."""
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _written(node: ast.expr, aliases: dict[str, str], constants: dict | None = None) -> str:
    """A default value as the contract writes it: a number, string or tuple by the repr of its value, however
    it is written (20_000, 2 * 10_000, 2 ** 6, int(64), a module constant N_PAIRS = 20_000: folded, never
    run), dotted names with their imports resolved (T.float32 or float32 -> torch.float32)."""
    try:
        return repr(_folded(node, constants or {}))
    except (ValueError, SyntaxError, TypeError, ArithmeticError, KeyError, RecursionError):
        text = ast.unparse(node)
    head, _, rest = text.partition(".")
    target = aliases.get(head) or (_dotted(constants[head]) if head in (constants or {}) else None)
    return target + ("." + rest if rest else "") if target else text


def _dotted(node: ast.expr) -> str | None:
    text = ast.unparse(node)
    return text if all(part.isidentifier() for part in text.split(".")) else None


_FOLD_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
             ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
             ast.Pow: lambda a, b: a ** b, ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b,
             ast.BitOr: lambda a, b: a | b, ast.BitAnd: lambda a, b: a & b, ast.BitXor: lambda a, b: a ^ b}
_INT_OPS = (ast.LShift, ast.RShift, ast.BitOr, ast.BitAnd, ast.BitXor)


def _folded(node: ast.expr, constants: dict, depth: int = 0):
    """The value of a constant expression, computed from the tree (nothing runs): literals, tuples, + - * / // %
    and small powers of numbers, int() and float() of one, and names of module constants (`constants`)."""
    if depth > 20:
        raise ValueError("too deep")
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.Tuple):
        return tuple(_folded(e, constants, depth + 1) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _folded(node.operand, constants, depth + 1)
        if not isinstance(value, (int, float)):
            raise TypeError("not a number")
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BinOp) and type(node.op) in _FOLD_OPS:
        a, b = _folded(node.left, constants, depth + 1), _folded(node.right, constants, depth + 1)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
            raise TypeError("not numbers")
        if isinstance(node.op, (ast.Pow, ast.LShift)) and abs(b) > 64:
            raise ValueError("too large")
        if isinstance(node.op, _INT_OPS) and not all(isinstance(x, int) for x in (a, b)):
            raise TypeError("not integers")
        return _FOLD_OPS[type(node.op)](a, b)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "float")
            and len(node.args) == 1 and not node.keywords and node.func.id not in constants):
        value = _folded(node.args[0], constants, depth + 1)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError("not a number")
        return int(value) if node.func.id == "int" else float(value)
    if isinstance(node, ast.Name) and node.id in constants:
        return _folded(constants[node.id], constants, depth + 1)
    raise ValueError(f"not a constant: {ast.unparse(node)}")


def _constants(tree: ast.Module) -> dict[str, ast.expr]:
    """The module's names bound once, at its top level, by a plain assignment (`N_PAIRS = 20_000`, `A = B = 64`,
    `A, B = 64, 64`), and never rebound (in another statement at the top level, by a `global`, an import or a
    def): their expressions."""
    bound: dict[str, list] = {}
    rebound: set[str] = set()

    def stored(node: ast.AST) -> set[str]:
        return {t.id for t in ast.walk(node) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}

    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    pairs = [(target.id, node.value)]
                elif (isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                      and len(target.elts) == len(node.value.elts) and all(isinstance(t, ast.Name) for t in target.elts)):
                    pairs = [(t.id, v) for t, v in zip(target.elts, node.value.elts)]
                else:
                    rebound |= stored(target)
                    continue
                for name, value in pairs:
                    bound.setdefault(name, []).append(value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            bound.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            rebound.add(node.name)
        else:  # an augmented assignment, a loop, a with, an if or try holding assignments
            rebound |= stored(node)
    for n in ast.walk(tree):
        if isinstance(n, ast.Global):
            rebound |= set(n.names)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            rebound |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return {name: values[0] for name, values in bound.items() if len(values) == 1 and name not in rebound}


# torch's own names for the same dtypes (torch.float is torch.float32): a default written either way is the same
DTYPE_ALIASES = {"torch.float": "torch.float32", "torch.double": "torch.float64", "torch.half": "torch.float16",
                 "torch.long": "torch.int64", "torch.int": "torch.int32", "torch.short": "torch.int16",
                 "torch.cfloat": "torch.complex64", "torch.cdouble": "torch.complex128", "torch.chalf": "torch.complex32"}


def readable_default(written: str) -> bool:
    """Whether a default as _written gives it is a value the grader read (a literal, or a dotted name such as
    torch.float32), rather than an expression it could not fold (a call, an unknown name)."""
    try:
        ast.literal_eval(written)
        return True
    except (ValueError, SyntaxError, TypeError):
        return written in DTYPE_ALIASES or written.startswith(("torch.", "numpy.", "np."))


def same_default(written: str, contract: str) -> bool:
    """Whether a default as the submission writes it (_written) gives a caller what the contract's does: 0 for a
    float 0.0, 10_000 or 1e4 for 10000.0, torch.float for torch.float32. An int the contract writes stays an int
    (20000.0 pairs cannot size an array)."""
    def value(text: str):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError):
            return DTYPE_ALIASES.get(text, text)

    got, want = value(written), value(contract)
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return float(got) == want
    return type(got) is type(want) and got == want


def source_defaults(source: bytes | str, name: str) -> dict[str, str] | None:
    """The default values of top-level function `name`, or of class `name`'s constructor (its __init__, or a
    dataclass's fields), read from the source: what a call without those arguments gets. None when the
    file does not define `name` with a def or class statement."""
    tree = ast.parse(source)
    aliases, constants = _aliases(tree), _constants(tree)
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
             and n.name == name]
    if not found:
        return None
    rebound = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import,
                                                      ast.ImportFrom))
               and name in {t.id for t in ast.walk(n) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
               | {(a.asname or a.name) for a in getattr(n, "names", [])}]
    if rebound:  # the name holds something else than the def at run time: its defaults are not these
        return None
    node = found[-1]  # as at run time: the last definition wins
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    seen: set[str] = set()
    while isinstance(node, ast.ClassDef) and node.name not in seen:  # an __init__ inherited from a class of this file
        seen.add(node.name)
        if any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in node.body) or len(node.bases) != 1:
            break
        base = node.bases[0]
        if not (isinstance(base, ast.Name) and base.id in classes) or any(
                isinstance(n, ast.AnnAssign) and n.value is not None for n in node.body):
            break
        node = classes[base.id]
    if isinstance(node, ast.ClassDef):
        init = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
        if not init:  # a dataclass: its annotated fields with values
            return {n.target.id: _written(n.value, aliases, constants) for n in node.body
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None}
        node = init[-1]
    args = node.args
    positional = args.posonlyargs + args.args
    out = {a.arg: _written(d, aliases, constants)
           for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults)}
    out.update({a.arg: _written(d, aliases, constants) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return out
