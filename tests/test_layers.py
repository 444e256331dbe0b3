"""Issue 43: imports run one way. The layer order is written once, in CONTRIBUTING.md ("Layers"); this test reads
every import of the grader (at the top of a module or inside a function alike) and fails on one that runs up a
layer. RUNNING_UP would list one allowed for a while, with why; each listed must still exist, so it only shrinks."""
import ast
import re

from conftest import ROOT

PACKAGE = ROOT / "autograder"
GUIDE = ROOT / "CONTRIBUTING.md"
# imports that still run up a layer, found when this test was written: (from, to, where) -> why it is left
RUNNING_UP: dict = {}  # none left: the last three (sandbox -> stages twice, report -> grade) were removed


def layers() -> dict[str, int]:
    """{part: its layer, 0 the lowest} from CONTRIBUTING.md's Layers block: one line per layer, lowest first."""
    text = GUIDE.read_text()
    block = re.search(r"## Layers\n.*?```\n(.*?)```", text, re.S)
    assert block, "CONTRIBUTING.md has no Layers block"
    order = {}
    for i, line in enumerate(l for l in block.group(1).splitlines() if l.strip()):
        for part in line.split("#")[0].split():
            order[part.strip(",")] = i
    return order


def part_of(module: list[str]) -> str:
    """`autograder.stages.fused` -> stages; `autograder.grade` -> grade; `autograder` -> autograder."""
    return module[1] if len(module) > 1 else "autograder"


def imports(package=PACKAGE, lines: bool = False) -> list[tuple]:
    """(importing part, imported part, file) for every import of one part of the grader by another (with `lines`,
    also the line and what it names). Seen: `import`, `from ... import` (relative or absolute, a part named as a
    name of the package too: `from autograder import feedback`), and `importlib.import_module` or `__import__`
    called with a constant name."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent)
        module = list(rel.with_suffix("").parts)
        here = module[:-1] if module[-1] == "__init__" else module
        base = module[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    up = base[:len(base) - (node.level - 1)]
                    target = up + (node.module.split(".") if node.module else [])
                else:
                    target = (node.module or "").split(".")
                if target[0] == "autograder":  # a name imported from the package itself may be a part
                    targets = [target + [a.name] if len(target) == 1 else target for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name.split(".") for a in node.names if a.name.split(".")[0] == "autograder"]
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str) and node.args[0].value.startswith("autograder.") \
                    and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__"):
                targets = [node.args[0].value.split(".")]
            for t in targets:
                if len(t) > 1 and not ((package / t[1]).is_dir() or (package / f"{t[1]}.py").exists()):
                    t = t[:1]  # a name of the package itself (`from .. import KIT_VERSION`)
                if part_of(t) != part_of(here):
                    where = (part_of(here), part_of(t), str(rel.relative_to("autograder")))
                    found.append((*where, node.lineno, ".".join(t)) if lines else where)
    return found


def test_every_part_has_a_layer():
    order = layers()
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert parts | {"autograder"} <= set(order), sorted(parts - set(order))


def test_no_import_runs_up_a_layer():
    order = layers()
    up = {(a, b, f) for a, b, f in imports() if order[b] > order[a]}
    said = [f"{f}:{n} imports {what}: {a} is on layer {order[a]}, {b} on {order[b]} (CONTRIBUTING.md, Layers: move "
            f"what it needs down, or have the caller hand it in)" for a, b, f, n, what in imports(lines=True)
            if (a, b, f) in up - set(RUNNING_UP)]
    assert not said, "\n".join(said)
    assert set(RUNNING_UP) - up == set(), f"fixed: strike these from RUNNING_UP {sorted(set(RUNNING_UP) - up)}"


def test_the_test_sees_an_import_that_runs_up(tmp_path):
    """The reading above can fail: a stage importing the feedback inside a function (the circle this issue broke)
    is seen, and so are `from .. import feedback`, `from autograder import feedback` and an import by a constant
    name."""
    fake = tmp_path / "autograder"
    for part in ("stages", "feedback"):
        (fake / part).mkdir(parents=True)
        (fake / part / "__init__.py").write_text("")
    (fake / "stages" / "x.py").write_text("def f():\n    from ..feedback.advice import next_step\n")
    (fake / "stages" / "y.py").write_text("from .. import feedback\nfrom . import common\n")
    # found by a stranger maintainer: three ways the first version of this test did not see
    (fake / "stages" / "z.py").write_text("from autograder import feedback\n")
    (fake / "stages" / "w.py").write_text("import importlib\n\n\ndef f():\n"
                                          "    return importlib.import_module('autograder.feedback.relations')\n")
    (fake / "stages" / "v.py").write_text("def f():\n    return __import__('autograder.feedback.steps')\n")
    found = imports(fake)
    assert {("stages", "feedback", f"stages/{n}.py") for n in "xyzwv"} <= set(found)
    assert not any(f == "stages/y.py" and b == "stages" for _, b, f in found)
    assert layers()["feedback"] > layers()["stages"]
