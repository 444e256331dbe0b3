"""Inputs that a driver draws in the child and the parent draws again to check the outputs (numpy only, no
torch: the parent imports this module too). Drawn from a seed, so nothing this large crosses the wire."""
import numpy as np


def decode_step(batch: int, n_heads: int, d_head: int, length: int, seed: int = 0) -> tuple:
    """One measured decode step's arrays: the weights qkv [3C, C] and out [C, C] (nn.Linear's layout), the
    cached keys and values [B, H, L, D] and the new token x [B, 1, C], float32 (what the child's tensors hold:
    torch takes them without a copy, so a measuring child draws half the bytes and copies none)."""
    C = n_heads * d_head
    source = np.random.default_rng(seed)

    def draw(shape: tuple) -> np.ndarray:
        return source.standard_normal(shape, dtype=np.float32)

    qkv_w, out_w = draw((3 * C, C)) / np.float32(C**0.5), draw((C, C)) / np.float32(C**0.5)
    k_old, v_old = (draw((batch, n_heads, length, d_head)) for _ in range(2))
    return qkv_w, out_w, k_old, v_old, draw((batch, 1, C))


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
    """How many cached positions the measured decode step has: drawn from the grade's seed between 3/4 of `longest`
    and `longest` (768 to 1,023), so a step cannot be cheap at one known length alone (secret on Gradescope)."""
    return longest - int(np.random.default_rng([seed, 1023]).integers(0, longest // 4 + 1))
