"""Stage 7 checks: the KV cache and decoding with it."""
import secrets
import weakref
from dataclasses import dataclass

import numpy as np

from ..child import seeded
from ..declarations import DEFAULTS_RULE, Edit, Function, Mistake, Probe, Stage
from ..evidence.compare import check_close
from ..evidence.diagnosis import diagnosed
from ..evidence.probes import CACHE_DATA, CACHE_REFILL, WOUT, WQKV, XB, cache_lengths, decode_output, decode_prime, probe_cache
from ..outcomes import Fail, StudentError
from .common import (
    AHEAD,
    counted_beside_baseline,
    expect_defaults,
    randn,
    shape_str,
    start_counted,
    unraised,
)
from .heads import module_weights

# rung 1 of the hint ladder of each mistake below
ASK = 'After one call of forward with the cache, how many positions does it hold, and which?'
DECODE_STEPS = 8  # counted one-token steps of the measured decode at each cache length; its batch, heads and d_head
# (seeded.decode_shape) and its cache lengths (seeded.growth_sizes over seeded.DECODE_RANGE) are drawn from the seed
GROWTH_FAILS = 2 ** 1.5  # a cost that grows this much or more each time the cache doubles is nearer 4x than 2x
CPU_FLOOR_S = 0.02  # added to each length's CPU time over the grader's before the growth is fitted: a few
# milliseconds either way (a busy machine's jitter) are no growth
CPU_TOP_S = 2 * CPU_FLOOR_S  # the least CPU time over the grader's at the longest cache for the growth between the two
# longest, CPU_STEP_FLOOR_S added, to decide alone: the fit's floor flattened a step that redid every pair head by head
# into one [L, L] buffer (a stranger's attack: 8, 19, 123 ms at 134, 268, 710 positions read 2.0x; 3.3x between the
# two longest), while the costliest correct style, a list cache copied at each step, took 3 to 22 ms at load 7 to 9
CPU_STEP_FLOOR_S = 0.005
CPU_OVER_S = 0.3  # the most CPU time 8 steps at one length may take over the grader's own (correct: a few ms either
# way; every pair redone: a tenth of a second at 128 positions, seconds at 768); without per-call counts (no /proc),
# the most the whole measuring child may take over the grader's
CPU_STOP_S = 4 * CPU_OVER_S  # 8 counted steps of the student's that took this much CPU time (alone: the grader's take
# milliseconds) already fail the rule, so its longer lengths are not measured: every pair redone at each of their
# prefill's up to 64 one-token steps and 8 counted ones made a grade run out of its time before its verdict
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
        Function(name="decode_cost_start", target="driver:decode_cost_start", reads=("module.py", "kv_cache.py")),
        Function(name="decode_cost_fill", target="driver:decode_cost_fill", reads=("module.py", "kv_cache.py")),
        Function(name="decode_cost_steps", target="driver:decode_cost_steps", reads=("module.py", "kv_cache.py")),
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
    try:
        r = probe_cache(api, 1, 1, 5, 2, [3, 3])
    except StudentError as e:  # another exception, past where it should have raised ValueError
        placed = unraised(api, "kv_cache.py", "KVCache.append", f"appending 3 + 3 positions into max_len=5 raised "
                          f"{e.info['type']}: {e.info['message']} (line {e.info.get('line')}); expected ValueError on "
                          "the second append, before any of it is written")
        if e.info.get("type") == "NotImplementedError" or placed.place is None:
            raise
        raise placed from None
    if r["error"] is None:
        raise unraised(api, "kv_cache.py", "KVCache.append", f"appending 3 + 3 positions into max_len=5 gave lengths "
                       f"{r['lengths']} and no error; expected ValueError on the second append")
    if not r["error"].startswith("ValueError"):  # placed where it should have raised ValueError first
        raise unraised(api, "kv_cache.py", "KVCache.append", f"appending 3 + 3 positions into max_len=5 gave lengths "
                       f"{r['lengths']} and {r['error']}; expected ValueError on the second append")
    after = r["after_error"]
    if after["length"] != 3:
        raise Fail(f"after the failed append the length is {after['length']}: the failed append must leave the "
                   "cache as it was (length 3)")
    if after["refill"] != "ok" or not after["prefix_ok"]:
        what = after["refill"] if after["refill"] != "ok" else "returned keys/values that are not the 3 + 2 appended"
        raise Fail(f"after the failed append, appending the 2 positions that still fit gave: {what}; the failed "
                   "append must leave the cache as it was")


def cache_holds(api) -> bool:
    """Whether the student's KVCache alone holds what three appends put in (probe_cache): a decode variant (a mask
    aligned top-left, say) is made with a right cache, so a wrong one's output matching it is a coincidence (a
    length set to t, not advanced by it, makes a step attend the first key, as a top-left mask would)."""
    try:
        r = probe_cache(api, 1, 2, 6, 4, [3, 1, 2])
    except Exception:  # noqa: BLE001 - a cache that cannot be probed holds nothing to rely on
        return False
    return not r.get("error") and r.get("lengths") == [0, 3, 4, 6] and all(r.get("prefix_ok") or [False])


def decode_output(api, ctx, tag, chunks, dtype=np.float32, B=2, C=8, H=2):
    rng = ctx.rng(tag)
    T = sum(chunks)
    x = randn(rng, B, T, C, dtype=dtype)
    qkv_w, out_w = module_weights(rng, C, dtype)
    got = api.module_decode(x, qkv_w, out_w, H, chunks)
    want = ctx.ref.module_forward(x, qkv_w, out_w, H)
    check_close(got, want, f"forward with a KV cache, fed in chunks {chunks}, against the full causal forward",
                inputs=shape_str(x), mistakes=lambda: ctx.mistakes.decode_variants(x, qkv_w, out_w, H, chunks)
                if cache_holds(api) else {},
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
    # a cache as long as the cost rule's (seeded.DECODE_RANGE): no length is one that only a measurement uses
    decode_output(api, ctx, "decode-chunks-long", [seeded.checked_size(*seeded.DECODE_RANGE, ctx.seed), 1, 2], B=1)


@STAGE.check(points=1, kind="property", visibility="hidden",
              rule="Fed in pieces, token by token or in chunks, the outputs equal the full forward's.")
def decode_float64(api, ctx):
    """decoding in float64 (a float64 cache) matches the reference tightly"""
    decode_output(api, ctx, "decode-f64", [3, 1, 1], dtype=np.float64)




def decode_step_expected(qkv_w, out_w, prefix, new, H: int) -> np.ndarray:
    """What the decode steps must return once the keys and values of the prefix [B, L, C] are in the cache: for
    each new token [B, S, C], its query against the keys and values of the prefix and of the new tokens up to
    itself, one row of scores per head (H of them), then the output projection. [B, S, C]"""
    B, L, C = prefix.shape
    S = new.shape[1]
    D = C // H
    heads = lambda t: t.reshape(B, -1, H, D).transpose(0, 2, 1, 3)  # noqa: E731 - [B, T, C] -> [B, H, T, D]
    q = heads(new @ qkv_w[:C].T)  # [B, H, S, D]: the new tokens' queries only
    k, v = (heads(t) for t in np.split(np.concatenate([prefix, new], axis=1) @ qkv_w[C:].T, 2, axis=-1))  # [B, H, L + S, D]
    scores = q @ k.swapaxes(-2, -1) / np.sqrt(D)  # [B, H, S, L + S]
    scores = np.where(np.arange(L + S)[None, :] <= L + np.arange(S)[:, None], scores, -np.inf)  # bottom-right causal
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    y = (w / w.sum(axis=-1, keepdims=True)) @ v  # [B, H, S, D]
    return y.transpose(0, 2, 1, 3).reshape(B, S, C) @ out_w.T  # [B, S, C]


@dataclass(frozen=True)
class DecodePlan:
    """One grade's measured decode: its (B, H, d_head) (seeded.decode_shape), the three cache lengths
    (seeded.growth_sizes over DECODE_RANGE, visited shortest first: memory a longer cache's steps freed and the
    allocator kept would hide a shorter one's), and each length's new tokens [B, S, C], drawn here from the system's
    randomness (a child cannot know them before its steps)."""

    seed: int
    shape: tuple[int, int, int]  # (B, H, d_head)
    lengths: tuple[int, int, int]
    tokens: tuple
    warm: tuple[int, int, int] = (0, 0, 0)  # one-token steps between each prefill and its counted steps
    spare: tuple[int, int, int] = (0, 0, 0)  # positions each cache keeps free after its counted steps

    def max_len(self, i: int) -> int:
        """The max_len of length i's cache: its prefix, the counted steps, the free positions drawn."""
        return self.lengths[i] + DECODE_STEPS + self.spare[i]

    def calls(self, baseline: bool) -> list:
        """The measuring child's calls: build and ordinary forwards, then per length a fill and the counted steps. A
        new module is built with the first fill, whose prefix goes through it (the way any decode fills a cache): its
        first call is that prefill, its second the first measured step; the other two lengths' counted steps come
        after 1 to 64 one-token steps (seeded.warm_steps), so a path picked by how many calls or steps came before
        is measured on both sides of its switch; so is one picked by how many positions the cache has left
        (seeded.spare_slots)."""
        B, H, D = self.shape
        S = DECODE_STEPS
        plan = [("decode_cost_start", (B, H, D, baseline), {"seed": self.seed}, False)]
        for i in range(len(self.lengths)):
            plan += [("decode_cost_fill", (self.lengths[i], S, i == 0, self.warm[i], self.spare[i]), {"seed": self.seed},
                      False),
                     ("decode_cost_steps", (self.tokens[i],), {}, True)]
        return plan

    def enough(self, index: int, value, cost) -> bool:
        """Whether the student's side may stop after its call `index` (sandbox.Worker.measure_calls): after a
        length's counted steps that took more than CPU_STOP_S of CPU time, or after the second length's when they
        made as much memory as the scores of every pair (decisive: judge_memory fails at half of it, correct steps
        add a few pages), whose verdict no longer length can change (a step of that cost fails at any length; two
        lengths still show its growth). Where the lengths reached do not fail after all (the grader's own steps
        were as costly), decode_step_cost_linear measures every length again."""
        if index < 2 or cost is None:
            return False
        if cost.cpu_s is not None and cost.cpu_s > CPU_STOP_S:
            return True
        L = self.lengths[(index - 2) // 2]
        made = getattr(cost, "peak_bytes", None)  # memory the steps made (what they touched of the module counts too,
        # judged beside the grader's: alone it would stop steps that read large weights)
        return index >= 4 and made is not None and made >= pair_bytes(L, self.shape)


_PLANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # grading worker -> {seed: DecodePlan}


def decode_plan(api, seed: int) -> DecodePlan:
    """This grade's DecodePlan for `seed` (the same for the runs started ahead and the check that takes them)."""
    plans = _PLANS.setdefault(api.worker, {})
    if seed not in plans:
        B, H, D = shape = seeded.decode_shape(seed)
        source = np.random.default_rng(secrets.randbits(64))
        plans[seed] = DecodePlan(seed, shape, seeded.growth_sizes(*seeded.DECODE_RANGE, seed),
                                 tuple(source.standard_normal((B, DECODE_STEPS, H * D), dtype=np.float32)
                                       for _ in range(3)),
                                 seeded.warm_steps(seed), seeded.spare_slots(seed))
    return plans[seed]


def start_decode_runs(api, seed: int) -> None:
    """Start the measuring children of decode_step_cost_linear with the stage (common.start_measurements)."""
    plan = decode_plan(api, seed)
    start_counted(api, f"decode:{seed}", plan.calls(False), plan.calls(True), plan.enough)


AHEAD["kv_cache"] = start_decode_runs


@dataclass
class DecodeRun:
    """Both sides of one measured decode: per length (shortest first) the steps' added peak bytes and
    CPU seconds, the student's and the baseline's (None where not counted, or, on the student's side, not measured:
    the run stopped at a length whose steps were far too slow, DecodePlan.enough), and the two children's
    whole-life counts (the fallback)."""

    peak: list
    base_peak: list
    cpu: list
    base_cpu: list
    whole: tuple  # (student peak, baseline peak, student CPU, baseline CPU), each None where not counted


def measure_decode(api, ctx, plan: DecodePlan, key: str, stop: bool = True) -> DecodeRun:
    """Run both children, check every measured length's outputs and cache length, return the costs. With `stop`,
    the student's side ends after a length whose steps were far too slow (DecodePlan.enough)."""
    B, H, D = plan.shape
    S = DECODE_STEPS
    (res, s_peak, s_cpu), (base, b_peak, b_cpu) = counted_beside_baseline(api, key, plan.calls(False), plan.calls(True),
                                                                          plan.enough if stop else None)
    qkv_w, out_w = (w.astype(np.float64) for w in seeded.decode_weights(H, D, plan.seed))
    n = len(plan.lengths)
    peak, base_peak, cpu, base_cpu = [None] * n, [None] * n, [None] * n, [None] * n
    for i, L in enumerate(plan.lengths):
        base_peak[i], base_cpu[i] = base[2 + 2 * i][1].memory_bytes, base[2 + 2 * i][1].cpu_s
        if 2 + 2 * i >= len(res):  # the student's side stopped at a shorter length (DecodePlan.enough)
            continue
        r, cost = res[2 + 2 * i]
        if r["length"] != L + S:
            raise Fail(f"after a forward of {L} tokens through a KVCache of max_len {plan.max_len(i)}, and {S} decode "
                       f"steps, its length is {r['length']}; expected {L + S}")
        prefix = seeded.decode_prefix(B, H, D, L, plan.seed).astype(np.float64)
        check_close(np.asarray(r["out"]), decode_step_expected(qkv_w, out_w, prefix, plan.tokens[i].astype(np.float64), H),
                    f"{S} decode steps (x [{B}, 1, {H * D}] each) after a forward of a random prefix of {L} tokens "
                    "with the cache", inputs=f"B={B}, H={H}, d_head={D}, {L} cached positions")
        # memory: the peak's rise and the pages held before that the steps touched (per_call.Cost.memory_bytes), so a
        # [B, H, L, L] buffer made with the cache and filled again at each step counts (a stranger's attack)
        peak[i], cpu[i] = cost.memory_bytes, cost.cpu_s
    return DecodeRun(peak, base_peak, cpu, base_cpu, (s_peak, b_peak, s_cpu, b_cpu))


def least(a: DecodeRun, b: DecodeRun) -> DecodeRun:
    """Each side's least count at each length over two runs (noise only ever adds), or the one run's that reached
    it (DecodePlan.enough)."""
    def low(x, y):
        return [min((v for v in (p, q) if v is not None), default=None) for p, q in zip(x, y)]

    whole = tuple(None if p is None or q is None else min(p, q) for p, q in zip(a.whole, b.whole))
    return DecodeRun(low(a.peak, b.peak), low(a.base_peak, b.base_peak), low(a.cpu, b.cpu), low(a.base_cpu, b.base_cpu),
                     whole)


def pair_bytes(L: int, shape: tuple) -> int:
    """float32 scores of every (query, key) pair of a cache of L positions (and the steps'), [B, H, L, L], for the
    measured decode's shape (B, H, d_head)."""
    B, H, _ = shape
    return B * H * (L + DECODE_STEPS) ** 2 * 4


def per_doubling(lengths, extra, floor: float) -> float:
    """How many times over a cost grows each time the cache length doubles: 2 to the least-squares slope of
    log2(extra + floor) against log2(length). Linear work: at most 2; every pair of positions: about 4."""
    x = np.log2(np.asarray(lengths, dtype=float))
    y = np.log2(np.asarray(extra, dtype=float) + floor)
    return float(2 ** (((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()))


def over(side, base) -> list | None:
    """Each length's count over the grader's (never below 0; None at a length the student's side did not reach,
    DecodePlan.enough), or None where the system counted no call alone (no /proc: every count None)."""
    if any(v is None for v in base) or all(v is None for v in side):
        return None
    return [None if s is None else max(s - b, 0) for s, b in zip(side, base)]


NOT_REACHED = "longer caches not measured: at this one the steps' CPU time already fails the rule"
LONGEST_NOT_REACHED = "the longest cache not measured: at these the steps already fail the rule"


def grew(what: str, lengths, extra, floor: float, shown) -> tuple[float | None, str]:
    """(the fitted growth per doubling, the sentence saying it) over the lengths measured; with one length only
    (the others not reached, DecodePlan.enough), no growth and that length's figure."""
    at = [(L, e) for L, e in sorted(zip(lengths, extra)) if e is not None]
    if len(at) < 2:
        return None, f"{what} was {shown(at[0][1])} at {at[0][0]} cached positions ({NOT_REACHED})"
    growth = per_doubling([L for L, _ in at], [e for _, e in at], floor)
    unreached = f"; {LONGEST_NOT_REACHED}" if len(at) < len(extra) else ""
    return growth, (f"{what} grew {growth:.1f}x per doubling of the cache, fitted over "
                    f"{', '.join(f'{shown(e)} at {L}' for L, e in at)} cached positions{unreached}")


@dataclass(frozen=True)
class Verdict:
    """What the costs say: `quadratic` with the reason when the step fails, and what the student reads either way."""

    quadratic: bool
    said: str
    one_length: bool = False  # failed by one length's memory (half the pair scores) while it did not grow 4x


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n < 10 * 2**20 else f"{n / 2**20:.0f} MiB"


def judge_memory(lengths, run: DecodeRun, shape: tuple) -> Verdict:
    """The steps' added memory over the grader's at each length (per_call.Cost.memory_bytes: the peak's rise and the
    pages held before that they touched): failing when at any length it reaches half that length's pair scores (one
    [B, H, L, L] float32 tensor at the drawn shape (B, H, d_head); a step quadratic at some lengths only fails there),
    or when it
    grows nearer 4x than 2x a doubling (fitted over the lengths, with a quarter of the shortest cache's pair
    scores added to each so that a few pages either way are no growth) to a quarter of the longest's. Without
    per-call counts (macOS) memory is not judged: the whole child's peak holds what the module took when built."""
    extra = over(run.peak, run.base_peak)
    if extra is None:  # the whole child's peak counts the module's build and its buffers: shown, never judged
        s, b = run.whole[0], run.whole[1]
        shown = "" if s is None or b is None else f" (the whole measuring child's peak: {mib(max(s - b, 0))} over the grader's)"
        return Verdict(False, f"memory not judged: this system cannot count one call alone{shown}")
    lengths = list(lengths)
    growth, said = grew("the memory your decode steps added over the grader's own (linear) steps", lengths, extra,
                        pair_bytes(min(lengths), shape) / 4, mib)
    said += ": about 1x is nothing beyond linear, 2x a copy of the cache per step, 4x the scores of every pair"
    # half the pair scores: a quadratic step makes at least all of them (and its softmax as many again), correct
    # steps add 0.0 to 1.0 MiB over the grader's (pages touched counted on both sides), and half of the shortest
    # cache's is 1.8 MiB at B * H = 48, 2.4 MiB at 64 (seeded.DECODE_HEADS)
    gated = [(L, e) for L, e in sorted(zip(lengths, extra)) if e is not None and e >= pair_bytes(L, shape) / 2]
    if gated:
        L, e = gated[0]
        row = pair_bytes(L, shape) / (L + DECODE_STEPS)  # a new token's row of the pair scores
        return Verdict(True, f"{said}. At {L} cached positions they added {mib(e)}, while the scores of every pair "
                             f"are {mib(pair_bytes(L, shape))} and a new token's row of them {row / 2**10:.0f} KiB",
                       growth is None or growth < GROWTH_FAILS)
    longest = max(lengths)
    top = extra[lengths.index(longest)]
    return Verdict(growth is not None and top is not None and growth >= GROWTH_FAILS
                   and top >= pair_bytes(longest, shape) / 4, said)


def judge_cpu(lengths, run: DecodeRun) -> Verdict:
    """The steps' CPU time over the grader's at each length: failing when it grows nearer 4x than 2x a doubling
    (fitted over the lengths with CPU_FLOOR_S added to each, or between the two longest: top_step), or when at any
    length it passes CPU_OVER_S (correct steps: milliseconds).
    Without per-call counts: the whole child's CPU time over the grader's against
    CPU_OVER_S."""
    extra = over(run.cpu, run.base_cpu)
    if extra is None:
        s, b = run.whole[2], run.whole[3]
        if s is None or b is None:
            return Verdict(False, "CPU time not measured")
        said = (f"CPU time counted for the whole measuring child (this system cannot count one call alone): "
                f"{(s - b) * 1000:+.0f} ms against the grader's own")
        return Verdict(s - b > CPU_OVER_S, said)
    growth, said = grew("the CPU time they took over the grader's own steps", lengths, extra, CPU_FLOOR_S,
                        lambda e: f"{e * 1000:.0f} ms")
    top = top_step(lengths, extra)
    if top is not None:
        said += f", {top:.1f}x between the two longest"
    said += ": about 1x is nothing beyond linear, 4x every pair redone at each step"
    slow = [(L, e) for L, e in sorted(zip(lengths, extra)) if e is not None and e > CPU_OVER_S]
    if slow:  # the same work at every length (padded to look flat) grows like nothing, and is far above correct steps
        return Verdict(True, f"{said}. At {slow[0][0]} cached positions they took {slow[0][1]:.2f} s more than the "
                             f"grader's own steps (correct ones: a few milliseconds either way)")
    return Verdict((growth is not None and growth >= GROWTH_FAILS) or (top is not None and top >= GROWTH_FAILS), said)


def top_step(lengths, extra) -> float | None:
    """The CPU time's growth per doubling between the two longest caches (CPU_STEP_FLOOR_S added to each), where
    the longest took at least CPU_TOP_S over the grader's: there a step that redoes every pair shows its 4x, which
    the fit over all three lengths, floored for the shortest's few milliseconds, can flatten. None elsewhere."""
    at = sorted((L, e) for L, e in zip(lengths, extra) if e is not None)
    if len(at) < 2 or at[-1][1] < CPU_TOP_S:
        return None
    return per_doubling([at[-2][0], at[-1][0]], [at[-2][1], at[-1][1]], CPU_STEP_FLOOR_S)


def decisive(plan: DecodePlan, run: DecodeRun) -> bool:
    """Whether a failing run fails by a margin no noise reaches, so measuring it again would change nothing: at some
    length the steps added all the pair scores' memory (twice the limit; a busy machine adds no pages) or more than
    CPU_STOP_S of CPU time (four times the limit; correct steps take milliseconds) over the grader's own."""
    memory, cpu = over(run.peak, run.base_peak) or [], over(run.cpu, run.base_cpu) or []
    return (any(e is not None and e >= pair_bytes(L, plan.shape) for L, e in zip(plan.lengths, memory))
            or any(e is not None and e > CPU_STOP_S for e in cpu))


def judged(plan: DecodePlan, run: DecodeRun) -> tuple[Verdict, Verdict]:
    return judge_memory(plan.lengths, run, plan.shape), judge_cpu(plan.lengths, run)


@STAGE.check(points=3, kind="property", visibility="public", cite="Article B, 'What it costs as the sequence grows'",
              rule="Decode steps cost work that grows linearly with the cache: measured at three cache lengths "
                   f"from {seeded.DECODE_RANGE[0]} to {seeded.DECODE_RANGE[1]} positions, batch B and heads H one of "
                   f"{', '.join(f'{b} x {h}' for b, h in seeded.DECODE_HEADS)}, and d_head one of "
                   f"{', '.join(map(str, seeded.DECODE_D))} (all drawn from the grade's seed), each filled by "
                   f"forwards of up to 64 tokens then 0 to {seeded.DECODE_WARM} one-token steps, with 0 to "
                   f"{seeded.DECODE_SPARE} positions of its max_len left free after the steps, the memory and CPU "
                   "time 8 more one-token steps add over the grader's own may grow about 2x when the cache doubles, "
                   "not 4x (over the three lengths, and for CPU time also between the two longest where the "
                   f"longest's steps take {CPU_TOP_S * 1000:.0f} ms or more over the grader's). "
                   "At any one length they may add at most half the scores of every pair of positions ([B, H, L, L] "
                   f"float32) and {CPU_OVER_S:g} s of CPU time over the grader's; steps that already add all "
                   "of those scores at the second length are not measured at the third.", measured=True)
def decode_step_cost_linear(api, ctx):
    """8 decode steps at three cache lengths between 128 and 768 positions, at a batch, heads and d_head drawn from
    the grade's seed: what they add to the peak memory and CPU time of their process (the module and the cache made
    before them are not theirs), over the grader's own steps, grows linearly with the length (read by the grader
    from outside the child)"""
    S = DECODE_STEPS
    plan = decode_plan(api, ctx.seed)
    run = measure_decode(api, ctx, plan, f"decode:{ctx.seed}")
    memory, cpu = judged(plan, run)
    if None in run.cpu and not (memory.quadratic or cpu.quadratic):  # stopped early, yet over the grader's own
        # it was not far enough to fail (the grader's steps were slow too): every length is measured after all
        run = measure_decode(api, ctx, plan, f"decode-all:{ctx.seed}", stop=False)
        memory, cpu = judged(plan, run)
    if (memory.quadratic or cpu.quadratic) and not decisive(plan, run):
        # measured once more before it costs points (each side's least counts), unless no noise could have made it
        run = least(run, measure_decode(api, ctx, plan, f"decode-again:{ctx.seed}"))
        memory, cpu = judged(plan, run)
    if memory.quadratic or cpu.quadratic:
        said = [v.said for v in (cpu, memory) if v.quadratic]
        B, H, D = plan.shape
        reached = [L for L, c in zip(plan.lengths, run.cpu) if c is not None] or plan.lengths
        why = ("A step redoes work for every cached position pair: compute only the new rows of scores"
               if cpu.quadratic or not memory.one_length else
               "There a step made or read memory on the scale of every cached position pair, not of one new row: "
               "compute only the new token's row of scores, over the cache's filled positions")
        raise diagnosed("cache-quadratic-step", f"{S} decode steps at each of {', '.join(map(str, sorted(reached)))} "
                        f"cached positions (B={B}, H={H}, d_head={D}): {'; '.join(said)}. {why}")
    return f"cost of {S} decode steps: {memory.said}; {cpu.said}"


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    written = probe_cache(api, 1, 1, 2, 2, [1])  # a stub's defaults earn nothing: the stage must work first
    expect_defaults(api, {"kv_cache:KVCache": {"dtype": "torch.float32", "device": "None"}}, written)
