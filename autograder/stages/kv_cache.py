"""Stage 7 checks: the KV cache and decoding with it."""
import functools

import numpy as np

from ..child import seeded
from ..compare import check_close
from ..feedback.diagnosis import diagnosed
from ..feedback.probes import CACHE_DATA, CACHE_REFILL, WOUT, WQKV, XB, cache_lengths, decode_output, decode_prime, probe_cache
from ..outcomes import Fail
from ..records import DEFAULTS_RULE, Edit, Function, Mistake, Probe, Stage
from .common import expect_defaults, randn, shape_str, timed_over_baseline
from .heads import module_weights

# rung 1 of the hint ladder of each mistake below
ASK = 'After one call of forward with the cache, how many positions does it hold, and which?'
DECODE_SIZES = (4, 16, 16, 1016, 8)  # batch, heads, d_head, most cached positions, steps: 1,024 at most in all
CPU_OVER_S = 0.3  # the most CPU time the steps may take over the grader's own on the same inputs (correct steps:
# a few hundredths of a second either way; every pair redone at each step, even a few rows at a time with little
# memory: a second or more)
STAGE = Stage(
    name="kv_cache", number=7, points=16, files=("kv_cache.py", "module.py"), calls=("heads",),
    reread='B "What it costs as the sequence grows"',
    torch=True, worked_points=1.0,
    functions=(
        Function(name="kv_cache_numel", target="driver:kv_cache_numel", reference="api:kv_cache_numel",
                 reads=("kv_cache.py",)),
        Function(name="kv_cache_allocation", target="driver:kv_cache_allocation", reads=("kv_cache.py",)),
        Function(name="kv_cache_probe", target="driver:kv_cache_probe", reads=("kv_cache.py",)),
        Function(name="module_decode", target="driver:module_decode", reads=("module.py",)),
        Function(name="decode_memory_run", target="driver:decode_memory_run", reads=("module.py", "kv_cache.py"),
                 measured=DECODE_SIZES, timed=True),
    ),
    intro="A preallocated key/value cache: fill the KVCache class and the cache part of forward above.",
    hints=(
        "When generating, the keys and values of earlier tokens never change, so keep them and only compute the "
        "new token's. Article B, 'What it costs as the sequence grows'.",
        "Allocate k and v once at full size; `length` says how much is filled. append writes the new slice at "
        "[length, length + t) along the position axis and returns views of the filled part.",
        "In forward, append the new keys/values before attending, so each new token sees itself. The queries are "
        "the last T of the L cached positions: the causal mask is aligned bottom-right.",
    ),
    mistakes=(
        Mistake(id="cache-top-left-causal", where="module.py:attend",
                explanation="the causal mask of a decode step is aligned top-left, so the new token sees only the "
                            "first key(s) (what SDPA's is_causal does when T_q != T_k); align it bottom-right",
                reread="Article B, 'What it costs as the sequence grows'",
                question=ASK,
                evidence='mistakes:decode_variants',
                mutant=(
                    Edit('module.py',
                         '.tril(diagonal=T_k - T)',
                         '.tril(diagonal=0)'),
                )),
        Mistake(id="cache-missing-new-token", where="module.py:forward",
                explanation="the new tokens attend to the cache as it was before their own keys and values went in, "
                            "so a token never sees itself: forward attends before appending, or append hands back the "
                            "prefix from before its own write",
                reread="Article B, 'What it costs as the sequence grows'",
                question=ASK,
                evidence='mistakes:decode_variants',
                mutant=(
                    Edit('module.py',
                         '            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included\n',
                             '            k_new, v_new = k, v\n'
                             '            k, v = cache.k[:, :, : cache.length], cache.v[:, :, : cache.length]\n'
                             '            cache.append(k_new, v_new)\n'),
                )),
        Mistake(id="cache-quadratic-step", where="module.py:forward",
                explanation="the output is right but one decode step does work that grows with the square of the "
                            "cache length; compute only the new rows of scores",
                reread="Article B, 'What it costs as the sequence grows'",
                question=ASK,
                evidence='check:decode_step_cost_linear',
                mutant=(
                    Edit('module.py',
                         '            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included\n',
                             '            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T'
                             ' included\n'
                             '            q = torch.cat([q.new_zeros(q.shape[0], self.n_heads, k.shape[-2] -'
                             ' q.shape[-2], q.shape[-1]), q], -2)\n'),
                    Edit('module.py',
                         'y = self.attend(q, k, v)  #',
                         'y = self.attend(q, k, v)[..., -x.shape[1]:, :]  #'),
                )),
    ),
    probes=(
        Probe(name="kv_cache_probe", file="kv_cache.py", function="append", args=(1, 2, 6, 4, CACHE_DATA, CACHE_REFILL),
              expected=lambda r: None, judge=cache_lengths),
        Probe(name="module_decode", file="module.py", function="forward", args=(XB, WQKV, WOUT, 2, [3, 1, 2]),
              expected=lambda r: r.module_forward(XB, WQKV, WOUT, 2), judge=decode_output,
              prime=decode_prime),
    ),
)


@STAGE.check(points=1.5, kind="property", visibility="public",
              rule="`k` and `v` are allocated once, [B, H, max_len, D], in `dtype`; `length` counts the filled positions.")
def allocates_up_front(api, ctx):
    """KVCache preallocates k and v as [B, H, max_len, D] in the requested dtype, length 0"""
    for dtype in ("float32", "float64"):
        r = api.kv_cache_allocation(2, 3, 10, 4, dtype)
        if r["k_shape"] != [2, 3, 10, 4] or r["v_shape"] != [2, 3, 10, 4]:
            raise Fail(f"KVCache(2, 3, 10, 4): k is {r['k_shape'] or 'not a tensor'}, v is "
                       f"{r['v_shape'] or 'not a tensor'}; expected both [B, H, max_len, D] = [2, 3, 10, 4], "
                       "allocated once")
        if r["dtype"] != dtype:
            raise Fail(f"KVCache(..., dtype=torch.{dtype}) stores {r['dtype']}")
        if r["length"] != 0:
            raise Fail(f"a new KVCache has length {r['length']}, expected 0")


@STAGE.check(points=2, kind="property", visibility="public",
              rule="Write k_new, v_new [B, H, t, D] at position `length`; return the filled k, v [B, H, length, D].")
def append_returns_prefix(api, ctx):
    """append writes at `length`, advances it, and returns everything filled so far"""
    r = probe_cache(api, 1, 2, 12, 3, [4, 1, 1, 3])
    if r["error"]:
        raise Fail(f"appending 4 + 1 + 1 + 3 positions into max_len=12 raised {r['error']}")
    if r["lengths"] != [0, 4, 5, 6, 9]:
        raise Fail(f"length after each append: {r['lengths']}; expected [0, 4, 5, 6, 9]")
    if not all(r["prefix_ok"]):
        bad = r["prefix_ok"].index(False)
        raise Fail(f"after append number {bad + 1}, the returned k, v are not the keys/values appended so far "
                   "(expected k[:, :, :length], v[:, :, :length])")
    if r["buffers_ok"] is False:
        raise Fail("after 4 + 1 + 1 + 3 appended positions, the cache's own k and v ([B, H, max_len, D], allocated "
                   "once) do not hold them in their first 9 positions: append must write k_new, v_new into k and v at "
                   "position `length`, not keep them elsewhere")


@STAGE.check(points=1.5, kind="property", visibility="public",
              rule="Raises ValueError if the t new positions do not fit in max_len, and leaves the cache as it was.")
def append_past_max_len_raises(api, ctx):
    """appending past max_len raises ValueError; a fill that ends exactly at max_len does not"""
    exact = probe_cache(api, 1, 1, 5, 2, [3, 2])
    if exact["error"]:
        raise Fail(f"appending 3 + 2 positions into max_len=5, which fills the cache exactly, raised {exact['error']} "
                   f"after lengths {exact['lengths']}; t new positions fit while length + t <= max_len, and only "
                   "a fill past max_len raises")
    r = probe_cache(api, 1, 1, 5, 2, [3, 3])
    if r["error"] is None or not r["error"].startswith("ValueError"):
        raise Fail(f"appending 3 + 3 positions into max_len=5 gave lengths {r['lengths']} and "
                   f"{r['error'] or 'no error'}; expected ValueError on the second append")
    after = r["after_error"]
    if after["length"] != 3:
        raise Fail(f"after the failed append the length is {after['length']}: the failed append must leave the "
                   "cache as it was (length 3)")
    if after["refill"] != "ok" or not after["prefix_ok"]:
        what = after["refill"] if after["refill"] != "ok" else "returned keys/values that are not the 3 + 2 appended"
        raise Fail(f"after the failed append, appending the 2 positions that still fit gave: {what}; the failed "
                   "append must leave the cache as it was")


def decode_output(api, ctx, tag, chunks, dtype=np.float32, B=2, C=8, H=2):
    rng = ctx.rng(tag)
    T = sum(chunks)
    x = randn(rng, B, T, C, dtype=dtype)
    qkv_w, out_w = module_weights(rng, C, dtype)
    got = api.module_decode(x, qkv_w, out_w, H, chunks)
    want = ctx.ref.module_forward(x, qkv_w, out_w, H)
    check_close(got, want, f"forward with a KV cache, fed in chunks {chunks}, against the full causal forward",
                inputs=shape_str(x), mistakes=lambda: ctx.mistakes.decode_variants(x, qkv_w, out_w, H, chunks),
                ignore_nan_in_mistakes=True)


@STAGE.check(points=3, kind="property", visibility="hidden", cite="Article B, 'What it costs as the sequence grows'",
              rule="Fed in pieces, token by token or in chunks, the outputs equal the full forward's.")
def decode_token_by_token(api, ctx):
    """decoding one token at a time equals the full forward on every position"""
    decode_output(api, ctx, "decode-1", [1] * 7)


@STAGE.check(points=2.5, kind="property", visibility="hidden",
              rule="Fed in pieces, token by token or in chunks, the outputs equal the full forward's.")
def decode_in_chunks(api, ctx):
    """a prompt chunk then smaller chunks (bottom-right causal alignment) equals the full forward"""
    decode_output(api, ctx, "decode-chunks", [4, 1, 3, 2])
    decode_output(api, ctx, "decode-chunks-b", [2, 5], B=1, C=12, H=3)


@STAGE.check(points=1, kind="property", visibility="hidden",
              rule="Fed in pieces, token by token or in chunks, the outputs equal the full forward's.")
def decode_float64(api, ctx):
    """decoding in float64 (a float64 cache) matches the reference tightly"""
    decode_output(api, ctx, "decode-f64", [3, 1, 1], dtype=np.float64)




def decode_step_expected(qkv_w, out_w, prefix, new) -> np.ndarray:
    """What the decode steps must return once the keys and values of the prefix [B, L, C] are in the cache
    (seeded.decode_step's arrays): for each new token [B, S, C], its query against the keys and values of the prefix
    and of the new tokens up to itself, one row of scores per head, then the output projection. [B, S, C]"""
    B, L, C = prefix.shape
    S, H = new.shape[1], DECODE_SIZES[1]
    D = C // H
    heads = lambda t: t.reshape(B, -1, H, D).transpose(0, 2, 1, 3)  # noqa: E731 - [B, T, C] -> [B, H, T, D]
    q = heads(new @ qkv_w[:C].T)  # [B, H, S, D]: the new tokens' queries only
    k, v = (heads(t) for t in np.split(np.concatenate([prefix, new], axis=1) @ qkv_w[C:].T, 2, axis=-1))  # [B, H, L + S, D]
    scores = q @ k.swapaxes(-2, -1) / np.sqrt(D)  # [B, H, S, L + S]
    scores = np.where(np.arange(L + S)[None, :] <= L + np.arange(S)[:, None], scores, -np.inf)  # bottom-right causal
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    y = (w / w.sum(axis=-1, keepdims=True)) @ v  # [B, H, S, D]
    return y.transpose(0, 2, 1, 3).reshape(B, S, C) @ out_w.T  # [B, S, C]


@functools.lru_cache(maxsize=4)
def expected_step(sizes: tuple, seed: int = 0) -> np.ndarray:
    """decode_step_expected on seeded.decode_step(*sizes, seed): the same for every grade with that seed, so
    computed once per grading process and seed. Read-only."""
    out = decode_step_expected(*(a.astype(np.float64) for a in seeded.decode_step(*sizes, seed)))
    out.flags.writeable = False
    return out


@STAGE.check(points=3, kind="property", visibility="public", cite="Article B, 'What it costs as the sequence grows'",
              rule="With 762 to 1,016 positions in the cache (appended in one call, after 1 to 3 ordinary forwards "
                   "of 8 to 64 tokens), 8 decode steps of one token each must add far less memory than the scores "
                   "of every pair of cached positions, and may take at most 0.3 s more CPU time in all than the "
                   "grader's own forward on the same inputs.")
def decode_step_cost_linear(api, ctx):
    """8 decode steps after 762 to 1,016 cached positions add far less memory than the [B, H, L, L] scores; they
    take about the CPU time of the grader's own steps (both as the kernel counted them, read by the grader)"""
    B, H, D, longest, S = DECODE_SIZES
    L = seeded.decode_length(longest, ctx.seed)  # drawn from the grade's seed: the same in the child that measures
    r, extra, cpu, base_cpu = timed_over_baseline(api, "decode_memory_run", ctx.seed)
    if r["length"] != L + S:
        raise Fail(f"after {L} positions appended to a KVCache of max_len {L + S}, and {S} decode steps, its length "
                   f"is {r['length']}; expected {L + S}")
    check_close(np.asarray(r["out"]), expected_step((B, H, D, L, S), ctx.seed),
                f"{S} decode steps (x [{B}, 1, {H * D}] each) after the keys and values of a random prefix of {L} "
                f"tokens were appended to the cache", inputs=f"B={B}, H={H}, d_head={D}, {L} cached positions")
    pairs = B * H * (L + S) ** 2 * 4  # float32 scores of every (query, key) pair of the cached positions
    row = B * H * (L + S) * 4  # a new token's row of them
    if extra is not None and extra > pairs / 4:
        raise diagnosed("cache-quadratic-step", f"{S} decode steps after {L} cached positions (B={B}, H={H}) raised "
                        f"peak memory by {extra / 2**20:.0f} MiB over correct ones; the scores of every pair of "
                        f"positions are {pairs / 2**20:.0f} MiB, a new token's row of them {row / 2**10:.0f} KiB. "
                        "A step redoes work for every cached position pair: compute only the new rows of scores")
    over = None if cpu is None or base_cpu is None else cpu - base_cpu  # the ordinary calls and the fill included
    if over is not None and over > CPU_OVER_S:  # measured once more before it costs points: each side's least counts
        _, _, cpu_again, base_again = timed_over_baseline(api, "decode_memory_run", ctx.seed)
        if cpu_again is not None and base_again is not None:
            cpu, base_cpu = min(cpu, cpu_again), min(base_cpu, base_again)
            over = cpu - base_cpu
    if over is not None and over > CPU_OVER_S:
        raise diagnosed("cache-quadratic-step", f"{S} decode steps after {L} cached positions (B={B}, H={H}) took "
                        f"{cpu:.2f} s of CPU time, {over:.2f} s more than the grader's own forward on the same inputs "
                        f"(filling the cache included, in both); steps whose work grows linearly with the cache take "
                        f"about as long, ones that redo every pair of positions (even a few rows at a time) a second "
                        f"more or worse. Compute only the new rows of scores")
    said = "" if over is None else f"; their CPU time {over * 1000:+.0f} ms against the grader's own"
    if extra is None:
        return f"memory of {S} decode steps at {L} cached positions: not measured (this system does not report a " \
               f"process's peak){said}"
    return (f"cost of {S} decode steps at {L} cached positions: {max(extra, 0) / 2**20:.1f} MiB of peak memory over "
            f"correct ones; recomputing the scores of every pair instead needs {pairs / 2**20:.0f} MiB{said}")


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    written = probe_cache(api, 1, 1, 2, 2, [1])  # a stub's defaults earn nothing: the stage must work first
    expect_defaults(api, {"kv_cache:KVCache": {"dtype": "torch.float32", "device": "None"}}, written)
