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


def attention_inputs(n: int, d: int, seed: int = 0, dtype=np.float32, lead: tuple = ()) -> tuple:
    """q, k, v [*lead, n, d] of one measured causal call (the fused memory checks: lead (B, H); the tiled: none), drawn
    from the grade's seed: the parent checks rows of the output that it picks after the call, so a call must be right
    everywhere."""
    source = np.random.default_rng(seed)
    return tuple(source.standard_normal((*lead, n, d), dtype=np.float32).astype(dtype, copy=False) for _ in range(3))


def module_inputs(n: int, d_model: int, seed: int = 0, batch: int = 1) -> tuple:
    """x [B, n, C] and the weights qkv [3C, C], out [C, C] of one measured causal forward, float32."""
    source = np.random.default_rng(seed)
    x = source.standard_normal((batch, n, d_model), dtype=np.float32)
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


DECODE_SPARE = 512  # the most positions a measured decode's cache may keep free after its counted steps


def spare_slots(seed: int) -> tuple[int, int, int]:
    """How many positions each measured decode cache (shortest first) keeps free after its 8 counted steps: its
    max_len is length + 8 + this, drawn from the grade's seed: none at the shortest (filled exactly, as the decode
    checks' caches are: a step that picks its path by the cache's max_len is measured from the range's start), and
    for the other two, one count within DECODE_SPARE's last eighth and one below it, in an order drawn too. A step
    that picks its path by how many positions are left (a stranger's attack: every pair redone unless among the
    cache's last 8 slots) is measured on both sides of its switch anywhere in 0 .. DECODE_SPARE."""
    source = np.random.default_rng([seed, 4107])
    many = DECODE_SPARE - int(source.integers(0, DECODE_SPARE // 8))
    some = int(source.integers(0, DECODE_SPARE * 7 // 8))
    return (0, some, many) if source.integers(0, 2) else (0, many, some)


def checked_size(low: int, high: int, seed: int, salt: int = 0) -> int:
    """One length drawn from the grade's seed between `low` and `high`, for a correctness check that shares a cost
    rule's range: the rule's lengths are no lengths that only a measurement uses."""
    return int(np.random.default_rng([seed, 4100, salt, low, high]).integers(low, high + 1))


# The shapes of the measured calls, drawn from the grade's seed like their lengths: a dimension that no correctness
# check varies and that every measured call shares (it was one constant each) lets a submission recognise the measured
# call and take a cheap path there only (issue 41: a step that redid every pair unless (B, H) == (4, 16), hand-written
# T x T attention unless H == 1 and d_head == 32, the whole n x n matrix unless the block was 256, all kept full
# points). Drawn from several values each, a gate on any one exact value loses at most seeds.
DECODE_HEADS = ((4, 16), (8, 8), (2, 32), (16, 4), (3, 16), (6, 8), (4, 12), (2, 24), (12, 4))  # (B, H): B * H is
# 64 or 48, near the 64 the decode rule's margins were set at (half a cache's pair scores, the memory bar, scales
# with B * H; so does what correct steps add)
DECODE_D = (8, 10, 12, 14, 16)  # d_head: at most 16, so a list cache's copy of k and v per step (B H L D 8 bytes)
# stays under half the pair scores (B H L^2 2 bytes) by as much as before (4 D / L: 0.47 at 16 and 136 positions)
FUSED_HEADS = ((1, 1), (1, 2), (2, 1))  # (B, H) of the fused memory rule's calls: B * H at most 2, so a T x T
# matrix per head at T = 8,192 stays within a torch child's memory in Gradescope's 768 MiB, as with B = H = 1
FUSED_D = (16, 24, 32, 48, 64)  # d_head (the module's d_model is H * d_head): a linear call's own tensors, 4 B H T d
# float32, are 0.25 MiB or more at the shortest length, beside a peak's noise of 0.1 to 0.3 MiB
TILED_BLOCKS = (64, 96, 128, 192, 256, 320)  # block_q = block_k of the tiled memory rule's calls. A code that keeps the
# whole n x n matrix at the shortest length only (a size gate) is told by the fall to the next length, where the tiles
# hold about 3 blocks of scores: at 384 (and at d = 32 from 128 on) that fall read 0.81 to 0.94 per doubling against the
# 0.9 bar, at 320 and d <= 16 0.64 to 0.77, at 256 (the old constant) 0.53 to 0.75
TILED_D = (8, 10, 12, 14, 16)  # d of its q, k, v [n, d], float64: at most 16 (the old constant) for the same reason


def _pick(source, values: tuple):
    return values[int(source.integers(0, len(values)))]


def decode_shape(seed: int) -> tuple[int, int, int]:
    """(B, H, d_head) of the measured decode steps (stages/kv_cache.py), drawn from the grade's seed over DECODE_HEADS
    and DECODE_D."""
    source = np.random.default_rng([seed, 4106])
    return (*_pick(source, DECODE_HEADS), _pick(source, DECODE_D))


def fused_shape(seed: int, salt: int = 0) -> tuple[int, int, int]:
    """(B, H, d_head) of the fused memory rule's calls (stages/fused.py; salt 1: the module's), drawn from the grade's
    seed over FUSED_HEADS and FUSED_D."""
    source = np.random.default_rng([seed, 4108, salt])
    return (*_pick(source, FUSED_HEADS), _pick(source, FUSED_D))


def tiled_shape(seed: int) -> tuple[int, int]:
    """(block, d) of the tiled memory rule's calls (stages/tiled.py: block_q = block_k = block), drawn from the
    grade's seed over TILED_BLOCKS and TILED_D."""
    source = np.random.default_rng([seed, 4110])
    return _pick(source, TILED_BLOCKS), _pick(source, TILED_D)


def softmax_shape(seed: int, salt: int = 0) -> tuple[int, int]:
    """(rows, n) of a softmax call drawn from the grade's seed over SOFTMAX_RANGE (the library check's, salt 0)."""
    (r0, r1), (n0, n1) = SOFTMAX_RANGE
    source = np.random.default_rng([seed, 4101, salt])
    return int(source.integers(r0, r1 + 1)), int(source.integers(n0, n1 + 1))
