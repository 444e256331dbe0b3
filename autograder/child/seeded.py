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
