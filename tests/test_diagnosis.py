"""Every catalogued mistake is caught and named, and correct-but-different code keeps full marks.

Each submission is a copy of the solutions with one change (conftest.variant).
"""
import pytest
from conftest import MUTANTS, grade, tiered, variant

from autograder.evidence.inference import INFERRED_IDS
from autograder.feedback.advice import diagnosis_text
from autograder.report.terminal import terminal
from autograder.stages import CATALOGUE, STAGES

SM_EXP = "    e = np.exp(scores - top)  # same shape as scores; the largest entry becomes exp(0) = 1\n"
SM_RAISE = "    if np.any(np.isneginf(top)):\n"
SCALE = "    return (q @ np.swapaxes(k, -1, -2)) / np.sqrt(d_k)"
MASK = "    return j <= i + (n_k - n_q)  # [n_q, n_k]"
SPLIT = ("    x = x.reshape(*lead, n, n_heads, d_head)  # [..., n, n_heads, d_head]\n"
         "    return np.swapaxes(x, -3, -2)  # [..., n_heads, n, d_head]")
ATTEND_SCALE = "scores = q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5"
FUSED_IS_CAUSAL = ("    if T_q == T_k:\n"
                   "        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)\n")
APPEND = "            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included\n"

NUMPY = [s.name for s in STAGES if not s.torch and not s.bonus]


def test_every_catalogue_id_has_a_mutant():
    assert set(MUTANTS) == set(CATALOGUE) - INFERRED_IDS  # the inferred ones: tests/test_inference.py


def named(res) -> set[str]:
    return {r.diagnosis for s in res.stages.values() for r in s.checks if r.diagnosis}


@pytest.mark.parametrize("mistake", tiered([i for i in CATALOGUE if i in MUTANTS], lambda i: CATALOGUE[i].stage))
def test_mistake_is_caught_and_named(tmp_path, mistake):
    edits, stages = MUTANTS[mistake]
    res = grade(variant(tmp_path, edits), stages=stages)
    home = CATALOGUE[mistake].stage if CATALOGUE[mistake].stage in stages else stages[0]
    assert res.stages[stages[0]].score < res.stages[stages[0]].max_score, f"{stages[0]} lost no points"
    assert named(res) == {mistake}, (named(res), [(r.check.id, r.message[:200]) for s in res.stages.values()
                                                  for r in s.checks if not r.passed])
    assert res.stages[home].status == "failed"
    assert mistake in terminal(res)


CORRECT_BUT_DIFFERENT = {
    "mask -1e30 instead of -inf": {"masking.py": [("return np.where(allowed, scores, -np.inf)",
                                                    "return np.where(allowed, scores, -1e30)")]},
    "einsum instead of @": {"scores.py": [("return x @ x.T  #", 'return np.einsum("id,jd->ij", x, x)  #')],
                            "scaling.py": [(SCALE, '    return np.einsum("...id,...jd->...ij", q, k) / np.sqrt(d_k)')]},
    "log-sum-exp softmax": {"softmax.py": [(SM_EXP + "    return e / np.sum(e, axis=axis, keepdims=True)\n",
                                            "    lse = top + np.log(np.sum(np.exp(scores - top), axis=axis, keepdims=True))\n"
                                            "    return np.exp(scores - lse)\n")]},
    "float32 softmax": {"softmax.py": [("    scores = np.asarray(scores)\n",
                                        "    scores = np.asarray(scores, dtype=np.float32)\n")]},
    "sdpa imported by name": {"fused.py": [("import torch.nn.functional as F\n",
                                            "import torch.nn.functional as F\n"
                                            "from torch.nn.functional import scaled_dot_product_attention as sdpa\n"),
                                           ("return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)",
                                            "return sdpa(q, k, v, dropout_p=p, is_causal=True)")]},
    "gqa heads repeated by broadcast and reshape": {"gqa.py": [(
        "    return np.repeat(kv, n_rep, axis=-3)",
        "    *lead, g, n, d = kv.shape\n"
        "    return np.broadcast_to(kv[..., None, :, :], (*lead, g, n_rep, n, d)).reshape(*lead, g * n_rep, n, d)")]},
    "rope with complex numbers": {"rope.py": [(
        "    a, b = x[..., :half], x[..., half:]",
        "    z = (x[..., :half] + 1j * x[..., half:]) * (cos + 1j * sin)\n"
        "    a, b = z.real, z.imag\n"
        "    cos, sin = np.ones_like(cos), np.zeros_like(sin)")]},
    "rope cache of keys not yet rotated": {"rope.py": [(
        "    q, k = rotate(q, offset=L), rotate(k, offset=L)  # positions L .. L + t - 1\n",
        ""), ("out, _ = attention(q, k, v, causal_mask(t, L + t))",
              "out, _ = attention(rotate(q, offset=L), rotate(k), v, causal_mask(t, L + t))")]},
}
BONUS_OF_FILE = {f: s.name for s in STAGES if s.bonus for f in s.files}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CORRECT_BUT_DIFFERENT))
def test_no_false_alarm(tmp_path, name):
    edits = CORRECT_BUT_DIFFERENT[name]
    bonus = sorted({BONUS_OF_FILE[f] for f in edits if f in BONUS_OF_FILE})
    stages = bonus or (NUMPY if "fused.py" not in edits else ["fused"])
    res = grade(variant(tmp_path, edits), stages=stages)
    assert set(res.stages) == set(stages)
    assert all(s.score == s.max_score > 0 for s in res.stages.values()), [
        (r.check.id, r.message[:300]) for s in res.stages.values() for r in s.checks if not r.passed]
    assert not named(res)


def test_blocked_stage_names_the_earlier_diagnosis(tmp_path):
    res = grade(variant(tmp_path, MUTANTS["softmax-no-exp"][0]), stages=["softmax", "dot_products"])
    assert res.stages["dot_products"].status == "blocked" and res.stages["dot_products"].blocked_by == "softmax"
    assert "blocked by softmax (softmax-no-exp)" in terminal(res)


def test_unmatched_failure_claims_no_diagnosis(tmp_path):
    res = grade(variant(tmp_path, {"scaling.py": [(SCALE, SCALE + " * 1.3")]}), stages=["scaling"])
    assert res.stages["scaling"].score < res.stages["scaling"].max_score and not named(res)


def test_own_mistake_is_failed_not_blocked(tmp_path):
    """masking has its own diagnosed mistake: it is 'failed', even though softmax (which it calls) fails too."""
    edits = {"softmax.py": MUTANTS["softmax-unstable"][0]["softmax.py"],
             "masking.py": MUTANTS["mask-top-left"][0]["masking.py"]}
    res = grade(variant(tmp_path, edits), stages=["softmax", "scaling", "masking"])
    assert res.stages["softmax"].diagnoses == ["softmax-unstable"]
    assert res.stages["masking"].status == "failed" and res.stages["masking"].diagnoses == ["mask-top-left"]


def test_two_mistakes_at_once_are_both_named(tmp_path):
    """No scale and a zeroed mask: the attention output matches neither alone, but both together."""
    edits = {"scaling.py": MUTANTS["scale-missing"][0]["scaling.py"],
             "masking.py": MUTANTS["mask-zero-not-neginf"][0]["masking.py"]}
    res = grade(variant(tmp_path, edits), stages=["softmax", "scaling", "masking"])
    combined = [r for r in res.stages["masking"].checks if r.diagnosis == "scale-missing+mask-zero-not-neginf"]
    assert combined, [(r.check.id, r.diagnosis) for r in res.stages["masking"].checks if not r.passed]
    assert combined[0].diagnoses == ["scale-missing", "mask-zero-not-neginf"]
    assert not combined[0].message.startswith("diagnosis")  # the evidence only: the diagnosis is data
    text = terminal(res)
    assert "Diagnosis scale-missing" in text and "Diagnosis mask-zero-not-neginf" in text
    assert "2 mistakes at once" in diagnosis_text(combined[0].diagnosis)


def test_earlier_stage_mistake_seen_later_blocks(tmp_path):
    """scale-missing shows in masking's attention too: masking is blocked by scaling, naming it."""
    res = grade(variant(tmp_path, MUTANTS["scale-missing"][0]), stages=["softmax", "scaling", "masking"])
    assert res.stages["masking"].status == "blocked" and res.stages["masking"].blocked_by == "scaling"
    assert "blocked by scaling (scale-missing)" in terminal(res)
