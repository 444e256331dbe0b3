"""Child-side helpers for the numpy bonus stages (no torch): they need objects that cannot cross
the wire (a random Generator), inputs built where the call is made, and runs in a fresh child whose peak memory
the parent reads. What they record here may feed a diagnosis; it never decides a point by itself."""
import importlib

import numpy as np

from autograder.child import invariants, seeded


def _mod(pkg: str, name: str):
    return importlib.import_module(f"{pkg}.{name}")


def dropout_probe(weights, p, seed, training, *, pkg):
    """attention_dropout(weights, p, np.random.default_rng(seed), training)."""
    fn = _mod(pkg, "dropout").attention_dropout
    return invariants.call(fn, np.asarray(weights), p, np.random.default_rng(seed), training)


def softmax_memory_run(salt=0, baseline=False, *, seed=0, pkg):
    """One softmax call on scores [rows, n] whose shape and values are drawn from the grade's seed
    (seeded.softmax_shape: the range a correctness check uses too), after 1 to 3 ordinary small ones, in a fresh
    child whose peak memory the parent reads when it reaps it; for the baseline, the same inputs and no call. A
    numpy softmax of a few thousand numbers adds next to nothing; one that loads a library while it runs (torch,
    ~190 MiB) shows in the peak. Returns {"shape", "out"}: the parent checks the output too, so the measured
    call must be a softmax."""
    rows, n = seeded.softmax_shape(seed, salt)
    scores = seeded.scores(rows, n, seed)
    if baseline:
        return {"shape": [rows, n], "out": None}
    softmax = _mod(pkg, "softmax").softmax
    for m in seeded.ordinary_sizes(2, 16, seed):  # ordinary calls first: the measured one is never the first
        softmax(seeded.scores(m, m, seed))
    out = softmax(scores)
    shape = list(np.shape(out))
    return {"shape": shape, "out": np.asarray(out, dtype=np.float64) if shape == [rows, n] else None}


_INPUTS: dict = {}  # tiled_memory_run's inputs, drawn by its "prepare" call for its measured one (one child)


def tiled_memory_run(n, d=16, block=64, baseline=False, *, seed=0, phase="both", pkg):
    """One causal tiled call at n = n_q = n_k, after 1 to 3 ordinary ones of 8 to 64 rows, in a fresh child (as
    drivers.fused_memory_run's); for the baseline, the same inputs and no call. The phases are
    drivers.fused_memory_run's: "prepare" imports the submission's module and makes the ordinary calls, "call" the
    measured one, which the parent
    brackets (what it alone adds to the child's peak). Returns {"shape", "out"}: the output, which the parent checks
    at rows it picks afterwards (the peak, measured outside, decides the memory; stages/growth.py compares it at
    three lengths)."""
    tiled = None if baseline else _mod(pkg, "tiled").tiled_attention
    if phase != "call" or (n, d, seed) not in _INPUTS:
        # the inputs first, on both sides (drawing them loads numpy's random module: not the call's memory); a
        # shorter length's, measured before in the same child, are let go
        _INPUTS.clear()
        _INPUTS[(n, d, seed)] = seeded.attention_inputs(n, d, seed, np.float64)
        if tiled is not None:
            for m in seeded.ordinary_sizes(8, 64, seed):  # ordinary calls first: the measured one is never the first
                tiled(*(a[:m].copy() for a in _INPUTS[(n, d, seed)]), True, block, block)  # arrays of their own:
                # views of the measured call's arrays let a stranger's code tell that call apart (it had seen them)
    if phase == "prepare":
        return None
    q, k, v = _INPUTS[(n, d, seed)]
    if baseline:  # an output of the same size goes back, so what sending it costs is on both sides
        return {"shape": [n, d], "out": np.zeros((n, d))}
    out = tiled(q, k, v, True, block, block)
    shape = list(np.shape(out))
    return {"shape": shape, "out": np.asarray(out, dtype=np.float64) if shape == [n, d] else None}
