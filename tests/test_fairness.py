"""Correct code written the way other people write attention keeps every point, and each message
blames the student's code only for what it did. Each case here lost points before its fix."""
import re
import shutil
from pathlib import Path

import pytest
from conftest import SOLUTIONS, grade, variant

pytestmark = pytest.mark.slow  # builds or runs a whole channel: `make test` only (CONTRIBUTING.md)

OUTSIDE = Path(__file__).parent / "outside"
SDPA_EQUAL = "return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)"
BOTTOM_RIGHT = ("    allowed = torch.ones(T_q, T_k, dtype=torch.bool, device=q.device).tril(diagonal=T_k - T_q)\n"
                "    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)")
TILED_START = "    n_q, d_k = q.shape\n"
APPEND_CHECK = "        if end > self.max_len:\n"


def failures(res) -> list:
    return [(r.check.id, r.message[:300]) for s in res.stages.values() for r in s.checks if not r.passed]


def full_marks(sub: Path, stages: list[str]) -> None:
    res = grade(sub, stages=stages)
    assert res.score + res.bonus_score == res.max_score + res.bonus_max_score, failures(res)


@pytest.mark.parametrize("name", ["nanogpt_module", "mingpt_module", "sdpa_cached_module"])
def test_module_written_elsewhere_keeps_full_marks(tmp_path, name):
    """nanoGPT's and minGPT's CausalSelfAttention (a mask buffer, Dropout submodules) and a cached module
    that calls SDPA with a bottom-right mask (its decode FLOPs were counted as 0 on CPU)."""
    sub = variant(tmp_path, {})
    shutil.copy(OUTSIDE / f"{name}.py", sub / "module.py")
    full_marks(sub, ["heads", "kv_cache", "fused"])


FUSED_VARIANTS = {
    "keyword arguments": [(SDPA_EQUAL, SDPA_EQUAL.replace("(q, k, v,", "(query=q, key=k, value=v,"))],
    "causal_lower_right": [(BOTTOM_RIGHT, (
        "    from torch.nn.attention.bias import causal_lower_right\n"
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T_q, T_k), dropout_p=p)"))],
    # found by a stranger: imported at the top, it loads torch._dynamo (70 MiB) in every child that imports fused.py,
    # which the measured calls of the fused and KV-cache stages once counted as theirs
    "causal_lower_right imported at the top": [
        ("import torch\n", "import torch\nfrom torch.nn.attention.bias import causal_lower_right\n"),
        (BOTTOM_RIGHT, "    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T_q, T_k), "
                       "dropout_p=p)")],
}


@pytest.mark.parametrize("name", sorted(FUSED_VARIANTS))
def test_sdpa_called_another_way_keeps_full_marks(tmp_path, name):
    full_marks(variant(tmp_path, {"fused.py": FUSED_VARIANTS[name]}), ["kv_cache", "fused"])


TILED_VARIANTS = {
    "inputs converted with np.asarray": "    q, k, v = np.asarray(q, float), np.asarray(k, float), np.asarray(v, float)\n",
    "keys converted and copied through a transpose": "    k = k.astype(np.float64).T.copy().T\n",
    "queries scaled up front": "    q = q / np.sqrt(q.shape[-1]) * np.sqrt(q.shape[-1])\n",
}


@pytest.mark.parametrize("name", sorted(TILED_VARIANTS))
def test_tiled_loop_with_converted_inputs_keeps_full_marks(tmp_path, name):
    full_marks(variant(tmp_path, {"tiled.py": [(TILED_START, TILED_VARIANTS[name] + TILED_START)]}), ["tiled"])


def test_a_numpy_stage_that_imports_torch_keeps_its_memory_points(tmp_path):
    """Found while the numpy children moved to a fork server without torch (and true of `make grade` before): torch
    imported at the top of tiled.py loaded inside the measured call, 66 MiB counted as the loop's own. The parts
    of torch a file imports load in the measuring child's start, the baseline's too."""
    sub = variant(tmp_path, {"tiled.py": [("import numpy as np\n", "import numpy as np\nimport torch  # noqa: F401\n")]})
    full_marks(sub, ["tiled"])


def test_tiled_loop_that_reads_every_block_still_fails(tmp_path):
    sub = variant(tmp_path, {"tiled.py": [("last_key = offset + i1 - 1 if causal else n_k - 1", "last_key = n_k - 1")]})
    res = grade(sub, stages=["tiled"])
    bad = [r for r in res.stages["tiled"].checks if not r.passed]
    assert [r.check.name for r in bad] == ["tiled_skips_hidden_blocks"], failures(res)
    assert "gave NaN in row 0" in bad[0].message and "Stop each query block's key loop" in bad[0].message


def test_cache_without_k_attribute_still_gets_its_append_checks(tmp_path):
    """A cache that names its tensors otherwise fails the allocation check, with words, and nothing else."""
    edits = {"kv_cache.py": [("self.k = torch.zeros", "self.keys = torch.zeros"),
                             ("self.v = torch.zeros", "self.values = torch.zeros"),
                             ("self.k[:, :, self.length : end] = k_new", "self.keys[:, :, self.length : end] = k_new"),
                             ("self.v[:, :, self.length : end] = v_new", "self.values[:, :, self.length : end] = v_new"),
                             ("return self.k[:, :, :end], self.v[:, :, :end]",
                              "return self.keys[:, :, :end], self.values[:, :, :end]")]}
    res = grade(variant(tmp_path, edits), stages=["kv_cache"])
    results = {r.check.name: r for r in res.stages["kv_cache"].checks}
    assert results["append_returns_prefix"].passed and results["append_past_max_len_raises"].passed
    assert not results["allocates_up_front"].passed
    assert "k is not a tensor" in results["allocates_up_front"].message


def test_failed_append_that_moves_length_is_caught(tmp_path):
    edits = {"kv_cache.py": [(APPEND_CHECK, "        self.length = end if end > self.max_len else self.length\n"
                                            + APPEND_CHECK)]}
    res = grade(variant(tmp_path, edits), stages=["kv_cache"])
    r = next(r for r in res.stages["kv_cache"].checks if r.check.name == "append_past_max_len_raises")
    assert not r.passed and "must leave the cache as it was" in r.message, r.message


def test_small_tolerances_print_as_numbers(tmp_path):
    sub = variant(tmp_path, {"softmax.py": [("    return e / np.sum(e, axis=axis, keepdims=True)\n",
                                             "    return e / np.sum(e, axis=axis, keepdims=True) * 1.001\n")]})
    res = grade(sub, stages=["softmax"])
    messages = "\n".join(r.message for r in res.stages["softmax"].checks if not r.passed)
    assert re.search(r"allowed \d(\.\d+)?e-05\)", messages), messages
    assert "allowed 0)" not in messages


def test_blocked_only_by_a_stage_the_failing_code_reaches(tmp_path):
    """merge_heads is wrong on its own and masking is wrong too: merge_heads never calls masking, so
    heads is failed, not blocked; an error in module.py's cache path is kv_cache's own."""
    edits = {"masking.py": [("return np.where(allowed, scores, -np.inf)", "return np.where(allowed, scores, -3.0)")],
             "heads.py": [("    return x.reshape(*lead, n, n_heads * d_head)  # [..., n, d_model]",
                           "    return 1.01 * x.reshape(*lead, n, n_heads * d_head)")]}
    res = grade(variant(tmp_path / "a", edits), stages=["softmax", "scaling", "masking", "heads"])
    assert res.stages["masking"].status == "failed"
    assert (res.stages["heads"].status, res.stages["heads"].blocked_by) == ("failed", None)

    edits = {"masking.py": edits["masking.py"],
             "module.py": [("            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included\n",
                            "            k, v = cache.append(k, v)\n            k = k[..., :-1]\n")]}
    res = grade(variant(tmp_path / "b", edits), stages=["softmax", "scaling", "masking", "heads", "kv_cache"])
    assert (res.stages["kv_cache"].status, res.stages["kv_cache"].blocked_by) == ("failed", None)


def test_wrong_numbers_from_a_stage_it_calls_still_block(tmp_path):
    """The same masking mistake alone: heads' multi-head checks run masking's code, so heads is blocked by it."""
    edits = {"masking.py": [("return np.where(allowed, scores, -np.inf)", "return np.where(allowed, scores, -3.0)")]}
    res = grade(variant(tmp_path, edits), stages=["softmax", "scaling", "masking", "heads"])
    assert (res.stages["heads"].status, res.stages["heads"].blocked_by) == ("blocked", "masking")


def test_a_changed_default_loses_the_defaults_check(tmp_path):
    sub = variant(tmp_path, {"fused.py": [("    causal: bool = True,\n", "    causal: bool = False,\n")],
                             "scaling.py": [("n_pairs: int = 20000", "n_pairs: int = 1000")]})
    res = grade(sub, stages=["scaling", "fused"])
    for stage, text in (("fused", "causal=False are not the contract's causal=True"),
                        ("scaling", "n_pairs=1000 are not the contract's n_pairs=20000")):
        bad = [r for r in res.stages[stage].checks if not r.passed]
        assert [r.check.name for r in bad] == ["keeps_the_defaults"] and text in bad[0].message, failures(res)
        assert res.stages[stage].status == "failed"


def test_dropout_is_checked_on_every_fused_path(tmp_path):
    """The mutation report found these: dropout dropped where there is no mask, or with the bottom-right mask."""
    for i, (old, new) in enumerate([("return F.scaled_dot_product_attention(q, k, v, dropout_p=p)\n",
                                     "return F.scaled_dot_product_attention(q, k, v)\n"),
                                    ("attn_mask=allowed, dropout_p=p)", "attn_mask=allowed)")]):
        res = grade(variant(tmp_path / str(i), {"fused.py": [(old, new)]}), stages=["fused"])
        bad = [r.check.name for r in res.stages["fused"].checks if not r.passed]
        assert bad == ["dropout_when_training"], failures(res)


def test_a_row_without_keys_inside_a_mixed_block_still_raises(tmp_path):
    """The mutation report found this: with one block holding rows that see keys and rows that see none,
    a stand-in maximum of -inf turned the empty rows into NaN instead of the ValueError."""
    edits = {"tiled.py": [("safe = np.where(np.isneginf(m_new), 0.0, m_new)", "safe = m_new")]}
    res = grade(variant(tmp_path, edits), stages=["tiled"])
    bad = [r for r in res.stages["tiled"].checks if not r.passed]
    assert [r.check.name for r in bad] == ["tiled_row_without_keys_raises"], failures(res)
    assert "n_q=3" in bad[0].message


def test_a_grading_process_that_grew_keeps_measuring_fairly():
    """A long-lived grading process (watch, a regrade worker, the tests) grows between grades; a fresh child
    counts the pages it shares with it until it execs, so a baseline measured while the process was small
    would make correct code look hungry. Baselines are kept per size of the grading process."""
    grade(SOLUTIONS, stages=["tiled"])  # measures (and keeps) a baseline while this process is as it is
    ballast = bytearray(384 * 2**20)  # this process grows by 384 MiB, every page touched
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    res = grade(SOLUTIONS, stages=["tiled"])
    st = res.stages["tiled"]
    assert st.score == st.max_score, [(r.check.name, r.message) for r in st.checks if not r.passed]
    del ballast


def test_causal_lower_right_imported_at_the_top_keeps_full_marks_through_make_grade(tmp_path):
    """Found by a stranger student: graded as `make grade` does (prestart: every child forked from a server), a
    fused.py importing causal_lower_right at its top scored 0/14 ("Artifact ... already registered"): the server's
    temp folder (/tmp, fixed when torch loaded) stayed the forked child's, torch._dynamo's first load tried to make
    its cache folder there, the write barrier refused it, and the half-loaded module failed again in the student's
    import. A forked child's temp folder is its own scratch folder (its TMPDIR)."""
    import json

    from autograder.cli import main

    sub = variant(tmp_path, {"fused.py": FUSED_VARIANTS["causal_lower_right imported at the top"]})
    out = tmp_path / "r.json"
    assert main(["grade", "--submission", str(sub), "--stage", "fused", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["extra_data"]["stages"]["fused"]["score"] == 14, [t["output"] for t in data["tests"] if t["score"] == 0]
