"""The reference's intermediate values for a probe's call, in the order a computation makes them.

Fault localisation (feedback/localise.py) compares them with the arrays the student's lines made during
the same call (child/tracer.py). Each step is (label, array), worked out from the reference's own
functions (so the fixtures, which record what the reference answered, hold them for the student repo)
and plain float64 arithmetic on the probe's fixed inputs. A student's computation may take other routes
through them (the transpose first, the mask as a number); the lists hold the common ones.
"""
import numpy as np

F64 = np.float64


def _softmax_parts(s, axis=-1) -> list[tuple[str, np.ndarray]]:
    s = np.asarray(s, dtype=F64)
    with np.errstate(invalid="ignore"):
        m = np.max(s, axis=axis, keepdims=True)
        shifted = s - m
        e = np.exp(shifted)
    total = np.sum(e, axis=axis, keepdims=True)
    return [("the row maxima", m), ("the scores minus the row maxima", shifted), ("their exponentials", e),
            ("exp(scores) unshifted", np.exp(np.clip(s, -700, 700))), ("the row sums", total),
            ("the softmax", e / total)]


def softmax(ref, scores, axis=-1):
    return [("the scores", np.asarray(scores, dtype=F64)), *_softmax_parts(scores, axis)[:-1],
            ("the softmax", ref.softmax(scores, axis))]


def _scores(ref, q, k) -> list[tuple[str, np.ndarray]]:
    q, k = np.asarray(q, dtype=F64), np.asarray(k, dtype=F64)
    scaled = np.asarray(ref.scaled_scores(q, k), dtype=F64)
    return [("k transposed", np.swapaxes(k, -1, -2)), ("q k^T", scaled * np.sqrt(q.shape[-1])),
            ("the scaled scores q k^T / sqrt(d_k)", scaled)]


def scaled_scores(ref, q, k):
    return _scores(ref, q, k)


def _masks(allowed) -> list[tuple[str, np.ndarray]]:
    allowed = np.asarray(allowed, dtype=bool)
    return [("the mask (True = may attend)", allowed), ("the mask's complement (True = hidden)", ~allowed),
            ("the additive mask (0 or -inf)", np.where(allowed, 0.0, -np.inf))]


def causal_mask(ref, n_q, n_k=None):
    n_k = n_q if n_k is None else n_k
    return [("the query positions", np.arange(n_q)[:, None]), ("the key positions", np.arange(n_k)[None, :]),
            *_masks(ref.causal_mask(n_q, n_k))]


def apply_mask(ref, scores, allowed):
    return [("the scores", np.asarray(scores, dtype=F64)), *_masks(np.broadcast_to(allowed, np.shape(scores))),
            ("the masked scores", np.asarray(ref.apply_mask(scores, allowed), dtype=F64))]


def _attention(ref, q, k, v, allowed) -> list[tuple[str, np.ndarray]]:
    parts = _scores(ref, q, k)
    scaled = parts[-1][1]
    if allowed is None:
        masked = scaled  # no mask: the scaled scores go straight to the softmax
    else:
        allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), scaled.shape[-2:])
        masked = np.asarray(ref.apply_mask(scaled, allowed), dtype=F64)
        parts += [*_masks(allowed), ("the masked scores", masked)]
    weights = np.asarray(ref.softmax(masked), dtype=F64)
    parts += [*_softmax_parts(masked)[:-1], ("the weights", weights),
              ("the output", weights @ np.asarray(v, dtype=F64))]
    return parts


def attention(ref, q, k, v, allowed=None):
    return _attention(ref, q, k, v, allowed)


def _heads(ref, x, n_heads) -> list[tuple[str, np.ndarray]]:
    x = np.asarray(x, dtype=F64)
    side_by_side = (*x.shape[:-1], n_heads, x.shape[-1] // n_heads)  # [..., n, n_heads, d_head]
    return [("the heads side by side [n, n_heads, d_head]", x.reshape(side_by_side)),
            ("the heads [n_heads, n, d_head]", np.asarray(ref.split_heads(x, n_heads), dtype=F64))]


def split_heads(ref, x, n_heads):
    return _heads(ref, x, n_heads)


def merge_heads(ref, x):
    x = np.asarray(x, dtype=F64)
    return [("the heads side by side [n, n_heads, d_head]", np.swapaxes(x, -3, -2)),
            ("the merged heads [n, d_model]", np.asarray(ref.merge_heads(x), dtype=F64))]


def multi_head_attention(ref, x, w_q, w_k, w_v, w_o, n_heads, causal=True):
    q, k, v = (np.asarray(t, dtype=F64) for t in ref.project_qkv(x, w_q, w_k, w_v))
    steps = [("q", q), ("k", k), ("v", v)]
    for name, t in (("q", q), ("k", k), ("v", v)):
        steps += [(f"{name}'s {label}", a) for label, a in _heads(ref, t, n_heads)]
    qh, kh, vh = (np.asarray(ref.split_heads(t, n_heads), dtype=F64) for t in (q, k, v))
    n = q.shape[-2]
    steps += _attention(ref, qh, kh, vh, ref.causal_mask(n, n) if causal else None)
    merged = np.asarray(ref.merge_heads(steps[-1][1]), dtype=F64)
    steps += [("the heads' outputs side by side", np.swapaxes(steps[-1][1], -3, -2)),
              ("the merged heads", merged),
              ("the output", np.asarray(ref.multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads), dtype=F64))]
    return steps


def _module_rows(ref, x, qkv_weight, out_weight, n_heads, start: int, stop: int, cache_rows: bool):
    """The module's steps for the queries start:stop, attending to keys 0:stop (a cache's view)."""
    x = np.asarray(x, dtype=F64)
    w = np.asarray(qkv_weight, dtype=F64)
    B, T, C = x.shape
    qkv = x @ w.T  # [B, T, 3C]
    q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
    rows = slice(start, stop)
    steps = [("the qkv projection", qkv[:, rows])]
    for name, t in (("q", q), ("k", k), ("v", v)):
        steps += [(name, t[:, rows]), *[(f"{name}'s {label}", a) for label, a in _heads(ref, t[:, rows], n_heads)]]
    qh = np.asarray(ref.split_heads(q[:, rows], n_heads), dtype=F64)
    kh, vh = (np.asarray(ref.split_heads(t[:, :stop], n_heads), dtype=F64) for t in (k, v))
    if cache_rows:
        D = C // n_heads
        for name, t in (("keys", kh), ("values", vh)):
            buffer = np.zeros((B, n_heads, T, D))
            buffer[:, :, :stop] = t
            steps += [(f"the cache's {name} [B, H, max_len, D]", buffer), (f"the cached {name} so far", t)]
    steps += _attention(ref, qh, kh, vh, ref.causal_mask(stop - start, stop))
    y = steps[-1][1]
    merged = np.asarray(ref.merge_heads(y), dtype=F64)
    full = np.asarray(ref.module_forward(x, qkv_weight, out_weight, n_heads), dtype=F64)
    steps += [("the heads' outputs side by side", np.swapaxes(y, -3, -2)), ("the merged heads", merged),
              ("the output", full[:, rows])]
    return steps


def module_forward(ref, x, qkv_weight, out_weight, n_heads):
    return _module_rows(ref, x, qkv_weight, out_weight, n_heads, 0, np.shape(x)[1], False)


def module_decode(ref, x, qkv_weight, out_weight, n_heads, chunks):
    steps, start = [], 0
    for t in chunks:
        steps += _module_rows(ref, x, qkv_weight, out_weight, n_heads, start, start + t, True)
        start += t
    return steps


def dot_scores(ref, x):
    x = np.asarray(x, dtype=F64)
    return [("x transposed", x.T), ("x x^T", np.asarray(ref.dot_scores(x), dtype=F64))]


def simple_self_attention(ref, x):
    x = np.asarray(x, dtype=F64)
    s = np.asarray(ref.dot_scores(x), dtype=F64)
    w = np.asarray(ref.softmax(s), dtype=F64)
    return [("x transposed", x.T), ("x x^T", s), *_softmax_parts(s)[:-1], ("the weights", w),
            ("the output", w @ x)]


def project_qkv(ref, x, w_q, w_k, w_v):
    q, k, v = ref.project_qkv(x, w_q, w_k, w_v)
    return [("q", np.asarray(q, dtype=F64)), ("k", np.asarray(k, dtype=F64)), ("v", np.asarray(v, dtype=F64))]


DRAWN = " (drawn from the seed)"  # a step a correct estimate may draw otherwise: parting there is no claim


def score_variance(ref, d_k, n_pairs, seed, scaled):
    """The docstring's way: q, then k, [n_pairs, d_k] from default_rng(seed); the row-wise dot products."""
    source, shape = np.random.default_rng(seed), (n_pairs, d_k)  # not as the solutions write it (the release)
    q, k = source.standard_normal(shape), source.standard_normal(shape)  # [n_pairs, d_k]
    dots = np.sum(q * k, axis=-1)  # [n_pairs]
    divided = [("the dot products q . k / sqrt(d_k)", dots / np.sqrt(d_k))] if scaled else []  # [n_pairs]
    return [("q" + DRAWN, q), ("k" + DRAWN, k), ("the dot products q . k", dots), *divided,
            ("the variance", np.asarray(ref.score_variance(d_k, n_pairs, seed, scaled), dtype=F64))]


def _bottom_right(n_q: int, n_k: int) -> np.ndarray:
    """The causal mask with the queries as the last n_q of n_k positions (True = may attend)."""
    return np.tril(np.ones((n_q, n_k), dtype=bool), k=n_k - n_q)


def _positions(n_q: int, n_k: int) -> list[tuple[str, np.ndarray]]:
    """What a mask is built from: the query rows (before or after the offset n_k - n_q) and the key positions."""
    return [("the query rows", np.arange(n_q, dtype=F64)[:, None]),
            ("the query positions", np.arange(n_k - n_q, n_k, dtype=F64)[:, None]),
            ("the key positions", np.arange(n_k, dtype=F64)[None, :])]


def attention_backward(ref, q, k, v, d_out, causal=True):
    """The forward pass's steps (bottom-right causal mask), then the backward's: dv, dP, the softmax Jacobian
    applied row by row, dq and dk."""
    q, k, v, d_out = (np.asarray(a, dtype=F64) for a in (q, k, v, d_out))
    n_q, n_k = q.shape[0], k.shape[0]
    allowed = _bottom_right(n_q, n_k) if causal else None  # [n_q, n_k]
    parts = [*_positions(n_q, n_k), *_attention(ref, q, k, v, allowed)]
    p = dict(parts)["the weights"]  # [n_q, n_k]
    dp = d_out @ v.T  # [n_q, n_k]
    rows = np.sum(dp * p, axis=-1, keepdims=True)  # [n_q, 1]
    dq, dk, dv = (np.asarray(a, dtype=F64) for a in ref.attention_backward(q, k, v, d_out, causal))
    # labelled by the names the docstring's formulas give (a variable named after a step must hold that step)
    return [*parts, ("dv", dv), ("dp", dp), ("dp * p", dp * p), ("the row sums of dp * p", rows),
            ("dp minus its row sums", dp - rows), ("ds", p * (dp - rows)), ("dq", dq), ("dk", dk)]


def dropout_probe(ref, weights, p, seed, training):
    """One rng.random(weights.shape) draw, the mask it gives, the survivors rescaled, the result."""
    w = np.asarray(weights, dtype=F64)
    draw = np.random.default_rng(seed).random(w.shape)  # not as the solutions write it (the release)
    kept = draw >= p
    return [("the draws", draw), ("the mask of kept weights", kept), ("the mask of dropped weights", ~kept),
            ("the weights divided by 1 - p", w / (1.0 - p)), ("the result", np.where(kept, w / (1.0 - p), 0.0))]


def rotate(ref, x, offset=0, base=10000.0):
    """Rotate-half rotary embedding: the positions, one frequency per pair, the angles, their cosines and sines,
    the two halves and the products the turn is made of; also the full-width route (the angles repeated over
    both halves, and rotate_half(x) = [-b, a]), which many implementations take."""
    x = np.asarray(x, dtype=F64)
    n, d = x.shape[-2], x.shape[-1]
    half = d // 2  # not as the solutions write it (the release)
    positions = np.arange(offset, offset + n)  # [n]
    freq = np.power(float(base), -np.arange(0, d, 2) / d)  # [d/2]
    angle = np.outer(positions, freq)  # [n, d/2]
    cos = np.cos(angle)
    sin = np.sin(angle)
    a = x[..., :half]  # [..., n, d/2]
    b = x[..., half:]
    wide = np.concatenate([angle, angle], axis=-1)  # [n, d]
    turned = np.concatenate([-b, a], axis=-1)  # [..., n, d]: rotate_half(x)
    return [("the positions", positions.astype(F64)), ("the frequencies", freq), ("the angles", angle),
            ("their cosines", cos), ("their sines", sin), ("the first half", a), ("the second half", b),
            ("a cos", a * cos), ("b sin", b * sin), ("a sin", a * sin), ("b cos", b * cos), ("-b", -b),
            ("the angles over both halves", wide), ("their cosines over both halves", np.cos(wide)),
            ("their sines over both halves", np.sin(wide)), ("rotate_half(x)", turned),
            ("x cos", x * np.cos(wide)), ("rotate_half(x) sin", turned * np.sin(wide)),
            ("the first half turned", a * cos - b * sin), ("the second half turned", a * sin + b * cos),
            ("the rotated rows", np.asarray(ref.rotate(x, offset, base), dtype=F64))]


def rope_attention(ref, q, k, v, causal=True):
    """q turned at positions n_k - n_q onwards, k from 0, v as it is; then attention's steps (bottom-right mask)."""
    n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
    q_turned = np.asarray(ref.rotate(q, n_k - n_q), dtype=F64)
    k_turned = np.asarray(ref.rotate(k, 0), dtype=F64)
    allowed = _bottom_right(n_q, n_k) if causal else None
    return [("q", q_turned), ("k", k_turned), ("v", np.asarray(v, dtype=F64)), *_positions(n_q, n_k),
            *_attention(ref, q_turned, k_turned, v, allowed)]


def rope_decode(ref, q, k, v, cache=None):
    """The new tokens turned at positions L onwards (L cached before them), appended after the cache's keys and
    values; then attention's steps for the new queries over all L + t keys."""
    t, L = np.shape(q)[-2], 0 if cache is None else np.shape(cache[0])[-2]
    q_turned = np.asarray(ref.rotate(q, L), dtype=F64)
    k_turned = np.asarray(ref.rotate(k, L), dtype=F64)
    k_all = k_turned if cache is None else np.concatenate([np.asarray(cache[0], dtype=F64), k_turned], axis=-2)
    v_all = np.asarray(v, dtype=F64) if cache is None else \
        np.concatenate([np.asarray(cache[1], dtype=F64), np.asarray(v, dtype=F64)], axis=-2)
    allowed = _bottom_right(t, L + t)  # [t, L + t]
    return [("q", q_turned), ("k", k_turned), ("the keys, the cache's first", k_all),
            ("the values, the cache's first", v_all), *_attention(ref, q_turned, k_all, v_all, allowed)]


def tiled_attention(ref, q, k, v, causal=True, block_q=64, block_k=64):
    """The online softmax block by block (the query blocks in order, each over the key blocks it sees, cut at the
    block size or also at the last key the block sees): each block's scores (scaled or not yet), its mask, the
    running maxima, the rescaling factor, the block's exponentials, the running sums and the accumulated values
    (unnormalised, or normalised at each block: the two ways it is written); then the output. Written unlike the
    solutions (the release)."""
    q, k, v = (np.asarray(a, dtype=F64) for a in (q, k, v))
    n_q, n_k, d_k = q.shape[0], k.shape[0], q.shape[1]
    shift = n_k - n_q
    found: dict[str, list] = {}

    def note(label: str, value) -> None:
        found.setdefault(label, []).append(np.asarray(value, dtype=F64))

    def over(rows_at: np.ndarray, edges: list[tuple[int, int]]) -> None:
        qb = q[rows_at]
        run_max, run_sum = np.full(len(rows_at), -np.inf), np.zeros(len(rows_at))
        run_acc = np.zeros((len(rows_at), v.shape[1]))
        for left, right in edges:
            cols_at = np.arange(left, right)
            seen = (cols_at[None, :] <= (rows_at + shift)[:, None]) if causal else \
                np.ones((len(rows_at), len(cols_at)), bool)
            if not seen.any():
                continue  # a block the mask hides entirely: skipped
            raw = np.einsum("id,jd->ij", qb, k[cols_at])
            scores = raw / np.sqrt(d_k)
            masked = np.where(seen, scores, -np.inf)
            new_max = np.maximum(run_max, masked.max(axis=1))
            base = np.where(np.isneginf(new_max), 0.0, new_max)
            with np.errstate(invalid="ignore"):
                factor = np.where(np.isneginf(run_max), 0.0, np.exp(run_max - base))
            weights = np.exp(masked - base[:, None])
            new_sum = factor * run_sum + weights.sum(axis=1)
            new_acc = factor[:, None] * run_acc + weights @ v[cols_at]
            for label, value in (
                    ("the block's keys", k[cols_at]), ("the block's keys scaled", k[cols_at] / np.sqrt(d_k)),
                    ("the block's values", v[cols_at]), ("the block's q k^T", raw), ("the block's scores", scores),
                    ("the block's mask", seen), ("the block's masked scores", masked),
                    ("the block's row maxima", masked.max(axis=1)), ("the running maxima", new_max),
                    ("the rescaling factor", factor), ("the block's exponentials", weights),
                    ("the block's row sums", weights.sum(axis=1)), ("the block's weighted values", weights @ v[cols_at]),
                    ("the running sums", new_sum), ("the accumulated values", new_acc),
                    ("the accumulated values normalised", new_acc / new_sum[:, None]),
                    ("the block's rows' positions", rows_at + shift), ("the block's key positions", cols_at)):
                note(label, value)
            run_max, run_sum, run_acc = new_max, new_sum, new_acc

    for top in range(0, n_q, block_q):
        rows_at = np.arange(top, min(top + block_q, n_q))  # this block's query rows
        for label, value in (("the block's queries", q[rows_at]), ("the block's queries scaled", q[rows_at] / np.sqrt(d_k)),
                             ("the running maxima at the start", np.full(len(rows_at), -np.inf)),
                             ("the running sums at the start", np.zeros(len(rows_at))),
                             ("the accumulated values at the start", np.zeros((len(rows_at), v.shape[1])))):
            note(label, value)
        stop = min(n_k, int(rows_at[-1]) + shift + 1) if causal else n_k  # past the last key the block sees
        over(rows_at, [(left, min(left + block_k, n_k)) for left in range(0, n_k, block_k)])
        if stop < n_k:
            over(rows_at, [(left, min(left + block_k, stop)) for left in range(0, stop, block_k)])
    steps_found = [(f"{label} (block {i + 1})" if len(values) > 1 else label, value)
                   for label, values in found.items() for i, value in enumerate(values)]
    return [*steps_found, ("the output", np.asarray(ref.tiled_attention(q, k, v, causal, block_q, block_k), dtype=F64))]


def score_count(ref, *args):
    return [("the number of scores", np.asarray(float(ref.score_count(*args)), dtype=F64))]


def kv_cache_floats(ref, *args):
    return [("the number of floats the cache holds", np.asarray(float(ref.kv_cache_floats(*args)), dtype=F64))]


def gqa_decode(ref, x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, cache=None):
    """A grouped-query decode step: q in n_heads heads, k and v in n_kv_heads, the cache's positions first, each
    key/value head repeated for its group, then attention with the queries as the last t positions."""
    q, k, v = (np.asarray(t, dtype=F64) for t in ref.project_qkv(x, w_q, w_k, w_v))
    qh = np.asarray(ref.split_heads(q, n_heads), dtype=F64)  # [n_heads, t, d_head]
    kh, vh = (np.asarray(ref.split_heads(t, n_kv_heads), dtype=F64) for t in (k, v))  # [n_kv_heads, t, d_head]
    steps = [("q", q), ("k", k), ("v", v), ("q's heads [n_heads, n, d_head]", qh),
             ("k's heads [n_kv_heads, n, d_head]", kh), ("v's heads [n_kv_heads, n, d_head]", vh)]
    if cache is not None:
        kh = np.concatenate([np.asarray(cache[0], dtype=F64), kh], axis=-2)  # [n_kv_heads, L + t, d_head]
        vh = np.concatenate([np.asarray(cache[1], dtype=F64), vh], axis=-2)
        steps += [("k's cached positions, then the new ones", kh), ("v's cached positions, then the new ones", vh)]
    rep = n_heads // n_kv_heads
    kr, vr = (np.asarray(ref.repeat_kv(t, rep), dtype=F64) for t in (kh, vh))  # [n_heads, L + t, d_head]
    steps += [("k's heads repeated for each query head", kr), ("v's heads repeated for each query head", vr)]
    steps += _attention(ref, qh, kr, vr, ref.causal_mask(qh.shape[-2], kr.shape[-2]))
    steps += [("the merged heads", np.asarray(ref.merge_heads(steps[-1][1]), dtype=F64)),
              ("the output", np.asarray(ref.gqa_decode(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, cache)[0],
                                        dtype=F64))]
    return steps


# the probe's name -> its steps (ref, *probe args)
STEPS = {f.__name__: f for f in (softmax, scaled_scores, causal_mask, apply_mask, attention, split_heads,
                                 merge_heads, multi_head_attention, module_forward, module_decode, dot_scores,
                                 simple_self_attention, project_qkv, score_variance, attention_backward,
                                 dropout_probe, rotate, rope_attention, rope_decode, tiled_attention, score_count,
                                 kv_cache_floats, gqa_decode)}


def steps_for(ref, name: str, args: tuple) -> list[tuple[str, np.ndarray]] | None:
    fn = STEPS.get(name)
    return fn(ref, *args) if fn else None
