"""Inputs that a driver draws in the child and the parent draws again to check the outputs (numpy only, no
torch: the parent imports this module too). Drawn from a seed, so nothing this large crosses the wire."""
import numpy as np


def decode_step(batch: int, n_heads: int, d_head: int, length: int, steps: int, seed: int = 0) -> tuple:
    """The measured decode steps' arrays: the weights qkv [3C, C] and out [C, C] (nn.Linear's layout), the prefix
    x [B, L, C] whose keys and values (the grader projects them) fill the cache, and the new tokens
    x [B, steps, C], fed one at a time, float32 (what the child's tensors hold: torch takes them without a copy)."""
    C = n_heads * d_head
    source = np.random.default_rng(seed)

    def draw(shape: tuple) -> np.ndarray:
        return source.standard_normal(shape, dtype=np.float32)

    qkv_w, out_w = draw((3 * C, C)) / np.float32(C**0.5), draw((C, C)) / np.float32(C**0.5)
    return qkv_w, out_w, draw((batch, length, C)), draw((batch, steps, C))


def ordinary_sizes(low: int, high: int, seed: int = 0) -> list[int]:
    """The sizes of the 1 to 3 ordinary calls a measuring child makes before its measured call, drawn from the grade's
    seed between `low` and `high`: the measured call is never the process's first, so code right only on its
    first call is measured where it is wrong."""
    source = np.random.default_rng([seed, low, high])
    return [int(n) for n in source.integers(low, high + 1, size=int(source.integers(1, 4)))]


def scores(rows: int, n: int, seed: int = 0) -> np.ndarray:
    """Scores [rows, n] of the measured softmax call (float64, spread like scaled scores and a few far larger)."""
    source = np.random.default_rng([seed, rows, n])
    return source.standard_normal((rows, n)) * source.choice([1.0, 30.0], size=(rows, 1))


def attention_inputs(n: int, d: int, seed: int = 0, dtype=np.float32) -> tuple:
    """q, k, v [n, d] of one measured causal call (the fused and tiled memory checks), drawn from the grade's seed:
    the parent checks rows of the output that it picks after the call, so a call must be right everywhere."""
    source = np.random.default_rng(seed)
    return tuple(source.standard_normal((n, d), dtype=np.float32).astype(dtype, copy=False) for _ in range(3))


def module_inputs(n: int, d_model: int, seed: int = 0) -> tuple:
    """x [1, n, C] and the weights qkv [3C, C], out [C, C] of one measured causal forward, float32."""
    source = np.random.default_rng(seed)
    x = source.standard_normal((1, n, d_model), dtype=np.float32)
    qkv_w = source.standard_normal((3 * d_model, d_model), dtype=np.float32) / np.float32(d_model**0.5)
    out_w = source.standard_normal((d_model, d_model), dtype=np.float32) / np.float32(d_model**0.5)
    return x, qkv_w, out_w


def decode_length(longest: int, seed: int) -> int:
    """How many positions the measured decode steps find in the cache: drawn from the grade's seed between 3/4 of
    `longest` and `longest` (762 to 1,016), so a step cannot be cheap at one known length alone (secret on
    Gradescope)."""
    return longest - int(np.random.default_rng([seed, 1023]).integers(0, longest // 4 + 1))
