"""The student repo: public checks only, fixtures instead of the reference, no solution text."""
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, SOLUTIONS

from autograder.instructor.build import release, strip_hidden_checks


@pytest.fixture(scope="module")
def student_repo(tmp_path_factory):
    return release(tmp_path_factory.mktemp("dist") / "student")


def _grade(repo, *args):
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", *args], cwd=repo, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_release_has_no_solutions_reference_or_hidden_checks(student_repo):
    names = {p.relative_to(student_repo).as_posix() for p in student_repo.rglob("*") if p.is_file()}
    assert not any(n.startswith(("solutions/", "attn_ref/", "tests/")) for n in names)
    assert not any(n.startswith("autograder/instructor/") for n in names)
    assert "autograder/stages/softmax.py" in names and "autograder/child/worker.py" in names
    assert {"Makefile", "README.md", "requirements-student.txt", "autograder/fixtures.json",
            "exercises/softmax.py"} <= names
    probe = ("import sys; sys.path.insert(0, '.'); from autograder.grade import CHECKS; "
             "print(sorted({c.visibility for c in CHECKS}), len(CHECKS))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=student_repo, capture_output=True, text=True, check=True)
    assert out.stdout.startswith("['public']")


def test_release_contains_no_solution_text(student_repo):
    """No line of a solution block (longer than a trivial one) appears in any shipped file."""
    solution_lines = set()
    for path in SOLUTIONS.glob("*.py"):
        inside, given = False, []
        for line in path.read_text().splitlines():
            if "# BEGIN SOLUTION" in line:
                inside = True
            elif "# END SOLUTION" in line:
                inside = False
            elif inside:
                code = line.split("#")[0].strip()
                if len(code) >= 20:
                    solution_lines.add(code)
            else:
                given.append(line)
        given_text = "\n".join(given)  # docstrings state the contract (e.g. d_head = d_model // n_heads)
        solution_lines = {c for c in solution_lines if c not in given_text}
    assert len(solution_lines) > 20
    for path in student_repo.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md", ".json", ".txt", "") and path.name != "Makefile":
            text = path.read_text()
            leaked = [s for s in solution_lines if s in text]
            assert not leaked, (path, leaked)


def test_untouched_release_grades_zero(student_repo):
    out = _grade(student_repo)
    assert "0/63.5" in out and "not started" in out and "hidden checks, run by the autograder" in out


def test_solutions_in_release_get_full_public_marks(student_repo, tmp_path):
    repo = tmp_path / "student"
    shutil.copytree(student_repo, repo)
    for f in SOLUTIONS.glob("*.py"):
        shutil.copy2(f, repo / "exercises" / f.name)
    out = _grade(repo)
    assert "63.5/63.5" in out and "failed" not in out


def test_release_diagnoses_like_the_full_repo(student_repo, tmp_path):
    """A public check's diagnosis works from fixtures: the mask-top-left mutant is named in the release."""
    repo = tmp_path / "student"
    shutil.copytree(student_repo, repo)
    for f in SOLUTIONS.glob("*.py"):
        shutil.copy2(f, repo / "exercises" / f.name)
    mask = repo / "exercises" / "masking.py"
    mask.write_text(mask.read_text().replace("return j <= i + (n_k - n_q)", "return j <= i"))
    out = _grade(repo, "--stage", "masking")
    assert "Diagnosis mask-top-left" in out


def test_student_makefile_targets(student_repo):
    p = subprocess.run(["make", "-n", "grade", "hint", "submit"], cwd=student_repo, capture_output=True, text=True)
    assert p.returncode == 0 and "autograder grade" in p.stdout and "autograder submit" in p.stdout


def test_strip_hidden_checks_keeps_public_ones():
    src = ('@STAGE.check(points=1, kind="reference")\ndef a(api, ctx):\n    pass\n\n\n'
           '@STAGE.check(points=1, kind="property", visibility="public")\ndef b(api, ctx):\n    pass\n\n\n'
           '@STAGE.check(1, "property", "public")\ndef d(api, ctx):\n    pass\n\n\n'
           '@STAGE.check(1, "property", visibility="hidden")\ndef c(api, ctx):\n    pass\n')
    out = strip_hidden_checks(src)
    assert "def b" in out and "def d" in out and "def a" not in out and "def c" not in out
    assert ROOT.exists()
