"""Stage 6 checks: splitting and merging heads, multi-head attention, the torch module."""
import numpy as np

from ..declarations import DEFAULTS_RULE, Edit, Function, Mistake, Probe, Stage
from ..evidence.compare import check_close
from ..evidence.probes import WK, WO, WOUT, WQ, WQKV, WV, X56, X58, XB, module_output, same_array
from ..outcomes import Fail
from .common import expect_defaults, randn, require_nontrivial, shape_str

# rung 1 of the hint ladder of each mistake below, and the line that makes it (Mistake.line)
ASK = "Follow one head's columns through the reshapes: which positions and features end up together?"
MADE_ON = 'reshape|swapaxes|transpose'
STAGE = Stage(
    name="heads", number=6, points=16, files=("heads.py", "module.py"), calls=("projections", "masking"),
    reread='B "Multi-head attention", "Code that matches the hand numbers"',
    torch=True, worked_points=1.0,
    functions=(
        Function(name="split_heads", target="heads:split_heads", reference="core:split_heads"),
        Function(name="merge_heads", target="heads:merge_heads", reference="core:merge_heads"),
        Function(name="multi_head_attention", target="heads:multi_head_attention", reference="core:multi_head_attention"),
        Function(name="module_forward", target="driver:module_forward", reference="api:module_forward",
                 reads=("module.py",)),
        Function(name="module_shapes", target="driver:module_shapes", reference="api:module_shapes",
                 reads=("module.py",)),
        Function(name="module_structure", target="driver:module_structure", reads=("module.py",)),
    ),
    intro="Several heads side by side, and the torch module. This cell also holds the KV cache and the fused "
          "call, which stages 7 and 8 grade.",
    hints=(
        "Each head is ordinary attention on its own slice of the feature columns; the outputs are placed side by "
        "side and mixed by W_O. Article B, 'Multi-head attention'.",
        "To split, reshape the last axis into (n_heads, d_head) and then swap the head axis in front of the "
        "positions; merging undoes exactly that, in reverse order. Each head scales by sqrt(d_head).",
        "In the module, one Linear produces q, k and v side by side: split its output into three along the last "
        "axis, in that order. Article B, 'Code that matches the hand numbers'.",
    ),
    mistakes=(
        Mistake(id="heads-wrong-split", where="heads.py:split_heads",
                explanation="the heads are split by a plain reshape to [n_heads, n, d_head], which mixes "
                            "positions and features; reshape to [n, n_heads, d_head], then swap the two axes",
                reread="Article B, 'Code that matches the hand numbers'",
                question=ASK,
                line=MADE_ON,
                evidence='check:split_heads_reference',
                mutant=(
                    Edit('heads.py',
                             '    x = x.reshape(*lead, n, n_heads, d_head)  # [..., n, n_heads, d_head]\n'
                             '    return np.swapaxes(x, -3, -2)  # [..., n_heads, n, d_head]',
                         '    return x.reshape(*lead, n_heads, n, d_head)'),
                )),
        Mistake(id="heads-no-merge-transpose", where="heads.py:merge_heads",
                explanation="the heads are merged without moving the head axis back next to the features, so "
                            "positions get mixed; swap the axes back before reshaping",
                reread="Article B, 'Code that matches the hand numbers'",
                question=ASK,
                line=MADE_ON,
                evidence='check:merge_heads_inverse',
                mutant=(
                    Edit('heads.py',
                         '    x = np.swapaxes(x, -3, -2)  # [..., n, n_heads, d_head]\n',
                         ''),
                )),
        Mistake(id="heads-no-output-projection", where="heads.py:multi_head_attention",
                explanation="the concatenated heads are returned without the output projection W_O",
                reread="Article B, 'Multi-head attention'",
                question=ASK,
                line=MADE_ON,
                evidence='mistakes:mha_variants',
                mutant=(
                    Edit('heads.py',
                         'return merge_heads(out) @ w_o',
                         'return merge_heads(out)'),
                )),
        Mistake(id="heads-scale-dmodel", where="module.py:attend",
                explanation="each head's scores are divided by sqrt(d_model); a head's queries and keys have "
                            "d_head features, so divide by sqrt(d_head)",
                reread="Article B, 'Multi-head attention'",
                question=ASK,
                line=MADE_ON,
                evidence='mistakes:mha_variants',
                mutant=(
                    Edit('module.py',
                         'scores = q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5',
                         'scores = q @ k.transpose(-2, -1) / (k.shape[-1] * self.n_heads) ** 0.5'),
                )),
    ),
    probes=(
        Probe(name="split_heads", file="heads.py", function="split_heads", args=(X56, 2),
              expected=lambda r: r.split_heads(X56, 2), judge=same_array()),
        Probe(name="merge_heads", file="heads.py", function="merge_heads", args=(np.swapaxes(X56.reshape(5, 2, 3), 0,
              1),), expected=lambda r: r.merge_heads(np.swapaxes(X56.reshape(5, 2, 3), 0, 1)), judge=same_array()),
        Probe(name="multi_head_attention", file="heads.py", function="multi_head_attention", args=(X58, WQ, WK, WV, WO,
              2), expected=lambda r: r.multi_head_attention(X58, WQ, WK, WV, WO, 2), judge=same_array({"d_k": 4,
              "n_heads": 2, "n_q": 5, "n_k": 5})),
        Probe(name="module_forward", file="module.py", function="forward", args=(XB, WQKV, WOUT, 2),
              expected=lambda r: r.module_forward(XB, WQKV, WOUT, 2), judge=module_output),
    ),
)


@STAGE.check(points=1, kind="reference", rule="head h = columns h*d_head:(h+1)*d_head")
def split_heads_reference(api, ctx):
    """split_heads gives head h the columns h*d_head:(h+1)*d_head, laid out [..., n_heads, n, d_head]"""
    rng = ctx.rng("split")
    for shape, h in [((5, 6), 2), ((2, 4, 8), 4), ((1, 3), 3), ((2, 3, 2, 8), 2)]:
        x = randn(rng, *shape)
        check_close(api.split_heads(x, h), ctx.ref.split_heads(x, h), f"split_heads(x, n_heads={h})",
                    inputs=shape_str(x), mistakes={"heads-wrong-split": ctx.mistakes.split_wrong(x, h)})


@STAGE.check(points=1.5, kind="reference", rule="Inverse of split_heads")
def merge_heads_inverse(api, ctx):
    """merge_heads matches the reference and undoes split_heads"""
    rng = ctx.rng("merge")
    for shape in [(2, 5, 3), (3, 4, 2, 2)]:
        x = randn(rng, *shape)
        check_close(api.merge_heads(x), ctx.ref.merge_heads(x), "merge_heads(x)", inputs=shape_str(x),
                    mistakes={"heads-no-merge-transpose": ctx.mistakes.merge_no_transpose(x)})
    x = randn(rng, 2, 5, 8)
    check_close(api.merge_heads(api.split_heads(x, 4)), x, "merge_heads(split_heads(x, 4)) against x",
                inputs=shape_str(x))


def _weights(rng, d_model, dt=np.float64):
    return [randn(rng, d_model, d_model, dtype=dt, scale=d_model**-0.5) for _ in range(4)]


@STAGE.check(points=2, kind="reference")
def mha_reference(api, ctx):
    """multi_head_attention matches the reference: causal or not, batch dims, n = 1, float32"""
    rng = ctx.rng("mha")
    for lead, n, d_model, h, causal, dt in [((), 5, 8, 2, True, np.float64), ((), 4, 6, 3, False, np.float64),
                                            ((2,), 3, 8, 4, True, np.float32), ((), 1, 4, 2, True, np.float64)]:
        x = randn(rng, *lead, n, d_model, dtype=dt)
        w = _weights(rng, d_model, dt)
        check_close(api.multi_head_attention(x, *w, h, causal), ctx.ref.multi_head_attention(x, *w, h, causal),
                    f"multi_head_attention(n_heads={h}, causal={causal})", inputs=shape_str(x),
                    mistakes=lambda: ctx.mistakes.mha_variants(x, *w, h, causal))


@STAGE.check(points=1, kind="property", visibility="public", rule="Concat(head_1, ..., head_h) W_O.")
def mha_equals_head_loop(api, ctx):
    """multi_head_attention equals running your attention on each head's columns and concatenating"""
    rng = ctx.rng("mha-loop")
    n, d_model, h = 5, 6, 3
    x = randn(rng, n, d_model)
    w_q, w_k, w_v, w_o = _weights(rng, d_model)
    d_head = d_model // h
    allowed = ctx.ref.causal_mask(n)
    heads = []
    for i in range(h):
        cols = slice(i * d_head, (i + 1) * d_head)
        out, _ = api.attention(x @ w_q[:, cols], x @ w_k[:, cols], x @ w_v[:, cols], allowed)
        heads.append(np.asarray(out, dtype=float))
    loop = np.concatenate(heads, axis=-1) @ w_o
    check_close(api.multi_head_attention(x, w_q, w_k, w_v, w_o, h, True), loop,
                "multi_head_attention against a loop over heads of your own attention()", inputs=shape_str(x))


@STAGE.check(points=1, kind="property", visibility="public", cite="Article A, 'What self-attention does and does not mean'",
              rule="With causal=False, permuting the tokens permutes the outputs the same way.")
def mha_permutation_equivariance(api, ctx):
    """without a causal mask, permuting the tokens permutes the outputs"""
    rng = ctx.rng("mha-perm")
    x = randn(rng, 5, 4)
    w = _weights(rng, 4)
    perm = rng.permutation(5)
    out = np.asarray(api.multi_head_attention(x, *w, 2, False), dtype=float)
    require_nontrivial(out, api.multi_head_attention(2 * x, *w, 2, False), "multi_head_attention")
    check_close(api.multi_head_attention(x[perm], *w, 2, False), out[perm],
                f"multi_head_attention(x[perm], causal=False) against the output permuted, perm={perm.tolist()}")


@STAGE.check(points=1.5, kind="property", visibility="public", cite="Article B, 'Code that matches the hand numbers'",
              rule="Its parameters are exactly those of two submodules")
def module_structure(api, ctx):
    """CausalSelfAttention's parameters are exactly those of qkv (C -> 3C) and out (C -> C), both Linear without bias"""
    info = api.module_structure(8, 2)
    if info["children"] != {"qkv": "Linear", "out": "Linear"}:
        raise Fail(f"the submodules that hold parameters are {info['children']}; expected exactly qkv and out, both "
                   "nn.Linear (buffers such as a mask, and parameter-free submodules such as Dropout, are fine)")
    want = {"qkv.weight": [24, 8], "out.weight": [8, 8]}
    if info["state"] != want:
        raise Fail(f"the parameters for d_model=8 are {info['state']}; expected exactly {want} (bias=False)")


def module_weights(rng, C, dt=np.float32):
    return randn(rng, 3 * C, C, dtype=dt, scale=C**-0.5), randn(rng, C, C, dtype=dt, scale=C**-0.5)


@STAGE.check(points=2, kind="reference")
def module_reference(api, ctx):
    """CausalSelfAttention.forward matches the reference for random weights (B = 2, several heads, T = 1)"""
    rng = ctx.rng("module")
    for B, T, C, H in [(2, 5, 8, 2), (1, 7, 12, 3), (3, 1, 8, 4)]:
        x = randn(rng, B, T, C, dtype=np.float32)
        qkv_w, out_w = module_weights(rng, C)
        check_close(api.module_forward(x, qkv_w, out_w, H), ctx.ref.module_forward(x, qkv_w, out_w, H),
                    f"CausalSelfAttention(d_model={C}, n_heads={H}) forward", inputs=shape_str(x),
                    mistakes=lambda: ctx.mistakes.module_variants(x, qkv_w, out_w, H))


@STAGE.check(points=1.5, kind="property", visibility="public", cite="Article B, 'Causal attention'",
              rule="changing later tokens never changes earlier outputs")
def module_future_does_not_leak(api, ctx):
    """changing later tokens never changes the module's earlier outputs"""
    rng = ctx.rng("module-future")
    x = randn(rng, 1, 6, 8, dtype=np.float32)
    qkv_w, out_w = module_weights(rng, 8)
    y = np.asarray(api.module_forward(x, qkv_w, out_w, 2))
    x2 = x.copy()
    x2[:, 4:] = randn(rng, 1, 2, 8, dtype=np.float32)
    y2 = np.asarray(api.module_forward(x2, qkv_w, out_w, 2))
    require_nontrivial(y[:, 4:], y2[:, 4:], "the module on tokens 4-5")
    check_close(y2[:, :4], y[:, :4], "module outputs of tokens 0-3 after changing tokens 4-5 (they must not move)")


@STAGE.check(points=0.5, kind="property", visibility="public", rule=DEFAULTS_RULE)
def keeps_the_defaults(api, ctx):
    """the functions keep the default argument values of their stubs' signatures"""
    # a stub's defaults earn nothing: the stage must work first
    written = api.multi_head_attention(np.ones((2, 2)), *[np.eye(2)] * 4, 1), api.module_shapes(4, 2)
    expect_defaults(api, {"heads:multi_head_attention": {"causal": "True"},
                          "module:CausalSelfAttention": {"fused": "False"}}, written)
