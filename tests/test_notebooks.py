"""The nbgrader edition: the whole cycle, headless, on copies; scores agree with `make grade`."""
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, clean_env, fresh_venv, grade, variant

from autograder.instructor.notebooks import nbgrader_course
from autograder.stages import BONUS_POINTS, CORE_POINTS

NBGRADER = Path(sys.executable).with_name("nbgrader")
pytestmark = [pytest.mark.skipif(not NBGRADER.exists(), reason="nbgrader is not installed (requirements-instructor.txt)"),
              pytest.mark.slow]  # builds and runs the notebook channels: `make test` only (CONTRIBUTING.md)
MASK_TOP_LEFT = ("return j <= i + (n_k - n_q)", "return j <= i")
SCALE_MISSING = ("return (q @ np.swapaxes(k, -1, -2)) / np.sqrt(d_k)", "return q @ np.swapaxes(k, -1, -2)")
MISTAKES = {"masking.py": MASK_TOP_LEFT, "scaling.py": SCALE_MISSING}


def cycle(course: Path, students: dict[str, tuple[str, str] | None | str], nbgrader: Path = NBGRADER,
          env: dict | None = None) -> dict[str, tuple[float, str]]:
    """generate_assignment, one submitted notebook per student, one autograde of them all, generate_feedback,
    export: {student: (score, feedback html)}. A student's entry is "untouched" (the release as handed out) or
    the solutions with an optional (old, new) edit. By default with this checkout's nbgrader and the grader on
    PYTHONPATH; `nbgrader` and `env` name an installed environment instead."""
    env = env or {**os.environ, "PATH": f"{NBGRADER.parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}

    said = []

    def run(*args):
        p = subprocess.run([str(nbgrader), *args], cwd=course, env=env, capture_output=True, text=True, timeout=1800)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        said.append(p.stdout + p.stderr)

    run("generate_assignment", "attention", "--force")
    release = json.loads((course / "release/attention/attention.ipynb").read_text())
    source = json.loads((course / "source/attention/attention.ipynb").read_text())
    by_id = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in source["cells"]}
    text = json.dumps(release)
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN" not in text and "hidden = True" not in text
    for student, edit in students.items():
        nb = json.loads(text)
        if edit != "untouched":
            for c in nb["cells"]:
                meta = c["metadata"].get("nbgrader", {})
                if meta.get("solution"):
                    c["source"] = re.sub(r"\s*### (BEGIN|END) SOLUTION\n", "\n", by_id[meta["grade_id"]])
                    if edit and edit[0] in c["source"]:
                        c["source"] = c["source"].replace(*edit)
        sub = course / "submitted" / student / "attention"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / "attention.ipynb").write_text(json.dumps(nb))
    run("autograde", "attention", "--force", "--create")
    # the checksum warnings nbgrader prints for nothing (its bug #1961, explained in the course README) name only
    # cells whose hidden checks it removed; any other cell's would be an edit this cycle never made
    warned = set(re.findall(r"Attribute 'checksum' for cell (\S+) has changed", said[-1]))
    hidden = {i for i, src in by_id.items() if "BEGIN HIDDEN TESTS" in "".join(src)}
    assert warned <= hidden, warned - hidden
    assert not warned or "jupyter/nbgrader#1961" in (course / "README.md").read_text()
    run("generate_feedback", "attention", "--force")
    run("export")
    rows = [line.split(",") for line in (course / "grades.csv").read_text().splitlines()[1:]]
    assert sorted(r[3] for r in rows) == sorted(students)
    return {r[3]: (float(r[7]), (course / f"feedback/{r[3]}/attention/attention.html").read_text()) for r in rows}


def test_nbgrader_course_scores_agree_with_make_grade(tmp_path):
    """One course, one autograde of four students (the solutions, the release untouched, and two mistakes): the
    solutions get every stage's points (bonus folded in, as on Gradescope), the untouched release 0, and a
    mistake the score `make grade` gives it, with the student's report in the feedback."""
    found = cycle(nbgrader_course(tmp_path / "course", "folded"),
                  {"alice": None, "bob": "untouched", **{f"m-{f.removesuffix('.py')}": e for f, e in MISTAKES.items()}})
    assert found["alice"][0] == CORE_POINTS + BONUS_POINTS
    assert found["bob"][0] == 0
    for file, edit in MISTAKES.items():
        score, feedback = found[f"m-{file.removesuffix('.py')}"]
        direct = grade(variant(tmp_path / f"v-{file}", {file: [edit]}), seed=0)
        assert score == direct.score + direct.bonus_score < CORE_POINTS + BONUS_POINTS, file
        # the feedback shows the student's report (public checks and the hidden ones' seed-0 twins); the hidden
        # checks' own run, for the points, prints its score alone
        assert "with the hidden checks" in feedback
        if file == "masking.py":
            assert "causal_mask_reference" in feedback  # a public check, reported


OTTER = Path(sys.executable).with_name("otter")


@pytest.fixture(scope="module")
def otter_assignment(tmp_path_factory):
    if not OTTER.exists():
        pytest.skip("otter-grader is not installed (requirements-instructor.txt)")
    from autograder.instructor.notebooks import otter_assign

    return otter_assign(tmp_path_factory.mktemp("otter"), "folded")  # every stage counts, as make grade's stages


def otter_run(result: Path, notebook: dict, tmp_path: Path, otter: Path = OTTER, env: dict | None = None) -> dict:
    env = env or {**os.environ, "PATH": f"{OTTER.parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "attention.ipynb").write_text(json.dumps(notebook))
    zip_path = next((result / "autograder").glob("*.zip"))
    p = subprocess.run([str(otter), "run", "-a", str(zip_path), "-o", str(tmp_path), "attention.ipynb"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    tests = json.loads((tmp_path / "results.json").read_text())["tests"]
    return {t["name"]: t["score"] for t in tests if "score" in t}


def test_otter_student_notebook_has_no_solutions_or_hidden_tests(otter_assignment):
    student = otter_assignment / "student"
    texts = [(student / "attention.ipynb").read_text(), *(p.read_text() for p in (student / "tests").glob("*.py"))]
    for text in texts:
        assert "BEGIN SOLUTION" not in text and "np.exp(scores - top)" not in text
        assert "reference_fp64" not in text  # a hidden check's name


def test_otter_check_on_the_student_notebook(otter_assignment, tmp_path):
    """`otter check` with the student's public tests: failures for the untouched notebook, none once solved."""
    env = {**os.environ, "PATH": f"{OTTER.parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    work = tmp_path / "student"
    shutil.copytree(otter_assignment / "student", work)
    shutil.copy2(otter_assignment / "autograder" / "attention.ipynb", work / "solved.ipynb")
    outputs = {}
    for nb in ("attention.ipynb", "solved.ipynb"):
        p = subprocess.run([str(OTTER), "check", nb, "-t", "tests", "-q", "softmax"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=600)
        outputs[nb] = p.stdout + p.stderr
    assert "All tests passed" not in outputs["attention.ipynb"] and "failed" in outputs["attention.ipynb"].lower()
    assert "All tests passed" in outputs["solved.ipynb"]


def test_otter_scores_agree_with_make_grade(otter_assignment, tmp_path):
    solved = json.loads((otter_assignment / "autograder" / "attention.ipynb").read_text())
    assert sum(otter_run(otter_assignment, solved, tmp_path / "solutions").values()) == CORE_POINTS + BONUS_POINTS
    student = json.loads((otter_assignment / "student" / "attention.ipynb").read_text())
    assert sum(otter_run(otter_assignment, student, tmp_path / "untouched").values()) == 0
    file = "scaling.py"  # masking.py's mistake: the zip's own environment below
    scores = otter_run(otter_assignment, with_mistake(solved, file), tmp_path / file)
    direct = grade(variant(tmp_path / f"v-{file}", {file: [MISTAKES[file]]}), seed=0)
    assert scores == {n: s.score for n, s in direct.stages.items()}, file


def with_mistake(notebook: dict, file: str) -> dict:
    """The notebook with MISTAKES[file]'s edit made in the cell that writes that file."""
    old, new = MISTAKES[file]
    nb = json.loads(json.dumps(notebook))
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if old in src:
            cell["source"] = src.replace(old, new)
    return nb


# This machine has no route to the CPU torch index the requirements name; its torch CPU wheel is local
# (pip's find-links), so the installs below leave that one line out and take everything else as written.
NO_TORCH_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def installable(lines: list[str]) -> list[str]:
    assert NO_TORCH_INDEX in lines  # the shipped requirements do name it
    return [line for line in lines if line.strip() and line != NO_TORCH_INDEX]


def test_nbgrader_autograde_in_a_venv_made_by_the_course_readme(tmp_path):
    """The course folder's README install (its requirements.txt: nbgrader and the kit's wheel) in a fresh
    venv, nbgrader from it and no PYTHONPATH, a course with the bonus stages apart: the solutions get the core
    stages' points, and a mistake the same score as `make grade`."""
    course = nbgrader_course(tmp_path / "course", "apart")
    readme = (course / "README.md").read_text()
    assert ".venv/bin/pip install -r requirements.txt" in readme and ".venv/bin/nbgrader autograde attention" in readme
    venv = fresh_venv(tmp_path / "venv", installable((course / "requirements.txt").read_text().splitlines()), course)
    found = cycle(course, {"alice": None, "carol": MISTAKES["masking.py"]}, nbgrader=venv / "bin" / "nbgrader",
                  env=clean_env(venv))
    assert found["alice"][0] == CORE_POINTS  # bonus stages apart: not in the notebook's points
    direct = grade(variant(tmp_path / "v", {"masking.py": [MISTAKES["masking.py"]]}), seed=0)
    assert found["carol"][0] == direct.score < CORE_POINTS
    assert all("No module named" not in feedback for _, feedback in found.values())


def test_nbgrader_test_cells_grade_once(tmp_path):
    """Each test cell calls the grader once, in the students' copy and at autograding alike."""
    from autograder.instructor.notebooks import build_notebook

    tests = [c for c in build_notebook()["cells"] if c["metadata"]["nbgrader"].get("grade")]
    assert tests and all(c["source"].count("grade_stage(") == 1 for c in tests)  # one call, whichever copy
    released = [re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n", "", c["source"], flags=re.S) for c in tests]
    assert all("hidden = False" in r and "hidden = True" not in r for r in released)


def test_otter_zip_grades_in_the_environment_its_own_setup_makes(otter_assignment, tmp_path):
    """The zip alone: its environment.yml's pip requirements (the kit's wheel from its files/, numpy, torch,
    otter) installed from the unpacked zip into a fresh venv, and `otter run` from that venv with no
    PYTHONPATH, in a folder far from the checkout: a submission with a mistake gets what `make grade` gives it,
    stage by stage."""
    import yaml

    zip_path = next((otter_assignment / "autograder").glob("*.zip"))
    source = tmp_path / "source"  # what Gradescope unpacks to /autograder/source
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(source)
    deps = yaml.safe_load((source / "environment.yml").read_text())["dependencies"]
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    wheels = [line for line in pip if line.endswith(".whl")]
    assert len(wheels) == 1 and (source / wheels[0]).is_file()
    venv = fresh_venv(tmp_path / "venv", installable(pip), source)
    env = clean_env(venv)
    found = subprocess.run([str(venv / "bin" / "python"), "-c", "import autograder, attn_ref; print(autograder.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    assert found.startswith(str(venv))
    solved = json.loads((otter_assignment / "autograder" / "attention.ipynb").read_text())
    scores = otter_run(otter_assignment, with_mistake(solved, "masking.py"), tmp_path / "run",
                       otter=venv / "bin" / "otter", env=env)
    direct = grade(variant(tmp_path / "v", {"masking.py": [MISTAKES["masking.py"]]}), seed=0)
    assert scores == {n: s.score for n, s in direct.stages.items()} and sum(scores.values()) < CORE_POINTS + BONUS_POINTS


WHEEL = "attention_kit-0.1.0-py3-none-any.whl"


def _first_checks() -> dict[str, str]:
    """The code opening each edition's first test cell, up to its first call of the grader."""
    from autograder.instructor.notebooks import build_notebook, otter_master

    nb = next(c["source"] for c in build_notebook(wheel=WHEEL)["cells"] if c["metadata"]["nbgrader"].get("grade"))
    ot = next(c["source"] for c in otter_master(WHEEL)["cells"] if "check_passed(" in c["source"])
    return {name: src.split("from autograder.notebook_cells")[0].removeprefix("# HIDDEN\n") for name, src in
            (("nbgrader", nb), ("otter", ot))}


def test_the_first_test_cell_stops_with_one_sentence_without_the_kit(tmp_path):
    """Issue 44: a kernel without the kit's wheel, or with another version of it, stops at the first test cell
    with one sentence naming the wheel to install (on the cell's output and the tool's terminal) and ends the
    kernel, so nbgrader and otter write no grade (they grade a cell that raises as 0 and go on: a silent 0/100)."""
    old = tmp_path / "old"
    (old / "autograder").mkdir(parents=True)
    (old / "autograder" / "__init__.py").write_text("KIT_VERSION = '0.0.9'\n")
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for edition, code in _first_checks().items():
        fix = "pip install -r requirements.txt" if edition == "nbgrader" else f"pip install files/{WHEEL}"
        for path, why in ((None, "has no autograder"), (old, "has version 0.0.9 of the kit's grader, not 0.1.0")):
            env = {**base, **({"PYTHONPATH": str(path)} if path else {})}
            p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=60)
            assert p.returncode == 1 and p.stdout == p.stderr, (edition, p)
            assert p.stdout.count("\n") == 1 and why in p.stdout and fix in p.stdout and WHEEL in p.stdout, p.stdout
        p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**base, "PYTHONPATH": str(ROOT)},
                           capture_output=True, text=True, timeout=60)
        assert (p.returncode, p.stdout, p.stderr) == (0, "", ""), (edition, p)


def test_otter_run_without_the_wheel_stops_and_writes_no_grade(otter_assignment, tmp_path):
    """Issue 44: `otter run` in an environment with otter and not the kit (this checkout's venv, no PYTHONPATH)
    graded the solutions 0/100 with exit status 0; now it stops with the sentence and writes no results."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{OTTER.parent}:{env['PATH']}"
    solved = json.loads((otter_assignment / "autograder" / "attention.ipynb").read_text())
    (tmp_path / "attention.ipynb").write_text(json.dumps(solved))
    zip_path = next((otter_assignment / "autograder").glob("*.zip"))
    p = subprocess.run([str(OTTER), "run", "-a", str(zip_path), "-o", str(tmp_path), "attention.ipynb"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode != 0 and not (tmp_path / "results.json").exists(), p.stdout[-2000:] + p.stderr[-2000:]
    assert "grading stopped: this kernel has no autograder" in p.stdout + p.stderr
    assert "pip install files/attention_kit-" in p.stdout + p.stderr
