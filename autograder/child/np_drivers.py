"""Child-side helpers for the numpy bonus stages (no torch): they need objects that cannot cross
the wire (a random Generator), inputs built where the call is made, and runs in a fresh child whose peak memory
the parent reads. What they record here may feed a diagnosis; it never decides a point by itself."""
import importlib

import numpy as np

from autograder.child import invariants


def _mod(pkg: str, name: str):
    return importlib.import_module(f"{pkg}.{name}")


def dropout_probe(weights, p, seed, training, *, pkg):
    """attention_dropout(weights, p, np.random.default_rng(seed), training)."""
    fn = _mod(pkg, "dropout").attention_dropout
    return invariants.call(fn, np.asarray(weights), p, np.random.default_rng(seed), training)


def tiled_memory_run(n, d=16, block=64, baseline=False, *, pkg):
    """One causal tiled call at n = n_q = n_k in a fresh child that ends after it, so the parent can read the
    child's peak memory when it reaps it (sandbox.Worker.measure); for the baseline, the same inputs and no
    call. Returns the output's shape (the peak, measured outside, decides)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
    if baseline:
        return [n, d]
    return list(np.shape(_mod(pkg, "tiled").tiled_attention(q, k, v, True, block, block)))


class _Tracked(np.ndarray):
    """q or k, marked: every array derived from it (a view, a slice, a transpose, astype, a scaled copy)
    keeps the mark, and each product of a q-derived with a k-derived array adds its number of scores
    to the shared log. How the loop converts or slices its inputs does not matter."""

    label: str | None = None
    log: list | None = None

    def __array_finalize__(self, obj) -> None:
        self.label = getattr(obj, "label", None)
        self.log = getattr(obj, "log", None)

    @staticmethod
    def _plain(args):
        return [np.ndarray.view(a, np.ndarray) if isinstance(a, _Tracked) else a for a in args]

    @staticmethod
    def _labels(args) -> dict:
        return {a.label: a for a in args if isinstance(a, _Tracked) and a.label}

    def _keep(self, result, source: "_Tracked"):
        return self._mark(result, source) if isinstance(result, np.ndarray) and result.size == source.size else result

    def _product(self, args, result):
        labels = self._labels(args)
        if {"q", "k"} <= set(labels) and isinstance(result, np.ndarray):
            labels["q"].log.append(int(result.size))
        return result

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if "out" in kwargs:
            kwargs["out"] = tuple(self._plain(kwargs["out"]))
        result = getattr(ufunc, method)(*self._plain(inputs), **kwargs)
        if ufunc is np.matmul:
            return self._product(inputs, result)
        labels = self._labels(inputs)
        return self._keep(result, next(iter(labels.values()))) if len(labels) == 1 else result

    def __array_function__(self, func, types, args, kwargs):
        flat = list(args) + list(kwargs.values())
        result = func(*self._plain(args), **{k: (np.ndarray.view(v, np.ndarray) if isinstance(v, _Tracked) else v)
                                            for k, v in kwargs.items()})
        if func in (np.dot, np.einsum, np.inner, np.tensordot, np.vdot):
            return self._product(flat, result)
        labels = self._labels(flat)
        if len(labels) != 1:
            return result
        source = next(iter(labels.values()))
        if isinstance(result, (list, tuple)):  # np.split, np.array_split, np.vsplit, ...: blocks keep the mark
            return type(result)(self._mark(r, source) for r in result)
        return self._keep(result, source)

    @staticmethod
    def _mark(result, source: "_Tracked"):
        if isinstance(result, np.ndarray) and result.dtype.kind in "fc":
            out = result.view(_Tracked)
            out.label, out.log = source.label, source.log
            return out
        return result

    def view(self, *args, **kwargs):
        """A view is the same data: it keeps the mark whatever type it is asked for."""
        return self._mark(np.ndarray.view(self, *args, **kwargs), self)

    def dot(self, other, out=None):
        return self._product([self, other], np.dot(*self._plain([self, other])))


def _keeping(orig, copy: bool):
    """np.asarray / np.array that keep a marked array marked (converting its dtype as asked)."""

    def convert(a, dtype=None, *args, **kwargs):
        if isinstance(a, _Tracked) and not args and set(kwargs) <= {"order", "copy"}:
            return a.astype(dtype or a.dtype, copy=copy or bool(kwargs.get("copy")))
        return orig(a, dtype, *args, **kwargs)

    return convert


def tiled_key_rows(n, block, d=8, *, pkg):
    """Scores computed (q.k products counted where they happen) by one causal tiled call at
    n = n_q = n_k, and the n * n a loop over every block computes."""
    module = _mod(pkg, "tiled")
    rng = np.random.default_rng(1)
    log: list = []
    q, k = (rng.standard_normal((n, d)).view(_Tracked) for _ in range(2))
    q.label, k.label, q.log, k.log = "q", "k", log, log
    v = rng.standard_normal((n, d))
    patches = {np.asarray: _keeping(np.asarray, False), np.array: _keeping(np.array, True)}
    rebound = [(np, name) for name in ("asarray", "array")]
    rebound += [(module, name) for name, value in vars(module).items() if any(value is o for o in patches)]
    saved = [(obj, name, getattr(obj, name)) for obj, name in rebound]
    try:
        for obj, name, value in saved:
            setattr(obj, name, patches[value])
        module.tiled_attention(q, k, v, True, block, block)
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)
    return {"read": int(sum(log)), "all": int(n * n), "causal": int(n * (n + 1) // 2)}
