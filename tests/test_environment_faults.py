"""The grader's environment at fault, named as such: a child whose interpreter is missing or out of reach
(as one under a /tmp that the namespaces hide), or whose Python lacks numpy, costs no check the
student's code ran: every check says "not run: the grader's environment", names what is missing, and
never blames the code ("did not finish", "raised"); the next step says so too."""
import subprocess
import sys

import pytest
from conftest import SOLUTIONS

import autograder.sandbox.launchers as launchers
from autograder.grade import grade
from autograder.report.gradescope_json import results_json
from autograder.results import Failure

MISSING = "/nonexistent/attn-kit/bin/python"
BLAME = ("did not finish", "raised ", "your code crashed", "segmentation")
BOUNDARIES = ["namespaces", "none"]


def _boundary(monkeypatch, which: str) -> None:
    if which == "namespaces":
        if not launchers.namespaces.available():
            pytest.skip("no namespaces on this machine")
    else:  # the child is started by Popen itself: the interpreter's absence is an OSError in the parent
        monkeypatch.setattr(launchers.namespaces, "available", lambda: False)


def _interpreter(monkeypatch, exe: str) -> None:
    monkeypatch.setattr(launchers, "interpreter", lambda: [exe, "-I", "-B"])


def _assert_environment(res, *named: str) -> None:
    for sr in res.stages.values():
        assert sr.score == 0
        for r in sr.checks:
            assert r.not_run and r.failure in (Failure.ENVIRONMENT, Failure.NO_TORCH), (sr.stage, r.failure, r.message)
            assert "the grader's environment" in r.message and "not a problem with your code" in r.message
            assert all(n in r.message for n in named), r.message
            assert not any(b in r.message for b in BLAME), r.message
    assert res.next_step.startswith(f"stages {', '.join(res.stages)} were not graded: the grader's environment")
    assert all(n in res.next_step for n in named)
    out = results_json(res)["output"]
    assert "the grader" in out and not any(b in out for b in BLAME)


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_a_missing_interpreter_is_the_environment(monkeypatch, boundary):
    _boundary(monkeypatch, boundary)
    _interpreter(monkeypatch, MISSING)
    res = grade(SOLUTIONS, stages=["softmax", "masking", "heads"])
    _assert_environment(res, MISSING, "interpreter")
    assert res.stages["heads"].checks[0].failure == Failure.NO_TORCH  # the torch child could not load torch


def test_an_interpreter_the_namespaces_hide_is_the_environment(monkeypatch, tmp_path):
    """A venv under /tmp: outside, it runs; inside the child's namespaces /tmp is a fresh tmpfs, so it is not found."""
    _boundary(monkeypatch, "namespaces")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    exe = str(venv / "bin" / "python")
    assert subprocess.run([exe, "-c", "pass"], timeout=60).returncode == 0
    _interpreter(monkeypatch, exe)
    res = grade(SOLUTIONS, stages=["softmax"])
    _assert_environment(res, exe, "not found or cannot be reached")


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_a_python_without_numpy_is_the_environment(monkeypatch, boundary):
    """The interpreter this venv was made from: the same Python, none of the kit's packages."""
    base = getattr(sys, "_base_executable", sys.executable)
    if subprocess.run([base, "-I", "-c", "import numpy"], capture_output=True, timeout=60).returncode == 0:
        pytest.skip(f"{base} has numpy")
    _boundary(monkeypatch, boundary)
    _interpreter(monkeypatch, base)
    res = grade(SOLUTIONS, stages=["softmax", "scaling"])
    _assert_environment(res, "the package numpy is missing", base)


def test_make_grade_reports_it_and_does_not_crash(monkeypatch, capsys):
    """`make grade` starts its children before grading (prestart): a missing interpreter is reported, not raised."""
    from autograder.cli import main

    _boundary(monkeypatch, "none")
    _interpreter(monkeypatch, MISSING)
    assert main(["grade", "--submission", str(SOLUTIONS), "--stage", "softmax"]) == 0
    out = capsys.readouterr().out
    assert "the grader's environment could not run your code" in out and MISSING in out, out
    assert not any(b in out for b in BLAME), out
