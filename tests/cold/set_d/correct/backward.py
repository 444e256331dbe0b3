# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Bonus stage: the backward pass of attention, by hand.

With S = q k^T / sqrt(d_k) (masked), P = softmax(S) and out = P v, and d_out = dL/d(out):
dv = P^T d_out; dP = d_out v^T; the softmax Jacobian gives dS = P * (dP - rowsum(dP * P));
dq = dS k / sqrt(d_k); dk = dS^T q / sqrt(d_k). Masked entries have P = 0, so they pass no gradient.
"""
import numpy as np


def attention_backward(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, d_out: np.ndarray, causal: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of sum(out * d_out) for out = attention(q, k, v).

    q [n_q, d_k], k [n_k, d_k], v [n_k, d_v], d_out [n_q, d_v] -> (dq, dk, dv) shaped like q, k, v.
    causal: bottom-right aligned causal mask (query i sees keys j <= n_k - n_q + i).
    """
    n_q, d_k = q.shape
    n_k = k.shape[0]
    scale = 1.0 / np.sqrt(d_k)
    s = (q @ k.T) * scale
    if causal:
        i = np.arange(n_q)[:, None]
        j = np.arange(n_k)[None, :]
        s = np.where(j <= (n_k - n_q) + i, s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(axis=-1, keepdims=True)
    dv = p.T @ d_out
    dp = d_out @ v.T
    ds = p * (dp - np.sum(dp * p, axis=-1, keepdims=True))
    dq = ds @ k * scale
    dk = ds.T @ q * scale
    return dq, dk, dv
