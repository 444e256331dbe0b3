# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks
# it and names the next step; `make hint` gives a nudge.
"""Stages 6-8 (torch part): causal self-attention as an nn.Module, with a KV cache and a fused path.

Article B, "Code that matches the hand numbers": two Linear layers, the heads made by reshaping.
Mask convention: boolean, True = may attend; causal alignment is bottom-right.
"""
import torch
import torch.nn as nn

from .fused import fused_attention
from .kv_cache import KVCache


class CausalSelfAttention(nn.Module):
    """x [B, T, C] -> [B, T, C] with C = d_model, n_heads heads of d_head = C // n_heads.

    Its parameters are exactly those of two submodules: `qkv` = nn.Linear(C, 3C, bias=False), whose
    output rows are q, then k, then v, and `out` = nn.Linear(C, C, bias=False). Buffers (a causal
    mask, say) and submodules without parameters (Dropout) are fine. fused=True computes the
    attention with `fused_attention`. With fused=True too, fed through a cache in pieces, the outputs
    equal the full forward's. The checks run at most 1,024 positions through it, but for the fused
    path's memory check: one fused=True forward of up to 8,192 positions, where a mask buffer of
    1,024 that only the unfused path reads is never touched.
    """

    def __init__(self, d_model: int, n_heads: int, fused: bool = False) -> None:
        super().__init__()
        raise NotImplementedError("heads: write this part of CausalSelfAttention.__init__")

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """x [B, T, C] -> [B, T, C]; changing later tokens never changes earlier outputs.

        With a cache, x holds the next T tokens after the cache's `length`: their keys/values are
        appended first, then the T queries attend to all cached ones. Fed in pieces, token by token
        or in chunks, the outputs equal the full forward's. One decode step's work grows linearly
        with the cache length (only the new rows of scores are computed). The grader runs this in a
        process of its own and reads, from outside it, what the steps alone add to its peak memory
        and CPU time (building the module, its buffers and the cache are not counted; memory is the
        peak's rise plus the pages held before that the steps touch): Decode steps cost work that
        grows linearly with the cache: measured at three cache lengths from 128 to 768 positions,
        batch B and heads H one of 4 x 16, 8 x 8, 2 x 32, 16 x 4, 3 x 16, 6 x 8, 4 x 12, 2 x 24, 12
        x 4, and d_head one of 8, 10, 12, 14, 16 (all drawn from the grade's seed), each filled by
        forwards of up to 64 tokens then 0 to 64 one-token steps, with 0 to 512 positions of its
        max_len left free after the steps, the memory and CPU time 8 more one-token steps add over
        the grader's own may grow about 2x when the cache doubles, not 4x (over the three lengths,
        and for CPU time also between the two longest where the longest's steps take 40 ms or more
        over the grader's). At any one length they may add at most half the scores of every pair of
        positions ([B, H, L, L] float32) and 0.3 s of CPU time over the grader's; steps that already
        add all of those scores at the second length are not measured at the third. Their outputs
        are checked too, and the decode checks use caches of the same lengths.
        """
        q, k, v = self.heads_of(x)  # each [B, H, T, D]
        if cache is not None:
            raise NotImplementedError("kv_cache: write this part of CausalSelfAttention.forward")
        y = self.attend(q, k, v)  # [B, H, T, D]
        return self.merge(y)  # [B, T, C]

    def heads_of(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, C] -> q, k, v, each [B, H, T, D]: the qkv projection, split into heads."""
        raise NotImplementedError("heads: write this part of CausalSelfAttention.heads_of")

    def merge(self, y: torch.Tensor) -> torch.Tensor:
        """y [B, H, T, D] -> [B, T, C]: the heads side by side, then the output projection."""
        raise NotImplementedError("heads: write this part of CausalSelfAttention.merge")

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention per head: q [B, H, T, D], k/v [B, H, T_k, D] -> [B, H, T, D].

        The T queries are the last T of the T_k positions (bottom-right alignment):
        query i sees keys j <= T_k - T + i.
        """
        if self.fused:
            raise NotImplementedError("fused: write this part of CausalSelfAttention.attend")
        raise NotImplementedError("heads: write this part of CausalSelfAttention.attend")
