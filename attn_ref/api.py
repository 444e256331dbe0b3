"""The reference behind the same names as the student API (see autograder.api.STUDENT_API)."""
from . import core


class RefAPI:
    """Every stage function, computed by the reference (float64)."""

    softmax = staticmethod(core.softmax)
    dot_scores = staticmethod(core.dot_scores)
    simple_self_attention = staticmethod(core.simple_self_attention)
    project_qkv = staticmethod(core.project_qkv)
    scaled_scores = staticmethod(core.scaled_scores)
    score_variance = staticmethod(core.score_variance)
    apply_mask = staticmethod(core.apply_mask)
    attention = staticmethod(core.attention)
    split_heads = staticmethod(core.split_heads)
    merge_heads = staticmethod(core.merge_heads)
    multi_head_attention = staticmethod(core.multi_head_attention)

    attention_backward = staticmethod(core.attention_backward)
    score_count = staticmethod(core.score_count)
    kv_cache_floats = staticmethod(core.kv_cache_floats)

    @staticmethod
    def tiled_attention(q, k, v, causal=True, block_q=64, block_k=64):
        return core.fused_attention(q, k, v, causal)

    @staticmethod
    def causal_mask(n_q, n_k=None):
        return core.causal_allowed(n_q, n_k)

    @staticmethod
    def module_forward(x, qkv_weight, out_weight, n_heads, fused=False):
        return core.module_forward(x, qkv_weight, out_weight, n_heads)

    @staticmethod
    def module_shapes(d_model, n_heads):
        return {"qkv.weight": [3 * d_model, d_model], "out.weight": [d_model, d_model]}

    @staticmethod
    def kv_cache_numel(batch, n_heads, max_len, d_head):
        return 2 * batch * n_heads * max_len * d_head

    @staticmethod
    def fused_attention(q, k, v, causal=True):
        return core.fused_attention(q, k, v, causal)

