"""GitHub Classroom: the release's .github/workflows/classroom.yml, its steps run as the runner would run
them, in the student repo: every stage's command passes with the solutions and fails with the stubs."""
import shutil
import subprocess

import pytest
from conftest import ROOT, SOLUTIONS, share_venv

from autograder.instructor.build import CLASSROOM_TOTAL, classroom_points, release
from autograder.stages import CORE

yaml = pytest.importorskip("yaml")
GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"



@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    if not (ROOT / ".venv" / ".student").exists():
        pytest.skip("needs the .venv that `make test` sets up")
    return share_venv(release(tmp_path_factory.mktemp("classroom") / "student"))


def steps(repo) -> list[dict]:
    workflow = yaml.safe_load((repo / ".github" / "workflows" / "classroom.yml").read_text())
    return workflow["jobs"]["run-autograding-tests"]["steps"]


def test_one_step_per_core_stage_worth_its_points(repo):
    graders = [s for s in steps(repo) if s.get("uses") == GRADER]
    assert [g["id"] for g in graders] == [s.name for s in CORE]
    scores = [g["with"]["max-score"] for g in graders]
    assert all(isinstance(x, int) for x in scores) and sum(scores) == CLASSROOM_TOTAL
    assert scores == [classroom_points()[s.name] for s in CORE]  # each stage's share of the core points
    reporter = next(s for s in steps(repo) if s.get("uses") == REPORTER)
    assert reporter["with"]["runners"].split(",") == [s.name for s in CORE]
    assert set(reporter["env"]) == {f"{s.name.upper()}_RESULTS" for s in CORE}


def test_points_that_do_not_make_100_are_scaled_to_whole_numbers():
    assert classroom_points({"a": 1, "b": 1, "c": 1}) == {"a": 34, "b": 33, "c": 33}
    assert sum(classroom_points({"a": 2.5, "b": 7.25, "c": 5}).values()) == CLASSROOM_TOTAL


def run_commands(repo, exercises) -> dict[str, int]:
    """Each grader step's command, run in the repo with `exercises` as its exercises/: its exit status."""
    shutil.rmtree(repo / "exercises")
    shutil.copytree(exercises, repo / "exercises", ignore=shutil.ignore_patterns("__pycache__"))
    setup = next(s for s in steps(repo) if s.get("run"))
    subprocess.run(setup["run"], shell=True, cwd=repo, check=True, capture_output=True)
    status = {}
    for g in (s for s in steps(repo) if s.get("uses") == GRADER):
        p = subprocess.run(g["with"]["command"], shell=True, cwd=repo, capture_output=True, text=True,
                           timeout=60 * g["with"]["timeout"])
        assert f"{g['id']}" in p.stdout, p.stdout + p.stderr  # the grading output is kept
        status[g["id"]] = p.returncode
    return status


def test_commands_pass_with_the_solutions_and_fail_with_the_stubs(repo):
    stubs = repo.parent / "stubs"
    shutil.copytree(repo / "exercises", stubs)
    assert run_commands(repo, SOLUTIONS) == {s.name: 0 for s in CORE}
    failing = run_commands(repo, stubs)
    assert all(failing[s.name] != 0 for s in CORE), failing
