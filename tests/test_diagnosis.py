"""Every catalogued mistake is caught and named, and correct-but-different code keeps full marks.

Each submission is a copy of the solutions with one change (conftest.variant).
"""
import pytest
from conftest import grade, variant

from autograder.feedback.advice import diagnosis_text
from autograder.feedback.inference import INFERRED_IDS
from autograder.report.terminal import terminal
from autograder.stages import CATALOGUE

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

NUMPY = ["softmax", "dot_products", "projections", "scaling", "masking"]

MUTANTS = {
    "softmax-unstable": ({"softmax.py": [(SM_EXP, "    e = np.exp(scores)\n")]}, ["softmax"]),
    "softmax-wrong-axis": ({"softmax.py": [("    scores = np.asarray(scores)\n",
                                            "    scores = np.asarray(scores)\n    axis = 0\n")]}, ["softmax"]),
    "softmax-no-exp": ({"softmax.py": [(SM_EXP, "    e = scores\n")]}, ["softmax"]),
    "softmax-fully-masked-silent": ({"softmax.py": [(SM_RAISE, "    if False:\n")]}, ["softmax"]),
    "scale-missing": ({"scaling.py": [(SCALE, "    return q @ np.swapaxes(k, -1, -2)")]}, ["scaling", "masking"]),
    "scale-by-dk": ({"scaling.py": [(SCALE, "    return (q @ np.swapaxes(k, -1, -2)) / d_k")]}, ["scaling", "masking"]),
    "scale-wrong-dim": ({"scaling.py": [("    d_k = q.shape[-1]\n", "    d_k = k.shape[-2]\n")]}, ["scaling", "masking"]),
    "mask-zero-not-neginf": ({"masking.py": [("return np.where(allowed, scores, -np.inf)",
                                              "return np.where(allowed, scores, 0.0)")]}, ["masking"]),
    "mask-after-softmax": ({"masking.py": [(
        "    if allowed is not None:\n        scores = apply_mask(scores, allowed)\n"
        "    weights = softmax(scores, axis=-1)  # [..., n_q, n_k]\n",
        "    weights = softmax(scores, axis=-1)\n    if allowed is not None:\n        weights = weights * allowed\n")]},
        ["masking"]),
    "mask-future-visible": ({"masking.py": [(MASK, "    return j >= i + (n_k - n_q)")]}, ["masking"]),
    "mask-excludes-self": ({"masking.py": [(MASK, "    return j < i + (n_k - n_q)")]}, ["masking"]),
    "mask-top-left": ({"masking.py": [(MASK, "    return j <= i")]}, ["masking"]),
    "mask-inverted": ({"masking.py": [("return np.where(allowed, scores, -np.inf)",
                                       "return np.where(allowed, -np.inf, scores)")]}, ["masking"]),
    "linear-attention": ({"masking.py": [(
        "    return weights @ v, weights  #",
        "    return q @ (np.swapaxes(k, -1, -2) @ v) / np.sqrt(q.shape[-1]), weights  #")]}, ["masking"]),
    "qk-swapped": ({"projections.py": [("q = x @ w_q", "q = x @ w_k"), ("k = x @ w_k", "k = x @ w_q")]},
                   ["projections"]),
    "heads-wrong-split": ({"heads.py": [(SPLIT, "    return x.reshape(*lead, n_heads, n, d_head)")]}, ["heads"]),
    "heads-no-merge-transpose": ({"heads.py": [("    x = np.swapaxes(x, -3, -2)  # [..., n, n_heads, d_head]\n", "")]},
                                 ["heads"]),
    "heads-no-output-projection": ({"heads.py": [("return merge_heads(out) @ w_o", "return merge_heads(out)")]},
                                   ["heads"]),
    "heads-scale-dmodel": ({"module.py": [(ATTEND_SCALE,
                                           "scores = q @ k.transpose(-2, -1) / (k.shape[-1] * self.n_heads) ** 0.5")]},
                           ["heads"]),
    "cache-top-left-causal": ({"module.py": [(".tril(diagonal=T_k - T)", ".tril(diagonal=0)")]}, ["kv_cache"]),
    "cache-missing-new-token": ({"module.py": [(APPEND, (
        "            k_new, v_new = k, v\n"
        "            k, v = cache.k[:, :, : cache.length], cache.v[:, :, : cache.length]\n"
        "            cache.append(k_new, v_new)\n"))]}, ["kv_cache"]),
    "cache-quadratic-step": ({"module.py": [
        (APPEND, APPEND + "            q = torch.cat([q.new_zeros(q.shape[0], self.n_heads, k.shape[-2] - q.shape[-2], "
                          "q.shape[-1]), q], -2)\n"),
        ("y = self.attend(q, k, v)  #", "y = self.attend(q, k, v)[..., -x.shape[1]:, :]  #")]}, ["kv_cache"]),
    "fused-materialized-mask": ({"fused.py": [(FUSED_IS_CAUSAL, "")]}, ["fused"]),
    "fused-dropout-in-eval": ({"fused.py": [("p = dropout_p if training else 0.0", "p = dropout_p")]}, ["fused"]),
    "fused-top-left": ({"fused.py": [(FUSED_IS_CAUSAL,
                                      "    return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)\n")]},
                       ["fused"]),
    "fused-float-mask": ({"fused.py": [("    allowed = torch.ones(T_q, T_k, dtype=torch.bool, device=q.device)",
                                        "    allowed = torch.ones(T_q, T_k, device=q.device)")]}, ["fused"]),
    "fused-layout": ({"fused.py": [("    T_q, T_k = q.shape[-2], k.shape[-2]\n",
                                    "    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, T, H, D]\n"
                                    "    T_q, T_k = q.shape[-2], k.shape[-2]\n"),
                                   ("        return F.scaled_dot_product_attention(q, k, v, dropout_p=p)\n",
                                    "        return F.scaled_dot_product_attention(q, k, v, dropout_p=p).transpose(1, 2)\n")]},
                     ["fused"]),
    "fused-not-fused": ({"fused.py": [("    T_q, T_k = q.shape[-2], k.shape[-2]\n", (
        "    T_q, T_k = q.shape[-2], k.shape[-2]\n"
        "    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
        "    if causal:\n"
        "        allowed = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)\n"
        "        scores = scores.masked_fill(~allowed, float('-inf'))\n"
        "    w = scores.softmax(-1)\n"
        "    if training and dropout_p:\n"
        "        w = F.dropout(w, dropout_p)\n"
        "    return w @ v\n"))]}, ["fused"]),
    # bonus stages
    "tiled-no-rescale": ({"tiled.py": [("alpha = np.exp(np.where(np.isneginf(m), -np.inf, m - safe))",
                                        "alpha = np.ones_like(m)")]}, ["tiled"]),
    "tiled-rescale-sum-only": ({"tiled.py": [("acc = alpha[:, None] * acc + p @ v[j0:j1]", "acc = acc + p @ v[j0:j1]")]},
                               ["tiled"]),
    "tiled-masked-row-nan": ({"tiled.py": [("        if np.any(l == 0):\n", "        if False:\n")]}, ["tiled"]),
    "backward-diagonal-softmax": ({"backward.py": [("ds = p * (dp - np.sum(dp * p, axis=1, keepdims=True))",
                                                    "ds = p * dp")]}, ["backward"]),
    "backward-missing-scale": ({"backward.py": [("dq = ds @ k / np.sqrt(d_k)", "dq = ds @ k")]}, ["backward"]),
    "dropout-not-inverted": ({"dropout.py": [("np.where(keep, weights / (1.0 - p), 0.0)", "np.where(keep, weights, 0.0)")]},
                             ["dropout"]),
    "dropout-in-eval": ({"dropout.py": [("if not training or p == 0.0:", "if p == 0.0:")]}, ["dropout"]),
    "dropout-keep-p": ({"dropout.py": [("keep = rng.random(weights.shape) >= p", "keep = rng.random(weights.shape) < p")]},
                       ["dropout"]),
    "costs-kv-missing-factor-2": ({"costs.py": [("return 2 * batch * n_layers", "return batch * n_layers")]}, ["costs"]),
    "costs-scores-not-squared": ({"costs.py": [("return n_tokens * n_tokens * n_heads", "return n_tokens * n_heads")]},
                                 ["costs"]),
}


def test_every_catalogue_id_has_a_mutant():
    assert set(MUTANTS) == set(CATALOGUE) - INFERRED_IDS  # the inferred ones: tests/test_inference.py


def named(res) -> set[str]:
    return {r.diagnosis for s in res.stages.values() for r in s.checks if r.diagnosis}


@pytest.mark.parametrize("mistake", sorted(MUTANTS))
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
}


@pytest.mark.parametrize("name", sorted(CORRECT_BUT_DIFFERENT))
def test_no_false_alarm(tmp_path, name):
    edits = CORRECT_BUT_DIFFERENT[name]
    stages = NUMPY if "fused.py" not in edits else ["fused"]
    res = grade(variant(tmp_path, edits), stages=stages)
    assert res.score == res.max_score, [(r.check.id, r.message[:300]) for s in res.stages.values()
                                        for r in s.checks if not r.passed]
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
