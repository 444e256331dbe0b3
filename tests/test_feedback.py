"""Feedback that follows the mistake: where "Next step" points, what an error from an earlier stage
says, the hint ladder's state, `V=1`, the ending of a single-stage run, and watch's one screen."""
import ast
import os
import re
import shutil
import subprocess
import time

import pytest
from conftest import EXERCISES, MUTANTS, ROOT, SOLUTIONS, Watching, grade, variant

from autograder.feedback.hints import next_hint, remember_run


def span_of(path, name: str) -> tuple[int, int]:
    """(first, last) line of the class or function `name` in the file."""
    node = next(n for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name)
    return node.lineno, node.end_lineno


def test_a_module_failure_points_at_module_py(tmp_path):
    sub = variant(tmp_path, {"module.py": [("q, k, v = self.qkv(x).split(C, dim=-1)", "k, q, v = self.qkv(x).split(C, dim=-1)")]})
    res = grade(sub, stages=["heads"])
    step = res.next_step
    line = int(re.search(r"module\.py:(\d+)", step).group(1))  # a line inside the wrong function
    first, last = span_of(sub / "module.py", "CausalSelfAttention")
    assert first <= line <= last, step


def test_a_named_mask_mistake_points_at_the_mask_not_at_the_raise(tmp_path):
    sub = variant(tmp_path, MUTANTS["mask-excludes-self"][0])
    res = grade(sub, stages=["softmax", "scaling", "masking"])
    step = res.next_step
    assert "mask-excludes-self" in step
    line = int(re.search(r"masking\.py:(\d+)", step).group(1))  # a line inside causal_mask
    first, last = span_of(sub / "masking.py", "causal_mask")
    assert "in causal_mask," in step and first <= line <= last, step


def test_an_error_in_an_earlier_stage_names_the_calling_function(tmp_path):
    sub = variant(tmp_path, {"softmax.py": [("    if np.any(np.isneginf(top)):\n", "    if np.any(np.isneginf(scores)):\n")]})
    res = grade(sub, stages=["softmax", "scaling", "masking"])
    messages = [r.message for r in res.stages["masking"].checks if r.error]
    assert any("in stage 1 (softmax)'s code, called from your attention at" in m for m in messages), messages


def test_hints_follow_the_latest_run_and_lead_with_its_diagnosis(tmp_path):
    sub = variant(tmp_path, MUTANTS["mask-top-left"][0])
    remember_run(grade(sub, stages=["masking"]))
    first = next_hint(sub)
    assert "mask-top-left" in first and "stage 5 (masking)" in first
    assert all("mask-top-left" in next_hint(sub) for _ in range(2))  # the diagnosis's own ladder (3 rungs)
    assert next_hint(sub).startswith("Hint 1/3 for stage 5 (masking)")
    remember_run(grade(sub, stages=["softmax"]))  # a later run of a stage that passes: masking still fails
    assert next_hint(sub).startswith("Hint 2/3 for stage 5 (masking)")
    fixed = tmp_path / "submission"
    shutil.copy2(SOLUTIONS / "masking.py", fixed / "masking.py")
    remember_run(grade(fixed, stages=["masking"]))
    assert "no hint needed" in next_hint(fixed)


def test_single_stage_run_ends_with_the_next_stage():
    res = grade(SOLUTIONS, stages=["softmax"])
    assert res.next_step.startswith("softmax passes. Next: stage 2 (dot_products), `make grade STAGE=dot_products`")


def test_make_grade_v1_shows_every_failing_check(tmp_path):
    if not (ROOT / ".venv" / ".student").exists():
        import pytest

        pytest.skip("needs the .venv that `make test` sets up")
    sub = variant(tmp_path, MUTANTS["softmax-no-exp"][0])

    def run(*extra):
        p = subprocess.run(["make", "-s", "grade", f"SUBMISSION={sub}", "STAGE=softmax", *extra], cwd=ROOT,
                           capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})
        assert p.returncode == 0, p.stderr
        return p.stdout

    short, full = run(), run("V=1")
    assert "more failing checks (`make grade V=1` shows them all)" in short
    assert "more failing checks" not in full and full.count("\n  x ") > short.count("\n  x ") >= 4


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_watch_draws_one_screen_per_save(tmp_path):
    sub = tmp_path / "exercises"
    shutil.copytree(EXERCISES, sub)
    shutil.copy2(SOLUTIONS / "softmax.py", sub / "softmax.py")
    w = Watching(sub, "--interval", "0.1")
    try:
        assert w.wait_for("Next step: start stage 2")
        time.sleep(0.5)
        w.clear()
        shutil.copy2(SOLUTIONS / "scaling.py", sub / "scaling.py")  # scaling, and masking, heads... after it
        assert w.wait_for("stage 4 scaling: passed")
        deadline = time.monotonic() + 90  # then the stages that use it, on the same screen
        while time.monotonic() < deadline and not re.search(r"Next step: (?!grading)", w.text):
            time.sleep(0.05)
        time.sleep(0.5)
        out = w.text
    finally:
        w.stop()
    assert out.count("\033[2J") == 1, "one screen per save: cleared once, then updated in place"
    assert "core stages pass" in out and "points" in out
    assert "every stage passes" not in out


def test_a_syntax_error_is_named_as_one_not_as_a_wrong_value(tmp_path):
    """A stray indent: the next step names the exception at its line, never 'that function's own output is wrong'."""
    sub = variant(tmp_path, {"softmax.py": [("    scores = np.asarray(scores)\n", "      scores = np.asarray(scores)\n")]})
    res = grade(sub, stages=["softmax"])
    assert "raises IndentationError" in res.next_step and "own output is wrong" not in res.next_step, res.next_step
    assert "softmax.py:" in res.next_step


def test_an_error_raised_in_a_passing_stage_blames_the_stage_that_fed_it(tmp_path):
    """Found by a stranger student: an inverted mask makes softmax (correct, passing) raise on a row with nothing
    allowed when heads calls it through masking. heads is blocked by masking, not failed on its own."""
    sub = variant(tmp_path, {"masking.py": [("    return np.where(allowed, scores, -np.inf)",
                                             "    return np.where(allowed, -np.inf, scores)")]})
    res = grade(sub, stages=["softmax", "masking", "heads"])
    assert res.stages["softmax"].status == "passed" and res.stages["masking"].status == "failed"
    assert res.stages["heads"].status == "blocked" and res.stages["heads"].blocked_by == "masking"


# -- found by cold students (issue 42's sets) ---------------------------------------------------------------

DRAW = "    keep = rng.random(weights.shape) >= p  # True with probability 1 - p\n"


@pytest.mark.parametrize("draw, passes", [
    ("    keep = rng.random(weights.shape[::-1]).T >= p\n", False),  # another draw: the docstring's rule broken
    ("    keep = rng.random(weights.shape) < 1 - p\n", True),  # the same draw read from the other end: correct
    ("    keep = rng.uniform(size=weights.shape) >= p\n", True),  # the same numbers, drawn by another name
])
def test_dropout_mask_is_the_docstrings_draw(tmp_path, draw, passes):
    """A mask drawn in the transposed shape passed every statistical check; a correct mask kept either way keeps
    the point."""
    res = grade(variant(tmp_path, {"dropout.py": [(DRAW, draw)]}), stages=["dropout"])
    check = next(r for r in res.stages["dropout"].checks if r.check.name == "dropout_uses_the_rng")
    assert check.passed == passes, check.message
    assert passes or "not those of the docstring's draw" in check.message
    assert res.stages["dropout"].status == ("passed" if passes else "failed")


def test_a_batch_left_out_of_the_cache_size_is_not_called_a_missing_factor_2(tmp_path):
    """kv_cache_floats without its batch had been named costs-kv-missing-factor-2: the check's own batch was 2."""
    sub = variant(tmp_path, {"costs.py": [("return 2 * batch * ", "return 2 * ")]})
    res = grade(sub, stages=["costs"])
    assert res.stages["costs"].status == "failed"
    assert "costs-kv-missing-factor-2" not in res.next_step + " ".join(res.stages["costs"].diagnoses), res.next_step


def test_a_hand_made_fused_attention_points_at_its_scores_line(tmp_path):
    """Found by a stranger student: the T x T scores built by hand (fused-not-fused) pointed at fused_attention's def
    line; it points at the line that makes them, wherever it is written."""
    body = ("    d = q.shape[-1]\n"
            "    T_q, T_k = q.shape[-2], k.shape[-2]\n"
            "    keep = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q) if causal else None\n"
            "    att = torch.matmul(q, k.transpose(-2, -1)) / d ** 0.5  # [B, H, T_q, T_k]\n"
            "    if keep is not None:\n"
            "        att = att.masked_fill(~keep, float('-inf'))\n"
            "    return torch.softmax(att, dim=-1) @ v\n")
    source = (SOLUTIONS / "fused.py").read_text()
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fused_attention")
    lines = source.splitlines(keepends=True)
    doc_end = fn.body[0].end_lineno if isinstance(fn.body[0], ast.Expr) else fn.lineno
    sub = variant(tmp_path, {})
    (sub / "fused.py").write_text("".join(lines[:doc_end]) + body + "".join(lines[fn.end_lineno:]))
    res = grade(sub, stages=["fused"])
    step = res.next_step
    assert "fused-not-fused" in step, step
    line = int(re.search(r"fused\.py:(\d+)", step).group(1))
    assert "torch.matmul(q, k.transpose" in (sub / "fused.py").read_text().splitlines()[line - 1], step
