"""Bonus stage 9: tiled attention with an online softmax (FlashAttention-style forward)."""
import numpy as np

from ..child import seeded
from ..declarations import DEFAULTS_RULE, Edit, Function, Mistake, Stage
from ..evidence.compare import check_close
from ..evidence.diagnosis import diagnosed
from ..outcomes import Fail, StudentError
from . import common, growth
from .common import (
    RAISED,
    causal_rows,
    expect_defaults,
    expect_value_error,
    inner_loop_bound_line,
    randn,
    sampled_rows,
    shape_str,
    unraised,
)

# The memory rule's causal calls: q, k, v [n, d] float64 at three lengths n drawn from the grade's seed over
# seeded.TILED_RANGE (seeded.growth_sizes), their block (block_q = block_k) and d drawn from it too (seeded.tiled_shape
# over seeded.TILED_BLOCKS, 64 to 320: 2,080 to 91 block pairs of a causal loop at n = 4096, a block of scores 32 KiB
# to 0.8 MiB; and seeded.TILED_D, 8 to 16)
LOW, HIGH = seeded.TILED_RANGE
STAGE = Stage(
    name="tiled", number=9, points=10, files=("tiled.py",), calls=(),
    reread='the online-softmax (FlashAttention) forward in numpy; B "What it costs as the sequence grows"',
    bonus=True, worked_points=1.0,
    functions=(
        Function(name="tiled_attention", target="tiled:tiled_attention", reference="api:tiled_attention"),
        Function(name="tiled_memory_run", target="npdriver:tiled_memory_run", reads=("tiled.py",)),
    ),
    intro="Bonus: tiled attention with an online softmax, never holding the n x n matrix.",
    hints=(
        "Process the queries in blocks; for each block, let the key blocks stream past while you keep, per query "
        "row, the largest score so far, the sum of exponentials so far, and the weighted sum of values so far.",
        "When a new key block raises a row's maximum from m_old to m_new, everything accumulated so far was "
        "measured against m_old: multiply both the sum and the weighted values by exp(m_old - m_new).",
        "With the causal mask, a query block never needs key blocks that start after its last query's position: "
        "stop the key loop there. Divide the weighted values by the sum only at the very end.",
    ),
    mistakes=(
        Mistake(id="tiled-no-rescale", where="tiled.py:tiled_attention",
                explanation="when a block raises a row's running maximum, the running sum and the accumulator "
                            "must both be multiplied by exp(m_old - m_new); neither was",
                reread="the docstring of tiled.py",
                evidence='mistakes:tiled_variants',
                mutant=(
                    Edit('tiled.py',
                         'alpha = np.exp(np.where(np.isneginf(m), -np.inf, m - safe))',
                         'alpha = np.ones_like(m)'),
                )),
        Mistake(id="tiled-rescale-sum-only", where="tiled.py:tiled_attention",
                explanation="the running sum is rescaled when the maximum grows but the output accumulator is "
                            "not; both carry the old maximum",
                reread="the docstring of tiled.py",
                evidence='mistakes:tiled_variants',
                mutant=(
                    Edit('tiled.py',
                         'acc = alpha[:, None] * acc + p @ v[j0:j1]',
                         'acc = acc + p @ v[j0:j1]'),
                )),
        Mistake(id="tiled-masked-row-nan", where="tiled.py:tiled_attention",
                explanation="a row with no allowed key came back NaN (exp(-inf - -inf)); raise ValueError as "
                            "softmax does",
                reread="Article A, 'Hide forbidden positions before softmax'",
                evidence='check:tiled_row_without_keys_raises',
                mutant=(
                    Edit('tiled.py',
                         '        if np.any(l == 0):\n',
                         '        if False:\n'),
                )),
    ),
)

@STAGE.check(points=2.5, kind="reference")
def tiled_reference_blocks(api, ctx):
    """equals the reference for many block sizes, blocks that do not divide n, n_q != n_k, causal or not"""
    rng = ctx.rng("tiled")
    cases = [(10, 10, 3, 4, True), (7, 12, 4, 5, True), (9, 9, 64, 64, False), (1, 9, 2, 2, True),
             (13, 20, 5, 7, False), (16, 16, 1, 1, True), (20, 20, 8, 3, True), (5, 9, 4, 4, False)]
    n = seeded.checked_size(LOW, 2 * LOW, ctx.seed)  # a length of the memory rule's range (its cheaper half), checked
    block, d = seeded.tiled_shape(ctx.seed)  # and its block and d: none is one that only a measurement uses
    q, k, v = randn(rng, n, d), randn(rng, n, d), randn(rng, n, 3)
    rows = sampled_rows(n)
    got = np.asarray(api.tiled_attention(q, k, v, True, block, block), dtype=float)
    if got.shape != (n, 3):
        raise Fail(f"tiled_attention of q, k [{n}, {d}], v [{n}, 3] returned shape {list(got.shape)}; expected [{n}, 3]")
    check_close(got[rows], causal_rows(q, k, v, rows), f"tiled_attention causal at n={n}, blocks of {block}, "
                "at rows picked after the call", inputs=f"q, k [{n}, {d}]")
    for n_q, n_k, bq, bk, causal in cases:
        q, k, v = randn(rng, n_q, 4), randn(rng, n_k, 4), randn(rng, n_k, 3)
        check_close(api.tiled_attention(q, k, v, causal, bq, bk), ctx.ref.tiled_attention(q, k, v, causal),
                    f"tiled_attention(causal={causal}, block_q={bq}, block_k={bk})",
                    inputs=f"q {shape_str(q)}, k {shape_str(k)}",
                    mistakes=lambda: ctx.mistakes.tiled_variants(q, k, v, causal, bq, bk))


@STAGE.check(points=1.5, kind="reference", visibility="public")
def tiled_large_scores(api, ctx):
    """stays exact when the scores reach +-1e4 and the running maximum jumps between blocks"""
    rng = ctx.rng("tiled-large")
    q, k, v = randn(rng, 12, 4, scale=60.0), randn(rng, 12, 4, scale=60.0), randn(rng, 12, 2)
    k[9] *= 3  # a late key with a much larger score: the maximum grows in a later block
    check_close(api.tiled_attention(q, k, v, True, 4, 4), ctx.ref.tiled_attention(q, k, v, True),
                "tiled_attention with scores near +-1e4", inputs="q, k [12, 4] x 60, blocks of 4",
                mistakes=lambda: ctx.mistakes.tiled_variants(q, k, v, True, 4, 4))


@STAGE.check(points=1.5, kind="property", visibility="public",
              rule=f"Extra memory grows with the block sizes and n * d, not n_q * n_k: hold one block_q x block_k "
                   "tile of scores at a time (a block_q x n_k strip per query block is not a tile). It is measured at "
                   f"three lengths n from {LOW:,} to {HIGH:,}, drawn from the grade's seed (the shortest below "
                   f"{LOW * 17 // 16:,}, the longest from {HIGH * 3 // 4:,}), causal, block_q = block_k one of "
                   f"{', '.join(map(str, seeded.TILED_BLOCKS))} and d one of {', '.join(map(str, seeded.TILED_D))} "
                   "(drawn from the grade's seed too), counting every page the call touches (memory held before "
                   "it too) and memory held before it that it lets go of: it may grow at most "
                   f"{growth.MAX_GROWTH}x per doubling of n (the n x n scores make 4x), and never fall as n grows; at "
                   "the longest n it may add less than half the memory of the n x n scores (float64).", measured=True)
def tiled_memory_linear(api, ctx):
    """one causal call's memory grows with n, not n^2: at most 2.8x per doubling of n over three lengths drawn from
    the grade's seed"""
    # each length's call counted alone, beside a child that built the same inputs without calling: what the
    # kernel counted, read by the grader (stages/growth.py)
    sizes = seeded.growth_sizes(LOW, HIGH, ctx.seed)
    block, d = seeded.tiled_shape(ctx.seed)
    runs = growth.measure(api, "tiled_memory_run", sizes, (d, block), ctx.seed)
    for (r, _, _), n in zip(runs, sizes):
        if list(r["shape"]) != [n, d]:
            raise Fail(f"tiled_attention of q, k, v [{n}, {d}] returned shape {r['shape']}; expected [{n}, {d}]")
        rows = sampled_rows(n)  # the memory is a pass only for a call that is right: at rows the child could not know
        check_close(np.asarray(r["out"])[rows],
                    causal_rows(*seeded.attention_inputs(n, d, ctx.seed, np.float64), rows),
                    f"tiled_attention causal at n={n}, blocks of {block} (a memory check's call), at rows "
                    "picked after the call", inputs=f"q, k, v [{n}, {d}]")
    g, why = growth.judge(api, "tiled_memory_run", sizes, (d, block), ctx.seed, runs, own_bytes(d), "n",
                          scores_bytes)
    if g is None:
        return "memory of a causal call: not measured (this system does not report a process's peak)"
    if why:
        raise Fail(f"{why}. Keep only a block of scores at a time")
    return f"memory of one causal call: {growth.describe(g, 'n')}; the n x n scores would make it about 4x per doubling"


def scores_bytes(n: int) -> int:
    """The memory of the n x n scores of a measured call (float64)."""
    return n * n * 8


def own_bytes(d: int):
    """The memory of a measured call's own tensors at length n, for its drawn d: q, k, v and the output, float64
    [n, d], as a function of n."""
    return lambda n: 4 * n * d * 8


def rows_kept_clean(n_q: int, n_k: int, block_q: int, block_k: int, j0: int) -> int:
    """How many leading query rows a causal loop that skips the hidden key blocks keeps clear of the keys from `j0`
    on: those of the query blocks whose last visible key lies in a key block that ends by `j0` (a block that is
    read is read whole, its hidden part with weights 0, and 0 x NaN is NaN)."""
    kept = 0
    for end in range(block_q, n_q + block_q, block_q):  # the end of each query block
        end = min(end, n_q)
        last = n_k - n_q + end - 1  # the furthest key any row of this block sees
        if min(n_k, (last // block_k + 1) * block_k) > j0:
            break
        kept = end
    return kept


@STAGE.check(points=2, kind="property", visibility="public",
              rule="Key blocks that the causal mask hides entirely are skipped: never read, so NaN values there never "
                   "reach the output.")
def tiled_skips_hidden_blocks(api, ctx):
    """with a causal mask, key blocks entirely in the future of a query block are not read: values set to NaN
    there leave that query block's output finite and exact"""
    rng = ctx.rng("tiled-skip")
    # (n_q, n_k, block_q, block_k, first key whose value is NaN); the second has n_q < n_k and unequal blocks
    for n_q, n_k, bq, bk, j0 in [(256, 256, 64, 64, 200), (100, 160, 32, 48, 150)]:
        q, k, v = randn(rng, n_q, 8), randn(rng, n_k, 8), randn(rng, n_k, 4)
        poisoned = v.copy()
        poisoned[j0:] = np.nan
        got = np.asarray(api.tiled_attention(q, k, poisoned, True, bq, bk), dtype=float)
        what = (f"tiled_attention(causal=True, block_q={bq}, block_k={bk}) with the values of keys {j0}..{n_k - 1} "
                f"set to NaN")
        if got.shape != (n_q, v.shape[1]):
            raise Fail(f"{what} returned shape {list(got.shape)}; expected {[n_q, v.shape[1]]}")
        kept = rows_kept_clean(n_q, n_k, bq, bk, j0)
        if np.isnan(got[:kept]).any():
            row = int(np.argwhere(np.isnan(got[:kept]))[0, 0])
            i0 = row // bq * bq
            clean = np.asarray(api.tiled_attention(q, k, v, True, bq, bk), dtype=float)
            if clean.shape == got.shape and np.isnan(clean[row]).any():  # not the NaN keys': said as what it is
                raise Fail(f"{what} gave NaN in row {row}, and so does the same call with every value finite: the "
                           "NaN is made inside the call (a row's running maximum, sum or rescaling), not read from "
                           "the hidden keys, so whether hidden blocks are skipped cannot be told until the values "
                           "are right (the values' own checks show where)")
            bound = inner_loop_bound_line(common.worker_snapshot(api).read_bytes("tiled.py"), "tiled_attention")
            raise Fail(f"{what} gave NaN in row {row}: its query block (rows {i0}..{min(i0 + bq, n_q) - 1}) sees no "
                       f"key past {n_k - n_q + min(i0 + bq, n_q) - 1}, yet a key block from {j0} on reached it (read "
                       "with weights 0, and 0 x NaN is NaN). Stop each query block's key loop after the key block "
                       "holding its last visible key", place=("tiled.py", "tiled_attention", bound) if bound else None)
        check_close(got[:kept], ctx.ref.tiled_attention(q, k, v, True)[:kept],
                    f"{what}: rows 0..{kept - 1}, which never see those keys", inputs=f"q {shape_str(q)}, k {shape_str(k)}")
        sees = np.arange(n_q) + n_k - n_q >= j0  # rows that attend to a NaN value with a weight above 0
        if not np.isnan(got[sees]).all():
            row = int(np.flatnonzero(sees & ~np.isnan(got).all(axis=1))[0])
            raise Fail(f"{what} gave a finite row {row}, which attends to key {j0} (its value NaN) with a weight "
                       "above 0: values are used as given, so that row is NaN")


@STAGE.check(points=1, kind="property", visibility="public",
              rule="Raises ValueError if a query row has no allowed key (causal with n_q > n_k).")
def tiled_row_without_keys_raises(api, ctx):
    """a query row with no allowed key (n_q > n_k, causal) raises ValueError instead of returning NaN; without the
    causal mask every row sees every key, so n_q > n_k does not raise"""
    # blocks of 2 (the first rows' block holds no allowed key), and one block of 4 (mixed rows)
    for n_q, block in [(4, 2), (3, 4)]:
        q, k, v = np.ones((n_q, 2)), np.ones((2, 2)), np.ones((2, 2))
        got = expect_value_error(lambda: api.tiled_attention(q, k, v, True, block, block),
                                 f"tiled_attention with n_q={n_q} > n_k=2, blocks of {block}",
                                 of=(api, "tiled.py", "tiled_attention"))
        if got is not RAISED:
            out = np.asarray(got, dtype=float)
            msg = (f"rows with no allowed key (n_q={n_q}, blocks of {block}) returned {out.tolist()} instead of "
                   "raising ValueError")
            if np.isnan(out).any():
                raise diagnosed("tiled-masked-row-nan", msg)
            raise unraised(api, "tiled.py", "tiled_attention", msg)
    # only the causal mask can leave a row without keys (a cold student's attempt raised for every n_q > n_k)
    rng = ctx.rng("tiled-tall-noncausal")
    q, k, v = randn(rng, 5, 2), randn(rng, 3, 2), randn(rng, 3, 2)
    try:
        got = api.tiled_attention(q, k, v, False, 2, 2)
    except StudentError as e:
        if e.info.get("type") != "ValueError":
            raise
        raise unraised(api, "tiled.py", "tiled_attention", "tiled_attention(q, k, v, causal=False) with n_q=5 > "
                       f"n_k=3 raised ValueError ({e.info.get('message')}): without the causal mask every query row "
                       "sees every key, so only a causal call can leave a row without one") from None
    w = np.exp(q @ k.T / np.sqrt(2))  # [5, 3]: every key, no mask
    check_close(got, (w / w.sum(-1, keepdims=True)) @ v, "tiled_attention(q, k, v, causal=False) with n_q=5 > n_k=3, "
                "blocks of 2", inputs=shape_str(q, k, v))


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    # a stub's defaults earn nothing: the stage must work first
    written = api.tiled_attention(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)))
    expect_defaults(api, {"tiled:tiled_attention": {"causal": "True", "block_q": "64", "block_k": "64"}}, written)


def _start(api, seed: int) -> None:
    """The memory rule's children, started with the stage, beside its other checks (common.start_measurements)."""
    growth.start(api, "tiled_memory_run", seeded.growth_sizes(LOW, HIGH, seed), seeded.tiled_shape(seed)[::-1], seed)


common.AHEAD[STAGE.name] = _start
