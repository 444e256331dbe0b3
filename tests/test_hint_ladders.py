"""Hints follow the diagnosis: each diagnosis has its own ladder, a second mistake in a stage
starts at its own first rung, and no rung gives the answer line away."""
from conftest import MUTANTS, SOLUTIONS, grade, variant

from autograder.feedback.hint_ladders import ladder
from autograder.feedback.hints import next_hint, remember_run
from autograder.stages import CATALOGUE


def _solution_lines() -> set[str]:
    out, inside = set(), False
    for path in SOLUTIONS.glob("*.py"):
        for line in path.read_text().splitlines():
            if "# BEGIN SOLUTION" in line:
                inside = True
            elif "# END SOLUTION" in line:
                inside = False
            elif inside and len(line.split("#")[0].strip()) >= 12:
                out.add(line.split("#")[0].strip())
    return out


def test_every_diagnosis_has_its_own_ladder_without_the_answer_line():
    answers = _solution_lines()
    assert len(answers) > 20
    firsts = set()
    for m in CATALOGUE.values():
        rungs = ladder(m)
        assert 2 <= len(rungs) <= 4 and all(len(r) < 300 for r in rungs), m.id
        assert not [a for a in answers for r in rungs if a in r], m.id
        firsts.add(rungs[1])
    assert len(firsts) == len(CATALOGUE)  # the idea rung is each diagnosis's own


def test_a_second_mistake_gets_its_own_first_rung(tmp_path):
    sub = variant(tmp_path / "a", MUTANTS["mask-top-left"][0])
    remember_run(grade(sub, stages=["masking"]))
    seen = [next_hint(sub) for _ in range(3)]
    assert [s.split(",")[0] for s in seen] == ["Hint 1/3 for stage 5 (masking)", "Hint 2/3 for stage 5 (masking)",
                                               "Hint 3/3 for stage 5 (masking)"]
    assert all("mask-top-left" in s for s in seen)
    other = tmp_path / "a" / "submission"  # now a different mistake in the same stage
    (other / "masking.py").write_text((SOLUTIONS / "masking.py").read_text().replace(
        "return np.where(allowed, scores, -np.inf)", "return np.where(allowed, scores, 0.0)"))
    remember_run(grade(other, stages=["masking"]))
    hint = next_hint(other)
    assert hint.startswith("Hint 1/3 for stage 5 (masking), about the mistake your last run named, "
                           "mask-zero-not-neginf"), hint
