"""Stage 8: the whole attention as one fused call."""
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
    p = dropout_p if training else 0.0
    T_q, T_k = q.shape[-2], k.shape[-2]
    if not causal:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p)
    if T_q == T_k:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
    allowed = torch.ones(T_q, T_k, dtype=torch.bool, device=q.device).tril(T_k - T_q)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~allowed, dropout_p=p)
