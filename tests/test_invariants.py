"""Rules that hold on every call the grader makes, whatever the check: the arguments are unchanged afterwards,
an error contract holds slice by slice, and every path of the module (fused or not, with a cache, in chunks)
equals the full forward. Each submission is a copy of the solutions that breaks only that rule."""
import numpy as np
import pytest
from conftest import SOLUTIONS, grade, variant

from autograder.child import invariants
from autograder.declarations import INPUTS_RULE

SM_BODY = ("    e = np.exp(scores - top)  # same shape as scores; the largest entry becomes exp(0) = 1\n"
           "    return e / np.sum(e, axis=axis, keepdims=True)\n")
SM_IN_PLACE = ("    scores -= top\n    np.exp(scores, out=scores)\n"
               "    scores /= np.sum(scores, axis=axis, keepdims=True)\n    return scores\n")
MASK_RETURN = "    return np.where(allowed, scores, -np.inf)\n"
MASK_TEST = "    if not np.all(np.any(allowed, axis=-1)):\n"
DROPOUT_RETURN = "    return np.where(keep, weights / (1.0 - p), 0.0)\n"
FUSED_PATH = "            return fused_attention(q, k, v, causal=True)\n"


def failing(res, stage: str) -> dict[str, str]:
    return {r.check.name: r.message for r in res.stages[stage].checks if not r.passed}


def test_the_invariant_notes_each_changed_argument_by_name():
    invariants.CHANGED.clear()

    def scale(scores, factor, out=None):
        scores *= factor
        return scores

    a, b = np.ones(3), np.ones(2)
    invariants.call(scale, a, 2.0, out=b)
    assert invariants.CHANGED == [{"function": "test_the_invariant_notes_each_changed_argument_by_name.<locals>.scale",
                                   "argument": "scores"}]
    invariants.CHANGED.clear()
    nan = np.array([np.nan, -np.inf])  # NaN and -inf left alone are not a change
    invariants.call(lambda x: x + 1, nan)
    invariants.call(lambda x: x, nan)  # returning the argument itself is fine
    assert invariants.CHANGED == []


def test_the_invariant_sees_a_tensor_changed_in_place():
    torch = pytest.importorskip("torch")
    invariants.CHANGED.clear()
    x = torch.ones(2, 3)
    invariants.call(lambda q, k: q.mul_(2) + k, x, torch.zeros(2, 3))
    assert [c["argument"] for c in invariants.CHANGED] == ["q"]
    invariants.CHANGED.clear()


@pytest.mark.parametrize("case", ["softmax", "apply_mask", "attention_dropout"])
def test_an_in_place_function_fails_its_stage_naming_the_argument(tmp_path, case):
    edits, stage, argument = {
        "softmax": ({"softmax.py": [(SM_BODY, SM_IN_PLACE)]}, "softmax", "scores"),
        "apply_mask": ({"masking.py": [(MASK_RETURN, "    scores[~allowed] = -np.inf\n    return scores\n")]},
                       "masking", "scores"),
        "attention_dropout": ({"dropout.py": [(DROPOUT_RETURN, "    weights *= keep / (1.0 - p)\n    return weights\n")]},
                              "dropout", "weights"),
    }[case]
    res = grade(variant(tmp_path, edits), stages=[stage])
    assert res.stages[stage].status == "failed"
    messages = failing(res, stage)
    said = f"{case} changed its argument `{argument}` in place"
    assert messages and all(said in m and INPUTS_RULE in m for m in messages.values()), messages


def test_copying_first_then_working_in_place_keeps_full_marks(tmp_path):
    """In-place steps on a copy of its own are correct code: no false alarm."""
    sub = variant(tmp_path, {"softmax.py": [("    scores = np.asarray(scores)\n",
                                             "    scores = np.array(scores, dtype=float)  # a copy of its own\n"),
                                            (SM_BODY, SM_IN_PLACE)]})
    res = grade(sub, stages=["softmax"])
    assert res.stages["softmax"].score == res.stages["softmax"].max_score, failing(res, "softmax")


def test_a_whole_array_neginf_test_fails_softmax(tmp_path):
    """The rule holds per slice: one all -inf row among good ones must raise, not come back NaN."""
    sub = variant(tmp_path, {"softmax.py": [("    if np.any(np.isneginf(top)):\n",
                                             "    if np.all(np.isneginf(scores)):\n")]})
    res = grade(sub, stages=["softmax"])
    assert res.stages["softmax"].status == "failed"
    messages = failing(res, "softmax")
    assert list(messages) == ["all_neginf_raises"], messages
    assert "row 1 is all -inf" in messages["all_neginf_raises"]
    assert "test each slice" in messages["all_neginf_raises"]


def test_a_whole_array_empty_row_test_fails_apply_mask(tmp_path):
    sub = variant(tmp_path, {"masking.py": [(MASK_TEST, "    if not np.any(allowed):\n")]})
    res = grade(sub, stages=["masking"])
    assert res.stages["masking"].status == "failed"
    messages = failing(res, "masking")
    assert list(messages) == ["apply_mask_empty_row_raises"], messages


def test_an_empty_column_is_no_error(tmp_path):
    """A test of the columns too (keys no query sees) raises where it must not."""
    sub = variant(tmp_path, {"masking.py": [(MASK_TEST, "    if not (np.all(np.any(allowed, axis=-1)) and "
                                                        "np.all(np.any(allowed, axis=-2))):\n")]})
    res = grade(sub, stages=["masking"])
    assert "key 1 is seen by no query" in failing(res, "masking").get("apply_mask_empty_row_raises", ""), \
        failing(res, "masking")


def test_a_fused_path_calling_sdpa_is_causal_fails_under_a_cache(tmp_path):
    """Right on the full forward (T_q = T_k), wrong in every decode step: the fused stage fails, naming why."""
    sub = variant(tmp_path, {"module.py": [(FUSED_PATH, "            return torch.nn.functional."
                                                        "scaled_dot_product_attention(q, k, v, is_causal=True)\n")]})
    res = grade(sub, stages=["fused"])
    assert res.stages["fused"].status == "failed"
    messages = failing(res, "fused")
    assert list(messages) == ["module_fused_with_cache"], messages
    assert "is_causal=True for 1 query and 2 keys" in messages["module_fused_with_cache"]


def test_a_fused_path_that_aligns_bottom_right_itself_keeps_full_marks(tmp_path):
    """Calling SDPA in the module directly is fine when the mask is right for T_q != T_k."""
    sub = variant(tmp_path, {"module.py": [(FUSED_PATH, (
        "            T, T_k = q.shape[-2], k.shape[-2]\n"
        "            if T == T_k:\n"
        "                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
        "            allowed = torch.ones(T, T_k, dtype=torch.bool).tril(diagonal=T_k - T)\n"
        "            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)\n"))]})
    res = grade(sub, stages=["fused"])
    assert res.stages["fused"].score == res.stages["fused"].max_score, failing(res, "fused")


def test_apply_mask_returning_its_scores_when_nothing_is_masked_fails(tmp_path):
    """The docstring promises a new array: handing back `scores` itself (here when every key is allowed)
    lets a caller who changes the result change its scores too."""
    sub = variant(tmp_path, {"masking.py": [("    return np.where(allowed, scores, -np.inf)\n",
                                          "    if np.all(allowed):\n        return scores\n"
                                          "    return np.where(allowed, scores, -np.inf)\n")]})
    res = grade(sub, stages=["softmax", "scaling", "masking"])
    masking = res.stages["masking"]
    assert masking.score < masking.max_score
    assert any("a new array" in r.message for r in masking.checks if not r.passed)


def test_a_cache_kept_outside_its_preallocated_buffers_fails(tmp_path):
    """Found by a stranger student: an append that grows its own tensors with torch.cat (the preallocated k, v never
    written) returned the right prefixes and passed. The docstring says k, v are allocated once and append writes at
    `length`: the buffers must hold what was appended, and the stage fails, saying so."""
    sub = variant(tmp_path, {"kv_cache.py": [(
        "        self.k[:, :, self.length : end] = k_new\n        self.v[:, :, self.length : end] = v_new\n"
        "        self.length = end\n        return self.k[:, :, :end], self.v[:, :, :end]  # views, [B, H, length, D]\n",
        "        self._k = k_new if self.length == 0 else torch.cat([self._k, k_new], dim=2)\n"
        "        self._v = v_new if self.length == 0 else torch.cat([self._v, v_new], dim=2)\n"
        "        self.length = end\n        return self._k, self._v\n")]})
    st = grade(sub, stages=["kv_cache"]).stages["kv_cache"]
    bad = {r.check.name: r.message for r in st.checks if not r.passed}
    assert "append_returns_prefix" in bad and "do not hold them" in bad["append_returns_prefix"], bad
    ok = grade(SOLUTIONS, stages=["kv_cache"]).stages["kv_cache"]
    assert ok.score == ok.max_score
