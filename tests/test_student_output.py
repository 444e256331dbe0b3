"""What the student's code prints is shown under the check it printed in; a call that never answers names
the line it was running."""
import json
import re

import pytest
from conftest import grade, variant

from autograder.instructor.build import student_readme
from autograder.report.gradescope_json import as_text
from autograder.report.html import render
from autograder.report.terminal import terminal
from autograder.report.watch_screen import screen
from autograder.sandbox.runner import PRINTED_LIMIT

D_K = "    d_k = q.shape[-1]\n"
WRONG_D_K = D_K + "    print('my d_k is', d_k, 'for q of shape', q.shape)\n    d_k = k.shape[-2]\n"


def failing(res, stage):
    return [r for r in res.stages[stage].checks if not r.passed]


def test_prints_are_shown_under_the_failing_check_everywhere(tmp_path):
    res = grade(variant(tmp_path, {"scaling.py": [(D_K, WRONG_D_K)]}), stages=["scaling"])
    bad = [r for r in failing(res, "scaling") if r.check.name == "reference"][0]
    assert bad.output == "my d_k is 4 for q of shape (3, 4)\n"  # this check's call only, not the others'
    text = terminal(res)
    block = text[text.index("x reference [scale-wrong-dim]"):]
    lines = block.splitlines()
    assert lines[2].strip() == "your code printed (stdout and stderr, during this check):", lines[:4]
    assert lines[3].strip() == "| my d_k is 4 for q of shape (3, 4)"
    assert "my d_k is 4 for q of shape (3, 4)" in render(res)
    assert "my d_k is 4 for q of shape (3, 4)" in screen(res, dict(res.stages), ["scaling"], color=False)
    gradescope = json.loads(as_text(res))
    assert any("my d_k is 4" in t["output"] for t in gradescope["tests"] if t.get("name", "").endswith("reference"))
    assert res.as_json()["stages"][0]["checks"][0].keys() >= {"output"}


def test_a_passing_checks_prints_are_not_shown(tmp_path):
    sub = variant(tmp_path, {"scaling.py": [(D_K, D_K + "    print('hello from scaled_scores')\n")]})
    res = grade(sub, stages=["scaling"])
    assert res.stages["scaling"].status == "passed"
    assert "hello from scaled_scores" not in terminal(res) and "your code printed" not in terminal(res)


def test_prints_are_capped_and_cleaned(tmp_path):
    sub = variant(tmp_path, {"scaling.py": [(D_K, WRONG_D_K + "    print('\\x1b[2J' + 'x' * 10000, flush=True)\n")]})
    res = grade(sub, stages=["scaling"])
    out = failing(res, "scaling")[0].output
    assert "\x1b" not in out  # a terminal would act on it
    assert len(out) < PRINTED_LIMIT + 200 and "more output not shown" in out
    assert out.startswith("my d_k is")


def test_prints_before_an_exception_are_kept(tmp_path):
    sub = variant(tmp_path, {"scaling.py": [(D_K, D_K + "    print('about to fail')\n    raise RuntimeError('boom')\n")]})
    res = grade(sub, stages=["scaling"])
    raised = [r for r in failing(res, "scaling") if r.check.name == "reference"][0]
    assert "RuntimeError: boom" in raised.message and raised.output == "about to fail\n"


def test_the_student_readme_says_where_prints_go():
    text = " ".join(student_readme().split())
    assert "shown under a failing check in `make grade`" in text and "`report.html`" in text


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_hang_names_the_line_it_was_running(tmp_path):
    loop = D_K + "    total = 0\n    while True:\n        total += d_k\n"
    sub = variant(tmp_path, {"scaling.py": [(D_K, loop)]})
    res = grade(sub, stages=["scaling"], timeout=1.0)
    hung = [r for r in failing(res, "scaling") if r.failure == "timeout"]
    assert hung, [(r.check.name, r.message) for r in failing(res, "scaling")]
    source = (sub / "scaling.py").read_text().splitlines()
    loop_lines = {i + 1 for i, line in enumerate(source) if line.strip() in ("while True:", "total += d_k")}
    for r in hung:
        m = re.search(r"it was running scaling\.py:(\d+), in scaled_scores", r.message)
        assert m and int(m.group(1)) in loop_lines, r.message
        assert r.where.file == "scaling.py" and r.where.line in loop_lines
    assert re.search(r"scaling\.py:(\d+)", res.next_step).group(1) in {str(n) for n in loop_lines}, res.next_step


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_hang_in_a_torch_stage_names_its_line(tmp_path):
    loop = "        B, T, C = x.shape\n        while T > 0:\n            C += 1\n"
    sub = variant(tmp_path, {"module.py": [("        B, T, C = x.shape\n", loop)]})
    res = grade(sub, stages=["heads"], timeout=2.0)
    hung = [r for r in failing(res, "heads") if r.failure == "timeout"]
    assert hung and all(re.search(r"it was running module\.py:\d+, in heads_of", r.message) for r in hung), \
        [(r.check.name, r.message) for r in failing(res, "heads")]


def test_a_warning_names_the_students_file_not_the_graders_folder(tmp_path):
    """Found by a stranger TA: numpy's RuntimeWarning from an unstable softmax showed the sandbox's scratch path
    (.../attn-grade-.../submission/softmax.py:27), which also made two runs' pages differ."""
    sub = variant(tmp_path, {"softmax.py": [("    top = np.max(scores, axis=axis, keepdims=True)\n",
                                             "    top = 0 * np.max(scores, axis=axis, keepdims=True)\n")]})
    res = grade(sub, stages=["softmax"])
    printed = " ".join(r.output for r in res.stages["softmax"].checks)
    assert "RuntimeWarning" in printed and "softmax.py:" in printed, printed
    assert "attn-grade-" not in printed and "/submission/" not in printed, printed
