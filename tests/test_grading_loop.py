"""The grading loop end to end: full marks, zero for stubs, statuses, JSON, CLI."""
import json
import subprocess
import sys

import pytest
from conftest import ROOT, SOLUTIONS, grade, variant

from autograder.report.gradescope_json import results_json
from autograder.report.terminal import terminal
from autograder.stages import BONUS_POINTS, BY_NAME, CHECKS, CORE_POINTS, STAGES


def test_points_add_up():
    """The totals are the declared stages' points, and each stage's points are its checks'."""
    assert CORE_POINTS == sum(s.points for s in STAGES if not s.bonus) > 0
    assert BONUS_POINTS == sum(s.points for s in STAGES if s.bonus)
    for s in STAGES:
        assert sum(c.points for c in CHECKS if c.stage == s.name) == pytest.approx(s.points), s.name
    kinds = {(c.stage, c.kind) for c in CHECKS}
    for s in STAGES:  # every core stage checks the articles' numbers; every stage more than them
        assert s.bonus or (s.name, "worked") in kinds
        assert {(s.name, "reference"), (s.name, "property")} & kinds


def test_solutions_score_full_marks(solutions_result):
    res = solutions_result
    bad = {n: [(r.check.name, r.message) for r in s.checks if not r.passed] for n, s in res.stages.items()}
    assert res.score == CORE_POINTS and res.bonus_score == BONUS_POINTS, {k: v for k, v in bad.items() if v}
    assert all(s.status == "passed" for s in res.stages.values())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_solutions_full_marks_other_seeds(seed):
    res = grade(SOLUTIONS, seed=seed)
    assert res.score == CORE_POINTS and res.bonus_score == BONUS_POINTS, [(r.check.id, r.message) for s in res.stages.values()
                                                       for r in s.checks if not r.passed]


def test_stubs_score_zero_not_started(stubs_result):
    res = stubs_result
    assert res.score == 0 and res.bonus_score == 0
    assert {n: s.status for n, s in res.stages.items()} == {s.name: "not_started" for s in STAGES}
    text = terminal(res)
    assert f"0/{CORE_POINTS}" in text
    assert "Next step: start stage 1 (softmax): open exercises/softmax.py:" in text


def test_next_step_points_at_first_stub_line(stubs_result):
    text = terminal(stubs_result)
    line = int(text.split("exercises/softmax.py:")[1].split()[0])
    assert "raise NotImplementedError" in (ROOT / "exercises" / "softmax.py").read_text().splitlines()[line - 1]


def test_results_json_gradescope_format(solutions_result, stubs_result):
    for res in (solutions_result, stubs_result):
        data = results_json(res)
        json.dumps(data)
        assert data["score"] == res.score
        assert len(data["tests"]) == len(CHECKS)
        for t in data["tests"]:
            assert set(t) >= {"name", "score", "max_score", "status", "output", "visibility", "extra_data"}
            assert t["status"] in ("passed", "failed")
            assert t["visibility"] in ("visible", "after_published")
            assert {"stage", "check", "diagnosis"} <= set(t["extra_data"])
        stages = data["extra_data"]["stages"]
        assert set(stages) == {s.name for s in STAGES}
        for name, s in stages.items():
            assert s["max_score"] == BY_NAME[name].points
            assert s["status"] in ("passed", "failed", "not_started", "blocked")


def test_partial_progress_and_blocked(tmp_path):
    """softmax left as a stub, everything else written: stages that call softmax are blocked by it."""
    stub_softmax = (ROOT / "exercises" / "softmax.py").read_text()
    sub = variant(tmp_path, {})
    (sub / "softmax.py").write_text(stub_softmax)
    res = grade(sub, stages=["softmax", "dot_products", "projections", "scaling", "masking"])
    st = {n: (s.status, s.blocked_by) for n, s in res.stages.items()}
    assert st["softmax"] == ("not_started", None)
    assert st["dot_products"] == ("blocked", "softmax")
    assert st["masking"] == ("blocked", "softmax")
    assert st["projections"] == ("passed", None)
    assert st["scaling"] == ("passed", None)
    assert "blocked by softmax" in terminal(res)


def test_wrong_numbers_report_where(tmp_path):
    """A failing reference check says what was expected, what came back, and where."""
    sub = variant(tmp_path, {"scores.py": [("return x @ x.T", "return x @ x.T + 0.5")]})
    res = grade(sub, stages=["dot_products"])
    assert res.stages["dot_products"].status == "failed"
    msgs = [r.message for r in res.stages["dot_products"].checks if not r.passed]
    ref = next(m for m in msgs if m.startswith("dot_scores(x):"))
    assert "worst at row 0, column " in ref and "expected" in ref and "got" in ref and "input: [5, 3] float64" in ref


def test_cli_grade_exit_code_and_json(tmp_path):
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", "--stage", "softmax,scaling", "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "softmax" in p.stdout and "not started" in p.stdout
    data = json.loads(out.read_text())
    assert set(data["extra_data"]["stages"]) == {"softmax", "scaling"}


def test_cli_unknown_stage():
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", "--stage", "nope"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown stage nope" in p.stderr


def test_hints_climb_one_rung_per_call(tmp_path):
    from autograder.feedback.hints import HINTS, next_hint

    sub = tmp_path / "exercises"
    sub.mkdir()
    for f in (ROOT / "exercises").glob("*.py"):
        (sub / f.name).write_text(f.read_text())
    first = next_hint(sub)
    assert first.startswith("Hint 1/3 for stage 1 (softmax)")
    assert next_hint(sub).startswith("Hint 2/3 for stage 1 (softmax)")
    assert next_hint(sub, "kv_cache").startswith("Hint 1/3 for stage 7 (kv_cache)")
    # finishing softmax moves the default to the next stage with a stub
    (sub / "softmax.py").write_text((SOLUTIONS / "softmax.py").read_text())
    assert "stage 2 (dot_products)" in next_hint(sub)
    for ladder in HINTS.values():  # hints never contain solution lines
        for line in (SOLUTIONS / "softmax.py").read_text().splitlines():
            if "np." in line:
                assert all(line.strip() not in h for h in ladder)


def test_stubs_that_return_none_score_zero(tmp_path):
    """otter's stubs are `...` (the function returns None): no property or cost check may pass on that."""
    import re

    sub = tmp_path / "ellipsis"
    sub.mkdir()
    for f in (ROOT / "exercises").glob("*.py"):
        (sub / f.name).write_text(re.sub(r"raise NotImplementedError\(.*\)$", "...", f.read_text(), flags=re.M))
    res = grade(sub)
    assert res.score == 0 and res.bonus_score == 0, [r.check.id for s in res.stages.values() for r in s.checks if r.passed]


def test_stage_may_be_repeated_as_well_as_comma_separated(tmp_path):
    """`--stage a --stage b` grades both, as `--stage a,b` does (a repeated flag used to keep only the last)."""
    first, second = STAGES[0].name, STAGES[1].name
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "autograder", "grade", "--submission", str(SOLUTIONS), "--stage", first,
                    "--stage", second, "--json", str(out)], cwd=ROOT, check=True, capture_output=True, timeout=300)
    graded = json.loads(out.read_text())["extra_data"]["stages"]
    assert set(graded) == {first, second}


def test_every_check_earns_its_stage_points_through_that_stage_own_code(solutions_result):
    """A stage's points are earned by its own files: every check of the solutions' grade called code of its stage's
    files (grade.verdict.calls_own_code, enforced on every passing check under the tests' strict mode). Found by a stranger
    attacker: Article B's causal exponentials and their sum were computed with scaled_scores and softmax alone, so a
    masking.py that did not even parse kept 1 of its 16 points."""
    from autograder.grade.verdict import calls_own_code

    for name, sr in solutions_result.stages.items():
        for r in sr.checks:
            assert calls_own_code(name, r.called), (name, r.check.name, r.called)
    assert not calls_own_code("masking", ("scaled_scores", "softmax"))  # the old way of computing those two
    assert calls_own_code("heads", ("module_forward",))  # a driver counts through the files it reads


def test_a_stage_whose_file_does_not_parse_keeps_none_of_its_points(tmp_path):
    sub = variant(tmp_path, {"masking.py": [("import numpy as np\n", "import numpy as np\ndef (\n")]})
    res = grade(sub, stages=["masking"])
    assert res.stages["masking"].score == 0, [(r.check.name, r.passed) for r in res.stages["masking"].checks]
