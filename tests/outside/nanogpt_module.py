"""CausalSelfAttention in the style of nanoGPT's model.py (Karpathy): a mask buffer named `bias`,
an attention Dropout and a residual Dropout, `scaled_dot_product_attention` when asked for, and the
kit's KV cache added to forward."""
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

from .fused import fused_attention
from .kv_cache import KVCache

BLOCK_SIZE = 1024  # GPT-2's context, nanoGPT's default block_size


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, fused: bool = False) -> None:
        super().__init__()
        assert d_model % n_heads == 0
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)
        self.n_head = n_heads
        self.n_embd = d_model
        self.flash = fused
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK_SIZE, BLOCK_SIZE)).view(1, 1, BLOCK_SIZE, BLOCK_SIZE))

    def forward(self, x, cache: KVCache | None = None):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if cache is not None:
            k, v = cache.append(k, v)
        T_k = k.size(-2)
        if self.flash:
            y = fused_attention(q, k, v, causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, T_k - T:T_k, :T_k] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.resid_dropout(self.out(y))
        return y
