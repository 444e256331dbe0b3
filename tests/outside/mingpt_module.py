"""CausalSelfAttention in the style of minGPT's model.py (Karpathy): a float `bias` mask buffer,
two Dropouts, the heads as a batch dimension, and the kit's KV cache added to forward."""
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

from .fused import fused_attention


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, fused=False):
        super().__init__()
        assert d_model % n_heads == 0
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)
        block_size = 1024  # GPT-2 small's context
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))
        self.n_head = n_heads
        self.n_embd = d_model
        self.fused = fused

    def forward(self, x, cache=None):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        past = 0
        if cache is not None:
            past = cache.length
            k, v = cache.append(k, v)
        if self.fused:
            y = fused_attention(q, k, v)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, past:past + T, :past + T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.resid_dropout(self.out(y))
        return y
