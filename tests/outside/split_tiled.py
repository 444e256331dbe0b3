"""A tiled (online-softmax) attention written with np.split / np.array_split blocks instead of slices,
as several public FlashAttention-in-numpy notebooks do; adapted to the kit's API."""
import numpy as np


def tiled_attention(q, k, v, causal=True, block_q=64, block_k=64):
    n_q, d = q.shape
    n_k = k.shape[0]
    offset = n_k - n_q
    q_blocks = np.array_split(q, range(block_q, n_q, block_q))
    k_blocks = np.split(k, list(range(block_k, n_k, block_k)))
    v_blocks = np.vsplit(v, list(range(block_k, n_k, block_k)))
    outs = []
    for bi, qb in enumerate(q_blocks):
        i0 = bi * block_q
        rows = offset + i0 + np.arange(qb.shape[0])
        m = np.full(qb.shape[0], -np.inf)
        l = np.zeros(qb.shape[0])
        acc = np.zeros((qb.shape[0], v.shape[1]))
        for bj, (kb, vb) in enumerate(zip(k_blocks, v_blocks)):
            j0 = bj * block_k
            if causal and j0 > rows[-1]:
                break  # this key block and all later ones are in every row's future
            s = np.dot(qb, kb.T) / np.sqrt(d)
            if causal:
                s = np.where(j0 + np.arange(kb.shape[0])[None, :] <= rows[:, None], s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            safe = np.where(np.isinf(m_new), 0.0, m_new)
            p = np.exp(s - safe[:, None])
            alpha = np.where(np.isinf(m), 0.0, np.exp(m - safe))
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ vb
            m = m_new
        if np.any(l == 0):
            raise ValueError("a query row has no allowed key")
        outs.append(acc / l[:, None])
    return np.concatenate(outs, axis=0)
