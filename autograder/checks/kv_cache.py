"""Stage 7 checks: the KV cache and decoding with it."""
import numpy as np

from ..compare import Fail, check_close
from ..diagnosis import diagnosed
from ..registry import check
from .common import randn, shape_str
from .heads import module_weights

S = "kv_cache"


@check(S, 2, "property", "public")
def allocates_up_front(api, ctx):
    """KVCache preallocates k and v as [B, H, max_len, D] in the requested dtype, length 0"""
    for dtype in ("float32", "float64"):
        r = api.kv_cache_probe(2, 3, 10, 4, [], dtype)
        if r["k_shape"] != [2, 3, 10, 4] or r["v_shape"] != [2, 3, 10, 4]:
            raise Fail(f"KVCache(2, 3, 10, 4): k is {r['k_shape']}, v is {r['v_shape']}; "
                       "expected both [B, H, max_len, D] = [2, 3, 10, 4], allocated once")
        if r["dtype"] != dtype:
            raise Fail(f"KVCache(..., dtype=torch.{dtype}) stores {r['dtype']}")
        if r["lengths"] != [0]:
            raise Fail(f"a new KVCache has length {r['lengths'][0]}, expected 0")


@check(S, 2, "property", "public")
def append_returns_prefix(api, ctx):
    """append writes at `length`, advances it, and returns everything filled so far"""
    r = api.kv_cache_probe(1, 2, 12, 3, [4, 1, 1, 3])
    if r["error"]:
        raise Fail(f"appending 4 + 1 + 1 + 3 positions into max_len=12 raised {r['error']}")
    if r["lengths"] != [0, 4, 5, 6, 9]:
        raise Fail(f"length after each append: {r['lengths']}; expected [0, 4, 5, 6, 9]")
    if not all(r["prefix_ok"]):
        bad = r["prefix_ok"].index(False)
        raise Fail(f"after append number {bad + 1}, the returned k, v are not the keys/values appended so far "
                   "(expected k[:, :, :length], v[:, :, :length])")


@check(S, 1.5, "property", "public")
def append_past_max_len_raises(api, ctx):
    """appending past max_len raises ValueError"""
    r = api.kv_cache_probe(1, 1, 5, 2, [3, 3])
    if r["error"] is None or not r["error"].startswith("ValueError"):
        raise Fail(f"appending 3 + 3 positions into max_len=5 gave lengths {r['lengths']} and "
                   f"{r['error'] or 'no error'}; expected ValueError on the second append")
    if r["lengths"] != [0, 3]:
        raise Fail(f"lengths {r['lengths']}: the failed append must leave the cache as it was (length 3)")


def _decode(api, ctx, tag, chunks, dtype=np.float32, B=2, C=8, H=2):
    rng = ctx.rng(tag)
    T = sum(chunks)
    x = randn(rng, B, T, C, dtype=dtype)
    qkv_w, out_w = module_weights(rng, C, dtype)
    got = api.module_decode(x, qkv_w, out_w, H, chunks)
    want = ctx.ref.module_forward(x, qkv_w, out_w, H)
    check_close(got, want, f"forward with a KV cache, fed in chunks {chunks}, against the full causal forward",
                inputs=shape_str(x), mistakes=lambda: ctx.mistakes.decode_variants(x, qkv_w, out_w, H, chunks),
                ignore_nan_in_mistakes=True)


@check(S, 3, "property", "hidden", cite="Article B, 'What it costs as the sequence grows'")
def decode_token_by_token(api, ctx):
    """decoding one token at a time equals the full forward on every position"""
    _decode(api, ctx, "decode-1", [1] * 7)


@check(S, 2.5, "property", "hidden")
def decode_in_chunks(api, ctx):
    """a prompt chunk then smaller chunks (bottom-right causal alignment) equals the full forward"""
    _decode(api, ctx, "decode-chunks", [4, 1, 3, 2])
    _decode(api, ctx, "decode-chunks-b", [2, 5], B=1, C=12, H=3)


@check(S, 1, "property", "hidden")
def decode_float64(api, ctx):
    """decoding in float64 (a float64 cache) matches the reference tightly"""
    _decode(api, ctx, "decode-f64", [3, 1, 1], dtype=np.float64)


@check(S, 3, "property", "public", cite="Article B, 'What it costs as the sequence grows'")
def decode_step_cost_linear(api, ctx):
    """the FLOPs of one decode step grow linearly with the cache length, not quadratically"""
    lengths = [64, 128, 256]
    f = [int(v) for v in api.decode_step_flops(32, 4, lengths)]
    d1, d2 = f[1] - f[0], f[2] - f[0]
    table = ", ".join(f"{L} cached: {n:,} FLOPs" for L, n in zip(lengths, f))
    if d1 <= 0:
        raise Fail(f"one decode step costs {table}: the cost does not grow with the cache at all, so the new "
                   "query is not attending to the cached keys")
    ratio = d2 / d1  # 3 for a + b L; 5 for a quadratic term that dominates
    C = 32
    naive = [2 * (L + 1) * C * 4 * C + 2 * 2 * (L + 1) ** 2 * C for L in lengths]  # no cache: redo every token
    note = (f"cost of one decode step: {f[0]:,} FLOPs with {lengths[0]} cached tokens, {f[2]:,} with {lengths[2]} "
            f"(x{f[2] / f[0]:.1f}); recomputing everything instead: {naive[0]:,} and {naive[2]:,} "
            f"(x{naive[2] / naive[0]:.1f})")
    if ratio > 3.5:
        raise diagnosed("cache-quadratic-step", f"one decode step costs {table}: growth from 64 to 256 is {ratio:.2f}x the growth from 64 to 128 "
                   "(linear cost gives 3.0); the step redoes work for every cached position pair")
    return note
