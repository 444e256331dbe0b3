"""The known mistakes, implemented on purpose (float64), so a wrong answer can be named on evidence.

Each function computes what a submission with that one mistake returns. The grader
names a mistake only when the student's output matches it and not the correct one.
"""
import numpy as np

from . import core, rope

F64 = np.float64


# -- softmax ------------------------------------------------------------------------------------
def softmax_unstable(s, axis=-1):
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(np.asarray(s, dtype=F64))
        return e / e.sum(axis=axis, keepdims=True)


def softmax_no_exp(s, axis=-1):
    s = np.asarray(s, dtype=F64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return s / s.sum(axis=axis, keepdims=True)


def softmax_other_axes(s, axis=-1):
    """Softmax along every axis but the requested one."""
    s = np.asarray(s, dtype=F64)
    want = axis % s.ndim
    return [core.softmax(s, axis=a) for a in range(s.ndim) if a != want]


# -- scores and scaling -------------------------------------------------------------------------
def scores_with_divisor(q, k, divisor):
    return core.scaled_scores(q, k) * np.sqrt(np.asarray(q).shape[-1]) / divisor


def scaling_variants(q, k):
    """id -> scores, for the scaling mistakes that q and k alone can show."""
    d_k, n_q, n_k = np.shape(q)[-1], np.shape(q)[-2], np.shape(k)[-2]
    out = {"scale-missing": scores_with_divisor(q, k, 1.0), "scale-by-dk": scores_with_divisor(q, k, d_k)}
    wrong = sorted({n_q, n_k} - {d_k})
    if wrong:
        out["scale-wrong-dim"] = [scores_with_divisor(q, k, np.sqrt(n)) for n in wrong]
    return out


# -- masks --------------------------------------------------------------------------------------
def mask_variants(n_q, n_k=None):
    """id -> the mask each causal-mask mistake builds (bool [n_q, n_k], True = may attend)."""
    n_k = n_q if n_k is None else n_k
    i, j = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    off = n_k - n_q
    out = {"mask-future-visible": [j >= i + off, j >= i], "mask-excludes-self": [j < i + off, j < i],
           "mask-inverted": [j > i + off]}
    if off:
        out["mask-top-left"] = [j <= i]
    return out


def attention_with(q, k, v, allowed=None, divisor=None, how="neginf"):
    """Attention with one step done wrong. how: neginf (correct) | zero | after | linear."""
    q, k, v = (np.asarray(a, dtype=F64) for a in (q, k, v))
    s = core.scaled_scores(q, k)
    if divisor is not None:
        s = s * np.sqrt(q.shape[-1]) / divisor
    if how == "linear":
        return s @ v, s
    if allowed is None:
        w = core.softmax(s)
    else:
        allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), s.shape)
        if how == "zero":
            w = core.softmax(np.where(allowed, s, 0.0))
        elif how == "after":
            w = core.softmax(s) * allowed
        else:
            w = core.softmax(np.where(allowed, s, -np.inf))
    return w @ v, w


def attention_variants(q, k, v, allowed=None):
    """id -> list of (out, weights), one per way of making that single-head attention mistake."""
    d_k, d_v, n_k = np.shape(q)[-1], np.shape(v)[-1], np.shape(k)[-2]
    out = {"scale-missing": [attention_with(q, k, v, allowed, divisor=1.0)],
           "scale-by-dk": [attention_with(q, k, v, allowed, divisor=d_k)],
           "linear-attention": [attention_with(q, k, v, None, how="linear")]}
    wrong = sorted({d_v, n_k} - {d_k})
    if wrong:
        out["scale-wrong-dim"] = [attention_with(q, k, v, allowed, divisor=np.sqrt(n)) for n in wrong]
    if allowed is not None and not np.all(allowed):
        out["mask-zero-not-neginf"] = [attention_with(q, k, v, allowed, how="zero")]
        out["mask-after-softmax"] = [attention_with(q, k, v, allowed, how="after")]
        hidden = ~np.broadcast_to(np.asarray(allowed, dtype=bool), np.shape(q)[:-1] + (n_k,))
        if hidden.any(axis=-1).all():  # read the other way round, every row still sees some key
            out["mask-inverted"] = [attention_with(q, k, v, hidden)]
        # two mistakes at once, one in the scale and one in the mask: named together ("a+b")
        for scale, divisor in (("scale-missing", 1.0), ("scale-by-dk", d_k)):
            for mask, how in (("mask-zero-not-neginf", "zero"), ("mask-after-softmax", "after")):
                out[f"{scale}+{mask}"] = [attention_with(q, k, v, allowed, divisor=divisor, how=how)]
    return out


# -- heads --------------------------------------------------------------------------------------
def split_wrong(x, n_heads):
    """A plain reshape to [..., n_heads, n, d_head]: mixes positions and features."""
    x = np.asarray(x, dtype=F64)
    *lead, n, d = x.shape
    return x.reshape(*lead, n_heads, n, d // n_heads)


def merge_no_transpose(x):
    x = np.asarray(x, dtype=F64)
    *lead, h, n, d = x.shape
    return x.reshape(*lead, n, h * d)


def mha_with(x, w_q, w_k, w_v, w_o, n_heads, causal=True, split=None, merge=None, divisor=None, use_wo=True):
    x = np.asarray(x, dtype=F64)
    split = split or core.split_heads
    merge = merge or core.merge_heads
    n = x.shape[-2]
    q, k, v = (split(t, n_heads) for t in core.project_qkv(x, w_q, w_k, w_v))
    allowed = core.causal_allowed(n) if causal else None
    out, _ = attention_with(q, k, v, allowed, divisor=divisor)
    y = merge(out)
    return y @ np.asarray(w_o, dtype=F64) if use_wo else y


def mha_variants(x, w_q, w_k, w_v, w_o, n_heads, causal=True):
    d_model = np.shape(x)[-1]
    args = (x, w_q, w_k, w_v, w_o, n_heads, causal)
    out = {"heads-wrong-split": [mha_with(*args, split=split_wrong),
                                 mha_with(*args, split=split_wrong, merge=merge_no_transpose)],
           "heads-no-merge-transpose": mha_with(*args, merge=merge_no_transpose),
           "heads-no-output-projection": mha_with(*args, use_wo=False)}
    if n_heads > 1:
        out["heads-scale-dmodel"] = mha_with(*args, divisor=np.sqrt(d_model))
    return out


def module_variants(x, qkv_weight, out_weight, n_heads):
    """The head mistakes for CausalSelfAttention, through its nn.Linear weight layout."""
    C = np.shape(x)[-1]
    w = np.asarray(qkv_weight, dtype=F64).T
    return mha_variants(x, w[:, :C], w[:, C:2 * C], w[:, 2 * C:], np.asarray(out_weight, dtype=F64).T, n_heads)


# -- KV cache -----------------------------------------------------------------------------------
def decode_variants(x, qkv_weight, out_weight, n_heads, chunks):
    """id -> outputs of chunked decoding with a cache mistake; NaN marks positions with no evidence."""
    x = np.asarray(x, dtype=F64)
    B, T, C = x.shape
    w = np.asarray(qkv_weight, dtype=F64).T
    q, k, v = (core.split_heads(t, n_heads) for t in core.project_qkv(x, w[:, :C], w[:, C:2 * C], w[:, 2 * C:]))
    wo = np.asarray(out_weight, dtype=F64).T
    top_left, before = np.full((B, T, C), np.nan), np.full((B, T, C), np.nan)
    start = 0
    for t in chunks:
        end = start + t
        qc = q[..., start:end, :]
        i, j = np.arange(t)[:, None], np.arange(end)[None, :]
        out, _ = core.attention(qc, k[..., :end, :], v[..., :end, :], j <= i)  # is_causal aligned top-left
        top_left[:, start:end] = core.merge_heads(out) @ wo
        if start > 0:  # attends to the cache before this chunk is appended: only earlier tokens
            out, _ = core.attention(qc, k[..., :start, :], v[..., :start, :])
            before[:, start:end] = core.merge_heads(out) @ wo
        start = end
    return {"cache-top-left-causal": top_left, "cache-missing-new-token": before}


# -- fused --------------------------------------------------------------------------------------
def fused_top_left(q, k, v):
    T_q, T_k = np.shape(q)[-2], np.shape(k)[-2]
    return core.attention(q, k, v, np.arange(T_k)[None, :] <= np.arange(T_q)[:, None])[0]


# -- bonus: tiled, backward, dropout, costs -----------------------------------------------------
def tiled_with(q, k, v, causal=True, block_q=64, block_k=64, rescale_sum=True, rescale_acc=True):
    """Online-softmax attention with the rescaling of the running sum and/or accumulator left out."""
    q, k, v = (np.asarray(a, dtype=F64) for a in (q, k, v))
    n_q, n_k = q.shape[0], k.shape[0]
    allowed = core.causal_allowed(n_q, n_k) if causal else np.ones((n_q, n_k), dtype=bool)
    s_all = core.scaled_scores(q, k)
    out = np.zeros((n_q, v.shape[1]))
    for i0 in range(0, n_q, block_q):
        i1 = min(i0 + block_q, n_q)
        m = np.full(i1 - i0, -np.inf)
        l_run = np.zeros(i1 - i0)
        acc = np.zeros((i1 - i0, v.shape[1]))
        for j0 in range(0, n_k, block_k):
            j1 = min(j0 + block_k, n_k)
            s = np.where(allowed[i0:i1, j0:j1], s_all[i0:i1, j0:j1], -np.inf)
            if np.all(np.isneginf(s)):
                continue
            m_new = np.maximum(m, s.max(axis=1))
            safe = np.where(np.isneginf(m_new), 0.0, m_new)
            p = np.exp(s - safe[:, None])
            alpha = np.exp(np.where(np.isneginf(m), -np.inf, m - safe))
            l_run = (alpha if rescale_sum else 1.0) * l_run + p.sum(axis=1)
            acc = (alpha[:, None] if rescale_acc else 1.0) * acc + p @ v[j0:j1]
            m = m_new
        with np.errstate(invalid="ignore", divide="ignore"):
            out[i0:i1] = acc / l_run[:, None]
    return out


def tiled_variants(q, k, v, causal=True, block_q=64, block_k=64):
    return {"tiled-no-rescale": tiled_with(q, k, v, causal, block_q, block_k, False, False),
            "tiled-rescale-sum-only": tiled_with(q, k, v, causal, block_q, block_k, True, False)}


def backward_variants(q, k, v, d_out, causal=True):
    """id -> (dq, dk, dv) for the backward mistakes."""
    q, k, v, d_out = (np.asarray(a, dtype=F64) for a in (q, k, v, d_out))
    allowed = core.causal_allowed(q.shape[0], k.shape[0]) if causal else None
    _, p = core.attention(q, k, v, allowed)
    dv = p.T @ d_out
    dp = d_out @ v.T
    scale = 1.0 / np.sqrt(q.shape[1])
    ds_diag = p * dp  # the Jacobian taken as if it were diagonal
    ds = p * (dp - (dp * p).sum(axis=1, keepdims=True))
    return {"backward-diagonal-softmax": [(ds_diag @ k * scale, ds_diag.T @ q * scale, dv)],
            "backward-missing-scale": [(ds @ k, ds.T @ q * scale, dv), (ds @ k * scale, ds.T @ q, dv),
                                       (ds @ k, ds.T @ q, dv)]}


def costs_variants(n_tokens, n_layers, n_kv_heads, d_head, batch=1):
    return {"costs-kv-missing-factor-2": core.kv_cache_floats(n_tokens, n_layers, n_kv_heads, d_head, batch) // 2}


# -- bonus: grouped-query attention -------------------------------------------------------------
def repeat_kv_tiled(kv, n_rep):
    """The key/value heads repeated as a whole block (0, 1, 0, 1) instead of each in place (0, 0, 1, 1)."""
    kv = np.asarray(kv, dtype=F64)
    return np.concatenate([kv] * n_rep, axis=-3)


def gqa_tiled(x, w_q, w_k, w_v, w_o, n_heads, n_kv_heads, causal=True):
    """Grouped-query attention where query head h reads key/value head h % n_kv_heads."""
    x = np.asarray(x, dtype=F64)
    n = x.shape[-2]
    q, k, v = core.project_qkv(x, w_q, w_k, w_v)
    q = core.split_heads(q, n_heads)
    k, v = (repeat_kv_tiled(core.split_heads(t, n_kv_heads), n_heads // n_kv_heads) for t in (k, v))
    out, _ = core.attention(q, k, v, core.causal_allowed(n) if causal else None)
    return core.merge_heads(out) @ np.asarray(w_o, dtype=F64)


# -- bonus: rotary position embedding -----------------------------------------------------------
def _turn(a, b, n, d, offset, base):
    angle = np.outer(np.arange(offset, offset + n), base ** (-np.arange(0, d, 2) / d))
    return a * np.cos(angle) - b * np.sin(angle), a * np.sin(angle) + b * np.cos(angle)


def rotate_interleaved(x, offset=0, base=10000.0):
    """Rotary embedding pairing features (2j, 2j + 1) instead of (j, j + d/2): written back in place,
    or written as two halves."""
    x = np.asarray(x, dtype=F64)
    n, d = x.shape[-2], x.shape[-1]
    a, b = _turn(x[..., 0::2], x[..., 1::2], n, d, offset, base)
    return [np.stack([a, b], axis=-1).reshape(x.shape), np.concatenate([a, b], axis=-1)]


def rope_attention_variants(q, k, v, causal=True):
    """id -> outputs of rope_attention with one rotary mistake."""
    q, k, v = (np.asarray(a, dtype=F64) for a in (q, k, v))
    n_q, n_k = q.shape[-2], k.shape[-2]
    allowed = core.causal_allowed(n_q, n_k) if causal else None

    def run(qr, kr, vr):
        return core.attention(qr, kr, vr, allowed)[0]

    qr, kr = rope.rotate(q, n_k - n_q), rope.rotate(k)
    out = {"rope-interleaved": [run(a, b, v) for a, b in zip(rotate_interleaved(q, n_k - n_q), rotate_interleaved(k))]}
    if v.shape[-1] % 2 == 0:  # v turned as the keys are (at the key positions), or at the queries' offset
        out["rope-rotates-v"] = [run(qr, kr, rope.rotate(v)), run(qr, kr, rope.rotate(v, n_k - n_q))]
    return out


def rope_decode_variants(q, k, v, chunks):
    """id -> outputs of decoding in `chunks` with a rotary mistake: positions restarted at 0 in every
    call (no offset under the cache), neighbouring features paired, or the values turned too."""
    q, k, v = (np.asarray(a, dtype=F64) for a in (q, k, v))
    no_offset, k_cache, start = [], [], 0
    for t in chunks:
        end = start + t
        k_cache.append(rope.rotate(k[..., start:end, :]))  # each call rotates from position 0
        keys = np.concatenate(k_cache, axis=-2)
        no_offset.append(core.attention(rope.rotate(q[..., start:end, :]), keys, v[..., :end, :],
                                        core.causal_allowed(t, end))[0])
        start = end
    out = {"rope-no-offset": np.concatenate(no_offset, axis=-2)}
    allowed = core.causal_allowed(q.shape[-2])
    out["rope-interleaved"] = [core.attention(a, b, v, allowed)[0]
                               for a, b in zip(rotate_interleaved(q), rotate_interleaved(k))]
    if v.shape[-1] % 2 == 0:
        out["rope-rotates-v"] = rope.rope_attention(q, k, rope.rotate(v))
    return out


def __getattr__(name: str):
    """A stage's mistakes may keep their evidence beside its reference, in attn_ref/<stage>.py: adding a stage then
    touches its reference module only. A name not defined here is looked up in the package's other modules."""
    import importlib
    import pkgutil

    if name.startswith("__"):
        raise AttributeError(name)
    package = __name__.rpartition(".")[0]
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if info.name != "mistakes":
            found = vars(importlib.import_module(f"{package}.{info.name}")).get(name)
            if callable(found):
                return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
