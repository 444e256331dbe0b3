"""Stage 8 checks: one fused scaled_dot_product_attention call."""
import numpy as np

from ..child import seeded
from ..declarations import DEFAULTS_RULE, Edit, Function, Mistake, Stage
from ..evidence.compare import check_close
from ..evidence.diagnosis import diagnosed
from ..outcomes import Fail
from . import common, growth
from .common import causal_rows, expect_defaults, randn, sampled_rows, shape_str
from .heads import module_weights

# rung 1 of the hint ladder of each mistake below
ASK = 'What does the fused call receive, and what does it build itself?'
LOW, HIGH = seeded.FUSED_RANGE
MODULE_SALT = 1  # the module's lengths are drawn apart from the function's
# The memory rule's causal calls are [B, H, T, d_head] (the module's: x [B, T, H * d_head] through H heads), the shape
# drawn from the grade's seed (seeded.fused_shape over seeded.FUSED_HEADS and FUSED_D, the module's with MODULE_SALT),
# at three lengths T drawn from it over seeded.FUSED_RANGE (seeded.growth_sizes)
STAGE = Stage(
    name="fused", number=8, points=14, files=("fused.py", "module.py"), calls=("heads", "kv_cache"),
    reread='B "Code that matches the hand numbers"',
    torch=True, worked_points=1.0,
    functions=(
        Function(name="fused_attention", target="driver:fused_attention", reference="api:fused_attention",
                 reads=("fused.py",)),
        Function(name="fused_probe", target="driver:fused_probe", reads=("fused.py",)),
        Function(name="fused_with_defaults", target="driver:fused_with_defaults", reads=("fused.py",)),
        Function(name="module_fused_probe", target="driver:module_fused_probe", reads=("module.py",)),
        Function(name="module_fused_decode", target="driver:module_fused_decode", reads=("module.py", "kv_cache.py")),
        Function(name="fused_memory_run", target="driver:fused_memory_run", reads=("fused.py",)),
        Function(name="module_fused_memory_run", target="driver:module_fused_memory_run", reads=("module.py",)),
    ),
    intro="One fused scaled_dot_product_attention call: fill fused_attention and the fused path above.",
    hints=(
        "torch.nn.functional.scaled_dot_product_attention does scores, scaling, mask, softmax and the weighted "
        "sum in one call, without keeping the T x T matrix when it can avoid it.",
        "When T_q equals T_k, pass is_causal=True and no mask. Only pass dropout_p when training.",
        "SDPA's is_causal aligns the mask top-left. With T_q != T_k build the bottom-right boolean mask yourself "
        "(True = may attend).",
    ),
    mistakes=(
        Mistake(id="fused-materialized-mask", where="fused.py:fused_attention",
                explanation="an explicit T x T mask is built where is_causal=True would do: O(T^2) memory, and no "
                            "flash kernel on CUDA",
                reread="Article B, 'What it costs as the sequence grows'",
                question=ASK,
                evidence='check:no_quadratic_memory',
                line=r"attn_mask\s*=|\.tril\(|\.triu\(",  # where the mask is made or passed
                mutant=(
                    Edit('fused.py',
                             '    if T_q == T_k:\n'
                             '        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)\n',
                         ''),
                )),
        Mistake(id="fused-dropout-in-eval", where="fused.py:fused_attention",
                explanation="dropout is applied when not training; pass dropout_p only when training=True",
                reread="Article B, 'Causal attention'",
                question=ASK,
                evidence='check:no_dropout_in_eval',
                mutant=(
                    Edit('fused.py',
                         'p = dropout_p if training else 0.0',
                         'p = dropout_p'),
                )),
        Mistake(id="fused-top-left", where="fused.py:fused_attention",
                explanation="with T_q != T_k the causal mask is aligned top-left (what is_causal=True does in "
                            "SDPA, or a tril with no diagonal offset): the queries are the last T_q positions, so "
                            "build the bottom-right mask in that case",
                reread="Article B, 'What it costs as the sequence grows'",
                question=ASK,
                evidence='check:bottom_right_when_lengths_differ',
                mutant=(
                    Edit('fused.py',
                             '    if T_q == T_k:\n'
                             '        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)\n',
                         '    return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)\n'),
                )),
        Mistake(id="fused-not-fused", where="fused.py:fused_attention",
                explanation="attention is computed by hand instead of one F.scaled_dot_product_attention call",
                reread="Article B, 'Code that matches the hand numbers'",
                question=ASK,
                evidence='check:no_quadratic_memory',
                line=r"@|\bmatmul\(|\beinsum\(|\bbmm\(",  # where the T x T scores are made by hand, not the def line
                mutant=(
                    Edit('fused.py',
                         '    T_q, T_k = q.shape[-2], k.shape[-2]\n',
                             '    T_q, T_k = q.shape[-2], k.shape[-2]\n'
                             '    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n'
                             '    if causal:\n'
                             '        allowed = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)\n'
                             "        scores = scores.masked_fill(~allowed, float('-inf'))\n"
                             '    w = scores.softmax(-1)\n'
                             '    if training and dropout_p:\n'
                             '        w = F.dropout(w, dropout_p)\n'
                             '    return w @ v\n'),
                )),
        Mistake(id="fused-float-mask", where="fused.py:fused_attention",
                explanation="the mask passed to SDPA is a float tensor of 0s and 1s: SDPA adds a float mask to the "
                            "scores, so it hides nothing; pass a boolean mask (True = may attend)",
                reread="Article B, 'Causal attention'",
                question=ASK,
                evidence='check:_evidence',
                mutant=(
                    Edit('fused.py',
                         '    allowed = torch.ones(T_q, T_k, dtype=torch.bool, device=q.device)',
                         '    allowed = torch.ones(T_q, T_k, device=q.device)'),
                )),
        Mistake(id="fused-layout", where="fused.py:fused_attention",
                explanation="q, k, v reach SDPA as [B, T, H, D]; it attends over the second-to-last axis, so it "
                            "wants [B, H, T, D]",
                reread="Article B, 'Multi-head attention'",
                question=ASK,
                evidence='check:_evidence',
                mutant=(
                    Edit('fused.py',
                         '    T_q, T_k = q.shape[-2], k.shape[-2]\n',
                             '    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, T, H, D]\n'
                             '    T_q, T_k = q.shape[-2], k.shape[-2]\n'),
                    Edit('fused.py',
                         '        return F.scaled_dot_product_attention(q, k, v, dropout_p=p)\n',
                         '        return F.scaled_dot_product_attention(q, k, v, dropout_p=p).transpose(1, 2)\n'),
                )),
    ),
)


def _float_mask_output(q, k, v) -> np.ndarray:
    """What SDPA returns when the causal mask reaches it as a float tensor of 0s and 1s (added to the scores, so it
    hides nothing), for q [B, H, T_q, D], k, v [B, H, T_k, D], in float64."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    n_q, n_k = np.shape(q)[-2], np.shape(k)[-2]  # not as the solutions write it: the release is searched for those
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) + np.tri(n_q, n_k, n_k - n_q)  # [B, H, n_q, n_k]
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True) @ v


def _evidence(r: dict, q, k, v, causal: bool) -> tuple[str | None, str]:
    """What a wrong output and the recorded SDPA calls (types, shapes and dtypes only: the spy reads no values)
    show: a float mask whose output is the one a float mask of 0s and 1s gives (decided here, from the returned
    values), or the time and head axes swapped on the way in (a [B, T, H, D] layout). (None, "") when neither."""
    B, H, T, D = q.shape
    for c in r["calls"]:
        floating = c.get("mask_type") == "Tensor" and str(c.get("mask_dtype")).startswith(("float", "bfloat"))
        if causal and floating and np.allclose(r["out"], _float_mask_output(q, k, v), rtol=1e-4, atol=1e-5):
            return "fused-float-mask", (f"the call got a {c['mask_dtype']} mask of shape {c['attn_mask']}, and the "
                                        "output is what a float mask of 0s and 1s gives")
        if H != T and c["q"] == [B, T, H, D]:
            return "fused-layout", f"the call got q of shape {c['q']} for q [B, H, T, D] = {list(q.shape)}"
    return None, ""


def _check_fused(r: dict, want, what: str, qkv: tuple, causal: bool, inputs: str, mistakes=None) -> None:
    """check_close of the student's output, naming what the output and the SDPA calls show when it differs."""
    try:
        check_close(r["out"], want, what, inputs=inputs, mistakes=mistakes)
    except Fail as f:
        found, why = _evidence(r, *qkv, causal)
        if f.diagnosis or found is None:
            raise
        raise diagnosed(found, f"{why}; {f}") from None


def _qkv(rng, B, H, T_q, T_k, D, dt=np.float32):
    return randn(rng, B, H, T_q, D, dtype=dt), randn(rng, B, H, T_k, D, dtype=dt), randn(rng, B, H, T_k, D, dtype=dt)


@STAGE.check(points=1.5, kind="reference")
def reference(api, ctx):
    """fused_attention matches the reference, causal and not, T_q = T_k"""
    rng = ctx.rng("fused")
    for B, H, T, D, causal in [(2, 3, 6, 4, True), (1, 2, 5, 8, False), (2, 1, 1, 4, True)]:
        q, k, v = _qkv(rng, B, H, T, T, D)
        r = api.fused_probe(q, k, v, causal)
        _check_fused(r, ctx.ref.fused_attention(q, k, v, causal), f"fused_attention(causal={causal})", (q, k, v),
                     causal, shape_str(q))
    T = seeded.checked_size(LOW, 2 * LOW, ctx.seed)  # a length of the memory rule's range (its cheaper half), checked
    B, H, D = seeded.fused_shape(ctx.seed)  # at the memory rule's shape: no shape is one that only a measurement uses
    q, k, v = _qkv(rng, B, H, T, T, D)
    rows = sampled_rows(T)
    got = np.asarray(api.fused_probe(q, k, v, True)["out"])
    if got.shape != q.shape:
        raise Fail(f"fused_attention of q, k, v {shape_str(q)} returned shape {list(got.shape)}; expected {list(q.shape)}")
    check_close(got[:, :, rows], _causal_rows(q, k, v, rows),
                f"fused_attention causal at T={T}, at rows picked after the call", inputs=shape_str(q))


@STAGE.check(points=2, kind="reference", cite="Article B, 'What it costs as the sequence grows'",
              rule="the queries are the last T_q positions (bottom-right alignment)")
def bottom_right_when_lengths_differ(api, ctx):
    """with T_q < T_k the queries are the last T_q positions (bottom-right causal alignment)"""
    rng = ctx.rng("fused-br")
    for T_q, T_k in [(1, 6), (3, 7)]:
        q, k, v = _qkv(rng, 1, 2, T_q, T_k, 4)
        r = api.fused_probe(q, k, v, True)
        _check_fused(r, ctx.ref.fused_attention(q, k, v, True), f"fused_attention, T_q={T_q}, T_k={T_k}", (q, k, v),
                     True, f"q {shape_str(q)}, k {shape_str(k)}", {"fused-top-left": ctx.mistakes.fused_top_left(q, k, v)})


@STAGE.check(points=1.5, kind="property", visibility="public", rule="Dropout is applied only when `training` is True.")
def no_dropout_in_eval(api, ctx):
    """dropout_p > 0 changes nothing when training=False"""
    q, k, v = _qkv(ctx.rng("fused-eval"), 1, 2, 6, 6, 4)
    plain = api.fused_probe(q, k, v, True, 0.0, False)["out"]
    r = api.fused_probe(q, k, v, True, 0.5, False)
    try:  # the values decide; the calls the child recorded only name the mistake
        check_close(r["out"], plain, "fused_attention(dropout_p=0.5, training=False) against dropout_p=0")
    except Fail:
        if any(c["dropout_p"] != 0.0 for c in r["calls"]):
            raise diagnosed("fused-dropout-in-eval", f"with training=False the call still got dropout_p="
                            f"{next(c['dropout_p'] for c in r['calls'] if c['dropout_p'] != 0.0)}: the output "
                            "differs from the one without dropout") from None
        raise


@STAGE.check(points=1, kind="property", visibility="public", rule="Dropout is applied only when `training` is True.")
def dropout_when_training(api, ctx):
    """dropout_p > 0 is applied when training=True"""
    rng = ctx.rng("fused-train")
    for T_q, causal in [(8, True), (8, False), (3, True)]:  # every path: is_causal, no mask, a bottom-right mask
        q, k, v = _qkv(rng, 1, 2, T_q, 8, 4)
        plain = api.fused_probe(q, k, v, causal, 0.0, False)["out"]
        r = api.fused_probe(q, k, v, causal, 0.5, True, 3)
        what = f"fused_attention(causal={causal}, T_q={T_q}, T_k=8, dropout_p=0.5, training=True)"
        if np.allclose(r["out"], plain):
            calls = "" if any(c["dropout_p"] == 0.5 for c in r["calls"]) else "; pass dropout_p to the fused call"
            raise Fail(f"{what} equals the output without dropout{calls}")


@STAGE.check(points=1, kind="reference", rule="fused=True computes the attention with `fused_attention`.", measured=True)
def module_fused_path(api, ctx):
    """CausalSelfAttention(fused=True) matches the reference, and its forward's memory grows with T, not T^2, over
    three lengths drawn from the grade's seed (the kernel's counts, read by the grader), as a path through the
    fused call does"""
    rng = ctx.rng("fused-module")
    x = randn(rng, 2, 6, 8, dtype=np.float32)
    qkv_w, out_w = module_weights(rng, 8)
    r = api.module_fused_probe(x, qkv_w, out_w, 2)
    check_close(r["out"], ctx.ref.module_forward(x, qkv_w, out_w, 2), "CausalSelfAttention(fused=True) forward",
                inputs=shape_str(x))
    shape = B, H, D = seeded.fused_shape(ctx.seed, MODULE_SALT)
    C = H * D
    sizes = seeded.growth_sizes(*seeded.FUSED_RANGE, ctx.seed, MODULE_SALT)
    runs = growth.measure(api, "module_fused_memory_run", sizes, shape, ctx.seed)
    for (big, _, _), T in zip(runs, sizes):
        if big["shape"] != [B, T, C]:
            raise Fail(f"CausalSelfAttention({C}, {H}, fused=True) on x [{B}, {T}, {C}] returned shape "
                       f"{big['shape']}; expected [{B}, {T}, {C}]")
        x, qkv_w, out_w = seeded.module_inputs(T, C, ctx.seed, B)
        q, k, v = (t.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # each [B, H, T, D]
                   for t in np.split(x.astype(np.float64) @ qkv_w.T.astype(np.float64), 3, axis=-1))
        rows = sampled_rows(T)
        y = _causal_rows(q, k, v, rows).transpose(0, 2, 1, 3).reshape(B, len(rows), C)  # [B, rows, C]
        check_close(np.asarray(big["out"])[:, rows], y @ out_w.T.astype(np.float64),
                    f"CausalSelfAttention({C}, {H}, fused=True) on {T} tokens (a memory check's call), at rows picked "
                    "after the call", inputs=f"x [{B}, {T}, {C}]")
    g, why = growth.judge(api, "module_fused_memory_run", sizes, shape, ctx.seed, runs, _own_bytes(shape),
                          scores=scores_bytes(shape))
    if why:
        raise diagnosed(_memory_mistake(runs, module=True), f"CausalSelfAttention({C}, {H}, fused=True): {why}. With "
                        "fused=True the attention goes through fused_attention, which keeps no T x T matrix")


@STAGE.check(points=1, kind="property", cite="Article B, 'What it costs as the sequence grows'",
              rule="With fused=True too, fed through a cache in pieces, the outputs equal the full forward's.")
def module_fused_with_cache(api, ctx):
    """CausalSelfAttention(fused=True) decoding with a KV cache, token by token and in chunks, equals the full
    causal forward"""
    rng = ctx.rng("fused-module-cache")
    for chunks, B, C, H in [([1] * 5, 2, 8, 2), ([3, 1, 2], 1, 12, 3), ([4], 1, 8, 2)]:
        x = randn(rng, B, sum(chunks), C, dtype=np.float32)
        qkv_w, out_w = module_weights(rng, C)
        r = api.module_fused_decode(x, qkv_w, out_w, H, chunks)
        what = f"CausalSelfAttention(fused=True) with a KV cache, fed in chunks {chunks}, against the full causal forward"
        try:
            check_close(r["out"], ctx.ref.module_forward(x, qkv_w, out_w, H), what, inputs=shape_str(x))
        except Fail as f:
            top_left = [c for c in r["calls"] if c["is_causal"] and c["q"] and c["k"] and c["q"][-2] != c["k"][-2]]
            if not top_left:
                raise
            n_q, n_k = top_left[0]["q"][-2], top_left[0]["k"][-2]
            raise Fail(f"a decode step called F.scaled_dot_product_attention with is_causal=True for "
                       f"{n_q} {'query' if n_q == 1 else 'queries'} and {n_k} keys, where SDPA aligns the mask top-left (the new "
                       "tokens see only the first keys); with a cache the queries are the last positions, so the "
                       f"fused path must align bottom-right (fused_attention does). {f}") from None


@STAGE.check(points=4.5, kind="property", visibility="public", cite="Article B, 'What it costs as the sequence grows'",
              rule=f"One causal call's memory must grow with T * d, not T * T. It is measured at three lengths T "
                   f"from {seeded.FUSED_RANGE[0]:,} to {seeded.FUSED_RANGE[1]:,} (the shortest below "
                   f"{seeded.FUSED_RANGE[0] * 17 // 16:,}, the longest from {seeded.FUSED_RANGE[1] * 3 // 4:,}), "
                   f"batch B and heads H one of {', '.join(f'{b} x {h}' for b, h in seeded.FUSED_HEADS)}, and "
                   f"d_head one of {', '.join(map(str, seeded.FUSED_D))} (all drawn from the grade's seed; the "
                   "module's forward too, at its own draw), counting every page the call touches (memory held before "
                   "it too, such as a buffer filled at import) and memory held before it that it lets go of: it must "
                   f"grow about 2x per doubling of T (a T x T matrix makes 4x), at most {growth.MAX_GROWTH}x, and "
                   "never fall as T grows; at the longest T it may add less than half the memory of the T x T scores "
                   "([B, H, T, T] float32) over the grader's own.", measured=True)
def no_quadratic_memory(api, ctx):
    """the fused causal call's memory grows with T, not T^2: about 2x per doubling of T over three lengths drawn
    from the grade's seed"""
    shape = B, H, D = seeded.fused_shape(ctx.seed)
    # each length's call counted alone, beside a child that made the same calls with
    # F.scaled_dot_product_attention itself: what the kernel counted, read by the grader (stages/growth.py)
    sizes = seeded.growth_sizes(*seeded.FUSED_RANGE, ctx.seed)
    runs = growth.measure(api, "fused_memory_run", sizes, shape, ctx.seed)
    for (r, _, _), T in zip(runs, sizes):
        if r["shape"] != [B, H, T, D]:
            raise Fail(f"fused_attention of q, k, v [{B}, {H}, {T}, {D}] returned shape {r['shape']}; expected "
                       f"[{B}, {H}, {T}, {D}]")
        rows = sampled_rows(T)  # the memory is a pass only for a call that is right: at rows the child could not know
        check_close(np.asarray(r["out"])[:, :, rows],
                    _causal_rows(*seeded.attention_inputs(T, D, ctx.seed, lead=(B, H)), rows),
                    f"fused_attention causal at T={T} (a memory check's call), at rows picked after the call",
                    inputs=f"q, k, v [{B}, {H}, {T}, {D}]")
    g, why = growth.judge(api, "fused_memory_run", sizes, shape, ctx.seed, runs, _own_bytes(shape),
                          scores=scores_bytes(shape))
    if g is None:
        return "memory of a causal call: not measured (this system does not report a process's peak)"
    if why:
        raise diagnosed(_memory_mistake(runs), f"{why}. Use is_causal=True instead of building a mask or the scores")
    return f"cost of one causal call: {growth.describe(g)}; a T x T matrix would make it about 4x per doubling"


def _own_bytes(shape: tuple):
    """The memory of a measured call's own tensors at length T, for its drawn shape (B, H, d_head): q, k, v and the
    output, float32 [B, H, T, d_head] (the module's x, q, k, v, output [B, T, H * d_head] alike), as a function of T."""
    B, H, D = shape
    return lambda T: 4 * B * H * T * D * 4


def scores_bytes(shape: tuple):
    """The memory of the T x T scores of a measured call, float32 [B, H, T, T], as a function of T."""
    B, H, _ = shape
    return lambda T: B * H * T * T * 4


def _causal_rows(q, k, v, rows: list[int]) -> np.ndarray:
    """causal_rows for each (batch, head) of q, k, v [B, H, T, d]: [B, H, len(rows), d_v], float64."""
    return np.stack([np.stack([causal_rows(qh, kh, vh, rows) for qh, kh, vh in zip(*heads)])
                     for heads in zip(q, k, v)])


def _memory_mistake(runs: list, module: bool = False) -> str | None:
    """The catalogued mistake the SDPA calls of the measured runs name (types and shapes only), or None."""
    calls = [r[0]["calls"] for r in runs]
    if any(not c for c in calls):
        return "fused-not-fused"
    if not module and any(c[0]["attn_mask"] is not None for c in calls):
        return "fused-materialized-mask"
    return None


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    # a stub's defaults earn nothing: the stage must work first. The defaults are read from the source, and the
    # call made without them must behave as they say (a decorator could change them at run time)
    q, k, v = _qkv(ctx.rng("fused-defaults"), 1, 2, 4, 4, 4)
    written = api.fused_with_defaults(q, k, v)
    expect_defaults(api, {"fused:fused_attention": {"causal": "True", "dropout_p": "0.0", "training": "False"}}, written)
    check_close(written, ctx.ref.fused_attention(q, k, v, True), "fused_attention(q, k, v) with its defaults",
                inputs=shape_str(q))


def _start(api, seed: int) -> None:
    """The memory rules' children, started with the stage, beside its other checks (common.start_measurements)."""
    growth.start(api, "fused_memory_run", seeded.growth_sizes(*seeded.FUSED_RANGE, seed), seeded.fused_shape(seed),
                 seed)
    growth.start(api, "module_fused_memory_run", seeded.growth_sizes(*seeded.FUSED_RANGE, seed, MODULE_SALT),
                 seeded.fused_shape(seed, MODULE_SALT), seed)


common.AHEAD[STAGE.name] = _start
