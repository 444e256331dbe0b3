"""The inputs and judges of fault localisation's probes (declarations.Probe), which each stage declares.

Every probe calls one student function on small fixed inputs drawn here; its judge compares the answer
with the reference's and, when they differ, asks inference (evidence/inference.py) what the difference
shows. Below the stages: it imports no stage, so the stage modules can use it.
"""
from typing import Callable

import numpy as np

from ..declarations import Probe
from . import inference


def _rng() -> np.random.Generator:
    return np.random.default_rng(23)


_R = _rng()
S34 = _R.normal(size=(3, 4)) * 2
X32 = _R.normal(size=(3, 2))
X54, W1, W2, W3 = _R.normal(size=(5, 4)), _R.normal(size=(4, 3)), _R.normal(size=(4, 3)), _R.normal(size=(4, 2))
Q34, K54 = _R.normal(size=(3, 4)), _R.normal(size=(5, 4))
K64, V62, S36 = _R.normal(size=(6, 4)), _R.normal(size=(6, 2)), _R.normal(size=(3, 6))
X56, X58 = _R.normal(size=(5, 6)), _R.normal(size=(5, 8))
WQ, WK, WV, WO = (_R.normal(size=(8, 8)) / 3 for _ in range(4))
XB = _R.normal(size=(1, 6, 8)).astype(np.float32)
WQKV, WOUT = (_R.normal(size=(24, 8)) / 3).astype(np.float32), (_R.normal(size=(8, 8)) / 3).astype(np.float32)
CAUSAL36 = np.tril(np.ones((3, 6), dtype=bool), 3)


def differs(got, want, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    try:
        g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    except (TypeError, ValueError):
        return True
    if g.shape != w.shape:
        return True
    with np.errstate(invalid="ignore"):
        # an infinite expected entry is met only by the same infinity (its tolerance would be infinite too)
        ok = np.where(np.isinf(w), g == w, np.abs(g - w) <= atol + rtol * np.abs(w))
    return not bool(np.all(ok))


def shape_note(got, want) -> str:
    g, w = np.shape(got), np.shape(want)
    return f"shape {tuple(g)}, expected {tuple(w)}" if g != w else "values differ"


def same_array(facts: dict | None = None) -> Callable:
    def judge(got, want, ref):
        if not differs(got, want):
            return None
        found = inference.infer(got, want, facts)
        return found or (None, shape_note(got, want))
    return judge


def same_mask(got, want, ref):
    g = np.asarray(got)
    if g.shape == np.shape(want) and g.dtype == bool and np.array_equal(g, want):
        return None
    return inference.mask_pattern(g, np.asarray(want)) or (None, shape_note(got, want))


def same_masked(got, want, ref):
    g = np.asarray(got, dtype=np.float64)
    if g.shape == np.shape(want):
        g = np.where(np.isinf(want) & (g <= -1e9), -np.inf, g)
    return None if not differs(g, want) else (None, shape_note(got, want))


def same_pair(facts: dict) -> Callable:
    def judge(got, want, ref):
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return None, f"returned {type(got).__name__}, expected (out, weights)"
        w_found = same_array({**facts, "weights": True})(got[1], want[1], ref)
        if w_found and w_found[0]:
            return w_found
        return same_array(facts)(got[0], want[0], ref) or w_found
    return judge


def same_triple(got, want, ref):
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return None, f"returned {type(got).__name__}, expected (q, k, v)"
    for part, g, w in zip("qkv", got, want):
        if differs(g, w):
            return None, f"{part} {shape_note(g, w)}"
    return None


def module_output(got, want, ref):
    if not differs(got, want, 1e-3, 1e-4):
        return None
    merged = np.asarray(want, dtype=np.float64) @ np.linalg.inv(WOUT.T.astype(np.float64))
    if not differs(got, merged, 1e-3, 1e-4):
        return ("inferred-no-output-projection", "your output equals the merged heads before `out`: multiplying it "
                "by out.weight^T gives the right output")
    return inference.infer(got, want, {"d_k": 4, "n_heads": 2, "n_q": 6, "n_k": 6}) or (None, shape_note(got, want))


def cache_chunks(batch: int, n_heads: int, max_len: int, d_head: int, chunks: list[int], seed: int = 0):
    """The keys and values a cache probe appends, drawn here in the parent: [(k_new, v_new) [B, H, t, D]], and
    a refill (k, v [B, H, max_len, D]) for after a refused append."""
    rng = np.random.default_rng([seed, batch, n_heads, max_len, d_head, *chunks])

    def draw(t: int) -> np.ndarray:
        return rng.standard_normal((batch, n_heads, t, d_head)).astype(np.float32)

    return [(draw(t), draw(t)) for t in chunks], (draw(max_len), draw(max_len))


def _is(got, *want) -> bool:
    try:
        return len(got) == len(want) and all(np.array_equal(np.asarray(g), w) for g, w in zip(got, want))
    except (TypeError, ValueError):
        return False


def cache_report(raw, data, refill, max_len: int) -> dict:
    """What append returned, judged here: `prefix_ok` says, per append, whether it returned exactly the
    keys and values appended so far (and after a refused append, whether a refill to max_len did)."""
    raw = raw if isinstance(raw, dict) else {}
    returned = list(raw.get("returned") or [])
    ok = [_is(pair, np.concatenate([k for k, _ in data[:i + 1]], -2), np.concatenate([v for _, v in data[:i + 1]], -2))
          for i, pair in enumerate(returned)]
    after = raw.get("after_error")
    if isinstance(after, dict):
        done = data[:len(returned)]
        room = max_len - sum(k.shape[-2] for k, _ in done)
        want = [np.concatenate([*(x[j] for x in done), refill[j][..., :room, :]], -2) for j in (0, 1)]
        after = {"length": after.get("length"), "refill": after.get("refill"),
                 "prefix_ok": _is(after["returned"], *want) if after.get("returned") is not None else None}
    buffers, written = raw.get("buffers"), data[:len(returned)]
    buffers_ok = None
    # (a cache without tensors named k, v loses the allocation check alone, which says so)
    if isinstance(buffers, list) and len(buffers) == 2 and all(np.ndim(b) == 4 for b in buffers) and written \
            and not raw.get("error"):
        n = sum(k.shape[-2] for k, _ in written)
        shape = (*written[0][0].shape[:2], max_len, written[0][0].shape[-1])
        buffers_ok = all(np.shape(b) == shape and np.array_equal(np.asarray(b)[..., :n, :],
                                                                 np.concatenate([x[j] for x in written], -2))
                         for j, b in enumerate(buffers))
    sizes = [np.shape(pair[0])[-2] if np.ndim(pair[0]) >= 2 else None for pair in returned
             if isinstance(pair, (list, tuple)) and len(pair) == 2]  # positions each append handed back
    return {"lengths": list(raw.get("lengths") or []), "prefix_ok": ok, "error": raw.get("error"),
            "after_error": after, "buffers_ok": buffers_ok, "sizes": sizes}


def probe_cache(api, batch: int, n_heads: int, max_len: int, d_head: int, chunks: list[int]) -> dict:
    """Append `chunks` positions through the student's KVCache.append alone, judged in the parent."""
    data, refill = cache_chunks(batch, n_heads, max_len, d_head, chunks)
    return cache_report(api.kv_cache_probe(batch, n_heads, max_len, d_head, data, refill), data, refill, max_len)


CACHE_DATA, CACHE_REFILL = cache_chunks(1, 2, 6, 4, [3, 1, 2])  # localisation's probe: they fill max_len 6


def cache_lengths(got, want, ref):
    """Chunks of 3, 1 and 2 positions appended to an empty cache of max_len 6, which they fill exactly."""
    got = cache_report(got, CACHE_DATA, CACHE_REFILL, 6)
    lengths, ok = list(got.get("lengths", [])), list(got.get("prefix_ok", []))
    if lengths == [0, 3, 4, 6] and ok == [True] * 3 and not got.get("error"):
        return None
    if got.get("error"):  # the cache refused positions that fit: what it holds was never wrong, so no contents claim
        return (None, f"appending chunks of 3, 1 and 2 positions to an empty cache of max_len 6, which they fill "
                f"exactly, raised {got['error']} after lengths {lengths}: positions that fit were refused "
                "(t new positions fit while length + t <= max_len)", r"max_len")
    if lengths == [0, 3, 4, 6] and got.get("sizes") and got["sizes"] != lengths[1:]:
        # the right count, handed back at the wrong size (the whole buffer, or the prefix from before the write):
        # what the cache holds may be right, so no contents claim
        return (None, f"appending chunks of 3, 1 and 2 positions to an empty cache of max_len 6, `length` read "
                f"{lengths} as it should, but append handed back k, v of {got['sizes']} positions: it must return "
                "the filled prefix k[:, :, :length], v[:, :, :length], its own new positions included", r"return\b")
    if lengths != [0, 3, 4, 6]:  # the count itself is off: that is the evidence (what append returns follows it)
        return ("inferred-cache-contents", f"appending chunks of 3, 1 and 2 positions to an empty cache, `length` "
                f"read {lengths} after each append (expected [0, 3, 4, 6]): it must grow by the t positions each "
                "append writes, and the next write starts where the last one ended", r"\blength\s*(\+=|=(?!=))")
    # (append's results are read back after the last append: a view of the buffers shows later writes too, so
    # no claim per append)
    return ("inferred-cache-contents", f"appending chunks of 3, 1 and 2 positions to an empty cache, `length` read "
            f"{lengths} as it should, but the filled part append returned did not equal what was appended")


def decode_prime(ref) -> None:
    """The answers decode_output compares with: the model whose cached keys are its queries, or its values."""
    ref.module_forward(XB, np.concatenate([WQKV[:8], WQKV[:8], WQKV[16:]]), WOUT, 2)
    ref.module_forward(XB, np.concatenate([WQKV[:8], WQKV[16:], WQKV[16:]]), WOUT, 2)


def decode_output(got, want, ref):
    if not differs(got, want, 1e-3, 1e-4):
        return None
    w = WQKV.copy()
    for name, rows in (("queries", slice(0, 8)), ("values", slice(16, 24))):
        w[8:16] = WQKV[rows]
        if not differs(got, ref.module_forward(XB, w, WOUT, 2), 1e-3, 1e-4):
            return ("inferred-cache-contents", f"fed in chunks of 3, 1 and 2 tokens, your outputs are those of a "
                    f"model whose cached keys are its {name}: the cache holds the wrong tensor")
    return None, "fed in chunks of 3, 1 and 2 tokens, the outputs differ from the full forward's"




# -- probes the feedback side adds where a stage declares none (localise.probes_of) ---------------------------

def _qkv(t_q: int, t_k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng([29, t_q, t_k, seed])
    return tuple(rng.standard_normal((1, 2, t, 8)).astype(np.float32) for t in (t_q, t_k, t_k))  # [B, H, T, D]


def sdpa_call(causal: bool, dropout_p: float, training: bool) -> Callable:
    """Judge of a fused_probe answer ({out, calls}): the output against the reference's (no dropout in eval)."""
    def judge(got, want, ref):
        out = got.get("out") if isinstance(got, dict) else None
        if out is not None and not differs(out, want, 1e-3, 1e-4):
            return None
        return None, (f"fused_attention(causal={causal}, dropout_p={dropout_p}, training={training}): "
                      f"{shape_note(out, want) if out is not None else 'no output'}")
    return judge


def _fused(t_q: int, t_k: int, causal: bool, dropout_p: float = 0.0, training: bool = False):
    q, k, v = _qkv(t_q, t_k, int(causal) + 2 * int(dropout_p > 0))
    return Probe(name="fused_probe", file="fused.py", function="fused_attention", stage="fused",
                 args=(q, k, v, causal, dropout_p, training),
                 expected=lambda r: r.fused_attention(q, k, v, causal), judge=sdpa_call(causal, dropout_p, training))


def variance_near_theory(d_k: int, n_pairs: int, scaled: bool = False) -> Callable:
    """Judge of a score_variance answer against theory (d_k unscaled, 1 scaled), not the reference's draws: a
    correct estimate made from other draws is never called wrong. Five standard errors: var((q.k)^2) = 2 d_k^2 +
    6 d_k, divided by d_k^2 when the dot products are divided by sqrt(d_k)."""
    theory, call = (1, f"score_variance({d_k}, {n_pairs}, scaled=True)") if scaled else (d_k, f"score_variance({d_k}, "
                                                                                          f"{n_pairs})")

    def judge(got, want, ref):
        try:
            g = float(got)
        except (TypeError, ValueError):
            return None, f"{call} returned {type(got).__name__}, expected a float"
        se = ((2 * d_k ** 2 + 6 * d_k) / n_pairs) ** 0.5 / (d_k if scaled else 1)
        return None if abs(g - theory) <= 5 * se else \
            (None, f"{call} = {g:.4g}; theory says {theory} (+- {5 * se:.2g})")
    return judge


def _variance(d_k: int, n_pairs: int, seed: int, scaled: bool = False):
    return Probe(name="score_variance", file="scaling.py", function="score_variance", stage="scaling",
                 args=(d_k, n_pairs, seed, scaled), expected=lambda r: r.score_variance(d_k, n_pairs, seed, scaled),
                 judge=variance_near_theory(d_k, n_pairs, scaled))


def same_parts(*names: str) -> Callable:
    """Judge of a function that returns a tuple of arrays (`names`, in the docstring's order)."""
    def judge(got, want, ref):
        if not isinstance(got, (tuple, list)) or len(got) != len(names):
            return None, f"returned {type(got).__name__}, expected ({', '.join(names)})"
        for name, g, w in zip(names, got, want):
            if differs(g, w):
                return None, f"{name} {shape_note(g, w)}"
        return None
    return judge


def _backward(causal: bool):
    rng = np.random.default_rng([31, int(causal)])
    q, k, v, d_out = (rng.standard_normal(shape) for shape in ((3, 2), (4, 2), (4, 5), (3, 5)))  # n_q != n_k
    return Probe(name="attention_backward", file="backward.py", function="attention_backward", stage="backward",
                 args=(q, k, v, d_out, causal), expected=lambda r: r.attention_backward(q, k, v, d_out, causal),
                 judge=same_parts("dq", "dk", "dv"))


DROPOUT_P, DROPOUT_SEED = 0.3, 7
DROPOUT_W = np.random.default_rng(37).random((4, 6))


def dropped(weights: np.ndarray, p: float, seed: int) -> np.ndarray:
    """The docstring's dropout: one rng.random(weights.shape) draw, a weight dropped where its draw is below p."""
    draw = np.random.default_rng(seed).random(weights.shape)
    return np.where(draw >= p, weights / (1.0 - p), 0.0)


def _dropout():
    w, p, seed = DROPOUT_W, DROPOUT_P, DROPOUT_SEED
    return Probe(name="dropout_probe", file="dropout.py", function="attention_dropout", stage="dropout",
                 args=(w, p, seed, True), expected=lambda r: dropped(w, p, seed), judge=same_array())


def _count(name: str, args: tuple):
    """A costs function on sizes that are distinct primes: a factor left out shows as which."""
    return Probe(name=name, file="costs.py", function=name, stage="costs", args=args,
                 expected=lambda r: getattr(r, name)(*args), judge=same_array())


def _softmax(scores: np.ndarray, *axis: int):
    return Probe(name="softmax", file="softmax.py", function="softmax", stage="softmax", args=(scores, *axis),
                 expected=lambda r: r.softmax(scores, *axis), judge=same_array({"weights": True}))


S34_LARGE = S34 * 400  # exp overflows unless the row maximum is taken away first
S34_APART = S34_LARGE + np.array([[0.0], [3000.0], [-3000.0]])  # rows thousands apart: one maximum for the whole
# array (not each row's) leaves every row but its own at exp(-3000) = 0, and 0 / 0
S34_HIDDEN = np.where(np.eye(3, 4, 1, dtype=bool), -np.inf, S34)  # one -inf per row: a masked score, not a row


def _rope_attention(causal: bool):
    rng = np.random.default_rng([41, int(causal)])
    q, k, v = (rng.standard_normal(shape) for shape in ((3, 8), (5, 8), (5, 2)))  # queries at positions 2..4
    return Probe(name="rope_attention", file="rope.py", function="rope_attention", stage="rope",
                 args=(q, k, v, causal), expected=lambda r: r.rope_attention(q, k, v, causal), judge=same_array())


def _decoded(got, want, ref):
    """Judge of rope_decode's (out, (k, v)) against the reference's."""
    try:
        parts = [("out", got[0], want[0]), ("the cache's k", got[1][0], want[1][0]),
                 ("the cache's v", got[1][1], want[1][1])]
    except (TypeError, IndexError, KeyError):
        return None, f"returned {type(got).__name__}, expected (out, (k, v))"
    for name, g, w in parts:
        if differs(g, w):
            return None, f"{name} {shape_note(g, w)}"
    return None


def _rope_decode():
    rng = np.random.default_rng(43)
    q, k, v = (rng.standard_normal(shape) for shape in ((2, 8), (2, 8), (2, 2)))  # two new tokens at 3 and 4
    cache = (rng.standard_normal((3, 8)), rng.standard_normal((3, 2)))  # three before them, keys already turned
    return Probe(name="rope_decode", file="rope.py", function="rope_decode", stage="rope", args=(q, k, v, cache),
                 expected=lambda r: r.rope_decode(q, k, v, cache), judge=_decoded)


def _tiled(causal: bool):
    rng = np.random.default_rng([47, int(causal)])
    q, k, v = (rng.standard_normal(shape) for shape in ((5, 3), (7, 3), (7, 2)))  # blocks of 2 queries, 3 keys
    return Probe(name="tiled_attention", file="tiled.py", function="tiled_attention", stage="tiled",
                 args=(q, k, v, causal, 2, 3), expected=lambda r: r.tiled_attention(q, k, v, causal, 2, 3),
                 judge=same_array())


EXTRA = {"softmax": (_softmax(S34_LARGE), _softmax(S34_APART), _softmax(S34_HIDDEN), _softmax(S34.T, 0)),
         "costs": (_count("score_count", (7, 3)), _count("kv_cache_floats", (7, 3, 5, 11, 13))),
         "fused": (_fused(4, 4, True), _fused(3, 6, True), _fused(4, 4, False), _fused(4, 4, True, 0.5, False)),
         "scaling": (_variance(16, 256, 3), _variance(16, 256, 3, scaled=True)),
         "backward": (_backward(True), _backward(False)),
         "dropout": (_dropout(),),
         "tiled": (_tiled(True), _tiled(False)),
         "rope": (_rope_attention(True), _rope_attention(False), _rope_decode())}
