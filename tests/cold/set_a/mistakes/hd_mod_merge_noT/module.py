"""Stages 6-8 (torch part): causal self-attention as an nn.Module, with a KV cache and a fused path."""
import math

import torch
import torch.nn as nn

from .fused import fused_attention
from .kv_cache import KVCache


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, fused: bool = False) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("d_model must be divisible by n_heads")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.fused = fused
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        q, k, v = self.heads_of(x)  # each [B, H, T, D]
        if cache is not None:
            k, v = cache.append(k, v)
        y = self.attend(q, k, v)  # [B, H, T, D]
        return self.merge(y)  # [B, T, C]

    def heads_of(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        shape = (B, T, self.n_heads, self.d_head)
        return (q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2), v.view(shape).transpose(1, 2))

    def merge(self, y: torch.Tensor) -> torch.Tensor:
        B, H, T, D = y.shape
        y = y.reshape(B, T, H * D)
        return self.out(y)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return fused_attention(q, k, v, causal=True)
        T, T_k = q.shape[-2], k.shape[-2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        allowed = torch.ones(T, T_k, dtype=torch.bool, device=q.device).tril(T_k - T)
        scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return weights @ v
