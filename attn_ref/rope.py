"""Reference rotary embedding, written with complex numbers: the pair (x_j, x_{j + d/2}) is the
complex number x_j + i x_{j + d/2}, multiplied by exp(i p theta_j) at position p (the solutions
write out the cosines and sines)."""
import numpy as np

from . import core

F64 = np.float64


def rotate(x, offset=0, base=10000.0):
    x = np.asarray(x, dtype=F64)
    n, d = x.shape[-2], x.shape[-1]
    z = x[..., : d // 2] + 1j * x[..., d // 2:]
    theta = np.exp(-np.log(base) * np.arange(0, d, 2) / d)  # base ** (-2j / d)
    z = z * np.exp(1j * np.outer(np.arange(offset, offset + n), theta))
    return np.concatenate([z.real, z.imag], axis=-1)


def rope_attention(q, k, v, causal=True):
    n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]
    allowed = core.causal_allowed(n_q, n_k) if causal else None
    return core.attention(rotate(q, n_k - n_q), rotate(k), v, allowed)[0]


def rope_decode(q, k, v, cache=None):
    L = 0 if cache is None else np.shape(cache[0])[-2]
    k, v = rotate(k, L), np.asarray(v, dtype=F64)
    if cache is not None:
        k = np.concatenate([np.asarray(cache[0], dtype=F64), k], axis=-2)
        v = np.concatenate([np.asarray(cache[1], dtype=F64), v], axis=-2)
    out = core.attention(rotate(q, L), k, v, core.causal_allowed(np.shape(q)[-2], k.shape[-2]))[0]
    return out, (k, v)
