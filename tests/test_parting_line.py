"""For a mistake nobody catalogued (issue 42): the next step points at a line the fix changes and, where one
small change of the reference's own intermediate reproduces the student's value, names that change in words
tied to the line. Each case is a copy of the solutions with one mistake of a kind a stranger made, written
fresh (none of them is a catalogue entry's own edit); `fix` is the text of the line the fix changes.
"""
from dataclasses import dataclass

import numpy as np
import pytest
from conftest import grade, tiered, variant

from autograder.feedback import relations, steps
from autograder.feedback.advice import parting_words


@dataclass(frozen=True)
class Mutant:
    """One uncatalogued mistake: the edits, the stages to grade, the fixed line's text and the name expected."""
    id: str
    edits: dict
    stages: tuple[str, ...]
    fix: str  # the (stripped) text of the line the fix changes, as the mutant has it
    named: str | None = None  # a phrase the diagnosis must hold; None where no name is claimed


SOFTMAX_TOP = "    top = np.max(scores, axis=axis, keepdims=True)"
SOFTMAX_EXP = "    e = np.exp(scores - top)  # same shape as scores; the largest entry becomes exp(0) = 1"
ATTEND_FILL = '        scores = scores.masked_fill(~allowed, float("-inf"))'
ATTEND_ALLOWED = "        allowed = torch.ones(T, T_k, dtype=torch.bool, device=q.device).tril(diagonal=T_k - T)  # [T, T_k]"
HEADS_V = "        v = v.view(B, T, self.n_heads, -1).transpose(1, 2)  # [B, H, T, D]"
CACHE_CHECK = ("        end = self.length + t\n        if end > self.max_len:\n"
               '            raise ValueError(f"KVCache.append: {self.length} + {t} positions exceed max_len={self.max_len}")\n'
               "        self.k[:, :, self.length : end] = k_new\n        self.v[:, :, self.length : end] = v_new\n"
               "        self.length = end\n")
CACHE_EARLY = ("        end = self.length + t\n        self.length = end  # counted first\n        if end > self.max_len:\n"
               '            raise ValueError(f"KVCache.append: {end - t} + {t} positions exceed max_len={self.max_len}")\n'
               "        self.k[:, :, end - t : end] = k_new\n        self.v[:, :, end - t : end] = v_new\n")
APPEND = "            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included"
SOFTMAX = ("softmax",)
MASKING = ("softmax", "masking")  # scaling, correct in each case, is left out: its article draws only cost time

MUTANTS = (
    Mutant("variance-scaled-by-d_k", {"scaling.py": [("        dots = dots / np.sqrt(d_k)", "        dots = dots / d_k")]},
           ("scaling",), "dots = dots / d_k", "divided by d_k"),
    Mutant("softmax-max-over-columns", {"softmax.py": [(SOFTMAX_TOP, SOFTMAX_TOP.replace("axis=axis", "axis=0"))]},
           SOFTMAX, "top = np.max(scores, axis=0, keepdims=True)", "over axis"),
    Mutant("softmax-shift-in-place", {"softmax.py": [(SOFTMAX_EXP, "    scores -= top  # shift\n    e = np.exp(scores)")]},
           SOFTMAX, "scores -= top  # shift", "in place"),
    Mutant("v-projected-with-w_k", {"projections.py": [("    v = x @ w_v", "    v = x @ w_k")]},
           ("projections",), "v = x @ w_k  # -> [..., n, d_v]", "k"),
    Mutant("apply-mask-writes-its-argument", {"masking.py": [("    return np.where(allowed, scores, -np.inf)",
                                                              "    scores[~allowed] = -np.inf\n    return scores")]},
           MASKING, "scores[~allowed] = -np.inf", "in place"),
    Mutant("attention-softmax-over-queries", {"masking.py": [("    weights = softmax(scores, axis=-1)",
                                                              "    weights = softmax(scores, axis=-2)")]},
           MASKING, "weights = softmax(scores, axis=-2)  # [..., n_q, n_k]", "inferred-softmax-axis"),
    Mutant("module-mask-inverted", {"module.py": [(ATTEND_FILL, ATTEND_FILL.replace("~allowed", "allowed"))]},
           ("heads",), 'scores = scores.masked_fill(allowed, float("-inf"))', "inverted"),
    Mutant("module-mask-per-column", {"module.py": [(ATTEND_ALLOWED, ATTEND_ALLOWED.replace(
        ".tril(diagonal=T_k - T)", ".triu(diagonal=T - T_k)"))]},
           ("heads",), "allowed = torch.ones(T, T_k, dtype=torch.bool, device=q.device).triu(diagonal=T - T_k)  # [T, T_k]",
           "transpose"),
    Mutant("module-v-from-k", {"module.py": [(HEADS_V, HEADS_V.replace("v = v.view", "v = k.view"))]},
           ("heads",), "v = k.view(B, T, self.n_heads, -1).transpose(1, 2)  # [B, H, T, D]"),  # raises: its line
    Mutant("fused-not-causal", {"fused.py": [("dropout_p=p, is_causal=True)", "dropout_p=p)")]},
           ("fused",), "return F.scaled_dot_product_attention(q, k, v, dropout_p=p)", "is_causal"),
    Mutant("fused-mask-inverted", {"fused.py": [("attn_mask=allowed, dropout_p=p)", "attn_mask=~allowed, dropout_p=p)")]},
           ("fused",), "return F.scaled_dot_product_attention(q, k, v, attn_mask=~allowed, dropout_p=p)", "attn_mask"),
    Mutant("fused-dropout-always", {"fused.py": [("    p = dropout_p if training else 0.0", "    p = dropout_p")]},
           ("fused",), "p = dropout_p", "fused-dropout-in-eval"),  # the line that made the call's dropout_p
    Mutant("fused-mask-per-column", {"fused.py": [(".tril(diagonal=T_k - T_q)", ".triu(diagonal=T_k - T_q)")]},
           ("fused",), "allowed = torch.ones(T_q, T_k, dtype=torch.bool, device=q.device).triu(diagonal=T_k - T_q)",
           "other keys than the causal ones"),
    Mutant("fused-is-causal-from-a-flag", {"fused.py": [(
        "        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)",
        "        flag = not causal  # a flag set on its own line\n"
        "        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=flag)")]},
           ("fused",), "flag = not causal  # a flag set on its own line", "is_causal"),
    # a stranger's misses, now on their line: a call's result dropped (not the correct `attend` it reaches), a
    # length counted by one, a softmax over the queries of a symmetric matrix (not "a transpose"), a standard
    # deviation where the variance belongs (a returned float)
    Mutant("cache-append-result-dropped", {"module.py": [(APPEND, "            cache.append(k, v)")]},
           ("kv_cache",), "cache.append(k, v)", "is not kept"),
    Mutant("cache-length-counts-one", {"kv_cache.py": [("        self.length = end\n", "        self.length += 1\n")]},
           ("kv_cache",), "self.length += 1", "inferred-cache-contents"),
    Mutant("self-attention-softmax-over-queries", {"scores.py": [("softmax(dot_scores(x), axis=-1)",
                                                                  "softmax(dot_scores(x), axis=0)")]},
           ("softmax", "dot_products"), "weights = softmax(dot_scores(x), axis=0)  # [n, n], each row sums to 1",
           "normalised over axis 0"),
    Mutant("variance-as-std", {"scaling.py": [("return float(np.var(dots))", "return float(np.std(dots))")]},
           ("scaling",), "return float(np.std(dots))", "a standard deviation where the variance belongs"),
    # cold students' misses (issue 42's sets): a tuple returned in another order is said so, slot by slot (it had
    # been called "q where its k belongs"); the bonus stages' functions are followed value by value too
    Mutant("projections-returned-in-another-order", {"projections.py": [("    return q, k, v", "    return q, v, k")]},
           ("projections",), "return q, v, k", "in another order"),
    Mutant("attention-returns-weights-first", {"masking.py": [("    return weights @ v, weights",
                                                               "    return weights, weights @ v")]},
           MASKING, "return weights, weights @ v  # [..., n_q, n_k] @ [..., n_k, d_v] -> [..., n_q, d_v]",
           "in another order"),
    Mutant("backward-row-sums-over-columns", {"backward.py": [("np.sum(dp * p, axis=1, keepdims=True)",
                                                               "np.sum(dp * p, axis=0, keepdims=True)")]},
           ("backward",), "ds = p * (dp - np.sum(dp * p, axis=0, keepdims=True))  # softmax Jacobian, row by row"),
    Mutant("backward-dq-from-v", {"backward.py": [("dq = ds @ k / np.sqrt(d_k)", "dq = ds @ v / np.sqrt(d_k)")]},
           ("backward",), "dq = ds @ v / np.sqrt(d_k)  # [n_q, d_k]"),  # raises (d_v != d_k): its line
    Mutant("dropout-survivors-multiplied", {"dropout.py": [("weights / (1.0 - p), 0.0)", "weights * (1.0 - p), 0.0)")]},
           ("dropout",), "return np.where(keep, weights * (1.0 - p), 0.0)"),
    Mutant("softmax-shift-by-the-minimum", {"softmax.py": [(SOFTMAX_TOP, SOFTMAX_TOP.replace("np.max", "np.min"))]},
           SOFTMAX, "top = np.min(scores, axis=axis, keepdims=True)"),  # right on small scores: a large probe
    Mutant("rope-queries-turned-from-0", {"rope.py": [("q, k = rotate(q, offset=n_k - n_q), rotate(k)",
                                                       "q, k = rotate(q), rotate(k)")]},
           ("rope",), "q, k = rotate(q), rotate(k)  # queries at positions n_k - n_q .. n_k - 1"),
    Mutant("rope-decode-keys-turned-from-0", {"rope.py": [("rotate(k, offset=L)  # positions", "rotate(k)  # positions")]},
           ("rope",), "q, k = rotate(q, offset=L), rotate(k)  # positions L .. L + t - 1"),
    Mutant("cache-size-without-its-batch", {"costs.py": [("return 2 * batch * ", "return 2 * ")]},
           ("costs",), "return 2 * n_layers * n_tokens * n_kv_heads * d_head"),  # a returned count is followed too
    Mutant("tiled-sum-not-rescaled", {"tiled.py": [("            l = alpha * l + p.sum(axis=1)",
                                                    "            l = l + p.sum(axis=1)")]},
           ("tiled",), "l = l + p.sum(axis=1)"),  # the output buffer (np.empty) is judged once written, not before
    # set C (held out) and set A: a slot made from the wrong operand is not "another order" (only a permutation of
    # the right values is); a mask returned as its complement is that, not a step "left out"
    Mutant("keys-projected-with-w_q", {"projections.py": [("    k = x @ w_k", "    k = x @ w_q")]},
           ("projections",), "k = x @ w_q  # -> [..., n, d_k]", "q where its k belongs"),
    Mutant("causal-mask-returns-its-complement", {"masking.py": [("    return j <= i + (n_k - n_q)",
                                                                  "    return j > i + (n_k - n_q)")]},
           MASKING, "return j > i + (n_k - n_q)  # [n_q, n_k]", "with the mask inverted"),
    Mutant("rope-frequency-without-2", {"rope.py": [("base ** (-2.0 * np.arange(half) / d)",
                                                     "base ** (-np.arange(half) / d)")]},
           ("rope",), "freq = base ** (-np.arange(half) / d)  # [d/2]: one frequency per pair"),
)

SOFTMAX_DEFAULT_AXIS_0 = Mutant("softmax-default-axis-0", {"softmax.py": [("axis: int = -1)", "axis: int = 0)")]},
                                SOFTMAX, "def softmax(scores: np.ndarray, axis: int = 0) -> np.ndarray:",
                                "softmax-wrong-axis")

# measured, not yet on their line (the fix changes the def line, a length update, a running maximum's start): each
# still fails its stage, and nothing names a change that is not the mistake
MISSES = (
    # right for the default axis, so a probe on axis 0 fails it; the maxima have no step's shape and no step is right
    # before the exponentials, so the pointer lands one line late
    Mutant("softmax-over-the-last-axis-always", {"softmax.py": [(SOFTMAX_TOP, SOFTMAX_TOP.replace("axis=axis", "axis=-1"))]},
           SOFTMAX, "top = np.max(scores, axis=-1, keepdims=True)"),
    Mutant("cache-length-before-check", {"kv_cache.py": [(CACHE_CHECK, CACHE_EARLY)]},
           ("kv_cache",), "self.length = end  # counted first"),
    Mutant("tiled-running-max-from-0", {"tiled.py": [("        m = np.full(i1 - i0, -np.inf)  # running max per row",
                                                       "        m = np.zeros(i1 - i0)  # running max per row")]},
           ("tiled",), "m = np.zeros(i1 - i0)  # running max per row"),
)


def graded(tmp_path, m: Mutant):
    """(results, the located place or None, the text of the line it names) for the mutant's copy."""
    sub = variant(tmp_path, m.edits)
    res = grade(sub, stages=list(m.stages))
    assert res.stages[m.stages[-1]].status == "failed"
    loc = res.located.get(m.stages[-1])
    text = (sub / loc.file).read_text().splitlines()[loc.line - 1].strip() if loc else None
    return res, loc, text


def claimed(res, loc) -> str:
    """Everything the feedback names: the stages' diagnoses and the words of the parting line."""
    ids = [d for sr in res.stages.values() for d in sr.diagnoses]
    ids += [r.diagnosis for sr in res.stages.values() for r in sr.checks if r.diagnosis]
    words = parting_words(loc) if loc else None
    return " ".join(ids + ([words] if words else []))


@pytest.mark.parametrize("m", tiered(MUTANTS, lambda m: m.stages[-1], lambda m: m.id))
def test_the_next_step_points_at_the_line_the_fix_changes_and_names_it(tmp_path, m):
    res, loc, text = graded(tmp_path, m)
    assert text == m.fix, (text, res.next_step)
    assert f"{loc.file}:{loc.line}" in res.next_step
    said = claimed(res, loc)
    assert (m.named or "") in said, said
    words = parting_words(loc)
    if words:  # the words are tied to the pointed line, and shown in the next step unless a catalogued name is
        assert words.startswith(f"line {loc.line}: ")
        assert words in res.next_step or res.stages[m.stages[-1]].diagnoses


def test_a_length_off_leads_with_the_lengths_and_claims_nothing_per_append(tmp_path):
    """append's results are read back after the last append (views show later writes): no per-append verdicts."""
    res, _, _ = graded(tmp_path, next(m for m in MUTANTS if m.id == "cache-length-counts-one"))
    first = next(r for r in res.stages["kv_cache"].checks if not r.passed)
    assert "`length` read [0, 1, 2, 3] after each append (expected [0, 3, 4, 6])" in first.message, first.message
    assert "[False" not in first.message and "inferred-" not in res.next_step, res.next_step


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_kept_result_is_not_called_dropped(tmp_path):
    """Precision: the cache's result is assigned, the mistake is in the `attend` it reaches: pointed there."""
    sub = variant(tmp_path, {"module.py": [(ATTEND_FILL, ATTEND_FILL.replace("~allowed", "allowed"))]})
    res = grade(sub, stages=["kv_cache"])
    loc = res.located.get("kv_cache")
    assert loc is not None and loc.function == "attend", res.next_step
    assert "is not kept" not in claimed(res, loc)


def test_a_variance_from_other_draws_is_not_blamed_on_the_draws(tmp_path):
    """q and k drawn in one call (another correct way): only the returned standard deviation is named."""
    draws = ("    q = rng.standard_normal((n_pairs, d_k))  # [n_pairs, d_k]\n"
             "    k = rng.standard_normal((n_pairs, d_k))  # [n_pairs, d_k]\n")
    sub = variant(tmp_path, {"scaling.py": [(draws, "    q, k = rng.standard_normal((2, n_pairs, d_k))\n"),
                                            ("return float(np.var(dots))", "return float(np.std(dots))")]})
    res = grade(sub, stages=["scaling"])
    loc = res.located.get("scaling")
    text = (sub / loc.file).read_text().splitlines()[loc.line - 1].strip() if loc else ""
    assert "standard_normal" not in text, res.next_step
    assert claimed(res, loc) in ("", f"line {loc.line}: your `returned value` is the square root of the reference's "
                                     "variance (a standard deviation where the variance belongs)"), claimed(res, loc)


@pytest.mark.slow
@pytest.mark.parametrize("m", MISSES, ids=[m.id for m in MISSES])
def test_a_mistake_not_yet_on_its_line_gets_no_wrong_name(tmp_path, m):
    res, loc, _ = graded(tmp_path, m)
    assert claimed(res, loc).replace(m.named or "", "").strip() == ""


def test_a_default_that_is_not_the_contracts_leads_the_next_step_at_its_own_line(tmp_path):
    """A wrong default is a rule broken on a line the grader can read: the next step opens there, before what the
    default makes go wrong elsewhere (which had pointed at the line using it)."""
    res, loc, _ = graded(tmp_path, SOFTMAX_DEFAULT_AXIS_0)
    lines = (tmp_path / "submission" / "softmax.py").read_text().splitlines()
    at = next(i for i, text in enumerate(lines, 1) if text.strip() == SOFTMAX_DEFAULT_AXIS_0.fix)
    assert res.next_step.startswith(f"fix stage 1 (softmax) at {tmp_path / 'submission' / 'softmax.py'}:{at}: ")
    assert "axis=0 are not the contract's axis=-1" in res.next_step, res.next_step
    # the default axis 0 does make the row maxima over axis 0: said of the line that takes them, and nothing else
    said = claimed(res, loc).replace("softmax-wrong-axis", "").strip()
    assert said in ("", f"line {loc and loc.line}: your `top` equals the reference's row maxima taken over axis 0 "
                        "(the queries' axis) instead of the last (each row over its keys)"), said


def test_a_cache_default_that_is_not_the_contracts_is_not_also_called_wrong_contents(tmp_path):
    """A cache made in float16 by default holds its entries rounded: the default leads the next step at its line,
    and no second mistake ("an entry written twice or skipped") is inferred from what the probes, called with the
    default, saw (a cold student's attempt was told both)."""
    old = "        dtype: torch.dtype = torch.float32,"
    sub = variant(tmp_path, {"kv_cache.py": [(old, old.replace("float32", "float16"))]})
    res = grade(sub, stages=["heads", "kv_cache"])
    at = (sub / "kv_cache.py").read_text().splitlines().index(old.replace("float32", "float16")) + 1
    assert f"kv_cache.py:{at}" in res.next_step, res.next_step
    assert res.stages["kv_cache"].diagnoses == [], res.stages["kv_cache"].diagnoses


def test_a_wrong_cache_is_not_named_as_a_mistake_of_the_decode_steps_mask(tmp_path):
    """A cache whose length is set to the last append's t makes the next decode step attend only its first key,
    the output a top-left mask makes: the decode check's output matched cache-top-left-causal (a mistake in
    `attend`). A decode variant is made with a right cache, so none is matched while the cache's own probe fails:
    the next step names what the cache does, at its line (a cold student's attempt was told the mask's name)."""
    sub = variant(tmp_path, {"kv_cache.py": [("        self.length = end\n", "        self.length = t\n")]})
    res = grade(sub, stages=["heads", "kv_cache"])
    assert "cache-top-left-causal" not in res.stages["kv_cache"].diagnoses
    at = (sub / "kv_cache.py").read_text().splitlines().index("        self.length = t") + 1
    assert f"kv_cache.py:{at}" in res.next_step and "top-left" not in res.next_step, res.next_step


@pytest.mark.parametrize("file, old, new, stages, param", [
    ("heads.py", "    allowed = causal_mask(n) if causal else None  # [n, n]", "    allowed = causal_mask(n)  # [n, n]",
     ("heads",), "causal"),
    ("scaling.py", "    rng = np.random.default_rng(seed)", "    rng = np.random.default_rng(0)", ("scaling",), "seed"),
], ids=["causal ignored", "seed ignored"])
def test_a_parameter_never_read_is_named_at_the_line_that_makes_what_it_is_about(tmp_path, file, old, new, stages,
                                                                                   param):
    """No probe calls with the other value of `causal` or another seed, so no value parts: the check that changes
    the parameter failed, and the function never reads it. The next step names it, at the one line that makes what
    the parameter is about (the mask, the generator), not at the def line (two cold students' attempts)."""
    sub = variant(tmp_path, {file: [(old, new)]})
    res = grade(sub, stages=list(stages))
    at = (sub / file).read_text().splitlines().index(new) + 1
    assert f"{file}:{at}" in res.next_step and f"never reads its parameter `{param}`" in res.next_step, res.next_step


def test_a_parameter_read_or_not_named_by_the_check_is_not_blamed(tmp_path):
    from autograder.feedback.sources import unread_parameter
    from autograder.sandbox.safe_files import Snapshot

    source = b"def f(x, causal=True, device=None):\n    mask = make_causal(x)\n    return mask\n"
    snap = Snapshot(tmp_path, {}, {}).with_file("m.py", source)
    assert unread_parameter(snap, "m.py", "f", "causal or not") == ("causal", 2)
    assert unread_parameter(snap, "m.py", "f", "batch dims") is None  # not named by the check
    assert unread_parameter(snap, "m.py", "f", "x changes") is None  # read


def test_a_mask_of_one_value_is_said_as_such_not_as_a_rule():
    """An all-False mask fits 'j <= i-6' as well as any offset past the edge: no rule is read from it (set C had
    been told its mask said j <= i-6 when its code said j <= i-3)."""
    from autograder.evidence.inference import mask_pattern

    right = np.tril(np.ones((3, 6), dtype=bool), 3)
    said = mask_pattern(np.zeros((3, 6), dtype=bool), right)[1]
    assert "no query sees any key" in said and "j <= i-" not in said.split(";")[0], said
    assert "every query sees every key" in mask_pattern(np.ones((3, 6), dtype=bool), right)[1]
    assert "j <= i+4" in mask_pattern(np.tril(np.ones((3, 6), dtype=bool), 4), right)[1]


def test_a_raise_the_student_wrote_points_at_the_test_that_decided_it(tmp_path):
    """apply_mask's check of empty rows, taken over the columns: it raises for a mask that hides a key from every
    query; the line to change is the `if`, not the `raise` under it."""
    sub = variant(tmp_path, {"masking.py": [("if not np.all(np.any(allowed, axis=-1)):",
                                             "if not np.all(np.any(allowed, axis=-2)):")]})
    res = grade(sub, stages=list(MASKING))
    assert res.stages["masking"].status == "failed"
    lines = (sub / "masking.py").read_text().splitlines()
    at = next(i for i, text in enumerate(lines, 1) if "np.any(allowed, axis=-2)" in text)
    assert f"masking.py:{at}" in res.next_step and f"masking.py:{at + 1}" not in res.next_step, res.next_step


@pytest.mark.parametrize("file, old, new, stages", [
    ("softmax.py", "    if np.any(np.isneginf(top)):", "    if np.all(np.isneginf(top)):", SOFTMAX),
    ("kv_cache.py", "        if end > self.max_len:", "        if t > self.max_len:", ("heads", "kv_cache")),
], ids=["softmax: every slice instead of any", "kv_cache: the new positions alone"])
def test_a_raise_not_made_points_at_the_test_above_it(tmp_path, file, old, new, stages):
    """A check that expects ValueError where the student's function returned (or failed later, writing past the
    cache's end) points at the `if` above the function's `raise ValueError`: its condition is what did not hold,
    not the function's def line (set A's cold student: both at the def line or the failed write before)."""
    sub = variant(tmp_path, {file: [(old, new)]})
    res = grade(sub, stages=list(stages))
    assert res.stages[stages[-1]].status == "failed"
    at = (sub / file).read_text().splitlines().index(new) + 1
    assert f"{file}:{at}" in res.next_step, res.next_step


def test_a_raise_for_every_tall_call_fails_and_points_at_its_test(tmp_path):
    """Only the causal mask can leave a query row without keys: raising for every n_q > n_k (a cold student's
    attempt, which kept every point before) fails the raise check at the `if` that decides it."""
    old = "    offset = n_k - n_q  # query i sits at position offset + i"
    new = "    if n_q > n_k:"
    sub = variant(tmp_path, {"tiled.py": [(old, old + "\n" + new + "\n        raise ValueError('no keys')")]})
    res = grade(sub, stages=["softmax", "tiled"])
    failed = [r.check.name for r in res.stages["tiled"].checks if not r.passed]
    assert failed == ["tiled_row_without_keys_raises"], failed
    at = (sub / "tiled.py").read_text().splitlines().index(new) + 1
    assert f"tiled.py:{at}" in res.next_step, res.next_step


def test_a_key_loop_that_reads_hidden_blocks_points_at_its_bound(tmp_path):
    """Key blocks wholly in a query block's future read anyway (values right, only the NaN keys show it): no value
    parts, so the skip check points at what sets where the key loop stops, not at the def line (three cold
    students' attempts)."""
    old = "        for j0 in range(0, min(n_k, last_key + 1), block_k):"
    new = "        for j0 in range(0, n_k, block_k):"
    sub = variant(tmp_path, {"tiled.py": [(old, new)]})
    res = grade(sub, stages=["softmax", "tiled"])
    at = (sub / "tiled.py").read_text().splitlines().index(new) + 1
    assert f"tiled.py:{at}" in res.next_step, res.next_step


def test_the_bound_of_an_inner_loop_is_read_from_the_source():
    from autograder.stages.common import inner_loop_bound_line

    src = (b"def f(n, b):\n    m = n\n    for i in range(0, n, b):\n        stop = min(n, i + b)\n"
           b"        for j in range(0, stop, b):\n            pass\n")
    assert inner_loop_bound_line(src, "f") == 4  # set per outer block
    assert inner_loop_bound_line(src.replace(b"range(0, stop, b)", b"range(0, m, b)"), "f") == 5  # a size: the loop
    assert inner_loop_bound_line(b"def f(n):\n    return n\n", "f") is None


def test_where_a_function_raises_nothing_no_test_line_is_made_up():
    from autograder.stages.common import raise_test_line

    src = b"class C:\n    def f(self, x):\n        if x:\n            raise ValueError()\n\n" \
          b"def g(x):\n    raise ValueError()\n\ndef h(x):\n    if x:\n        if x > 1:\n            raise ValueError\n"
    assert raise_test_line(src, "C.f", "ValueError") == 3
    assert raise_test_line(src, "g", "ValueError") is None  # raised outside any `if`
    assert raise_test_line(src, "h", "ValueError") == 11  # the innermost test
    assert raise_test_line(src, "h", "TypeError") is None and raise_test_line(src, "missing", "ValueError") is None


# -- each relation on arrays alone: a value made with exactly one change, and the right value with none ------

Q, K = np.random.default_rng(5).normal(size=(3, 4)), np.random.default_rng(6).normal(size=(6, 4))
V = np.random.default_rng(7).normal(size=(6, 2))


def attention_steps(n_k: int = 6):
    """The reference's steps of a causal attention of the 3 queries Q over n_k keys."""
    from autograder.api import ReferenceAPI

    ref = ReferenceAPI()
    return steps.attention(ref, Q, K[:n_k], V[:n_k], ref.causal_mask(3, n_k))


def changed(label: str, make) -> tuple[str, str] | None:
    want = attention_steps(3 if label.endswith("square") else 6)
    label = label.removesuffix(" square")
    return relations.relation(make(dict(want)), [label], want)


def masked_weights(d: dict, allowed) -> np.ndarray:
    return relations._softmax(np.where(allowed, d["the scaled scores q k^T / sqrt(d_k)"], -np.inf))


@pytest.mark.parametrize("label, make, words", [
    ("the mask (True = may attend)", lambda d: ~d["the mask (True = may attend)"], "mask inverted"),
    ("the weights", lambda d: masked_weights(d, ~d["the mask (True = may attend)"]), "mask inverted"),
    ("the mask (True = may attend)", lambda d: np.tril(np.ones((3, 6), bool)), "aligned top-left"),
    ("the masked scores", lambda d: np.where(np.tril(np.ones((3, 6), bool), 4), d["the scaled scores q k^T / sqrt(d_k)"],
                                             -np.inf), "also sees the next key"),
    ("the mask (True = may attend) square", lambda d: np.triu(np.ones((3, 3), bool)), "transposed"),
    ("the weights", lambda d: relations._softmax(d["the scaled scores q k^T / sqrt(d_k)"]), "no mask"),
    ("the weights", lambda d: relations._softmax(np.where(d["the mask (True = may attend)"], d["q k^T"], -np.inf)),
     "no scale"),
    ("the row maxima", lambda d: np.max(d["the masked scores"], axis=0, keepdims=True), "over axis 0"),
    ("the weights", lambda d: relations._softmax(d["the masked scores"], 0), "normalised over axis 0"),
    ("q k^T", lambda d: d["q k^T"].T, "transpose"),
    ("the scaled scores q k^T / sqrt(d_k)", lambda d: d["q k^T"] / 4, "q k^T divided by d_k = 4"),
    ("the scaled scores q k^T / sqrt(d_k)", lambda d: d["q k^T"] * 2, "a multiplication where a division belongs"),
    ("the scaled scores q k^T / sqrt(d_k)", lambda d: d["q k^T"], "left out"),
    ("the weights", lambda d: d["the weights"] * 6, "times n = 6"),
    ("the weights", lambda d: d["the weights"].astype(np.float16).astype(float), "float16"),
])
def test_each_relation_is_named_from_the_references_steps(label, make, words):
    found = changed(label, make)
    assert found is not None and words in found[1], found


def test_an_operand_swapped_is_named_and_an_unnamed_factor_is_not():
    want = [("q", Q), ("k", K[:3]), ("v", V[:3])]
    assert "holds the reference's k where its v belongs" in relations.relation(K[:3], ["v"], want)[1]
    assert changed("the scaled scores q k^T / sqrt(d_k)", lambda d: d["q k^T"] * 1.3) is None


def test_the_right_values_are_never_named():
    """Precision on arrays: every step of a masked attention, compared with itself, names no change."""
    want = attention_steps()
    for label, w in want:
        if sum(np.array_equal(w, x) for _, x in want if np.shape(x) == np.shape(w)) == 1:
            assert relations.relation(w, [label], want) is None, label


@pytest.mark.parametrize("call, words", [
    ({"is_causal": False, "masked": False}, "neither is_causal nor attn_mask"),
    ({"is_causal": True, "masked": False, "t_q": 3}, "aligns top-left"),
    ({"is_causal": False, "masked": True, "allowed": ~np.tril(np.ones((4, 4), bool))}, "inverted"),
    ({"is_causal": True, "masked": False, "dropout_p": 0.5}, "dropout_p=0.5 while training=False"),
    ({"is_causal": True, "masked": False, "scale": 0.125}, "scale=0.125"),
])
def test_an_sdpa_calls_arguments_are_compared_with_the_references(call, words):
    base = {"t_q": 4, "t_k": 4, "d": 8, "dropout_p": 0.0, "scale": None, "allowed": None}
    assert words in relations.sdpa_relation({**base, **call}, causal=True, dropout=0.0, training=False)
    right = {**base, "is_causal": True, "masked": False}
    assert relations.sdpa_relation(right, causal=True, dropout=0.0, training=False) is None
    mask = {**base, "t_q": 3, "t_k": 6, "masked": True, "is_causal": False,
            "allowed": np.tril(np.ones((3, 6), bool), 3)}
    assert relations.sdpa_relation(mask, causal=True, dropout=0.0, training=False) is None


# -- confirm by repair (part 3): the named change, made as an edit of a copy, reruns the failing checks ---------

def _hints(sub, res) -> list[str]:
    """Every rung `make hint` gives for the stage, in order, after the run `res` (as cli.py remembers it)."""
    from autograder.feedback.hints import next_hint, remember_run, upcoming

    remember_run(res)
    stage = next(iter(res.stages))
    return [next_hint(sub, stage) for _ in range(upcoming(sub, stage)["of"])]


def test_a_named_change_that_an_edit_confirms_says_so_and_the_last_rung_gives_the_edit(tmp_path):
    from autograder.feedback.repair import repair_of

    res, loc, _ = graded(tmp_path, next(m for m in MUTANTS if m.id == "v-projected-with-w_k"))
    found = repair_of(loc)
    assert found is not None and found["after"].startswith("v = x @ w_v"), res.next_step
    assert f"Confirmed: with the operand `w_v` where `w_k` was on line {loc.line}, all" in res.next_step, res.next_step
    rungs = _hints(tmp_path / "submission", res)
    assert "change `v = x @ w_k" in rungs[-1] and "to `v = x @ w_v" in rungs[-1], rungs[-1]
    assert not any("w_v" in r for r in rungs[:-1]), rungs


@pytest.mark.slow  # runs make grade and make hint, whole channels (CONTRIBUTING.md, the tiers): make test only
def test_make_grade_confirms_the_edit_as_the_api_does_and_make_hint_ends_on_it(tmp_path):
    """The confirmation ran only where a grade started its own children (the API): `make grade` and Gradescope start
    theirs ahead, and said nothing of it, so the hint ladder's last rung never gave the edit to a student. Through
    the CLI now: the same sentence, and `python -m autograder hint` (what `make hint` runs) ends on the edit."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    m = next(m for m in MUTANTS if m.id == "v-projected-with-w_k")
    sub = variant(tmp_path, m.edits)
    env = {**os.environ, "NO_COLOR": "1"}

    def cli(*args: str) -> str:
        p = subprocess.run([sys.executable, "-m", "autograder", *args], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode in (0, 1), p.stdout + p.stderr
        return p.stdout

    out = cli("grade", "--submission", str(sub), "--stage", ",".join(m.stages))
    assert "Confirmed: with the operand `w_v` where `w_k` was on line" in " ".join(out.split()), out
    rungs = [cli("hint", "--submission", str(sub), m.stages[-1]) for _ in range(6)]
    assert any("to `v = x @ w_v" in " ".join(r.split()) for r in rungs), rungs[-1]


def test_no_edit_derived_no_claim(tmp_path):
    """The default axis 0 makes the row maxima over axis 0 at a line holding `axis=axis`: named, nothing to edit."""
    from autograder.feedback.repair import repair_of

    res, loc, _ = graded(tmp_path, SOFTMAX_DEFAULT_AXIS_0)
    assert loc is not None and repair_of(loc) is None
    assert "onfirmed" not in res.next_step, res.next_step
    assert "change `" not in _hints(tmp_path / "submission", res)[-1]


def test_an_edit_that_leaves_a_check_failing_claims_nothing(tmp_path):
    """Two mistakes: the named one's edit (axis back) leaves the second failing the checks: no confirmation."""
    from autograder.feedback.repair import edits_for, repair_of

    sub = variant(tmp_path, {"softmax.py": [(SOFTMAX_TOP, SOFTMAX_TOP.replace("axis=axis", "axis=0")),
                                            (SOFTMAX_EXP, SOFTMAX_EXP.replace("np.exp(scores - top)",
                                                                              "np.exp(scores - top) + 1e-3"))]})
    res = grade(sub, stages=["softmax"])
    loc = res.located.get("softmax")
    assert "over axis 0" in (parting_words(loc) or ""), res.next_step
    assert edits_for(loc, res.snapshot), "an edit is derived, and tried"
    assert repair_of(loc) is None and "onfirmed" not in res.next_step, res.next_step


def test_a_repair_never_changes_a_score(tmp_path, monkeypatch):
    """The same mutant graded with the repair confirmed and with it switched off: every check's result the same."""
    from autograder.feedback import repair

    m = next(m for m in MUTANTS if m.id == "softmax-max-over-columns")
    sub = variant(tmp_path, m.edits)
    tried = grade(sub, stages=list(m.stages))
    assert repair.repair_of(tried.located["softmax"]) is not None
    monkeypatch.setattr(repair, "confirm_first", lambda *a, **k: None)
    plain = grade(sub, stages=list(m.stages))
    assert [(r.check.id, r.status, r.score, r.message) for sr in tried.stages.values() for r in sr.checks] == \
        [(r.check.id, r.status, r.score, r.message) for sr in plain.stages.values() for r in sr.checks]
    assert tried.score == plain.score and tried.stages["softmax"].status == "failed"


@pytest.mark.parametrize("line, words, after", [
    ("    top = np.max(scores, axis=0, keepdims=True)", "taken over axis 0 (the queries' axis) instead of the last",
     "    top = np.max(scores, axis=-1, keepdims=True)"),
    ('    s = s.masked_fill(allowed, float("-inf"))', "equals the reference's masked scores with the mask inverted",
     '    s = s.masked_fill(~allowed, float("-inf"))'),
    ("    allowed = j > i  # [n, n]", "equals the reference's mask with the mask inverted (True where ...)",
     "    allowed = j <= i  # [n, n]"),
    ("    m = torch.ones(T, T).triu(diagonal=T - T_k)", "with the mask transposed (built per column)",
     "    m = torch.ones(T, T).tril(diagonal=T_k - T)"),
    ("    m = np.tril(np.ones((n, n)), k=1)", "with the mask shifted one diagonal: each query also sees the next key",
     "    m = np.tril(np.ones((n, n)), k=0)"),
    ("    s = q @ k.T / d_k", "made with q k^T divided by d_k = 4 instead of sqrt(d_k) = 2",
     "    s = q @ k.T / d_k ** 0.5"),
    ("    y = F.scaled_dot_product_attention(q, k, v)", "sets neither is_causal nor attn_mask: every query ...",
     "    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)"),
    ("    x -= x.max()", "your code writes into `x`, the array the caller passed in", "    x = x.copy()\n    x -= x.max()"),
])
def test_each_relation_kind_derives_its_edit(line, words, after):
    from autograder.feedback.repair import derive

    assert derive(line, words, 7)[0].after == after


@pytest.mark.parametrize("line, words", [
    ("    top = np.max(scores, axis=axis, keepdims=True)", "taken over axis 0 (the queries' axis) instead of the last"),
    ("    w = softmax(s)", "with no scale: q k^T is not divided by sqrt(d_k)"),
    ("    w = softmax(s)", "with no mask applied (every key visible to every query)"),
])
def test_no_edit_is_made_up_where_the_line_does_not_hold_the_change(line, words):
    from autograder.feedback.repair import derive

    assert derive(line, words, 7) == []
