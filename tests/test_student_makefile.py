"""The student repo's Makefile is student.mk, the file the full repo's Makefile includes: every one of its
targets runs in a built release, and the variables it documents (STAGE, SEED, SUBMISSION) reach the grader."""
import os
import re
import subprocess
import zipfile

import pytest
from conftest import ROOT, SOLUTIONS, output_until, share_venv, tiny_gpt2_checkpoint

from autograder.instructor.build import release

pytestmark = pytest.mark.slow  # builds the release and runs its Makefile: `make test` only (CONTRIBUTING.md)


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    if not (ROOT / ".venv" / ".student").exists():
        pytest.skip("needs the .venv that `make test` sets up")
    return share_venv(release(tmp_path_factory.mktemp("student") / "student"))


def make(repo, *args: str, timeout: float = 300) -> str:
    p = subprocess.run(["make", "-s", *args], cwd=repo, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "NO_COLOR": "1"})
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def targets(makefile: str) -> set[str]:
    return {t for t in re.findall(r"^([a-z][\w-]*):", makefile, re.M)}


def test_the_release_makefile_is_student_mk(student):
    assert (student / "Makefile").read_text() == (ROOT / "student.mk").read_text()
    assert "include student.mk" in (ROOT / "Makefile").read_text()
    assert (student / "setup.mk").read_text() == (ROOT / "setup.mk").read_text()


def test_every_target_of_the_student_makefile_runs(student):
    ran = {"help", "student-help"}
    make(student, "setup")  # the shared .venv is set up already: nothing to do, and nothing fails
    ran.add("setup")
    assert "make grade [STAGE=masking]" in make(student, "help") and "instructors" not in make(student)
    out = make(student, "grade", "STAGE=softmax", "SEED=3")
    assert "(seed 3)" in out and "softmax" in out and "dot_products" not in out
    ran.add("grade")
    assert "Hint 1/" in make(student, "hint", "STAGE=softmax")
    ran.add("hint")
    make(student, "submit")
    with zipfile.ZipFile(student / "submission.zip") as z:
        assert "softmax.py" in z.namelist()
    ran.add("submit")
    assert "A-softmax-weights" in make(student, "worked")
    ran.add("worked")
    make(student, "report", "STAGE=softmax")
    page = (student / "report.html").read_text()
    assert "<td class='name'>softmax</td>" in page and "<td class='name'>dot_products</td>" not in page
    ran.add("report")
    assert "Next step:" in output_until(["make", "-s", "watch"], student, b"Next step:",
                                        env={**os.environ, "NO_COLOR": "1"})
    ran.add("watch")
    refused = subprocess.run(["make", "-s", "capstone"], cwd=student, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "NO_COLOR": "1"})
    assert refused.returncode != 0 and "stage 6 (heads) has not passed: not started" in refused.stdout, refused.stdout
    # the stage check passes in the release too (its fixtures answer for the reference), then GPT-2's path runs
    tiny = tiny_gpt2_checkpoint(student.parent / "gpt2")
    out = make(student, "capstone", f"SUBMISSION={SOLUTIONS}", "MODEL=gpt2", f"GPT2_DIR={tiny}")
    assert "they agree" in out and "the same tokens: yes" in out, out
    ran.add("capstone")
    assert targets((student / "Makefile").read_text()) == ran
