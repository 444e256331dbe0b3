"""Inputs that a driver draws in the child and the parent draws again to check the outputs (numpy only, no
torch: the parent imports this module too). Drawn from a seed, so nothing this large crosses the wire."""
import numpy as np


def decode_weights(n_heads: int, d_head: int, seed: int = 0) -> tuple:
    """The weights of the measured decode steps' module, qkv [3C, C] and out [C, C] (nn.Linear's layout), float32."""
    C = n_heads * d_head
    source = np.random.default_rng([seed, 7])
    return tuple(source.standard_normal(shape, dtype=np.float32) / np.float32(C**0.5) for shape in ((3 * C, C), (C, C)))


def decode_prefix(batch: int, n_heads: int, d_head: int, length: int, seed: int = 0) -> np.ndarray:
    """x [B, L, C] of the tokens whose keys and values (the grader projects them) fill the cache before the measured
    steps at one length, float32 (what the child's tensors hold: torch takes them without a copy)."""
    return np.random.default_rng([seed, 7, length]).standard_normal((batch, length, n_heads * d_head), dtype=np.float32)


DECODE_RANGE = (128, 768)  # the cache lengths the decode steps are measured at and the decode checks use


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


FUSED_RANGE = (1024, 8192)  # the lengths T of the fused memory rule's calls and of a fused correctness check
TILED_RANGE = (512, 4096)  # the lengths n of the tiled memory rule's calls and of a tiled correctness check
SOFTMAX_RANGE = ((2, 32), (2, 512))  # rows and columns of the softmax library check's call and of a softmax check


def growth_sizes(low: int, high: int, seed: int, salt: int = 0) -> tuple[int, int, int]:
    """Three lengths of one cost rule's calls, shortest first, drawn from the grade's seed (secret on Gradescope)
    between `low` and `high`: the shortest within low .. low + low/16, the longest within the last quarter, one
    between (at least twice the shortest, at most half the longest). How the cost grows over them decides the rule,
    and the shortest sits at the range's start, so code that changes its algorithm at any length above it is
    measured on both sides of its switch."""
    source = np.random.default_rng([seed, 4099, salt, low, high])
    shortest = low + int(source.integers(0, low // 16))
    longest = high - int(source.integers(0, high // 4 + 1))
    return shortest, int(source.integers(2 * shortest, longest // 2 + 1)), longest


DECODE_WARM = 64  # one-token steps the measured decode may make between a cache's prefill and its counted steps


def warm_steps(seed: int) -> tuple[int, int, int]:
    """How many one-token steps the measured decode makes between each cache's prefill and its 8 counted steps, per
    cache length (shortest first), drawn from the grade's seed: none at the shortest (whose module is new, so its
    counted steps are the module's 2nd to 9th calls), and for the other two, one count within DECODE_WARM's last
    eighth and one below it, in an order drawn too. A step that picks its path by how many steps came since a
    prefill, or since the module was built, is measured on both sides of its switch anywhere in 0 .. DECODE_WARM."""
    source = np.random.default_rng([seed, 4102])
    many = DECODE_WARM - int(source.integers(0, DECODE_WARM // 8))
    mid = int(source.integers(1, many - 8))
    return (0, mid, many) if source.integers(0, 2) else (0, many, mid)


def checked_size(low: int, high: int, seed: int, salt: int = 0) -> int:
    """One length drawn from the grade's seed between `low` and `high`, for a correctness check that shares a cost
    rule's range: the rule's lengths are no lengths that only a measurement uses."""
    return int(np.random.default_rng([seed, 4100, salt, low, high]).integers(low, high + 1))


def softmax_shape(seed: int, salt: int = 0) -> tuple[int, int]:
    """(rows, n) of a softmax call drawn from the grade's seed over SOFTMAX_RANGE (the library check's, salt 0)."""
    (r0, r1), (n0, n1) = SOFTMAX_RANGE
    source = np.random.default_rng([seed, 4101, salt])
    return int(source.integers(r0, r1 + 1)), int(source.integers(n0, n1 + 1))
