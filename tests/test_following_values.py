"""Fault localisation by following values: the student's function runs under the child's tracer, each line's
arrays are compared with the reference's intermediate steps, and the next step names the line where they
part, which is a line the fix changes. Each case is a copy of the solutions with one mistake written the way
a student would; the assertion reads the pointed line's text in that copy.
"""
import sys

import numpy as np
from conftest import SOLUTIONS, grade, variant

from autograder.feedback import localise

HEADS_Q = "        q = q.view(B, T, self.n_heads, -1).transpose(1, 2)  # [B, H, T, D]"
SCALE = "    return (q @ np.swapaxes(k, -1, -2)) / np.sqrt(d_k)"
SOFTMAX_SUM = "    return e / np.sum(e, axis=axis, keepdims=True)"
ALLOWED = "        allowed = torch.ones(T, T_k, dtype=torch.bool, device=q.device).tril(diagonal=T_k - T)  # [T, T_k]"
INIT_OUT = "        self.out = nn.Linear(d_model, d_model, bias=False)\n"


def pointed(tmp_path, edits: dict, stages: list[str]):
    """(the located place, the text of the line the next step names) for the copy with `edits`."""
    sub = variant(tmp_path, edits)
    res = grade(sub, stages=stages)
    assert res.stages[stages[-1]].status == "failed"
    loc = res.located[stages[-1]]
    assert f"{loc.file}:{loc.line}" in res.next_step and f"in {loc.function}, at " in res.next_step, res.next_step
    return loc, (sub / loc.file).read_text().splitlines()[loc.line - 1].strip()


def test_a_top_left_slice_of_a_mask_buffer_points_at_the_slice_in_attend(tmp_path):
    """A causal mask made once in __init__ (a 1024 x 1024 buffer, traced as its corner) and sliced from the top
    left in attend: right for the full forward, wrong for the cache's later chunks. The pointer goes to the
    slice, not to forward and not to the buffer, which is right."""
    edits = {"module.py": [(INIT_OUT, INIT_OUT + '        self.register_buffer("mask", torch.ones(1024, 1024, '
                                      'dtype=torch.bool).tril())\n'),
                           (ALLOWED, "        allowed = self.mask[:T, :T_k]  # [T, T_k]")]}
    loc, text = pointed(tmp_path, edits, ["kv_cache"])
    assert (loc.file, loc.function) == ("module.py", "attend")
    assert text == "allowed = self.mask[:T, :T_k]  # [T, T_k]"
    assert loc.steps[-1]["verdict"] == "wrong" and loc.steps[-1]["label"].startswith("the mask")


def test_a_wrong_reshape_in_the_head_splitting_helper_points_at_it(tmp_path):
    loc, text = pointed(tmp_path, {"module.py": [(HEADS_Q, "        q = q.reshape(B, self.n_heads, T, -1)  # [B, H, T, D]")]},
                        ["heads"])
    assert (loc.file, loc.function) == ("module.py", "heads_of")
    assert text.startswith("q = q.reshape(B, self.n_heads, T, -1)")
    assert loc.steps[-1]["verdict"] == "wrong" and "heads" in loc.steps[-1]["label"]


def test_a_view_that_raises_points_at_its_own_line_in_the_helper(tmp_path):
    loc, text = pointed(tmp_path, {"module.py": [(HEADS_Q, "        q = q.view(B, self.n_heads, T, -1).transpose(2, 3)")]},
                        ["heads"])
    assert (loc.file, loc.function) == ("module.py", "heads_of") and text.startswith("q = q.view(B, self.n_heads")


def test_a_scale_missing_from_one_line_of_a_multi_line_function(tmp_path):
    """The scores are right on the line before; the function hands them back unscaled: the return line."""
    edits = {"scaling.py": [(SCALE, "    scores = q @ np.swapaxes(k, -1, -2)  # [..., n_q, n_k]\n    return scores")]}
    loc, text = pointed(tmp_path, edits, ["scaling"])
    assert (loc.function, text.split("#")[0].strip()) == ("scaled_scores", "return scores")


def test_a_wrong_scale_on_its_own_line_points_at_that_line_not_the_product(tmp_path):
    edits = {"scaling.py": [(SCALE, "    raw = q @ np.swapaxes(k, -1, -2)\n    scaled = raw / d_k\n    return scaled")]}
    loc, text = pointed(tmp_path, edits, ["scaling"])
    assert text == "scaled = raw / d_k"
    assert [s["verdict"] for s in loc.steps] == ["right", "wrong"]


def test_a_wrong_scale_inside_attention_points_at_attentions_line(tmp_path):
    edits = {"masking.py": [("    scores = scaled_scores(q, k)  # [..., n_q, n_k]",
                             "    scores = q @ np.swapaxes(k, -1, -2) / q.shape[-1]  # [..., n_q, n_k]")]}
    loc, text = pointed(tmp_path, edits, ["softmax", "scaling", "masking"])
    assert (loc.function, text.split("#")[0].strip()) == ("attention", "scores = q @ np.swapaxes(k, -1, -2) / q.shape[-1]")


def test_a_wrong_axis_in_softmaxs_sum_points_at_the_sum(tmp_path):
    """The row sums have no intermediate's shape when taken over the other axis; the line after the last right
    value (the exponentials) is the sum's, not the division's."""
    edits = {"softmax.py": [(SOFTMAX_SUM, "    total = np.sum(e, axis=0, keepdims=True)  # [1, n]\n    return e / total")]}
    loc, text = pointed(tmp_path, edits, ["softmax"])
    assert (loc.function, text) == ("softmax", "total = np.sum(e, axis=0, keepdims=True)  # [1, n]")


def test_a_value_passed_along_unchanged_is_followed_to_the_method_that_made_it(tmp_path):
    """forward returns what merge returned, the merged heads, one step short of the output: merge's return."""
    loc, text = pointed(tmp_path, {"module.py": [("        return self.out(y)\n", "        return y\n")]}, ["heads"])
    assert (loc.function, text) == ("merge", "return y")


def test_nothing_traced_falls_back_to_the_first_line_and_says_so(tmp_path):
    """A mask built as Python lists leaves no array on any line: the function's first line, said as such."""
    body = ("    if n_k is None:\n        n_k = n_q\n"
            "    return [[j <= i for j in range(n_k)] for i in range(n_q)]  # top left, and lists")
    start = "    if n_k is None:\n"
    text = (SOLUTIONS / "masking.py").read_text()
    old = text[text.index(start):text.index("    return j <= i + (n_k - n_q)  # [n_q, n_k]\n")] + \
        "    return j <= i + (n_k - n_q)  # [n_q, n_k]"
    sub = variant(tmp_path, {"masking.py": [(old, body)]})
    res = grade(sub, stages=["softmax", "scaling", "masking"])
    loc = res.located["masking"]
    assert loc.function == "causal_mask" and "no values could be traced" in loc.how
    assert (sub / "masking.py").read_text().splitlines()[loc.line - 1].strip() == "if n_k is None:"
    assert "no values could be traced, so this is the function's first line" in res.next_step


def test_correct_code_is_never_pointed_at(solutions_result):
    assert not solutions_result.located and solutions_result.score == solutions_result.max_score


def test_the_first_parting_ignores_values_of_no_intermediates_shape_before_a_right_one():
    """On records alone: a right value, one of no step's shape, a wrong one: the line after the right one."""
    want = [("a", np.ones((2, 2))), ("b", np.full((2, 2), 2.0)), ("c", np.full((2, 2), 3.0))]
    probe = type("P", (), {"file": "f.py", "function": "g"})()

    def rec(line, value, name="x"):
        return {"file": "f.py", "function": "g", "qualname": "g", "line": line, "name": name,
                "value": np.asarray(value, dtype=float), "corner": False}

    records = [rec(1, np.ones((2, 2))), rec(2, np.ones(3)), rec(3, np.zeros((2, 2))), rec(4, np.zeros((2, 2)), "return")]
    assert localise.first_parting(records, want, probe)[2] == 2
    records = [rec(1, np.ones((2, 2))), rec(2, np.full((2, 2), 2.0)), rec(3, np.zeros((2, 2)), "return")]
    assert localise.first_parting(records, want, probe)[2] == 3
    records = [rec(1, np.ones((2, 2))), rec(2, np.full((2, 2), 3.0), "return")]  # all right: nothing to say
    assert localise.first_parting(records, want, probe) is None


def test_the_tracer_records_lines_of_methods_and_buffers(tmp_path):
    """The child's tracer on its own: a method's locals, an attribute set in __init__, a return value; lines of
    files outside the traced folder are not recorded."""
    sys.path.insert(0, str(tmp_path))
    (tmp_path / "toy_traced.py").write_text(
        "import numpy as np\n"
        "class A:\n"
        "    def __init__(self):\n"
        "        self.buf = np.arange(6.0).reshape(2, 3)\n"
        "    def f(self, x):\n"
        "        y = x * 2\n"
        "        y[0, 0] = -1\n"
        "        return y + self.buf\n")
    try:
        import toy_traced

        from autograder.child import tracer

        before = sys.gettrace()
        value, records = tracer.run(lambda: toy_traced.A().f(np.ones((2, 3))), str(tmp_path))
    finally:
        sys.path.remove(str(tmp_path))
    seen = [(r["function"], r["line"], r["name"]) for r in records]
    assert seen == [("__init__", 4, "self.buf"), ("f", 6, "y"), ("f", 7, "y"), ("f", 8, "return")], seen
    assert records[2]["value"][0, 0] == -1 and np.array_equal(records[3]["value"], value)
    assert sys.gettrace() is before  # the tracer is off again once the call returns


def test_the_report_shows_the_values_beside_the_references_up_to_the_parting(tmp_path):
    from autograder.report.html import render

    edits = {"scaling.py": [(SCALE, "    raw = q @ np.swapaxes(k, -1, -2)\n    scaled = raw / d_k\n    return scaled")]}
    sub = variant(tmp_path, edits)
    res = grade(sub, stages=["scaling"])
    page = render(res)
    section = page[page.index("Where your values part from the reference's"):]
    line = res.located["scaling"].line
    assert "q k^T" in section and f"the values part here, scaling.py:{line}" in section
    assert section.index("<code>raw</code>") < section.index("<code>scaled</code>")


def test_q_and_k_swapped_at_the_split_point_at_the_split_not_at_attend(tmp_path):
    """Found by a stranger student: `k, q, v = ...split(...)` made a `q` that holds the keys. Each array equals some
    reference step, so it once read as right and the pointer went to attend, which is correct. A variable named
    after a step (q, k, v) must hold that step: the pointer goes to the split."""
    split = "        q, k, v = self.qkv(x).split(C, dim=-1)  # each [B, T, C]"
    loc, text = pointed(tmp_path, {"module.py": [(split, split.replace("q, k, v =", "k, q, v ="))]}, ["heads"])
    assert (loc.file, loc.function) == ("module.py", "heads_of") and text.startswith("k, q, v = self.qkv(x)")


def test_a_zero_where_minus_infinity_belongs_points_at_apply_mask(tmp_path):
    """Found by a stranger TA: a 0 where the mask must put -inf was read as equal to -inf (the tolerance of an
    infinite expected value is infinite), so apply_mask's probe passed and the pointer went to its caller."""
    loc, text = pointed(tmp_path, {"masking.py": [("    return np.where(allowed, scores, -np.inf)",
                                                   "    return np.where(allowed, scores, 0.0)")]}, ["masking"])
    assert (loc.file, loc.function) == ("masking.py", "apply_mask") and text == "return np.where(allowed, scores, 0.0)"
