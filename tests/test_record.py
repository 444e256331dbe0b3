"""The graded record is the one source every renderer reads: statuses and failure kinds as enums, the
diagnosis as data beside the evidence, where it happened, and the next step computed once."""
import ast
import json
import subprocess
import sys

import pytest
from conftest import GRADER_ROOT, MUTANTS, ROOT, grade, variant

from autograder import grade as grading
from autograder.feedback.sources import def_line_number, first_stub
from autograder.instructor.class_report import troubles
from autograder.report import RENDERERS
from autograder.report.gradescope_json import md_text, results_json
from autograder.report.terminal import terminal
from autograder.report.watch_screen import screen
from autograder.results import CheckStatus, Failure, StageStatus, Where
from autograder.stages import BONUS_POINTS, CORE_POINTS

RENDERER_FILES = [*sorted((GRADER_ROOT / "report").glob("*.py")), GRADER_ROOT / "instructor" / "class_report.py",
                  GRADER_ROOT / "notebook_cells.py"]
LOOP = ("    weights = softmax(dot_scores(x), axis=-1)",
        "    while True:\n        pass\n    weights = softmax(dot_scores(x), axis=-1)")


def test_the_record_is_plain_data(solutions_result):
    data = json.loads(json.dumps(solutions_result.as_json()))
    assert (data["score"], data["bonus_score"]) == (CORE_POINTS, BONUS_POINTS)
    assert data["next_step"] == solutions_result.next_step != ""
    checks = [c for s in data["stages"] for c in s["checks"]]
    assert {c["status"] for c in checks} == {"passed"} and not any(c["failure"] for c in checks)
    assert {s["status"] for s in data["stages"]} == {"passed"}


def test_stubs_raise_where_their_stub_is(stubs_result):
    sr = stubs_result.stages["softmax"]
    assert sr.status == StageStatus.NOT_STARTED
    path, line = first_stub(stubs_result.snapshot, "softmax")
    first = sr.checks[0]
    assert (first.status, first.failure) == (CheckStatus.FAILED, Failure.RAISED)
    assert first.where == Where(path.name, "softmax", line)


def test_a_diagnosis_is_data_not_a_line_of_the_message(tmp_path):
    res = grade(variant(tmp_path, MUTANTS["softmax-no-exp"][0]), stages=["softmax"])
    named = [r for r in res.stages["softmax"].checks if r.diagnosis]
    assert named and all(r.diagnoses == ["softmax-no-exp"] and r.failure == Failure.WRONG for r in named)
    assert not any("softmax-no-exp" in r.message or r.message.startswith("diagnosis") for r in named)
    line = def_line_number(res.snapshot, "softmax.py", "softmax")
    assert named[0].where == Where("softmax.py", "softmax", line)
    tests = [t for t in results_json(res)["tests"] if t["extra_data"]["diagnosis"]]
    assert all("**Diagnosis** softmax-no-exp:" in t["output"] for t in tests)


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_hang_is_a_timeout_and_the_class_report_reads_the_kind(tmp_path):
    res = grade(variant(tmp_path, {"scores.py": [LOOP]}), stages=["dot_products"], timeout=1.0)
    kinds = [r.failure for r in res.stages["dot_products"].checks if not r.passed]
    first, n = kinds.index(Failure.TIMEOUT), grading.ABORTS_PER_STAGE  # each hang costs its check; a second stops
    assert kinds[first:] == [Failure.TIMEOUT] * n + [Failure.AFTER_ABORT] * (len(kinds) - first - n), kinds
    assert len(kinds) > first + n  # the stage did stop: some checks were not run
    found = troubles(results_json(res))
    assert found and found[0].startswith("dot_products: your code did not finish")
    reworded = results_json(res)
    for t in reworded["tests"]:  # the class report goes by the kind, not by the words
        t["output"] = t["output"].replace("did not finish", "stopped")
    assert troubles(reworded) == found


def test_the_next_step_is_computed_once_and_renderers_only_show_it(tmp_path, monkeypatch):
    calls = []
    real = grading.next_step
    monkeypatch.setattr(grading, "next_step", lambda res: calls.append(1) or real(res))
    res = grade(variant(tmp_path, MUTANTS["mask-top-left"][0]), stages=["masking"])
    shown = {r.name: r.render(res) for r in RENDERERS if not r.pictures}
    def unwrapped(text: str) -> str:  # the watch screen wraps its lines at 80 columns
        return "".join(text.split())

    assert res.next_step in terminal(res)
    assert unwrapped(res.next_step) in unwrapped(screen(res, dict(res.stages), ["masking"], False))
    assert json.loads(shown["record"])["next_step"] == res.next_step
    loc = res.located["masking"]  # the localised function is part of the record, and of the step made from it
    assert json.loads(shown["record"])["located"]["masking"] == vars(loc) and f"in {loc.function}," in res.next_step
    assert md_text(res.next_step) in json.loads(shown["json"])["output"]
    assert len(calls) == 1


def test_renderers_neither_compute_nor_read_the_submission():
    """No renderer calls the advice that reads the submission, nor takes anything from the modules that
    read it but `rel` (how a path is shown), nor parses a diagnosis out of a message."""
    for path in RENDERER_FILES:
        tree = ast.parse(path.read_text())
        calls = [n.func for n in ast.walk(tree) if isinstance(n, ast.Call)]
        called = {f.id if isinstance(f, ast.Name) else getattr(f, "attr", "") for f in calls}
        taken = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert "next_step" not in called, path.name
        assert not {(m, a) for m, a in taken if m in ("sources", "safe_files") and a != "rel"}, path.name
        assert "startswith(\"diagnosis" not in path.read_text(), path.name


def test_each_listed_renderer_is_a_grade_option():
    out = subprocess.run([sys.executable, "-m", "autograder", "grade", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert all(f"--{r.name} FILE" in out for r in RENDERERS)
