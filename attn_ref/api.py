"""Reference answers for the calls that have no function of the same shape in core: the torch
module's forward, its parameter shapes, the KV cache's size, the fused and tiled calls.

The grader finds every reference function by the name a stage declares ("api:module_forward",
"core:softmax"; see autograder/stages), so nothing here lists them.
"""
from . import core


def tiled_attention(q, k, v, causal=True, block_q=64, block_k=64):
    return core.fused_attention(q, k, v, causal)


def causal_mask(n_q, n_k=None):
    return core.causal_allowed(n_q, n_k)


def module_forward(x, qkv_weight, out_weight, n_heads, fused=False):
    return core.module_forward(x, qkv_weight, out_weight, n_heads)


def module_shapes(d_model, n_heads):
    return {"qkv.weight": [3 * d_model, d_model], "out.weight": [d_model, d_model]}


def kv_cache_numel(batch, n_heads, max_len, d_head):
    return 2 * batch * n_heads * max_len * d_head


def fused_attention(q, k, v, causal=True):
    return core.fused_attention(q, k, v, causal)
