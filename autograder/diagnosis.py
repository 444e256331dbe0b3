"""The catalogue of known attention mistakes, and matching a wrong answer against them.

A diagnosis is named only on evidence: the student's output matches what attn_ref.mistakes
computes for that mistake on the same input, and does not match the correct answer (or, for
cost mistakes, a FLOP or memory measurement shows it).
"""
from dataclasses import dataclass

import numpy as np

MATCH_RTOL, MATCH_ATOL = 1e-3, 1e-4  # a mistake "matches" at a looser tolerance than a pass (fp32 inputs)


@dataclass(frozen=True)
class Mistake:
    id: str
    stage: str
    explanation: str
    reread: str
    where: str = ""  # "file.py:function" to open


_M = [
    Mistake("softmax-unstable", "softmax", "exp() of the raw scores overflows for large scores; subtract each "
            "slice's maximum first (it cancels in the ratio)", "Article A, 'How the scores become shares'", "softmax.py:softmax"),
    Mistake("softmax-wrong-axis", "softmax", "the weights are normalised along the wrong axis; each query's "
            "weights over the keys (the `axis` argument) must sum to 1", "Article A, 'How the scores become shares'", "softmax.py:softmax"),
    Mistake("softmax-no-exp", "softmax", "the scores are divided by their sum without exponentiating, which "
            "allows negative weights and keeps them proportional to the raw scores", "Article B, 'Simple self-attention'", "softmax.py:softmax"),
    Mistake("softmax-fully-masked-silent", "softmax", "a slice that is entirely -inf came back as NaN or zeros; "
            "there is nothing to normalise, so raise ValueError", "Article A, 'Hide forbidden positions before softmax'", "softmax.py:softmax"),
    Mistake("scale-missing", "scaling", "the scores are not divided by sqrt(d_k), so their spread grows with d_k "
            "and softmax saturates", "Article A, 'Why divide by the square root?'", "scaling.py:scaled_scores"),
    Mistake("scale-by-dk", "scaling", "the scores are divided by d_k instead of sqrt(d_k), which shrinks them too "
            "much as d_k grows", "Article B, 'Scores, now with a divide'", "scaling.py:scaled_scores"),
    Mistake("scale-wrong-dim", "scaling", "the square root is taken of the wrong size (a sequence length or d_v); "
            "it must be d_k, the width of a query or key", "Article A, 'Why divide by the square root?'", "scaling.py:scaled_scores"),
    Mistake("mask-zero-not-neginf", "masking", "forbidden scores are set to 0, and exp(0) = 1 still gives them "
            "weight; set them to -inf", "Article B, 'Causal attention'", "masking.py:apply_mask"),
    Mistake("mask-after-softmax", "masking", "weights are zeroed after softmax, so the rows no longer sum to 1; "
            "mask the scores before softmax", "Article A, 'Hide forbidden positions before softmax'", "masking.py:attention"),
    Mistake("mask-future-visible", "masking", "the mask lets queries see later positions (upper triangle); token i "
            "may only see keys j <= i", "Article B, 'Causal attention'", "masking.py:causal_mask"),
    Mistake("mask-excludes-self", "masking", "the mask hides each token from itself; the diagonal is allowed "
            "(j <= i, not j < i)", "Article B, 'Causal attention'", "masking.py:causal_mask"),
    Mistake("mask-top-left", "masking", "with fewer queries than keys the mask is aligned top-left; the queries "
            "are the last n_q positions, so query i sees keys j <= n_k - n_q + i", "Article B, 'Causal attention'", "masking.py:causal_mask"),
    Mistake("linear-attention", "masking", "softmax is missing: the output is (q k^T) v, a different mechanism, "
            "not a weighted average", "Article A, 'A transparent reference implementation'", "masking.py:attention"),
    Mistake("qk-swapped", "projections", "queries and keys are swapped: q must come from W_Q and k from W_K",
            "Article B, 'Trainable attention'", "projections.py:project_qkv"),
    Mistake("heads-wrong-split", "heads", "the heads are split by a plain reshape to [n_heads, n, d_head], which "
            "mixes positions and features; reshape to [n, n_heads, d_head], then swap the two axes",
            "Article B, 'Code that matches the hand numbers'", "heads.py:split_heads"),
    Mistake("heads-no-merge-transpose", "heads", "the heads are merged without moving the head axis back next to "
            "the features, so positions get mixed; swap the axes back before reshaping",
            "Article B, 'Code that matches the hand numbers'", "heads.py:merge_heads"),
    Mistake("heads-no-output-projection", "heads", "the concatenated heads are returned without the output "
            "projection W_O", "Article B, 'Multi-head attention'", "heads.py:multi_head_attention"),
    Mistake("heads-scale-dmodel", "heads", "each head's scores are divided by sqrt(d_model); a head's queries and "
            "keys have d_head features, so divide by sqrt(d_head)", "Article B, 'Multi-head attention'", "module.py:attend"),
    Mistake("cache-top-left-causal", "kv_cache", "the causal mask of a decode step is aligned top-left, so the new "
            "token sees only the first key(s) (what SDPA's is_causal does when T_q != T_k); align it bottom-right",
            "Article B, 'What it costs as the sequence grows'", "module.py:attend"),
    Mistake("cache-missing-new-token", "kv_cache", "the new tokens attend to the cache before their own keys and "
            "values are appended, so a token never sees itself; append first",
            "Article B, 'What it costs as the sequence grows'", "module.py:forward"),
    Mistake("cache-quadratic-step", "kv_cache", "the output is right but one decode step does work that grows with "
            "the square of the cache length; compute only the new rows of scores",
            "Article B, 'What it costs as the sequence grows'", "module.py:forward"),
    Mistake("fused-materialized-mask", "fused", "an explicit T x T mask is built where is_causal=True would do: "
            "O(T^2) memory, and no flash kernel on CUDA", "Article B, 'What it costs as the sequence grows'", "fused.py:fused_attention"),
    Mistake("fused-dropout-in-eval", "fused", "dropout is applied when not training; pass dropout_p only when "
            "training=True", "Article B, 'Causal attention'", "fused.py:fused_attention"),
    Mistake("fused-top-left", "fused", "is_causal=True is used with T_q != T_k, where SDPA aligns the mask "
            "top-left; build the bottom-right mask in that case", "Article B, 'What it costs as the sequence grows'", "fused.py:fused_attention"),
    Mistake("fused-not-fused", "fused", "attention is computed by hand instead of one "
            "F.scaled_dot_product_attention call", "Article B, 'Code that matches the hand numbers'", "fused.py:fused_attention"),
    # bonus stages
    Mistake("tiled-no-rescale", "tiled", "when a block raises a row's running maximum, the running sum and the "
            "accumulator must both be multiplied by exp(m_old - m_new); neither was", "the docstring of tiled.py",
            "tiled.py:tiled_attention"),
    Mistake("tiled-rescale-sum-only", "tiled", "the running sum is rescaled when the maximum grows but the output "
            "accumulator is not; both carry the old maximum", "the docstring of tiled.py", "tiled.py:tiled_attention"),
    Mistake("tiled-masked-row-nan", "tiled", "a row with no allowed key came back NaN (exp(-inf - -inf)); raise "
            "ValueError as softmax does", "Article A, 'Hide forbidden positions before softmax'",
            "tiled.py:tiled_attention"),
    Mistake("backward-diagonal-softmax", "backward", "the softmax Jacobian was applied as if it were diagonal "
            "(dS = P * dP); every weight depends on every score of its row, so subtract rowsum(dP * P) first",
            "the docstring of backward.py", "backward.py:attention_backward"),
    Mistake("backward-missing-scale", "backward", "dq or dk lacks the 1/sqrt(d_k) that the forward pass applied to "
            "the scores", "Article A, 'Why divide by the square root?'", "backward.py:attention_backward"),
    Mistake("dropout-not-inverted", "dropout", "the surviving weights are not divided by 1 - p, so dropout shrinks "
            "the expected output", "Article B, 'Causal attention'", "dropout.py:attention_dropout"),
    Mistake("dropout-in-eval", "dropout", "weights are dropped when not training; dropout is off at inference",
            "Article B, 'Causal attention'", "dropout.py:attention_dropout"),
    Mistake("dropout-keep-p", "dropout", "weights are kept with probability p instead of dropped with it",
            "Article B, 'Causal attention'", "dropout.py:attention_dropout"),
    Mistake("costs-kv-missing-factor-2", "costs", "the cache holds a key and a value per token and head: the "
            "factor 2 is missing", "Article B, 'What it costs as the sequence grows'", "costs.py:kv_cache_floats"),
    Mistake("costs-scores-not-squared", "costs", "every query scores every key: n x n scores per head, not n",
            "Article B, 'What it costs as the sequence grows'", "costs.py:score_count"),
]
CATALOGUE: dict[str, Mistake] = {m.id: m for m in _M}


def explain(mistake_id: str) -> str:
    m = CATALOGUE[mistake_id]
    return f"diagnosis {m.id}: {m.explanation} (reread {m.reread})"


def diagnosed(mistake_id: str | None, message: str, arrays: dict | None = None):
    """A compare.Fail naming a mistake that a measurement showed (or a plain one for None)."""
    from .compare import Fail

    if mistake_id is None:
        return Fail(message, arrays=arrays)
    return Fail(f"{explain(mistake_id)}\n{message}", diagnosis=mistake_id, arrays=arrays)


def close(got, want, ignore_nan_in_want: bool = False) -> bool:
    try:
        g = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    w = np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        return False
    if ignore_nan_in_want:
        keep = ~np.isnan(w)
        if not keep.any():
            return False
        g, w = g[keep], w[keep]
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(g, w, rtol=MATCH_RTOL, atol=MATCH_ATOL, equal_nan=True))


def diagnose(got, want, variants: dict | None, ignore_nan_in_want: bool = False) -> str | None:
    """The id of the first mistake whose output `got` matches while it does not match `want`."""
    if not variants or close(got, want):
        return None
    for mistake_id, cands in variants.items():
        assert mistake_id in CATALOGUE, mistake_id
        for c in cands if isinstance(cands, list) else [cands]:
            if close(got, c, ignore_nan_in_want):
                return mistake_id
    return None
