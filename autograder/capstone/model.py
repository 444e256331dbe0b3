"""A small decoder-only transformer whose attention layers are the student's own `CausalSelfAttention`.

The kit supplies everything around the attention: token and position embeddings, the LayerNorms,
the MLP and the LM head (GPT-2's block layout: pre-norm, residual around attention and MLP). The
student's module is imported in this process (see `load_student`): the capstone runs the student's
own code on the student's own machine, so it is not sandboxed the way grading is.
"""
import importlib
import importlib.machinery
import importlib.util
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

PACKAGE = "capstone_submission"  # the name the submission folder is imported under


def load_student(submission: Path):
    """(CausalSelfAttention, KVCache) from the submission folder, imported in this process.

    The folder becomes a package of its own (its __init__.py is not run), so module.py's relative
    imports (`from .kv_cache import KVCache`) resolve inside the submission."""
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]  # a second load (another submission, in the tests) imports afresh
    spec = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
    package = importlib.util.module_from_spec(spec)
    package.__path__ = [str(Path(submission).resolve())]
    sys.modules[PACKAGE] = package
    module = importlib.import_module(f"{PACKAGE}.module")
    kv_cache = importlib.import_module(f"{PACKAGE}.kv_cache")
    return module.CausalSelfAttention, kv_cache.KVCache


@dataclass(frozen=True)
class Config:
    vocab: int
    n_ctx: int  # the most positions the position embedding holds
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    bias: bool = False  # biases in the attention's Linear layers (GPT-2 has them; the capstone model does not)
    eps: float = 1e-5  # LayerNorm's epsilon


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU in the tanh approximation, the form GPT-2 was trained with."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


class MLP(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(gelu_tanh(self.fc(x)))


class Block(nn.Module):
    """x + attn(ln1(x)), then x + mlp(ln2(x)); attn is the student's CausalSelfAttention."""

    def __init__(self, cfg: Config, attention_cls) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        self.attn = attention_cls(cfg.d_model, cfg.n_heads)
        if cfg.bias:
            # GPT-2's attention has biases; the contract's Linear layers do not. The student's forward calls
            # self.qkv(x) and self.out(y), so a bias given to those two Linear layers is used as it stands.
            self.attn.qkv.bias = nn.Parameter(torch.zeros(3 * cfg.d_model))
            self.attn.out.bias = nn.Parameter(torch.zeros(cfg.d_model))
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        self.mlp = MLP(cfg.d_model)

    def forward(self, x: torch.Tensor, cache=None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cache)  # the student's attention, with or without its cache
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    """ids [B, T] -> logits [B, T, vocab]; `caches` (one KVCache per layer) make it a decode step
    whose T tokens come after the cached ones, so the positions start at the caches' length."""

    def __init__(self, cfg: Config, attention_cls) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, attention_cls) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, ids: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        start = caches[0].length if caches else 0
        T = ids.shape[1]
        if start + T > self.cfg.n_ctx:
            raise ValueError(f"{start + T} positions exceed the model's {self.cfg.n_ctx}")
        pos = torch.arange(start, start + T, device=ids.device)
        x = self.tok(ids) + self.pos(pos)  # [B, T, C]
        for i, block in enumerate(self.blocks):
            x = block(x, caches[i] if caches else None)
        return self.head(self.ln_f(x))  # [B, T, vocab]

    def new_caches(self, kv_cache_cls, batch: int, max_len: int) -> list:
        """One of the student's KVCache per layer, [B, H, max_len, d_head] each."""
        c = self.cfg
        dtype = self.tok.weight.dtype
        return [kv_cache_cls(batch, c.n_heads, max_len, c.d_model // c.n_heads, dtype=dtype) for _ in self.blocks]


@torch.no_grad()
def generate(model: Decoder, prompt: torch.Tensor, n_new: int, kv_cache_cls=None) -> tuple[torch.Tensor, float]:
    """Greedy decoding of n_new tokens after prompt [B, T0]: (all ids [B, T0 + n_new], seconds).

    Without a cache class, every step runs the whole sequence again; with one, the prompt fills the
    student's caches once and each step feeds only the newest token."""
    model.eval()
    ids = prompt
    t0 = time.perf_counter()
    if kv_cache_cls is None:
        for _ in range(n_new):
            nxt = model(ids)[:, -1].argmax(-1, keepdim=True)  # [B, 1]
            ids = torch.cat([ids, nxt], dim=1)
    else:
        caches = model.new_caches(kv_cache_cls, prompt.shape[0], prompt.shape[1] + n_new)
        logits = model(ids, caches)
        for step in range(n_new):
            nxt = logits[:, -1].argmax(-1, keepdim=True)  # [B, 1]
            ids = torch.cat([ids, nxt], dim=1)
            if step < n_new - 1:
                logits = model(nxt, caches)
    return ids, time.perf_counter() - t0


def attention_weights(model: Decoder, ids: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's attention weights on ids [B, T], [B, H, T, T] per layer.

    Recomputed from what enters each student module (captured by a forward hook) and the module's own
    qkv weights, as the contract lays them out (rows q, k, v; head h owns columns h*D..(h+1)*D): a module
    that passed its stage computes exactly these weights inside its forward."""
    inputs: list[torch.Tensor] = []
    hooks = [b.attn.register_forward_pre_hook(lambda m, args: inputs.append(args[0].detach())) for b in model.blocks]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    out = []
    H = model.cfg.n_heads
    for block, x in zip(model.blocks, inputs):
        B, T, C = x.shape
        with torch.no_grad():
            q, k, _ = block.attn.qkv(x).split(C, dim=-1)  # each [B, T, C]
        q = q.view(B, T, H, -1).transpose(1, 2)  # [B, H, T, D]
        k = k.view(B, T, H, -1).transpose(1, 2)  # [B, H, T, D]
        scores = q @ k.transpose(-2, -1) / math.sqrt(C // H)  # [B, H, T, T]
        allowed = torch.ones(T, T, dtype=torch.bool).tril()
        out.append(scores.masked_fill(~allowed, float("-inf")).softmax(-1))
    return out


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the positions where weight [B, T] is 1."""
    per = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)
    return (per * weight).sum() / weight.sum()
