"""One bonus policy, chosen at build time (`BONUS=apart|folded`): Gradescope's score is the sum of its
tests' scores under either, and GitHub Classroom's reporter total is the same number."""
import pytest
from conftest import SOLUTIONS, grade, variant

from autograder.report.classroom import results_for
from autograder.report.gradescope_json import BONUS_POLICIES, results_json
from autograder.stages import BONUS_POINTS, CORE_POINTS

ZERO_MASK = ("return np.where(allowed, scores, -np.inf)", "return np.where(allowed, scores, 0.0)")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return {"solutions": grade(SOLUTIONS, seed=0),
            "zero-mask": grade(variant(tmp_path_factory.mktemp("zm"), {"masking.py": [ZERO_MASK]}), seed=0)}


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
    assert graded["zero-mask"].score < CORE_POINTS
