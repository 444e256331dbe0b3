"""The shape of the kit: parts as folders, no import cycle, boundaries that hold, and a new stage
that needs only its stage module, its solution module and its reference function."""
import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, copy_repo

from autograder.stages import STAGES

GRADER = ROOT / "autograder"
PARTS = ("stages", "child", "evidence", "feedback", "sandbox", "report", "grade", "instructor", "capstone")


def modules(folder: Path, package: str) -> list[str]:
    out = []
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).with_suffix("")
        parts = [package, *rel.parts]
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] != "__main__":
            out.append(".".join(parts))
    return out


ALL = modules(GRADER, "autograder") + modules(ROOT / "attn_ref", "attn_ref")


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_every_module_imports_first_in_a_fresh_interpreter():
    """Any module imported before all others works: no import cycle hides behind an import order."""
    script = (
        "import importlib, json, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "bad = {}\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    for m in [m for m in sys.modules if m.split('.')[0] in ('autograder', 'attn_ref')]:\n"
        "        del sys.modules[m]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        bad[name] = repr(e)\n"
        "print(json.dumps(bad))\n"
    )
    for order in (ALL, ALL[::-1]):
        p = subprocess.run([sys.executable, "-c", script, json.dumps(order)], capture_output=True, text=True,
                           timeout=300, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout.splitlines()[-1]) == {}


def _package_imports(path: Path, package: str) -> set[str]:
    """Absolute names of the package's modules that `path` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    rel_parts = path.relative_to(ROOT).with_suffix("").parts
    pkg_parts = list(rel_parts[:-1])
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[: len(pkg_parts) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {n for n in found if n.split(".")[0] == package}


def test_outcomes_is_a_leaf():
    assert _package_imports(GRADER / "outcomes.py", "autograder") == set()
    # declarations reads the kit-wide rule sentences from messages, the leaf of the kit-wide text
    assert _package_imports(GRADER / "declarations.py", "autograder") <= {"autograder.messages"}
    assert _package_imports(GRADER / "messages.py", "autograder") == set()


def test_child_sees_only_child():
    """The sandbox copies autograder/child/ alone: nothing there may import the rest of the grader."""
    for path in (GRADER / "child").glob("*.py"):
        outside = {n for n in _package_imports(path, "autograder") if not n.startswith("autograder.child")}
        assert not outside, (path.name, outside)


def test_stage_checks_do_not_reach_into_the_sandbox():
    for path in (GRADER / "stages").glob("*.py"):
        names = _package_imports(path, "autograder")
        assert not names & {"autograder.sandbox.runner", "autograder.sandbox.launchers", "autograder.grade"}, (path.name, names)


def test_the_top_level_holds_only_entry_points_and_the_core():
    """At most 9 modules beside the parts' folders (the package's __init__ and __main__ aside): the entry points
    (cli, watch, notebook_cells) and the core (declarations, outcomes, results, api, submission). DESIGN.md
    says 8; issue 43's one-way imports moved notebook_cells out of report/ (it runs a grade) and submission out
    of sandbox/ (it reads the stages' files), and compare into evidence/; grade became a folder (the loop, its verdict rules)."""
    top = sorted(p.stem for p in GRADER.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(top) <= 9, top
    folders = {p.name for p in GRADER.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(PARTS), folders


def test_parts_are_folders_with_a_docstring():
    for part in PARTS:
        init = GRADER / part / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.splitlines()[0]) > 20, part
    assert not (GRADER / "checks").exists()


def test_attn_ref_and_solutions_stay_independent():
    for path in (ROOT / "attn_ref").glob("*.py"):
        names = {n.split(".")[0] for n in _package_imports(path, "autograder") | _package_imports(path, "solutions")}
        assert not names, path


# ---------------------------------------------------------------------------------------- toy --
# Two stages numbered after every declared one: a bonus stage, then a core stage numbered after it (the
# reports, the next step and the totals still treat it as core). Each is three files: its stage module
# (with a mistake, its evidence and mutant, and a probe), its solution and its reference (the bonus stage's
# mistake's evidence beside its reference, in attn_ref/toy.py).
TOY_N = max(s.number for s in STAGES) + 1
CORE_N = TOY_N + 1
TOY_STAGE = f'''"""A toy stage, added by the structure test: doubling an array."""
import numpy as np

from ..evidence.compare import check_close
from ..evidence.probes import same_array
from ..declarations import Edit, Function, Mistake, Probe, Stage

X = np.arange(6.0).reshape(2, 3)
STAGE = Stage(
    name="toy", number={TOY_N}, points=2, files=("toy.py",), bonus=True,
    functions=(Function(name="double", target="toy:double", reference="toy:double"),),
    intro="Double every entry.",
    hints=("Multiply by two.", "x * 2 keeps the shape."),
    mistakes=(Mistake(id="toy-triple", where="toy.py:double", explanation="the entries are tripled",
                      reread="the docstring of toy.py", evidence="mistakes:toy_tripled",
                      mutant=(Edit("toy.py", "np.asarray(x) * 2", "np.asarray(x) * 3"),)),),
    probes=(Probe(name="double", file="toy.py", function="double", args=(X,), expected=lambda r: r.double(X),
                  judge=same_array()),),
)


@STAGE.check(points=1, kind="reference", visibility="public")
def doubles_public(api, ctx):
    """doubles a fixed array"""
    x = np.arange(6.0).reshape(2, 3)
    check_close(api.double(x), ctx.ref.double(x), "double(x)", mistakes={{"toy-triple": ctx.mistakes.toy_tripled(x)}})


@STAGE.check(points=1, kind="reference")
def doubles_hidden(api, ctx):
    """doubles random arrays"""
    x = ctx.rng("toy").standard_normal((4, 5))
    check_close(api.double(x), ctx.ref.double(x), "double(x)", mistakes={{"toy-triple": 3 * x}})
'''
TOY_SOLUTION = '''"""Toy stage: double every entry of x (any shape)."""
import numpy as np


def double(x: np.ndarray) -> np.ndarray:
    """x -> 2 x, same shape."""
    # BEGIN SOLUTION
    return np.asarray(x) * 2
    # END SOLUTION
'''
TOY_REFERENCE = '''"""Reference of the toy stage, and its mistake's evidence beside it."""
import numpy as np


def double(x):
    return np.multiply(x, 2.0)


def toy_tripled(x):
    return np.multiply(x, 3.0)
'''

TOY_CORE_STAGE = f'''"""A toy core stage, added by the structure test: halving an array."""
import numpy as np

from ..evidence.compare import check_close, check_printed
from ..evidence.probes import same_array
from ..declarations import WORKED_RULE, Edit, Function, Mistake, Probe, Stage

X = np.arange(4.0)
STAGE = Stage(
    name="toy_core", number={CORE_N}, points=3, files=("toy_core.py",),
    reread="the docstring of toy_core.py",
    functions=(Function(name="halve", target="toy_core:halve", reference="toy_core:halve"),),
    intro="Halve every entry.",
    hints=("Divide by two.",),
    mistakes=(Mistake(id="toy-core-double", where="toy_core.py:halve", explanation="the entries are doubled",
                      reread="the docstring of toy_core.py", evidence="check:halves",
                      mutant=(Edit("toy_core.py", "np.asarray(x) / 2", "np.asarray(x) * 2"),)),),
    probes=(Probe(name="halve", file="toy_core.py", function="halve", args=(X,), expected=lambda r: r.halve(X),
                  judge=same_array()),),
)


@STAGE.check(points=1, kind="worked", visibility="public", cite="the docstring of toy_core.py", rule=WORKED_RULE)
def halves_one(api, ctx):
    """half of 1 is 0.5, as printed"""
    check_printed(api.halve(np.array([1.0])), np.array([0.5]), 1, "halve([1])")


@STAGE.check(points=2, kind="reference", visibility="public")
def halves(api, ctx):
    """halves a fixed array"""
    check_close(api.halve(X), ctx.ref.halve(X), "halve(x)", mistakes={{"toy-core-double": 2 * X}})
'''
TOY_CORE_SOLUTION = '''"""Toy core stage: halve every entry of x (any shape)."""
import numpy as np


def halve(x: np.ndarray) -> np.ndarray:
    """x -> x / 2, same shape."""
    # BEGIN SOLUTION
    return np.asarray(x) / 2
    # END SOLUTION
'''
TOY_CORE_REFERENCE = '''"""Reference of the toy core stage."""
import numpy as np


def halve(x):
    return np.multiply(x, 0.5)
'''
TOYS = {"autograder/stages/toy.py": TOY_STAGE, "solutions/toy.py": TOY_SOLUTION, "attn_ref/toy.py": TOY_REFERENCE,
        "autograder/stages/toy_core.py": TOY_CORE_STAGE, "solutions/toy_core.py": TOY_CORE_SOLUTION,
        "attn_ref/toy_core.py": TOY_CORE_REFERENCE}


@pytest.fixture(scope="module")
def toy_kit(tmp_path_factory):
    """A copy of the kit (tracked files) with a toy bonus stage and a toy core stage added, three new files each."""
    kit = copy_repo(tmp_path_factory.mktemp("kit") / "kit")
    for name, text in TOYS.items():
        assert not (kit / name).exists(), f"the kit has its own {name} now: give this test's toy stage another name"
        (kit / name).write_text(text)
    return kit


def _make(kit: Path, *args: str) -> str:
    """`make ARGS` in the copy, with this checkout's virtual environment (set up by `make test`)."""
    venv = ROOT / ".venv"
    if not (venv / ".instructor").exists():
        pytest.skip("needs the .venv that `make test` sets up")
    p = subprocess.run(["make", "-s", f"VENV={venv}", *args], cwd=kit, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "NO_COLOR": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.mark.slow
def test_a_new_stage_is_three_files_and_every_build_picks_it_up(toy_kit):
    kit = toy_kit
    _make(kit, "exercises")
    stub = (kit / "exercises" / "toy.py").read_text()
    assert 'raise NotImplementedError("toy: write this part of double")' in stub and "np.asarray(x) * 2" not in stub

    out = _make(kit, "grade", "SUBMISSION=solutions", "STAGE=toy")
    assert f"{TOY_N}  toy" in out and "2/2  passed" in out
    out = _make(kit, "grade", "STAGE=toy")
    assert "not started" in out and "exercises/toy.py:" in out
    mutant = kit / "mutant"
    shutil.copytree(kit / "solutions", mutant)
    (mutant / "toy.py").write_text(TOY_SOLUTION.replace("* 2", "* 3"))
    out = _make(kit, "grade", "SUBMISSION=mutant", "STAGE=toy")
    assert "Diagnosis toy-triple: the entries are tripled" in out
    for rung in (1, 2, 3):  # its own ladder first (autograder/feedback/hint_ladders.py), then the stage's
        assert (f"Hint {rung}/3 for stage {TOY_N} (toy), about the mistake your last run named, toy-triple"
                in _make(kit, "hint", "STAGE=toy"))
    assert f"Hint 1/2 for stage {TOY_N} (toy)" in _make(kit, "hint", "STAGE=toy")

    _make(kit, "release")
    student = kit / "dist" / "student"
    assert (student / "exercises" / "toy.py").is_file() and not (student / "attn_ref").exists()
    shutil.copy2(kit / "solutions" / "toy.py", student / "exercises" / "toy.py")
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", "--stage", "toy"], cwd=student,
                       capture_output=True, text=True, timeout=300)
    # the hidden check runs as its twin and keeps its points, marked as a twin in the total
    assert p.returncode == 0 and "2/2  passed" in p.stdout and "(2/2 checks)" in p.stdout, p.stdout + p.stderr
    assert "1 of these points are twins" in p.stdout, p.stdout

    _make(kit, "autograder")
    with zipfile.ZipFile(kit / "dist" / "autograder.zip") as z:
        assert {"autograder/stages/toy.py", "attn_ref/toy.py"} <= set(z.namelist())
    # the zip's run_autograder as gradescope-local runs it, in this checkout's environment: the toy stage is in
    # the zip's files, whichever environment grades them (test_setup_builds builds the one setup.sh makes)
    results = json.loads(Path(_in_kit(kit, "import sys; from autograder.instructor.build import gradescope_local\n"
                                           "out = str(gradescope_local('solutions', python=sys.executable))")).read_text())
    toy = [t for t in results["tests"] if t["extra_data"]["stage"] == "toy"]
    # a bonus stage under the default policy ("apart"): its tests pass, worth 0 in the score; its points are apart
    assert [t["status"] for t in toy] == ["passed", "passed"] and results["extra_data"]["stages"]["toy"]["score"] == 2

    nb, ot = _in_kit(kit, "from autograder.instructor.notebooks import build_notebook, otter_master\n"
                          "nb, ot = build_notebook(), otter_master('attention_kit.whl')\n"
                          "out = [[c['source'] for c in nb['cells']], [c['source'] for c in ot['cells']]]")
    assert any(s.startswith(f"## Stage {TOY_N}: toy\n\nDouble every entry.") for s in nb)
    assert any(s.startswith("%%writefile submission/toy.py") for s in nb)
    assert any("check_passed('toy', 'doubles_hidden')" in s for s in ot)


def _in_kit(kit: Path, code: str):
    """`out` as `code` (run in a fresh interpreter in the copy) leaves it, through JSON."""
    p = subprocess.run([sys.executable, "-c", f"import json, sys; sys.path.insert(0, '.')\n{code}\nprint(json.dumps(out))"],
                       cwd=kit, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(p.stdout)


def _declared(kit: Path) -> dict:
    """The kit's own totals and tables, computed in the copy (where the toy stages are declared)."""
    found = _in_kit(kit, "from autograder.stages import BONUS_POINTS, CORE_POINTS\n"
                         "from autograder.instructor.tables import readme_table, student_table, student_totals\n"
                         "out = [CORE_POINTS, BONUS_POINTS, readme_table(), student_table(), student_totals()]")
    return dict(zip(["core", "bonus", "readme", "student", "totals"], found))


@pytest.mark.slow
def test_the_toy_stages_reach_totals_tables_and_the_next_step(toy_kit):
    """Both toy stages count where they belong (the core one in the core total, though numbered after the
    bonus stages), both READMEs' tables list them, and an unstarted core stage is the next step."""
    kit, ours = toy_kit, _declared(ROOT)
    found = _declared(kit)
    assert (found["core"], found["bonus"]) == (ours["core"] + 3, ours["bonus"] + 2)
    assert f"| {CORE_N} | toy_core | `toy_core.py` | 3 | the docstring of toy_core.py |" in found["readme"]
    assert f"| {TOY_N} | toy (bonus) | `toy.py` | 2 |" in found["readme"]
    assert f"from the {found['core']} core points" in found["readme"]
    _make(kit, "readme")
    readme = (kit / "README.md").read_text()
    assert found["readme"] in readme and ours["readme"] not in readme
    _make(kit, "release")
    student = (kit / "dist" / "student" / "README.md").read_text()
    assert f"| {CORE_N} | toy_core | `toy_core.py` | 3 |" in student and f"| {TOY_N} | toy (bonus) | `toy.py` | 2 |" in student
    assert found["totals"] in student and f"make {found['core']} points" in student

    _make(kit, "exercises")
    out = _make(kit, "grade", "SUBMISSION=solutions")
    assert f"total {found['core']:g}/{found['core']:g}" in " ".join(out.split())
    assert out.index(f"{CORE_N}  toy_core") < out.index("bonus stages") < out.index(f"{TOY_N}  toy")
    unstarted = kit / "unstarted"
    shutil.copytree(kit / "solutions", unstarted)
    shutil.copy2(kit / "exercises" / "toy_core.py", unstarted / "toy_core.py")
    out = _make(kit, "grade", "SUBMISSION=unstarted")
    assert f"Next step: start stage {CORE_N} (toy_core): open unstarted/toy_core.py:" in out, out


# ------------------------------------------------------------------------------- a class-based toy --
# A stateful stage is three files too: its checks call a class through a recorded script (construct, then method
# calls and attribute reads: autograder/child/scripts.py), which the wire carries; no driver of its own.
WINDOW_STAGE = f'''"""A class-based toy stage, added by the structure test: a window over the last vectors pushed."""
import numpy as np

from ..evidence.compare import check_close
from ..outcomes import Fail
from ..declarations import Edit, Function, Mistake, Stage

STAGE = Stage(
    name="window", number={CORE_N + 1}, points=2, files=("window.py",), bonus=True,
    functions=(Function(name="window", target="window:Window", reference="window:Window", script="numpy"),),
    intro="Keep the last vectors pushed.",
    hints=("Drop the oldest row once there are more than `size`.", "Slice the last `size` rows."),
    mistakes=(Mistake(id="window-keeps-all", where="window.py:Window.push", explanation="it never drops a row",
                      reread="the docstring of window.py", evidence="check:keeps_the_last",
                      mutant=(Edit("window.py", "self.rows[-self.size:]", "self.rows"),)),),
)


@STAGE.check(points=1, kind="reference", visibility="public")
def keeps_the_last(api, ctx):
    """push returns the last `size` vectors pushed, oldest first, and length counts them"""
    x = np.arange(15.0).reshape(5, 3)
    steps = [["call", "push", [row]] for row in x] + [["get", "length"]]
    got, want = api.window([3], steps), ctx.ref.window([3], steps)
    for i in range(len(x)):
        check_close(got[i], want[i], f"push of vector {{i + 1}} into Window(3)",
                    mistakes={{"window-keeps-all": x[:i + 1]}})
    if got[-1] != want[-1]:
        raise Fail(f"after 5 pushes into Window(3), length is {{got[-1]}}; expected {{want[-1]}}")


@STAGE.check(points=1, kind="reference", visibility="public")
def refuses_a_wrong_size(api, ctx):
    """push raises ValueError for a vector of another size, and the window goes on"""
    steps = [["call", "push", [np.ones(3)]], ["call?", "push", [np.ones(4)]], ["call", "push", [np.zeros(3)]]]
    got, want = api.window([2], steps), ctx.ref.window([2], steps)
    if not isinstance(got[1], dict) or got[1].get("raised") != want[1]["raised"]:
        raise Fail(f"push of a vector of 4 into a window of vectors of 3 returned {{got[1]!r}}; expected ValueError")
    check_close(got[2], want[2], "push after the refused one")
'''
WINDOW_SOLUTION = '''"""Class-based toy stage: a window over the last `size` vectors pushed."""
import numpy as np


class Window:
    """Holds the last `size` vectors pushed; `length` counts them (at most `size`)."""

    def __init__(self, size: int) -> None:
        self.size, self.rows, self.length = size, [], 0

    def push(self, x: np.ndarray) -> np.ndarray:
        """Add x [d]; return the vectors held, oldest first [length, d]. A vector of another size than the first
        raises ValueError."""
        # BEGIN SOLUTION
        if self.rows and len(x) != len(self.rows[0]):
            raise ValueError("every vector has the first one's size")
        self.rows = self.rows + [np.asarray(x, dtype=float)]
        self.rows = self.rows[-self.size:]
        self.length = len(self.rows)
        return np.stack(self.rows)
        # END SOLUTION
'''
WINDOW_REFERENCE = '''"""Reference of the class-based toy stage."""
import numpy as np


class Window:
    def __init__(self, size):
        self.size, self.held = size, np.zeros((0, 0))

    @property
    def length(self):
        return len(self.held)

    def push(self, x):
        x = np.asarray(x, dtype=np.float64)[None, :]
        if len(self.held) and self.held.shape[1] != x.shape[1]:
            raise ValueError("wrong size")
        self.held = (np.concatenate([self.held, x]) if len(self.held) else x)[-self.size:]
        return self.held.copy()
'''


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_class_based_stage_is_three_files_with_no_driver(tmp_path):
    kit = copy_repo(tmp_path / "kit")
    for name, text in {"autograder/stages/window.py": WINDOW_STAGE, "solutions/window.py": WINDOW_SOLUTION,
                       "attn_ref/window.py": WINDOW_REFERENCE}.items():
        assert not (kit / name).exists(), f"the kit has its own {name} now: give this test's toy stage another name"
        (kit / name).write_text(text)

    def grade_in_kit(folder: Path) -> str:
        p = subprocess.run([sys.executable, "-m", "autograder", "grade", "--submission", str(folder), "--stage",
                            "window"], cwd=kit, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "NO_COLOR": "1"})
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout

    out = grade_in_kit(kit / "solutions")
    assert "2/2  passed" in out, out
    mutant = kit / "mutant"
    shutil.copytree(kit / "solutions", mutant)
    (mutant / "window.py").write_text(WINDOW_SOLUTION.replace("self.rows[-self.size:]", "self.rows"))
    out = grade_in_kit(mutant)
    assert "window-keeps-all" in out and "1/2" in out, out
    (mutant / "window.py").write_text(WINDOW_SOLUTION.replace("            raise ValueError(", "            print("))
    out = grade_in_kit(mutant)
    # the step after the one that should have raised fails at the student's own line, found through the script
    assert "x refuses_a_wrong_size" in out and "mutant/window.py:20" in out and "keeps_the_last" not in out, out


def test_no_test_file_imports_another():
    """Shared test helpers live in conftest.py: no test file (nor the bench) imports another test file."""
    found = []
    for path in [*sorted((ROOT / "tests").glob("*.py")), *sorted((ROOT / "bench").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names if n.startswith("test_")]
    assert not found, "move what they share to tests/conftest.py:\n" + "\n".join(found)


def test_every_test_file_but_a_channels_keeps_a_test_in_test_fast():
    """The tiers (CONTRIBUTING.md): a file marked slow at its top is a channel's; any other keeps at least one test
    without the slow marker, so `make test-fast` still reaches every part the file covers."""
    import ast

    bare = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark"
                                                                          for t in n.targets)]
        if any("slow" in ast.unparse(n.value) for n in top):
            continue
        tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
        if tests and all(any("slow" in ast.unparse(d) for d in n.decorator_list) for n in tests):
            bare.append(path.name)
    assert not bare, f"every test of these is slow: mark the file (pytestmark) or keep one fast: {bare}"
