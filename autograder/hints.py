"""A ladder of hints per stage, from a nudge to a near-answer; `make hint` climbs one rung per call.

The rung reached is remembered in `.hints.json` beside the submission folder. Hints never
print solution code; they point at the idea and the article section.
"""
import json
from pathlib import Path

from .registry import STAGE, STAGES
from .report import first_stub

HINTS: dict[str, list[str]] = {
    "softmax": [
        "Softmax turns any row of scores into positive shares that add up to one: exponentiate, then divide "
        "by the row's total. Article A, 'How the scores become shares'.",
        "exp(1e4) is inf in floating point. Subtracting the same number from every score in a slice changes no "
        "ratio, so subtract the slice's maximum first (keepdims=True keeps the shapes broadcastable).",
        "exp(-inf) is exactly 0, which is how a masked entry gets no weight. But if the maximum of a slice is "
        "itself -inf, every entry is masked: check for that and raise ValueError before dividing 0 by 0.",
    ],
    "dot_products": [
        "The score between tokens i and j is their dot product; all of them at once form an n x n matrix. "
        "Article B, 'Simple self-attention'.",
        "One matrix product of x with its own transpose gives every pair. Then each row of weights (your "
        "softmax, along the last axis) mixes the rows of x.",
    ],
    "projections": [
        "Queries, keys and values are three different linear maps of the same tokens, with no bias. "
        "Article B, 'Trainable attention'.",
        "Each is x times its weight matrix, with x on the left: [..., n, d_model] @ [d_model, d_k]. The @ "
        "operator already handles leading batch dimensions.",
    ],
    "scaling": [
        "The dot product of two d_k-dimensional vectors with unit-variance entries has variance d_k; dividing "
        "by sqrt(d_k) brings it back to 1. Article A, 'Why divide by the square root?'.",
        "For q [..., n_q, d_k] and k [..., n_k, d_k], swap the last two axes of k (not .T, which reverses every "
        "axis of a batched array) and divide by the square root of q's last dimension.",
        "For score_variance: draw q and k of shape [n_pairs, d_k] from np.random.default_rng(seed), take the "
        "row-wise dot products, optionally divide them, and return their variance as a float.",
    ],
    "masking": [
        "A forbidden position must get weight exactly 0 and the others must still sum to 1, so the mask acts "
        "on the scores, before softmax. Article A, 'Hide forbidden positions before softmax'.",
        "Set forbidden scores to -inf (not 0: exp(0) is 1). For the causal mask, compare a column of query "
        "indices with a row of key indices; broadcasting builds the whole [n_q, n_k] table.",
        "With fewer queries than keys, the queries are the last n_q positions: query i sits at position "
        "n_k - n_q + i and may see every key up to and including that position.",
    ],
    "heads": [
        "Each head is ordinary attention on its own slice of the feature columns; the outputs are placed "
        "side by side and mixed by W_O. Article B, 'Multi-head attention'.",
        "To split, reshape the last axis into (n_heads, d_head) and then swap the head axis in front of the "
        "positions; merging undoes exactly that, in reverse order. Each head scales by sqrt(d_head).",
        "In the module, one Linear produces q, k and v side by side: split its output into three along the "
        "last axis, in that order. Article B, 'Code that matches the hand numbers'.",
    ],
    "kv_cache": [
        "When generating, the keys and values of earlier tokens never change, so keep them and only compute "
        "the new token's. Article B, 'What it costs as the sequence grows'.",
        "Allocate k and v once at full size; `length` says how much is filled. append writes the new slice "
        "at [length, length + t) along the position axis and returns views of the filled part.",
        "In forward, append the new keys/values before attending, so each new token sees itself. The queries "
        "are the last T of the L cached positions: the causal mask is aligned bottom-right.",
    ],
    "tiled": [
        "Process the queries in blocks; for each block, let the key blocks stream past while you keep, per "
        "query row, the largest score so far, the sum of exponentials so far, and the weighted sum of values so far.",
        "When a new key block raises a row's maximum from m_old to m_new, everything accumulated so far was "
        "measured against m_old: multiply both the sum and the weighted values by exp(m_old - m_new).",
        "With the causal mask, a query block never needs key blocks that start after its last query's position: "
        "stop the key loop there. Divide the weighted values by the sum only at the very end.",
    ],
    "backward": [
        "Go backwards through out = P v, P = softmax(S), S = q k^T / sqrt(d_k): one product rule at a time.",
        "dv and dP come straight from out = P v. For the softmax, each weight in a row depends on every score "
        "in that row: the Jacobian is diag(p) - p p^T, not diag(p).",
        "That Jacobian applied to a row of dP is p * (dP - sum(dP * p)). Then dq and dk follow from S, "
        "each with the same 1/sqrt(d_k) the forward pass used.",
    ],
    "dropout": [
        "Inverted dropout: drop each weight with probability p and scale up the survivors, so the expected "
        "value of every weight is unchanged; at inference, do nothing.",
        "rng.random(shape) gives uniform numbers in [0, 1): comparing them with p gives the mask. Divide "
        "survivors by 1 - p.",
    ],
    "costs": [
        "Every query scores every key, in every head. A KV cache keeps two vectors (a key and a value) per "
        "token, per key/value head, per layer, per sequence in the batch.",
        "Check your formula against the KVCache you wrote: count the numbers its k and v tensors hold.",
    ],
    "fused": [
        "torch.nn.functional.scaled_dot_product_attention does scores, scaling, mask, softmax and the weighted "
        "sum in one call, without keeping the T x T matrix when it can avoid it.",
        "When T_q equals T_k, pass is_causal=True and no mask. Only pass dropout_p when training.",
        "SDPA's is_causal aligns the mask top-left. With T_q != T_k build the bottom-right boolean mask "
        "yourself (True = may attend).",
    ],
}


def _state_path(submission: Path) -> Path:
    return submission.resolve().parent / ".hints.json"


def first_unfinished(submission: Path) -> str:
    """The first stage whose files still hold its stub (or the last graded status, if known)."""
    last = submission.resolve().parent / ".grade-state.json"
    if last.is_file():
        try:
            statuses = json.loads(last.read_text())
            for s in STAGES:
                if statuses.get(s.name, "passed") != "passed":
                    return s.name
        except (ValueError, AttributeError):
            pass
    for s in STAGES:
        if first_stub(submission, s.name):
            return s.name
    return STAGES[-1].name


def next_hint(submission: Path, stage: str | None = None) -> str:
    stage = stage or first_unfinished(submission)
    if stage not in STAGE:
        raise ValueError(f"unknown stage {stage}; stages: {', '.join(STAGE)}")
    path = _state_path(submission)
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        state = {}
    ladder = HINTS[stage]
    rung = min(int(state.get(stage, 0)), len(ladder) - 1)
    state[stage] = rung + 1
    try:
        path.write_text(json.dumps(state, indent=1))
    except OSError:
        pass
    more = "run `make hint` again for the next one" if rung + 1 < len(ladder) else "that was the last hint"
    return f"Hint {rung + 1}/{len(ladder)} for stage {STAGE[stage].number} ({stage}):\n  {ladder[rung]}\n({more})"
