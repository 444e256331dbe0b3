"""Stage 8: the whole attention as one fused call.

Article B, "Code that matches the hand numbers" and "What it costs as the sequence grows".
"""
import torch
import torch.nn.functional as F


def fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = True,
    dropout_p: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """One call of F.scaled_dot_product_attention. q [B, H, T_q, D], k/v [B, H, T_k, D] -> [B, H, T_q, D].

    causal=True: the queries are the last T_q positions (bottom-right alignment), so
    query i sees keys j <= T_k - T_q + i. When T_q == T_k use is_causal (no T x T mask
    is built). Dropout is applied only when `training` is True.
    One causal call's memory must grow with T * d, not T * T. It is measured at three lengths T from
    1,024 to 8,192 (the shortest below 1,088, the longest from 6,144), batch B and heads H one
    of 1 x 1, 1 x 2, 2 x 1, and d_head one of 16, 24, 32, 48, 64 (all drawn from the grade's
    seed; the module's forward too, at its own draw), counting every page the call touches
    (memory held before it too, such as a buffer filled at import) and memory held before it
    that it lets go of: it must grow about 2x per doubling of T (a T x T matrix makes 4x), at
    most 2.8x, and never fall as T grows; at the longest T it may add less than half the memory
    of the T x T scores ([B, H, T, T] float32) over the grader's own.
    """
    # BEGIN SOLUTION
    T_q, T_k = q.shape[-2], k.shape[-2]
    p = dropout_p if training else 0.0
    if not causal:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p)
    if T_q == T_k:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
    # is_causal aligns top-left when T_q != T_k, so build the bottom-right mask: [T_q, T_k]
    allowed = torch.ones(T_q, T_k, dtype=torch.bool, device=q.device).tril(diagonal=T_k - T_q)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)
    # END SOLUTION
