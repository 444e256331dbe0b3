"""Build the nbgrader course directory from solutions/ (`make nbgrader`).

    python -m autograder.instructor.notebooks nbgrader [--out dist/nbgrader]
    python -m autograder.instructor.notebooks otter [--out dist/otter]

One assignment, `attention`, one notebook: per stage (the four bonus stages included) an explanation, solution cells that
write the stage's module (`%%writefile submission/<file>`) with nbgrader's solution markers, and
a locked test cell worth the stage's points that calls autograder.notebook_cells.grade_stage: public
checks in the student version, hidden ones between nbgrader's hidden-test markers.

The bonus policy (`BONUS=apart|folded`, as for Gradescope and Classroom) decides what the bonus stages are
worth: folded, their points, as every other stage; apart, nothing in the notebook's total (nbgrader's test
cell is worth 0 and prints the bonus score instead of returning it; otter's test cases are worth 0), so
each edition's total is the score Gradescope and Classroom give.
"""
import argparse
import ast
import json
import re
import sys
from pathlib import Path

from .. import KIT_VERSION
from ..report.gradescope_json import BONUS_POLICIES, DEFAULT_BONUS_POLICY
from ..stages import CHECKS, STAGES, SUBMISSION_FILES

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "attention"


def _imports(filename: str) -> list[str]:
    """The submission modules that solutions/<filename> imports (`from .kv_cache import ...`)."""
    tree = ast.parse((ROOT / "solutions" / filename).read_text())
    found = [f"{n.module}.py" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module]
    return [f for f in found if f in SUBMISSION_FILES]


def notebook_files() -> dict[str, list[str]]:
    """Which files each stage's cells write: a file at the first stage declaring it, after the files it
    imports (module.py imports kv_cache.py and fused.py, so stage 6 writes all four)."""
    written: set[str] = set()
    out: dict[str, list[str]] = {}

    def add(filename: str, cells: list[str]) -> None:
        if filename in written:
            return
        written.add(filename)
        for dep in _imports(filename):
            add(dep, cells)
        cells.append(filename)

    for s in STAGES:
        out[s.name] = []
        for f in s.files:
            add(f, out[s.name])
    return out


def nb_markers(source: str) -> str:
    source = re.sub(r"# BEGIN SOLUTION(?: stage=\w+)?", "### BEGIN SOLUTION", source)
    return source.replace("# END SOLUTION", "### END SOLUTION")


def _cell(kind: str, source: str, meta: dict | None = None) -> dict:
    cell = {"id": meta["grade_id"].replace("_", "-"), "cell_type": kind,
            "metadata": {"nbgrader": {"schema_version": 3, **meta}}, "source": source}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def counted(stage, bonus_policy: str) -> bool:
    """Whether `stage`'s points count in a notebook's total under `bonus_policy` (BONUS_POLICIES)."""
    if bonus_policy not in BONUS_POLICIES:
        raise ValueError(f"bonus policy {bonus_policy!r}: one of {', '.join(BONUS_POLICIES)}")
    return bonus_policy == "folded" or not stage.bonus


APART = ("\n\nA bonus stage: it is graded, and its score shown, apart from the core points; it adds nothing to "
         "this notebook's total.")


def kit_check(fix: str) -> str:
    """Code that opens the first test cell: where this kernel lacks the kit's grader, or has another version of
    it, one sentence naming `fix` (on the cell's output and the grading tool's terminal) and the kernel ends,
    so the tool writes no grade at all (never a silent 0: nbgrader and otter grade a raising cell as 0 and
    go on)."""
    return ("import importlib.util as _u, os as _os\n"
            f"_want = {KIT_VERSION!r}\n"
            "_have = getattr(__import__('autograder'), 'KIT_VERSION', 'another') if _u.find_spec('autograder') else None\n"
            "if _have != _want:\n"
            "    _why = ('this kernel has no autograder (the kit\\'s grader)' if _have is None else\n"
            "            f'this kernel has version {_have} of the kit\\'s grader, not {_want}')\n"
            f"    _say = 'grading stopped: ' + _why + '; ' + {fix + ', then grade again.'!r} + '\\n'\n"
            "    print(_say, end='', flush=True)\n"
            "    _os.write(2, _say.encode())\n"
            "    _os._exit(1)\n")


NBGRADER_FIX = ("install the kit's wheel into the grading environment from the course folder "
                "(pip install -r requirements.txt, which names ./{wheel})")
OTTER_FIX = "install files/{wheel} from the autograder zip (pip install files/{wheel})"


def build_notebook(bonus_policy: str = DEFAULT_BONUS_POLICY, wheel: str = "") -> dict:
    cells = [_cell("markdown", "# Attention, stage by stage\n\nFill in each stage's code where it says so, then "
                   "run its test cell. The numbers checked come from Article A (\"Attention from First Principles: "
                   "One Complete Calculation\") and Article B (\"Transformer attention from first principles\"). "
                   "Mask convention: boolean, True = may attend.",
                   {"grade": False, "solution": False, "locked": True, "grade_id": "intro"}),
             _cell("code", "import os\nos.makedirs('submission', exist_ok=True)\nopen('submission/__init__.py', 'w').close()",
                   {"grade": False, "solution": False, "locked": True, "grade_id": "setup"})]
    files = notebook_files()
    for s in STAGES:
        worth = counted(s, bonus_policy)
        check = kit_check(NBGRADER_FIX.format(wheel=wheel or "attention_kit-*.whl")) if s == STAGES[0] else ""
        cells.append(_cell("markdown", f"## Stage {s.number}: {s.name}\n\n{s.intro}" + ("" if worth else APART),
                           {"grade": False, "solution": False, "locked": True, "grade_id": f"about_{s.name}"}))
        for f in files[s.name]:
            src = (ROOT / "solutions" / f).read_text()
            cells.append(_cell("code", f"%%writefile submission/{f}\n" + nb_markers(src).rstrip() + "\n",
                               {"grade": False, "solution": True, "locked": False,
                                "grade_id": f"{s.name}_{f.removesuffix('.py')}"}))
        # one grade per cell: the hidden-test block only switches the hidden checks on, so the student's
        # copy (where nbgrader removed it) grades the public checks, and autograding grades once with both
        test = (check + "from autograder.notebook_cells import grade_stage\n"
                "hidden = False\n"
                "### BEGIN HIDDEN TESTS\n"
                "hidden = True\n"
                "### END HIDDEN TESTS\n"
                f"score = grade_stage({s.name!r}, hidden=hidden)\n"
                # the cell's value is its partial credit; a cell worth 0 must return none (nbgrader refuses more)
                + ("score" if worth else f"print(f'bonus, apart from the core points: {{score:g}}/{s.points}')"))
        cells.append(_cell("code", test, {"grade": True, "solution": False, "locked": True,
                                          "points": s.points if worth else 0, "grade_id": f"test_{s.name}"}))
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                        "name": "python3"},
                                         "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}


CONFIG = """\
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "attention-kit"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
c.ExecutePreprocessor.timeout = 600
c.Execute.timeout = 600
"""


COURSE_README = """\
# The attention course for nbgrader

The notebook's test cells import the kit's grader (`autograder`), so the Python that runs nbgrader
(and its kernel) must have the kit installed: without it (or with another version) the first test cell
says which wheel to install and ends the kernel, so autograde records no grade. From this folder:

```sh
python3 -m venv .venv
.venv/bin/pip install -r requirements.txt   # nbgrader, ipykernel, numpy, CPU torch and the kit ({wheel})
.venv/bin/nbgrader db assignment add attention
.venv/bin/nbgrader generate_assignment attention
.venv/bin/nbgrader autograde attention      # after collecting submitted/<student>/attention/attention.ipynb
.venv/bin/nbgrader generate_feedback attention
.venv/bin/nbgrader export                   # grades.csv
```

The wheel holds the hidden checks and the reference: it is for grading, never for students. Students
install the student repo's grader instead (`make release` writes it; from that folder,
`pip install .`), whose public checks answer from recorded fixtures. Each test cell grades its stage
once: in the students' copy on the public checks, at autograding with the hidden checks too.

`nbgrader autograde` warns "Attribute 'checksum' for cell test_<stage> has changed!" once for each test
cell, in every notebook: nbgrader records a test cell's checksum before it removes the hidden checks from
the students' copy, then compares it with the copy's (a known nbgrader bug, jupyter/nbgrader#1961). It
grades with the recorded cell, hidden checks included, so that warning changes nothing; the same warning
for any other cell means a student edited a cell they should not have. SQLAlchemy's "Object of type
<SubmittedAssignment> not in session" warnings come from nbgrader's own database code and change nothing either.

`requirements.txt` takes torch's CPU build from download.pytorch.org. Where that site cannot be reached (a
machine that sees only a package mirror), pip retries it for every package and the install takes many minutes:
remove the `--extra-index-url` line first, and pip takes torch from the mirror.
"""


def course_requirements(wheel: str) -> str:
    """The grading environment's requirements: nbgrader and the kernel at the instructor pins, numpy and
    psutil at the kit's, torch's CPU build, and the kit's wheel (a path relative to the course folder)."""
    from .build import requirement_pins

    pins = {**requirement_pins(), **requirement_pins(ROOT / "requirements-instructor.txt")}
    return (f"{pins['nbgrader']}\n{pins['ipykernel']}\n{pins['numpy']}\n{pins['psutil']}\n"
            f"--extra-index-url https://download.pytorch.org/whl/cpu\n{pins['torch']}\n./{wheel}\n")


COURSE_WORK = ("submitted", "autograded", "feedback")  # nbgrader's folders of students' work: a rebuild keeps out


def nbgrader_course(out: Path = ROOT / "dist" / "nbgrader", bonus_policy: str = DEFAULT_BONUS_POLICY) -> Path:
    """The course folder: nbgrader_config.py, source/attention/attention.ipynb, the kit's wheel, the
    grading environment's requirements.txt and a README saying how to install and run it."""
    from .build import fresh, kit_wheel

    out = fresh(out, keep=COURSE_WORK)  # a rebuild starts over: no gradebook, release or log of the last one
    (out / "source" / ASSIGNMENT).mkdir(parents=True)
    wheel = kit_wheel(out).name
    (out / "requirements.txt").write_text(course_requirements(wheel))
    (out / "README.md").write_text(COURSE_README.format(wheel=wheel))
    (out / "nbgrader_config.py").write_text(CONFIG)
    notebook = build_notebook(bonus_policy, wheel)
    (out / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_text(json.dumps(notebook, indent=1))
    return out


def _raw(text: str) -> dict:
    return {"cell_type": "raw", "metadata": {}, "source": text}


def _code(source: str, output: str | None = None) -> dict:
    outputs = [] if output is None else [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                                          "data": {"text/plain": output}}]
    return {"cell_type": "code", "metadata": {}, "execution_count": 1 if output else None, "outputs": outputs,
            "source": source}


def otter_master(wheel: str, bonus_policy: str = DEFAULT_BONUS_POLICY) -> dict:
    """The otter-assign master notebook: one question per stage, one test case per check,
    worth that check's points (public checks public, hidden checks hidden), so the partial credit
    is the same as `make grade`'s. `wheel` (the kit's, beside the notebook) goes into the autograder
    zip only, and its requirements install it: the zip grades on a machine that has nothing else. Under
    the `apart` bonus policy a bonus stage's test cases are worth 0 (they still run and say what fails)."""
    cells = [_raw("# ASSIGNMENT CONFIG\nname: attention\ngenerate:\n  pdf: false\ntests:\n  files: true\n  ok_format: true\n"
                  "export_cell: false\ncheck_all_cell: false\n"
                  f"requirements: {OTTER_REQUIREMENTS}\nautograder_files:\n- {wheel}\n"),
             {"cell_type": "markdown", "metadata": {}, "source": "# Attention, stage by stage\n\nFill in each stage, "
              "then run its tests (Article A: \"Attention from First Principles: One Complete Calculation\"; "
              "Article B: \"Transformer attention from first principles\"). Mask convention: True = may attend."},
             _code("import os\nos.makedirs('submission', exist_ok=True)\nopen('submission/__init__.py', 'w').close()")]
    files = notebook_files()
    for s in STAGES:
        stage_checks = [c for c in CHECKS if c.stage == s.name]
        worth = counted(s, bonus_policy)
        points = [c.points if worth else 0 for c in stage_checks]
        cells.append(_raw(f"# BEGIN QUESTION\nname: {s.name}\npoints: {json.dumps(points)}"))
        cells.append({"cell_type": "markdown", "metadata": {},
                      "source": f"## Stage {s.number}: {s.name}\n\n{s.intro}" + ("" if worth else APART)})
        if files[s.name]:
            cells.append(_raw("# BEGIN SOLUTION"))
            for f in files[s.name]:
                src = re.sub(r"# BEGIN SOLUTION stage=\w+", "# BEGIN SOLUTION", (ROOT / "solutions" / f).read_text())
                cells.append(_code(f"%%writefile submission/{f}\n" + src.rstrip() + "\n"))
            cells.append(_raw("# END SOLUTION"))
        cells.append(_raw("# BEGIN TESTS"))
        for c in stage_checks:
            head = "# HIDDEN\n" if c.visibility == "hidden" else ""
            head += kit_check(OTTER_FIX.format(wheel=wheel)) if s == STAGES[0] and c is stage_checks[0] else ""
            cells.append(_code(f"{head}from autograder.notebook_cells import check_passed\n"
                               f"check_passed({s.name!r}, {c.name!r})", "True"))
        cells.append(_raw("# END TESTS"))
        cells.append(_raw("# END QUESTION"))
    for i, cell in enumerate(cells):
        cell["id"] = f"cell-{i}"
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                        "name": "python3"}, "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


OTTER_REQUIREMENTS = "requirements.txt"


def otter_requirements(wheel: str) -> str:
    """The autograder environment's pip requirements (otter puts them in the zip's environment.yml):
    numpy, psutil and torch at the kit's pins (torch's CPU build: Gradescope has no GPU, and PyPI's Linux
    torch is the 2 GiB CUDA build), then the kit's wheel from the zip's files/ folder. The environment is
    made in the zip's folder (/autograder/source), so the wheel's path is relative to it."""
    from .build import requirement_pins

    pins = requirement_pins()
    return (f"{pins['numpy']}\n{pins['psutil']}\n--extra-index-url https://download.pytorch.org/whl/cpu\n"
            f"{pins['torch']}\n./files/{wheel}\n")


def otter_assign(out: Path = ROOT / "dist" / "otter", bonus_policy: str = DEFAULT_BONUS_POLICY) -> Path:
    """Write the kit's wheel, the requirements and the master notebook, and run `otter assign`:
    out/result/{student,autograder}, the autograder zip self-contained (see otter_requirements)."""
    import subprocess

    from .build import fresh, kit_wheel

    out = fresh(out)  # absolute (otter assign runs in `out`), and empty: nothing of the last build is left
    wheel = kit_wheel(out).name
    (out / OTTER_REQUIREMENTS).write_text(otter_requirements(wheel))
    master = out / "attention.ipynb"
    master.write_text(json.dumps(otter_master(wheel, bonus_policy), indent=1))
    otter = Path(sys.executable).with_name("otter")
    subprocess.run([str(otter), "assign", "--no-pdfs", "--no-run-tests", str(master), str(out / "result")],
                   check=True, cwd=out)
    return out / "result"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder.instructor.notebooks")
    sub = p.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("nbgrader")
    n.add_argument("--out", default=str(ROOT / "dist" / "nbgrader"))
    o = sub.add_parser("otter")
    o.add_argument("--out", default=str(ROOT / "dist" / "otter"))
    for q in (n, o):
        q.add_argument("--bonus", choices=BONUS_POLICIES, default=DEFAULT_BONUS_POLICY,
                       help="the bonus stages apart from the notebook's total, or counted in it (default: %(default)s)")
    args = p.parse_args(argv)
    from .build import NotABuild

    try:
        if args.cmd == "otter":
            print(f"wrote the otter-grader assignment to {otter_assign(Path(args.out), args.bonus)}")
        else:
            print(f"wrote the nbgrader course directory {nbgrader_course(Path(args.out), args.bonus)}")
    except NotABuild as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
