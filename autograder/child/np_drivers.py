"""Child-side helpers for the numpy bonus stages (no torch): they need objects that cannot cross
the wire (a random Generator) or measurements made next to the student's code (memory, access)."""
import importlib
import tracemalloc

import numpy as np


def _mod(pkg: str, name: str):
    return importlib.import_module(f"{pkg}.{name}")


def dropout_probe(weights, p, seed, training, *, pkg):
    """attention_dropout(weights, p, np.random.default_rng(seed), training)."""
    fn = _mod(pkg, "dropout").attention_dropout
    return fn(np.asarray(weights), p, np.random.default_rng(seed), training)


def tiled_peak_memory(n, d=16, block=64, *, pkg):
    """(peak bytes allocated (tracemalloc) by one causal tiled call at n = n_q = n_k, the output's shape)."""
    fn = _mod(pkg, "tiled").tiled_attention
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
    tracemalloc.start()
    try:
        out = fn(q, k, v, True, block, block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return int(peak), list(np.shape(out))


class _Tracked(np.ndarray):
    """An array that records which rows of it are sliced (k[j0:j1]), to see which key blocks are read."""

    rows_read: list
    root = False

    def __array_finalize__(self, obj) -> None:
        self.rows_read = getattr(obj, "rows_read", [])
        self.root = False  # views and results of arithmetic are not the keys themselves

    def __getitem__(self, index):
        if not self.root:
            return np.asarray(self).__getitem__(index)
        first = index[0] if isinstance(index, tuple) and index else index
        if isinstance(first, slice):
            start, stop, _ = first.indices(self.shape[0])
            self.rows_read.append(max(0, stop - start))
        elif isinstance(first, (int, np.integer)):
            self.rows_read.append(1)
        return np.asarray(self).__getitem__(index)


def tiled_key_rows(n, block, d=8, *, pkg):
    """Key rows read by a causal tiled call at n = n_q = n_k, and the rows a skip-free loop would read."""
    fn = _mod(pkg, "tiled").tiled_attention
    rng = np.random.default_rng(1)
    q, v = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    k = rng.standard_normal((n, d)).view(_Tracked)
    k.rows_read, k.root = [], True
    fn(q, k, v, True, block, block)
    n_q_blocks = -(-n // block)
    return {"read": int(sum(k.rows_read)), "all": int(n_q_blocks * n)}
