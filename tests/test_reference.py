"""attn_ref: reproduces every worked number, agrees with torch's SDPA, and stays independent."""
import ast
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT

from attn_ref import core
from autograder.api import ReferenceAPI
from autograder.evidence.compare import check_printed, check_within
from autograder.stages.article_numbers import WORKED


@pytest.mark.parametrize("w", WORKED, ids=[w.id for w in WORKED])
def test_reference_reproduces_worked_number(w):
    got = w.compute(ReferenceAPI())
    if isinstance(w.precision, dict):
        check_within(got, w.expected, w.precision["sampling_error"], w.id)
    else:
        check_printed(got, w.expected, w.precision, w.id)


def test_worked_check_fails_on_a_wrong_number():
    """The worked comparison really compares: one unit in the last printed place is too much."""
    from autograder.outcomes import Fail

    with pytest.raises(Fail):
        check_printed([0.4111, 0.1978], [0.4011, 0.1978], 4, "x")
    check_printed([0.40114, 0.19776], [0.4011, 0.1978], 4, "x")


def test_every_article_section_with_numbers_is_covered():
    sections = {(w.article, w.section) for w in WORKED}
    for need in [("A", "How the scores become shares"), ("A", "Hide forbidden positions before softmax"),
                 ("B", "The one idea"), ("B", "Simple self-attention"), ("B", "Trainable attention"),
                 ("B", "Scores, now with a divide"), ("B", "Weights and output"), ("B", "Causal attention"),
                 ("B", "Multi-head attention"), ("B", "Code that matches the hand numbers")]:
        assert need in sections, need


def test_every_section_the_kit_cites_is_in_its_article():
    """Found by a stranger student: two inferred diagnoses sent them to reread sections no article has (Article A,
    'Turn scores into weights with softmax'). Every section named where a student reads it (a diagnosis's reread,
    a check's citation, a worked number's section) is one of the headings the kit declares (SECTIONS); and where
    the articles are at hand (beside the checkout), each declared heading is in its article."""
    import re

    from autograder.stages import CATALOGUE, CHECKS
    from autograder.stages.article_numbers import SECTIONS

    cited = [(m.id, m.reread) for m in CATALOGUE.values()] + [(c.id, c.cite) for c in CHECKS]
    cited += [(w.id, f"Article {w.article}, '{w.section}'") for w in WORKED]
    found = [(who, a, " ".join(sec.split())) for who, words in cited
             for a, sec in re.findall(r"Article ([AB]), '([^']+)'", words)]
    assert len(found) > 50
    for who, article, section in found:
        assert section in SECTIONS[article], (who, article, section)
    folder = ROOT.parent / "shared" / "articles"
    if not folder.is_dir():
        pytest.skip("the articles are not beside this checkout: the declared headings are not compared with them")
    for article, name in (("A", "000_ad6340b3b26d7c94.txt"), ("B", "001_774abd5489e74511.txt")):
        text = " ".join((folder / name).read_text().split())
        for section in SECTIONS[article]:
            assert section in text, (article, section)


@pytest.mark.parametrize("T_q,T_k,causal", [(5, 5, True), (6, 6, False), (3, 7, True), (1, 9, True)])
def test_reference_agrees_with_sdpa(T_q, T_k, causal):
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 3, T_q, 8)), rng.standard_normal((2, 3, T_k, 8)), rng.standard_normal((2, 3, T_k, 8))
    mask = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q) if causal else None
    want = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), attn_mask=mask).numpy()
    np.testing.assert_allclose(core.fused_attention(q, k, v, causal), want, rtol=1e-12, atol=1e-12)


def test_reference_module_matches_article_class():
    """The numpy module reference equals a torch CausalSelfAttention built with the same weights and is_causal."""
    rng = np.random.default_rng(1)
    B, T, C, H = 2, 6, 12, 3
    x, w_qkv, w_out = rng.standard_normal((B, T, C)), rng.standard_normal((3 * C, C)), rng.standard_normal((C, C))
    xt = torch.tensor(x)
    q, k, v = (xt @ torch.tensor(w_qkv).T).split(C, dim=-1)
    q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
    want = (y @ torch.tensor(w_out).T).numpy()
    np.testing.assert_allclose(core.module_forward(x, w_qkv, w_out, H), want, rtol=1e-10, atol=1e-10)


def test_reference_softmax_edge_cases():
    np.testing.assert_allclose(core.softmax(np.array([1e4, 1e4 - 1])), [1 / (1 + np.exp(-1)), 1 / (1 + np.exp(1))])
    assert core.softmax(np.array([0.0, -np.inf]))[1] == 0.0
    with pytest.raises(ValueError):
        core.softmax(np.array([-np.inf, -np.inf]))


def _imports(folder):
    names = set()
    for path in (ROOT / folder).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_reference_and_solutions_are_independent():
    assert not {"solutions", "exercises", "autograder"} & _imports("attn_ref")
    assert not {"attn_ref", "autograder", "exercises"} & _imports("solutions")
    assert _imports("solutions") <= {"numpy", "torch", "__future__"}


def test_worked_json_lists_every_check():
    p = subprocess.run([sys.executable, "-m", "autograder", "worked", "--json"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    items = json.loads(p.stdout)
    assert len(items) == len(WORKED) >= 40
    for it in items:
        assert {"id", "article", "section", "quantity", "expected", "precision"} <= set(it)
        assert it["article"] in ("A", "B")


@pytest.mark.parametrize("n_q,n_k,causal", [(4, 4, True), (3, 6, True), (5, 5, False)])
def test_reference_backward_agrees_with_autograd(n_q, n_k, causal):
    rng = np.random.default_rng(3)
    q, k, v, g = (rng.standard_normal(s) for s in ((n_q, 4), (n_k, 4), (n_k, 3), (n_q, 3)))
    qt, kt, vt = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    mask = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q) if causal else None
    (F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask) * torch.tensor(g)).sum().backward()
    for got, t in zip(core.attention_backward(q, k, v, g, causal), (qt, kt, vt)):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_reference_costs():
    assert core.score_count(128_000) == 16_384_000_000
    assert core.kv_cache_floats(1024, 1, 12, 64) == 2 * 1024 * 768


@pytest.mark.parametrize("n_heads,n_kv_heads,causal", [(4, 2, True), (6, 3, False), (4, 1, True), (4, 4, True)])
def test_reference_gqa_agrees_with_sdpa(n_heads, n_kv_heads, causal):
    """attn_ref's grouped-query attention (a loop over query heads) equals torch's SDPA with enable_gqa."""
    from attn_ref import gqa

    rng = np.random.default_rng(4)
    B, T, C = 2, 5, 12
    d_head = C // n_heads
    x = rng.standard_normal((B, T, C))
    w_q, w_o = rng.standard_normal((C, C)), rng.standard_normal((C, C))
    w_k, w_v = rng.standard_normal((C, n_kv_heads * d_head)), rng.standard_normal((C, n_kv_heads * d_head))

    def heads(a, h):  # [B, T, h * d_head] -> [B, h, T, d_head]
        return torch.tensor(a).view(B, T, h, d_head).transpose(1, 2)

    y = F.scaled_dot_product_attention(heads(x @ w_q, n_heads), heads(x @ w_k, n_kv_heads),
                                       heads(x @ w_v, n_kv_heads), is_causal=causal, enable_gqa=True)
    want = y.transpose(1, 2).reshape(B, T, C).numpy() @ w_o
    got = gqa.grouped_query_attention(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, causal)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    if 1 < n_kv_heads < n_heads:  # the tile-order mistake is a different answer exactly when groups are mixed
        from attn_ref import mistakes

        assert not np.allclose(mistakes.gqa_tiled(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, causal), want)
    with pytest.raises(ValueError):
        gqa.grouped_query_attention(x, w_q, w_k, w_v, w_o, 4, 3)


def test_reference_rope_by_hand_and_by_distance():
    """Hand values of the rotate-half convention, base 10,000; scores depend on the distance only."""
    from attn_ref import mistakes, rope

    # d = 4: pair 0 = features (0, 2) at frequency 1, pair 1 = features (1, 3) at 10,000 ** (-1/2) = 0.01
    x = np.array([[0.0, 1.0, 0.0, 0.0]])
    np.testing.assert_allclose(rope.rotate(x, offset=3), [[0.0, np.cos(0.03), 0.0, np.sin(0.03)]], atol=1e-15)
    np.testing.assert_allclose(rope.rotate(np.array([[1.0, 0.0]]), offset=1), [[np.cos(1.0), np.sin(1.0)]])
    np.testing.assert_allclose(rope.rotate(x, offset=0), x)  # position 0 is not turned
    rng = np.random.default_rng(5)
    q0, k0 = rng.standard_normal(8), rng.standard_normal(8)
    s = rope.rotate(np.tile(q0, (6, 1))) @ rope.rotate(np.tile(k0, (6, 1)), offset=10).T
    for lag in range(-5, 6):
        assert np.ptp(np.diagonal(s, offset=lag)) < 1e-12
    assert np.ptp(np.diagonal(s[::-1])) > 1e-3
    x = rng.standard_normal((3, 5, 8))
    np.testing.assert_allclose(np.linalg.norm(rope.rotate(x, 7), axis=-1), np.linalg.norm(x, axis=-1))
    assert all(not np.allclose(m, rope.rotate(x, 7)) for m in mistakes.rotate_interleaved(x, 7))


def test_reference_rope_decode_equals_the_full_forward_and_the_no_offset_mistake_does_not():
    from attn_ref import mistakes, rope

    rng = np.random.default_rng(6)
    q, k, v = rng.standard_normal((2, 6, 4)), rng.standard_normal((2, 6, 4)), rng.standard_normal((2, 6, 2))
    outs, cache, start = [], None, 0
    for t in (2, 1, 3):
        out, cache = rope.rope_decode(q[:, start:start + t], k[:, start:start + t], v[:, start:start + t], cache)
        outs.append(out)
        start += t
    full = rope.rope_attention(q, k, v, True)
    np.testing.assert_allclose(np.concatenate(outs, axis=1), full, rtol=1e-12, atol=1e-12)
    assert not np.allclose(mistakes.rope_decode_variants(q, k, v, [2, 1, 3])["rope-no-offset"], full)
