"""Reference attention in float64 numpy. Every function casts its inputs to float64."""
import numpy as np

F64 = np.float64


def softmax(scores, axis=-1):
    """Log-sum-exp softmax; raises ValueError for a slice that is all -inf."""
    s = np.asarray(scores, dtype=F64)
    m = s.max(axis=axis, keepdims=True)
    if np.isneginf(m).any():
        raise ValueError("reference softmax: fully masked slice")
    lse = m + np.log(np.exp(s - m).sum(axis=axis, keepdims=True))
    return np.exp(s - lse)


def dot_scores(x):
    x = np.asarray(x, dtype=F64)
    return np.einsum("id,jd->ij", x, x)


def simple_self_attention(x):
    x = np.asarray(x, dtype=F64)
    return np.einsum("ij,jd->id", softmax(dot_scores(x)), x)


def project_qkv(x, w_q, w_k, w_v):
    x = np.asarray(x, dtype=F64)
    return tuple(np.einsum("...nd,de->...ne", x, np.asarray(w, dtype=F64)) for w in (w_q, w_k, w_v))


def scaled_scores(q, k):
    q, k = np.asarray(q, dtype=F64), np.asarray(k, dtype=F64)
    return np.einsum("...id,...jd->...ij", q, k) * (1.0 / np.sqrt(q.shape[-1]))


def causal_allowed(n_q, n_k=None):
    """Bottom-right aligned causal mask: query i sees key j iff j - i <= n_k - n_q."""
    n_k = n_q if n_k is None else n_k
    return np.subtract.outer(np.arange(n_k), np.arange(n_q)).T <= (n_k - n_q)


def attention(q, k, v, allowed=None):
    """Returns (out, weights) in float64; `allowed` broadcasts to [..., n_q, n_k]."""
    s = scaled_scores(q, k)
    if allowed is not None:
        s = np.where(np.asarray(allowed, dtype=bool), s, -np.inf)
    w = softmax(s)
    return np.einsum("...ij,...jd->...id", w, np.asarray(v, dtype=F64)), w


def multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, causal=True):
    """Loops over heads explicitly (the solutions reshape instead)."""
    x = np.asarray(x, dtype=F64)
    n, d_model = x.shape[-2], x.shape[-1]
    d_head = d_model // n_heads
    q, k, v = project_qkv(x, w_q, w_k, w_v)
    allowed = causal_allowed(n) if causal else None
    heads = []
    for h in range(n_heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        out, _ = attention(q[..., cols], k[..., cols], v[..., cols], allowed)
        heads.append(out)
    return np.concatenate(heads, axis=-1) @ np.asarray(w_o, dtype=F64)


def module_forward(x, qkv_weight, out_weight, n_heads, causal=True):
    """CausalSelfAttention in numpy: x [B, T, C]; qkv_weight [3C, C] (nn.Linear layout); out_weight [C, C]."""
    x = np.asarray(x, dtype=F64)
    C = x.shape[-1]
    w = np.asarray(qkv_weight, dtype=F64).T  # [C, 3C]: columns q | k | v
    return multi_head_attention(
        x, w[:, :C], w[:, C : 2 * C], w[:, 2 * C :], np.asarray(out_weight, dtype=F64).T, n_heads, causal
    )


def fused_attention(q, k, v, causal=True):
    """[B, H, T_q, D] x [B, H, T_k, D] -> [B, H, T_q, D], bottom-right causal alignment."""
    allowed = causal_allowed(q.shape[-2], k.shape[-2]) if causal else None
    return attention(q, k, v, allowed)[0]


def apply_mask(scores, allowed):
    s = np.asarray(scores, dtype=F64)
    allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), s.shape)
    if not allowed.any(axis=-1).all():
        raise ValueError("reference apply_mask: a row has no allowed key")
    return np.where(allowed, s, -np.inf)


def split_heads(x, n_heads):
    x = np.asarray(x, dtype=F64)
    d_head = x.shape[-1] // n_heads
    return np.stack([x[..., h * d_head : (h + 1) * d_head] for h in range(n_heads)], axis=-3)


def merge_heads(x):
    x = np.asarray(x, dtype=F64)
    return np.concatenate([x[..., h, :, :] for h in range(x.shape[-3])], axis=-1)


def score_variance(d_k, n_pairs=20000, seed=0, scaled=False):
    """Sample variance of q.k (or q.k/sqrt(d_k)) over standard-normal pairs; float64."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n_pairs, d_k))
    k = rng.standard_normal((n_pairs, d_k))
    d = np.einsum("nd,nd->n", q, k) / (np.sqrt(d_k) if scaled else 1.0)
    return float(d.var())


def attention_backward(q, k, v, d_out, causal=True):
    """Gradients of sum(out * d_out) for out = attention(q, k, v), via the softmax Jacobian.

    Written as an explicit Jacobian-vector product per row (the solutions use the row-sum form).
    """
    q, k, v, d_out = (np.asarray(a, dtype=F64) for a in (q, k, v, d_out))
    allowed = causal_allowed(q.shape[0], k.shape[0]) if causal else None
    out, p = attention(q, k, v, allowed)
    dv = np.einsum("ij,id->jd", p, d_out)
    dp = np.einsum("id,jd->ij", d_out, v)
    ds = np.stack([(np.diag(row) - np.outer(row, row)) @ g for row, g in zip(p, dp)])  # J_softmax^T dp
    scale = 1.0 / np.sqrt(q.shape[-1])
    return ds @ k * scale, ds.T @ q * scale, dv


def score_count(n_tokens, n_heads=1):
    return int(n_heads) * int(n_tokens) ** 2


def kv_cache_floats(n_tokens, n_layers, n_kv_heads, d_head, batch=1):
    return int(np.prod([2, batch, n_layers, n_tokens, n_kv_heads, d_head], dtype=np.int64))
