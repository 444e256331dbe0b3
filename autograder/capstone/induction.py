"""The capstone's task: copy a repeated random sequence, which only attention can solve.

Each sequence is L distinct random tokens followed by the same L tokens again (L drawn per sequence,
so no fixed offset gives the answer away), then random filler up to the batch's length. Inside the
repeated half, the next token is the one that followed the current token's earlier occurrence: a
two-layer model learns it with a previous-token head (layer 1 writes "the token before me" into each
position) and an induction head (layer 2 looks for the position whose previous token is the current
one, and copies what is there).
"""
import sys
import time
from dataclasses import dataclass

import torch

from .model import Decoder, cross_entropy


@dataclass(frozen=True)
class Task:
    vocab: int = 32
    min_len: int = 6
    max_len: int = 16  # the sequences are 2 * max_len tokens long

    @property
    def length(self) -> int:
        return 2 * self.max_len


def batch(task: Task, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids [n, T], lens [n], weight [n, T]): weight is 1 where position i's next token lies in the
    repeated half and follows an earlier occurrence of token i (positions L .. 2L - 2)."""
    T = task.length
    lens = torch.randint(task.min_len, task.max_len + 1, (n,), generator=gen)  # [n]
    perm = torch.rand(n, task.vocab, generator=gen).argsort(dim=1)  # [n, vocab]: distinct tokens per row
    filler = torch.randint(0, task.vocab, (n, T), generator=gen)  # [n, T]
    i = torch.arange(T)  # [T]
    L = lens[:, None]  # [n, 1]
    src = torch.where(i < L, i, i - L).clamp(max=task.vocab - 1)  # [n, T]: which of the L tokens goes where
    ids = torch.where(i < 2 * L, perm.gather(1, src), filler)  # [n, T]
    weight = ((i >= L) & (i <= 2 * L - 2)).float()  # [n, T]
    return ids, lens, weight


def accuracy(model: Decoder, task: Task, n: int = 512, seed: int = 12345) -> float:
    """Share of the repeated half's predictable tokens that the model's argmax gets right, on n fresh sequences."""
    gen = torch.Generator().manual_seed(seed)
    ids, _, weight = batch(task, n, gen)
    model.eval()
    with torch.no_grad():
        pred = model(ids[:, :-1]).argmax(-1)  # [n, T - 1]
    right = (pred == ids[:, 1:]).float() * weight[:, :-1]
    return float(right.sum() / weight[:, :-1].sum())


def progress(step: int, steps: int, loss: float, started: float, out=sys.stdout) -> None:
    """One line, redrawn in place with a carriage return: a bar, the step, the loss, the seconds so far."""
    width = 30
    filled = width * step // steps
    out.write(f"\r  training [{'#' * filled}{'.' * (width - filled)}] {step:>4}/{steps}  loss {loss:6.3f}  "
              f"{time.monotonic() - started:5.1f}s")
    if step == steps:
        out.write("\n")
    out.flush()


def train(model: Decoder, task: Task, steps: int, seed: int, batch_size: int = 64, lr: float = 3e-3,
          show: bool = True) -> list[float]:
    """Adam on the repeated half's cross-entropy, with a short warm-up and a cosine decay; the losses, per step."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + torch.cos(torch.tensor(torch.pi * s / steps)).item()))
    losses = []
    started = time.monotonic()
    model.train()
    for step in range(1, steps + 1):
        ids, _, weight = batch(task, batch_size, gen)
        logits = model(ids[:, :-1])  # [B, T - 1, vocab]
        loss = cross_entropy(logits, ids[:, 1:], weight[:, :-1])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if show and (step % 10 == 0 or step == steps):
            progress(step, steps, sum(losses[-10:]) / len(losses[-10:]), started)
    return losses
