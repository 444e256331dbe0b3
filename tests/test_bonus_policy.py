"""One bonus policy, chosen at build time (`BONUS=apart|folded`): Gradescope's score is the sum of its
tests' scores under either, and GitHub Classroom's reporter total is the same number."""
import json

import pytest
from conftest import grade, variant

from autograder.report.classroom import results_for
from autograder.report.gradescope_json import BONUS_POLICIES, results_json
from autograder.stages import BONUS_POINTS, CORE_POINTS

ZERO_MASK = ("return np.where(allowed, scores, -np.inf)", "return np.where(allowed, scores, 0.0)")


@pytest.fixture(scope="module")
def graded(tmp_path_factory, solutions_result):
    return {"solutions": solutions_result,  # grade(SOLUTIONS, seed=0), graded once per test process
            "zero-mask": grade(variant(tmp_path_factory.mktemp("zm"), {"masking.py": [ZERO_MASK]}), seed=0)}


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
@pytest.mark.parametrize("policy", BONUS_POLICIES)
def test_gradescope_score_is_its_tests_sum_and_classrooms_total(graded, policy):
    for name, res in graded.items():
        data = results_json(res, bonus_policy=policy)
        tests = sum(t["score"] for t in data["tests"])
        assert data["score"] == pytest.approx(tests), name
        expected = res.score + (res.bonus_score if policy == "folded" else 0)
        assert data["score"] == pytest.approx(expected), name
        classroom = results_for(res, bonus_folded=policy == "folded")
        assert sum(t["score"] for r in classroom.values() for t in r["tests"]) == pytest.approx(expected), name
    full = results_json(graded["solutions"], bonus_policy=policy)
    assert full["score"] == CORE_POINTS + (BONUS_POINTS if policy == "folded" else 0)
    # the total the student reads is the score (found by a stranger TA: folded, the text said 91/100 beside a 127)
    assert full["output"].startswith(f"**{full['score']:g}/{CORE_POINTS + (BONUS_POINTS if policy == 'folded' else 0):g}**")
    assert graded["zero-mask"].score < CORE_POINTS


def notebook_scores(res, policy: str) -> dict[str, tuple[float, float]]:
    """Each notebook edition's (score, total) for a graded submission, from the points its generated notebook
    declares (not by running nbgrader or otter): nbgrader gives a test cell its stage's score up to the cell's
    points, otter a test case its points when its check passes."""
    from autograder.instructor.notebooks import build_notebook, otter_master

    nb = build_notebook(policy)
    cells = [c["metadata"]["nbgrader"] for c in nb["cells"] if c["metadata"]["nbgrader"].get("grade")]
    nbgrader = (sum(min(res.stages[c["grade_id"].removeprefix("test_")].score, c["points"]) for c in cells),
                sum(c["points"] for c in cells))
    questions = [c["source"] for c in otter_master("kit.whl", policy)["cells"]
                 if c["cell_type"] == "raw" and c["source"].startswith("# BEGIN QUESTION")]
    otter_score = otter_total = 0.0
    for q in questions:
        name = q.split("name: ")[1].split("\n")[0]
        points = json.loads(q.split("points: ")[1].split("\n")[0])
        checks = res.stages[name].checks
        assert len(points) == len(checks)
        otter_score += sum(p for p, r in zip(points, checks) if r.passed)
        otter_total += sum(points)
    return {"nbgrader": nbgrader, "otter": (otter_score, otter_total)}


@pytest.mark.parametrize("policy", BONUS_POLICIES)
def test_every_channel_gives_one_score_under_the_policy(graded, policy):
    """Gradescope's score, Classroom's reporter total and both notebook editions' totals are one number per
    submission under each policy: the bonus stages count in all of them (folded) or in none (apart)."""
    for name, res in graded.items():
        gradescope = results_json(res, bonus_policy=policy)
        classroom = results_for(res, bonus_folded=policy == "folded")
        scores = {"gradescope": (gradescope["score"], sum(t["max_score"] for t in gradescope["tests"])),
                  "classroom": (sum(t["score"] for r in classroom.values() for t in r["tests"]),
                                sum(r["max_score"] for r in classroom.values())),
                  **notebook_scores(res, policy)}
        expected = res.score + (res.bonus_score if policy == "folded" else 0)
        total = CORE_POINTS + (BONUS_POINTS if policy == "folded" else 0)
        for channel, (score, out_of) in scores.items():
            assert score == pytest.approx(expected) and out_of == pytest.approx(total), (name, channel, scores)
    assert graded["solutions"].score + graded["solutions"].bonus_score == CORE_POINTS + BONUS_POINTS


def test_an_apart_bonus_cell_is_worth_nothing_and_returns_nothing():
    """nbgrader takes a test cell's value as its partial credit and refuses one above the cell's points: a
    bonus cell worth 0 prints its score instead of returning it."""
    from autograder.instructor.notebooks import build_notebook
    from autograder.stages import BY_NAME

    for policy in BONUS_POLICIES:
        for c in build_notebook(policy)["cells"]:
            meta = c["metadata"]["nbgrader"]
            if not meta.get("grade"):
                continue
            stage = BY_NAME[meta["grade_id"].removeprefix("test_")]
            last = c["source"].splitlines()[-1]
            if stage.bonus and policy == "apart":
                assert meta["points"] == 0 and last.startswith("print(") and "apart" in last
            else:
                assert meta["points"] == stage.points and last == "score"


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_folded_release_totals_as_the_autograder_does(tmp_path):
    """Found by a stranger TA: `make release BONUS=folded` changed only the Classroom workflow, so the student's
    `make grade` still said the bonus was apart while Gradescope and Classroom counted it. The release carries
    the policy: its README says so, and its `make grade` prints the total with the bonus in."""
    import subprocess
    import sys

    from autograder.instructor.build import release

    repo = release(tmp_path / "student", bonus_policy="folded")
    assert f"out of {CORE_POINTS + BONUS_POINTS}" in (repo / "README.md").read_text()
    out = subprocess.run([sys.executable, "-m", "autograder", "grade", "--stage", "softmax,costs"], cwd=repo,
                         capture_output=True, text=True, timeout=300).stdout
    assert "with bonus" in out and "apart from the core points" not in out, out
