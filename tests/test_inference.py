"""Diagnosis by inference and fault localisation.

Each inferred diagnosis is shown on a submission that makes the mistake in a way the catalogue does not
hold (a copy of the solutions with one edit); correct code gets none. Each pointer rule is checked for
the file, the function and a line inside that function. `python tests/test_inference.py` prints the
figures over the catalogued mistakes and the new ones below.
"""
import ast
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import grade, tiered, variant

from autograder.evidence.inference import INFERRED_IDS
from autograder.feedback.advice import next_step
from autograder.report.terminal import terminal

NP = ["softmax", "masking"]  # scaling passes in every case here: its article draws (20,000 x 512) would only cost time
MASK = "    return j <= i + (n_k - n_q)  # [n_q, n_k]"
SCALE = "    return (q @ np.swapaxes(k, -1, -2)) / np.sqrt(d_k)"
SOFTMAX_W = "    weights = softmax(scores, axis=-1)  # [..., n_q, n_k]"
APPEND = "            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included\n"
HEADS = ["softmax", "scaling", "masking", "projections", "heads"]

# name -> (edits, stages graded, inferred id or None, (file, function, text on the wrong line))
NEW: dict[str, tuple[dict, list[str], str | None, tuple[str, str, str]]] = {
    "mask shifted by one diagonal": ({"masking.py": [(MASK, "    return j <= i + (n_k - n_q) + 1")]}, NP,
                                     "inferred-mask-pattern", ("masking.py", "causal_mask", "+ 1")),
    "mask shifted by two": ({"masking.py": [(MASK, "    return j <= i + (n_k - n_q) + 2")]}, NP,
                            "inferred-mask-pattern", ("masking.py", "causal_mask", "+ 2")),
    "scores divided by d_k**2": ({"scaling.py": [(SCALE, "    return (q @ np.swapaxes(k, -1, -2)) / d_k**2")]},
                                 ["scaling"], "inferred-temperature", ("scaling.py", "scaled_scores", "d_k**2")),
    "scores multiplied by sqrt(d_k)": ({"scaling.py": [(SCALE, SCALE.replace("/ np.sqrt", "* np.sqrt"))]},
                                       ["scaling"], "inferred-temperature", ("scaling.py", "scaled_scores", "* np.sqrt")),
    "weights scaled after softmax": ({"masking.py": [(SOFTMAX_W, "    weights = softmax(scores, axis=-1) / "
                                                      "np.sqrt(q.shape[-1])")]}, NP,
                                     "inferred-scaled-after-softmax", ("masking.py", "attention", "/ np.sqrt")),
    "softmax over the queries in attention": ({"masking.py": [(SOFTMAX_W, "    weights = softmax(scores, axis=-2)")]},
                                              NP, "inferred-softmax-axis", ("masking.py", "attention", "axis=-2")),
    "softmax over the whole matrix": ({"softmax.py": [("return e / np.sum(e, axis=axis, keepdims=True)",
                                                       "return e / np.sum(e)")]}, ["softmax"],
                                      "inferred-normalised-everything", ("softmax.py", "softmax", "np.sum(e)")),
    "softmax in float16": ({"softmax.py": [("    scores = np.asarray(scores)\n",
                                            "    scores = np.asarray(scores, dtype=np.float16)\n")]}, ["softmax"],
                           "inferred-low-precision", ("softmax.py", "softmax", "float16")),
    "split_heads swaps the wrong axes": ({"heads.py": [("    return np.swapaxes(x, -3, -2)  # [..., n_heads, n, d_head]",
                                                        "    return np.moveaxis(x, -3, -1)")]}, HEADS,
                                         "inferred-layout", ("heads.py", "split_heads", "moveaxis")),
    "module without its output projection": ({"module.py": [("        return self.out(y)\n", "        return y\n")]},
                                             ["heads"], "heads-no-output-projection",  # catalogued: pointer test
                                             ("module.py", "merge", "return y")),
    "cache appends the keys twice": ({"module.py": [(APPEND, "            cache.append(k, v)\n" + APPEND)]},
                                     ["kv_cache"], "inferred-cache-contents", ("module.py", "forward", "cache.append")),
    "cache stores the queries as keys": ({"module.py": [(APPEND, APPEND.replace("append(k, v)", "append(q, v)"))]},
                                         ["kv_cache"], "inferred-cache-contents", ("module.py", "forward", "append(q")),
    "cache never advances its length": ({"kv_cache.py": [("        self.length = end\n", "")]}, ["kv_cache"],
                                        "inferred-cache-contents", ("kv_cache.py", "append", "self.")),
    "cache writes v into k": ({"kv_cache.py": [("self.k[:, :, self.length : end] = k_new",
                                                "self.k[:, :, self.length : end] = v_new")]}, ["kv_cache"],
                              "inferred-cache-contents", ("kv_cache.py", "append", "= v_new")),
    # new mistakes for the figures (named or not, the pointer must land)
    "gram matrix x.T @ x": ({"scores.py": [("return x @ x.T  #", "return x.T @ x  #")]}, ["dot_products"], None,
                            ("scores.py", "dot_scores", "x.T @ x")),
    "self-attention without softmax": ({"scores.py": [("    return weights @ x  #", "    return (x @ x.T) @ x  #")]},
                                       ["softmax", "dot_products"], None,
                                       ("scores.py", "simple_self_attention", "(x @ x.T)")),
    "k projected with w_q": ({"projections.py": [("    k = x @ w_k", "    k = x @ w_q")]}, ["projections"], None,
                             ("projections.py", "project_qkv", "k = x @ w_q")),
    "apply_mask with -1e4": ({"masking.py": [("return np.where(allowed, scores, -np.inf)",
                                              "return np.where(allowed, scores, -1e4)")]}, NP, None,
                             ("masking.py", "apply_mask", "-1e4")),
    "mask from the top-left plus one": ({"masking.py": [(MASK, "    return j <= i + 1")]}, NP, "inferred-mask-pattern",
                                        ("masking.py", "causal_mask", "j <= i + 1")),
    "module softmax over the queries": ({"module.py": [("return scores.softmax(dim=-1) @ v",
                                                        "return scores.softmax(dim=-2) @ v")]}, ["heads"], None,
                                        ("module.py", "attend", "dim=-2")),
    "merge_heads in the wrong order": ({"heads.py": [("    x = np.swapaxes(x, -3, -2)  # [..., n, n_heads, d_head]\n",
                                                      "    x = np.swapaxes(x, -3, -1)\n")]}, HEADS, None,
                                       ("heads.py", "merge_heads", "swapaxes(x, -3, -1)")),
    "scores divided by n_k": ({"scaling.py": [(SCALE, "    return (q @ np.swapaxes(k, -1, -2)) / k.shape[-2]")]},
                              ["scaling"], None, ("scaling.py", "scaled_scores", "k.shape[-2]")),
    # refuses the fill that ends exactly at max_len: the cache's contents are never wrong, so no cache-contents name
    "cache capacity test off by one": ({"kv_cache.py": [("        if end > self.max_len:\n",
                                                         "        if end >= self.max_len:\n")]}, ["kv_cache"], None,
                                       ("kv_cache.py", "append", "if end >= self.max_len:")),
    # found by a stranger student: the right contents, handed back at the buffer's full size: no contents name
    "append hands back the whole buffer": ({"kv_cache.py": [(
        "        return self.k[:, :, :end], self.v[:, :, :end]  # views, [B, H, length, D]\n",
        "        return self.k, self.v\n")]}, ["kv_cache"], None, ("kv_cache.py", "append", "return self.k, self.v")),
}

FAST = [n for n, (_, stages, _, _) in NEW.items() if not {"heads", "kv_cache"} & set(stages)]


def _inside(path: Path, function: str, line: int) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return node.body[0].lineno <= line <= node.end_lineno
    return False


def named(res) -> set[str]:
    return {d for s in res.stages.values() for d in s.diagnoses}


def claims(res) -> set[str]:
    """Every diagnosis the reports show: each check's (each of a combined 'a+b'). A localisation's inferred id
    is shown only when it is put on a check (localise.attach)."""
    return {d for s in res.stages.values() for r in s.checks for d in r.diagnoses}


def test_the_capacity_off_by_one_is_not_named_cache_contents(tmp_path):
    """A `>=` capacity test refuses a fill that fits; the cache never holds anything wrong, so the inferred
    cache-contents name ("writes more positions than it is given") would be wrong: no name, and the pointer
    goes to the comparison in append, not to forward."""
    edits, stages, _, (file, function, text) = NEW["cache capacity test off by one"]
    sub = variant(tmp_path, edits)
    res = grade(sub, stages=stages)
    assert res.stages["kv_cache"].status == "failed"
    assert not claims(res), (claims(res), res.located)
    loc = res.located["kv_cache"]
    assert loc.diagnosis is None
    assert (loc.file, loc.function) == (file, function)
    assert (sub / file).read_text().splitlines()[loc.line - 1].strip() == text
    assert f"{file}:{loc.line}" in res.next_step
    failing = {r.check.name: r.message for r in res.stages["kv_cache"].checks if not r.passed}
    assert "which fills the cache exactly" in failing["append_past_max_len_raises"]


@pytest.mark.slow
@pytest.mark.parametrize("mistake", sorted(NEW))
def test_no_diagnosis_is_claimed_but_the_mistakes_own(tmp_path, mistake):
    """Precision: over the new mistakes, a claimed name is the mistake's own (none where it has none). The
    catalogued mutants are held to the same in tests/test_diagnosis.py."""
    edits, stages, want, _ = NEW[mistake]
    res = grade(variant(tmp_path, edits), stages=stages)
    assert claims(res) <= ({want} if want else set()), (claims(res), res.located)


@pytest.mark.parametrize("mistake", tiered(sorted(n for n, v in NEW.items() if v[2] in INFERRED_IDS),
                                            lambda n: NEW[n][1][-1]))
def test_inferred_diagnosis_is_named(tmp_path, mistake):
    edits, stages, want, (file, function, text) = NEW[mistake]
    sub = variant(tmp_path, edits)
    res = grade(sub, stages=stages)
    assert named(res) == {want}, (named(res), res.located)
    report = terminal(res)
    assert f"Diagnosis {want}" in report and "the evidence:" in report


@pytest.mark.parametrize("mistake", ["mask shifted by one diagonal", "module without its output projection",
                                     "cache appends the keys twice"])
def test_pointer_lands_inside_the_wrong_function(tmp_path, mistake):
    edits, stages, _, (file, function, text) = NEW[mistake]
    sub = variant(tmp_path, edits)
    res = grade(sub, stages=stages)
    home = stages[-1]
    loc = res.located[home]
    assert (loc.file, loc.function) == (file, function)
    assert _inside(sub / file, function, loc.line)
    step = next_step(res)
    assert f"in {function}, at " in step and f"{file}:{loc.line}" in step, step
    assert text in (sub / file).read_text().splitlines()[loc.line - 1]


def test_missing_projection_is_read_off_the_output():
    """The module's output times out.weight^T's inverse is the merged heads: inferred-no-output-projection (the
    catalogue already holds the module that leaves `out` out, so the reading is shown on the arrays)."""
    from attn_ref import api as ref
    from autograder.evidence import probes as L

    want = ref.module_forward(L.XB, L.WQKV, L.WOUT, 2)
    merged = np.asarray(want, dtype=np.float64) @ np.linalg.inv(L.WOUT.T.astype(np.float64))
    assert L.module_output(merged, want, ref)[0] == "inferred-no-output-projection"
    assert L.module_output(want, want, ref) is None


def test_shifted_mask_says_what_it_allows(tmp_path):
    res = grade(variant(tmp_path, NEW["mask shifted by one diagonal"][0]), stages=NP)
    assert "query i sees keys j <= i+1" in terminal(res)
    assert res.located["masking"].function == "causal_mask"  # not attention, which only uses it


def test_temperature_names_the_divisor(tmp_path):
    res = grade(variant(tmp_path, NEW["scores divided by d_k**2"][0]), stages=["scaling"])
    assert "which is d_k**2 = 16" in terminal(res)


def test_unrecognised_factor_claims_nothing(tmp_path):
    res = grade(variant(tmp_path, {"scaling.py": [(SCALE, SCALE + " * 1.3")]}), stages=["scaling"])
    assert not named(res) and res.located["scaling"].diagnosis is None


CORRECT = {
    "mask -1e30": {"masking.py": [("return np.where(allowed, scores, -np.inf)", "return np.where(allowed, scores, -1e30)")]},
    "float32 softmax": {"softmax.py": [("    scores = np.asarray(scores)\n",
                                        "    scores = np.asarray(scores, dtype=np.float32)\n")]},
    "tril mask": {"masking.py": [(MASK, "    return np.tril(np.ones((n_q, n_k), dtype=bool), n_k - n_q)")]},
    "einsum scores": {"scaling.py": [(SCALE, '    return np.einsum("...id,...jd->...ij", q, k) / np.sqrt(d_k)')]},
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_code_gets_no_diagnosis_and_full_marks(tmp_path, name):
    res = grade(variant(tmp_path, CORRECT[name]), stages=["softmax", "scaling", "masking"])  # each edited file's stage
    assert res.score == res.max_score and not named(res) and not res.located


def test_no_inferred_id_on_the_solutions(solutions_result):
    assert not solutions_result.located
    assert not named(solutions_result) & INFERRED_IDS


def figures(out=sys.stdout) -> None:
    """Over the catalogued mutants (tests/test_diagnosis.py) and NEW: named, right function, right line."""
    import tempfile

    from conftest import MUTANTS

    from autograder.stages import CATALOGUE

    rows = []
    cases = {f"catalogue {k}": (e, s, k, None) for k, (e, s) in MUTANTS.items()}
    cases.update({f"new {k}": v for k, v in NEW.items()})
    for name, (edits, stages, want, place) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            sub = variant(Path(d), edits)
            res = grade(sub, stages=stages)
            failed = [n for n, s in res.stages.items() if s.status != "passed"]
            if place is None:  # the catalogue's own place; the edited line is the one holding the new text
                m = CATALOGUE[want]
                file, function = m.where.split(":") if m.where else (next(iter(edits)), "")
                new = ([n for pairs in edits.values() for _, n in pairs][0].strip().splitlines() or [""])[0].strip()
                place = (file, function, new)
            file, function, text = place
            step = next_step(res)
            m_line = re.search(rf"{re.escape(file)}:(\d+)", step)
            line = int(m_line.group(1)) if m_line else 0
            lines = (sub / file).read_text().splitlines() if (sub / file).exists() else []
            right_fn = bool(m_line) and (f"in {function}," in step or _inside(sub / file, function, line))
            right_line = right_fn and 0 < line <= len(lines) and bool(text) and text.split("#")[0].strip() in lines[line - 1]
            wrong = claims(res) - ({want} if want else set())
            rows.append((name, bool(named(res)), right_fn, right_line, bool(failed), bool(claims(res)), bool(wrong)))
            print(f"{name:55s} named={rows[-1][1]!s:5} fn={right_fn!s:5} line={right_line!s:5} "
                  f"wrong={sorted(wrong)}", file=out, flush=True)
    for label, part in (("catalogued", [r for r in rows if r[0].startswith("catalogue")]),
                        ("new", [r for r in rows if r[0].startswith("new")])):
        print(f"{label}: {len(part)} mistakes, named {sum(r[1] for r in part)}, pointer in the right function "
              f"{sum(r[2] for r in part)}, on the right line {sum(r[3] for r in part)}; claimed a name "
              f"{sum(r[5] for r in part)}, a wrong one {sum(r[6] for r in part)}", file=out)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    figures()
