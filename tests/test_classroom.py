"""GitHub Classroom: the release's .github/workflows/classroom.yml, its steps run as the runner would run
them, in the student repo, and its reporter's sum done as classroom-resources/autograding-grading-reporter
does it (each runner's tests' scores over the runners' max_score): the points `make grade` gives."""
import base64
import io
import json
import os
import re
import shutil
import subprocess
import zipfile

import pytest
from conftest import ROOT, SOLUTIONS, share_venv

from autograder.instructor.build import classroom_workflow, release
from autograder.instructor.classroom_local import classroom_local
from autograder.report.classroom import CLASSROOM_TOTAL, classroom_points
from autograder.stages import BONUS_POINTS, CORE, STAGES

pytestmark = pytest.mark.slow  # builds or runs a whole channel: `make test` only (CONTRIBUTING.md)

yaml = pytest.importorskip("yaml")
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
ZERO_MASK = ("return np.where(allowed, scores, -np.inf)", "return np.where(allowed, scores, 0.0)")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    if not (ROOT / ".venv" / ".student").exists():
        pytest.skip("needs the .venv that `make test` sets up")
    return share_venv(release(tmp_path_factory.mktemp("classroom") / "student"))


def steps(text: str) -> list[dict]:
    return yaml.safe_load(text)["jobs"]["run-autograding-tests"]["steps"]


def reporter(text: str) -> dict:
    return next(s for s in steps(text) if s.get("uses") == REPORTER)


def test_one_reporting_step_per_core_stage_and_the_real_reporter_inputs(repo):
    text = (repo / ".github" / "workflows" / "classroom.yml").read_text()
    ids = [s["id"] for s in steps(text) if "id" in s]
    assert ids == [s.name for s in CORE]
    rep = reporter(text)
    assert rep["with"]["runners"].split(",") == ids  # the reporter's one input
    assert rep["env"] == {f"{i.upper()}_RESULTS": f"${{{{steps.{i}.outputs.result}}}}" for i in ids}
    assert all(set(s) <= {"name", "uses", "with", "run", "id", "env"} for s in steps(text))


def test_points_that_do_not_make_100_are_scaled_to_whole_numbers():
    assert classroom_points({"a": 1, "b": 1, "c": 1}) == {"a": 34, "b": 33, "c": 33}
    assert sum(classroom_points({"a": 2.5, "b": 7.25, "c": 5}).values()) == CLASSROOM_TOTAL


def run_workflow(repo, exercises, text: str) -> tuple[float, float]:
    """Every `run` step in order (GITHUB_OUTPUT per step), then the reporter's sum: (points, max points)."""
    shutil.rmtree(repo / "exercises")
    shutil.copytree(exercises, repo / "exercises", ignore=shutil.ignore_patterns("__pycache__"))
    outputs: dict[str, dict[str, str]] = {}
    for i, s in enumerate(steps(text)):
        if "run" not in s:
            continue
        out = repo.parent / f"output-{i}"
        out.write_text("")
        p = subprocess.run(s["run"], shell=True, cwd=repo, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "GITHUB_OUTPUT": str(out)})
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        if "id" in s:
            assert s["id"] in p.stdout  # the step's log names its stage and points
            outputs[s["id"]] = dict(line.split("=", 1) for line in out.read_text().splitlines())
    rep = reporter(text)
    env = {k: re.sub(r"\$\{\{steps\.(\w+)\.outputs\.(\w+)\}\}", lambda m: outputs[m[1]][m[2]], v)
           for k, v in rep["env"].items()}
    points = maximum = 0.0
    for runner in rep["with"]["runners"].split(","):
        result = json.loads(base64.b64decode(env[f"{runner.upper()}_RESULTS"]))
        maximum += result["max_score"]
        points += sum(t.get("score", 0) for t in result["tests"])
    return points, maximum


def make_grade_points(repo) -> float:
    """The student repo's own `make grade` total (its Gradescope-format JSON's score)."""
    subprocess.run(["make", "grade", "JSON=g.json"], cwd=repo, check=True, capture_output=True, timeout=600)
    return json.loads((repo / "g.json").read_text())["score"]


def test_the_workflow_gives_make_grades_points(repo):
    workflow = (repo / ".github" / "workflows" / "classroom.yml").read_text()
    stubs = repo.parent / "stubs"
    shutil.copytree(repo / "exercises", stubs)
    assert run_workflow(repo, SOLUTIONS, workflow) == (CLASSROOM_TOTAL, CLASSROOM_TOTAL)
    assert run_workflow(repo, stubs, workflow) == (0, CLASSROOM_TOTAL)
    zero_mask = repo.parent / "zero-mask"
    shutil.copytree(SOLUTIONS, zero_mask, ignore=shutil.ignore_patterns("__pycache__"))
    masking = zero_mask / "masking.py"
    assert ZERO_MASK[0] in masking.read_text()
    masking.write_text(masking.read_text().replace(*ZERO_MASK))
    points, maximum = run_workflow(repo, zero_mask, workflow)
    assert (points, maximum) == (make_grade_points(repo), CLASSROOM_TOTAL)
    assert 0 < points < CLASSROOM_TOTAL  # partial credit: the stages using the mask keep their passing checks
    # `make classroom-local` (the TA's way to run the workflow here) gives the reporter's sum too, from a zip as well
    said = io.StringIO()
    with zipfile.ZipFile(repo.parent / "zero-mask.zip", "w") as z:
        for f in sorted(zero_mask.glob("*.py")):
            z.write(f, f"attention/{f.name}")
        z.writestr("__MACOSX/attention/._masking.py", b"junk")
    total = classroom_local(repo.parent / "zero-mask.zip", student=repo, root=repo.parent / "local", out=said)
    assert total == (points, CLASSROOM_TOTAL) and f"Classroom total: {points:g}/{CLASSROOM_TOTAL}" in said.getvalue()


def test_with_the_bonus_folded_in_the_bonus_stages_report_on_top(repo):
    workflow = classroom_workflow(bonus_folded=True)
    assert [s["id"] for s in steps(workflow) if "id" in s] == [s.name for s in STAGES]
    assert run_workflow(repo, SOLUTIONS, workflow) == (CLASSROOM_TOTAL + BONUS_POINTS,) * 2
