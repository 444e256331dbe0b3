"""The capstone command: check the stages, then train and probe the small model, or load GPT-2."""
import math
import sys
import time
from pathlib import Path

import torch

GATE = ("heads", "kv_cache")  # the stages whose code the model runs: CausalSelfAttention and KVCache
LENGTHS = (32, 64, 128)  # new tokens generated for the speed table


def gate(submission: Path) -> bool:
    """Grade the stages the model needs; print and return False when one does not pass."""
    from ..feedback.advice import STATUS_WORD, blocked_note
    from ..grade import grade
    from ..results import StageStatus
    from ..stages import BY_NAME

    print(f"checking stages {', '.join(GATE)} of {submission} first (the model runs that code)...")
    res = grade(submission, list(GATE))
    bad = [(s, res.stages[s]) for s in GATE if res.stages[s].status != StageStatus.PASSED]
    if not bad:
        return True
    for name, sr in bad:
        why = f" {blocked_note(sr, res)}" if sr.blocked_by else ""
        print(f"stage {BY_NAME[name].number} ({name}) has not passed: {STATUS_WORD[sr.status]}{why}, "
              f"{sr.score:g}/{sr.max_score:g} points")
    print(f"Next step: {res.next_step}")
    print("The capstone trains a model on your CausalSelfAttention and KVCache, so it waits until "
          f"{' and '.join(GATE)} pass (make grade STAGE={','.join(GATE)}).")
    return False


def speeds(model, prompt: torch.Tensor, kv_cache_cls, lengths=LENGTHS, runs: int = 3) -> list[tuple[int, float, float, bool]]:
    """(new tokens, tok/s with the student's cache, tok/s without, the same tokens?) for each length: after one
    warm-up of each, the median of `runs` timings, taken in turns (a busy machine slows both alike)."""
    import statistics

    from .model import generate

    generate(model, prompt, 2, kv_cache_cls)
    generate(model, prompt, 2)
    rows = []
    for n in lengths:
        t_c, t_f = [], []
        for _ in range(runs):
            cached, t = generate(model, prompt, n, kv_cache_cls)
            t_c.append(t)
            full, t = generate(model, prompt, n)
            t_f.append(t)
        rows.append((n, n / statistics.median(t_c), n / statistics.median(t_f), bool(torch.equal(cached, full))))
    return rows


def trainable(model, task) -> str | None:
    """None when one training step through the student's attention works and reaches every attention layer's
    qkv weights; else what is wrong, in words. Checked before training: a module that detaches its scores, or
    changes in place a tensor autograd needs, passes every graded check (they run without gradients) but
    cannot learn, and training it would only end in a poor score or a traceback."""
    from .induction import batch
    from .model import cross_entropy

    ids, _, weight = batch(task, 4, torch.Generator().manual_seed(0))
    model.train()
    model.zero_grad(set_to_none=True)
    try:
        logits = model(ids[:, :-1])
        cross_entropy(logits, ids[:, 1:], weight[:, :-1]).backward()
    except RuntimeError as e:
        first = str(e).splitlines()[0]
        return (f"one training step through your CausalSelfAttention failed: {first}. The graded checks run without "
                "gradients; training needs them: look in exercises/module.py for a tensor changed in place "
                "(masked_fill_, +=, an index assignment) after autograd used it, and use the out-of-place form")
    dead = [i for i, b in enumerate(model.blocks)
            if b.attn.qkv.weight.grad is None or not bool(b.attn.qkv.weight.grad[: 2 * model.cfg.d_model].abs().sum())]
    model.zero_grad(set_to_none=True)
    if dead:
        return ("no gradient reaches the q and k rows of qkv's weight in your CausalSelfAttention (layer "
                f"{', '.join(map(str, dead))}): something in exercises/module.py cuts the scores off from autograd "
                "(.detach(), torch.no_grad(), .numpy() or .item() and back). The graded checks run without gradients, "
                "so they cannot see it; no number of training steps helps until it is gone")
    return None


def print_speeds(rows) -> None:
    print("  generation (greedy)  new tokens  with cache  without   same tokens")
    for n, c, f, same in rows:
        print(f"  {'':19}  {n:>10}  {c:>7.0f}/s  {f:>6.0f}/s   {'yes' if same else 'NO'}")


def head_scores(weights: list[torch.Tensor], lens: torch.Tensor) -> dict[tuple[int, int], tuple[float, float]]:
    """(layer, head) -> (previous-token score, induction score), averaged over the batch.

    weights: per layer [B, H, T, T]. Previous-token: mean of A[i, i - 1] over positions 1..2L-1. Induction:
    mean of A[i, i - L + 1] over the repeated half (i = L .. 2L - 1), the position after the earlier
    occurrence of token i."""
    out = {}
    for layer, a in enumerate(weights):
        B, H, T, _ = a.shape
        prev = torch.zeros(H)
        ind = torch.zeros(H)
        for b in range(B):
            L = int(lens[b])
            i = torch.arange(1, 2 * L)
            prev += a[b, :, i, i - 1].mean(-1)
            j = torch.arange(L, 2 * L)
            ind += a[b, :, j, j - L + 1].mean(-1)
        for h in range(H):
            out[(layer, h)] = (float(prev[h] / B), float(ind[h] / B))
    return out


def toy(args) -> int:
    from . import page
    from .induction import Task, accuracy, batch, train
    from .model import Config, Decoder, attention_weights, generate, load_student

    attention_cls, kv_cache_cls = load_student(args.submission)
    task = Task()
    torch.manual_seed(args.seed)
    model = Decoder(Config(vocab=task.vocab, n_ctx=task.max_len + max(LENGTHS)), attention_cls)
    why = trainable(model, task)
    if why:
        print(why)
        return 1
    print(f"training a {model.cfg.n_layers}-layer decoder (d_model {model.cfg.d_model}, {model.cfg.n_heads} heads) "
          f"built from your CausalSelfAttention to copy a repeated random sequence ({args.steps} steps, seed {args.seed})")
    t0 = time.monotonic()
    train(model, task, args.steps, args.seed)
    seconds = time.monotonic() - t0
    acc = accuracy(model, task)
    print(f"trained in {seconds:.1f} s: {100 * acc:.1f}% of the repeated half's tokens right")

    gen = torch.Generator().manual_seed(args.seed + 1)
    ids, lens, _ = batch(task, 1, gen)
    L = int(lens[0])
    prompt = ids[:, : L + 2]  # the sequence once, and the first two tokens of its repetition
    rows = speeds(model, prompt, kv_cache_cls)
    copied, _ = generate(model, prompt, L - 2, kv_cache_cls)
    print(f"  prompt     {' '.join(map(str, prompt[0].tolist()))}\n  continued  "
          f"{' '.join(map(str, copied[0, L + 2 :].tolist()))} (the rest of the repetition: "
          f"{'right' if torch.equal(copied[0, L + 2 :], ids[0, L + 2 : 2 * L]) else 'not quite'})")
    print_speeds(rows)

    probe, probe_lens, _ = batch(task, 64, torch.Generator().manual_seed(args.seed + 2))
    weights = attention_weights(model, probe)
    scores = head_scores(weights, probe_lens)
    prev = max((k for k in scores if k[0] == 0), key=lambda k: scores[k][0])
    ind = max((k for k in scores if k[0] > 0), key=lambda k: scores[k][1])
    print(f"  previous-token head: layer {prev[0]} head {prev[1]} (score {scores[prev][0]:.2f}); "
          f"induction head: layer {ind[0]} head {ind[1]} (score {scores[ind][1]:.2f})")
    L0 = int(probe_lens[0])
    labels = [str(t) for t in probe[0, : 2 * L0].tolist()]
    shown = [w[0, :, : 2 * L0, : 2 * L0].numpy() for w in weights]  # the first probe sequence, both copies
    page.write({
        "submission": args.submission, "seed": args.seed, "steps": args.steps, "seconds": seconds, "accuracy": acc,
        "layers": model.cfg.n_layers, "d_model": model.cfg.d_model, "n_heads": model.cfg.n_heads,
        "speeds": rows, "scores": scores,
        "heads": [("previous-token", prev[0], prev[1], scores[prev][0], shown[prev[0]][prev[1]], labels,
                   "Each position looks at the one just before it: the bright line under the diagonal."),
                  ("induction", ind[0], ind[1], scores[ind][1], shown[ind[0]][ind[1]], labels,
                   f"In the repetition (from position {L0}), each position looks at the token after its own earlier "
                   f"copy: the line {L0 - 1} places left of the diagonal.")],
    }, Path(args.html))
    print(f"wrote {args.html}")
    ok = acc >= 0.95 and all(same for *_, same in rows)
    if acc < 0.95:
        print(f"the model reached {100 * acc:.1f}%, short of 95%: more steps (make capstone STEPS=...) or another seed")
    if not all(same for *_, same in rows):
        print("with your cache the model generated other tokens than without it: see the table above")
    return 0 if ok else 1


def fetch(folder: Path, names: list[str], no_download: bool) -> str | None:
    """None once `names` are in folder (downloaded when missing); else the error to print."""
    from . import gpt2 as g

    missing = [name for name in names if not (folder / name).exists()]
    if not missing:
        return None
    if no_download:
        return f"error: no {', '.join(str(folder / n) for n in missing)} (download {' and '.join(g.URL + n for n in missing)})"
    try:
        g.download(folder)
    except OSError as e:  # no network, a proxy, a refused address: the folder is what the command needs
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        reason = getattr(e, "reason", None) or e
        return (f"error: GPT-2's files could not be downloaded ({reason}). Put {', '.join(g.FILES)} from {g.URL} "
                f"into {folder} (or name another folder: make capstone MODEL=gpt2 GPT2_DIR=...) and run again.")
    return None


def broken(e) -> str:
    """The error line for a file of GPT2_DIR that is damaged or missing: which, why, and how to fetch it again."""
    from . import gpt2 as g

    if e.path.name not in g.FILES:  # config.json: GPT-2's sizes need none, so nothing downloads it
        return (f"error: {e.path} {e.why}.\nFetch it again from where the checkpoint came from (GPT-2's own: "
                f"{g.URL}{e.path.name}), or delete it where the checkpoint is one of GPT-2's sizes.")
    return (f"error: {e.path} {e.why}.\nFetch it again: delete it and run make capstone MODEL=gpt2 again, which "
            f"downloads {g.URL}{e.path.name} into {e.path.parent} (or download that address there by hand).")


def load_gpt2(folder: Path, no_download: bool):
    """(tensors, config, tokenizer) from folder, or the error line to print: a file missing and not downloaded,
    or one that is damaged (g.BrokenFile: named, with the address to fetch it again)."""
    from . import gpt2 as g

    error = fetch(folder, ["model.safetensors"], no_download)
    if error:
        return error
    try:
        w = g.gpt2_weights(folder / "model.safetensors")
        g.check_shapes(w, folder / "model.safetensors")
        heads = g.heads_from_config(folder)
        if heads is None and w["wte.weight"].shape[1] not in g.HEADS_BY_WIDTH:
            raise g.BrokenFile(folder / "config.json", f"is missing: the checkpoint's width "
                               f"{w['wte.weight'].shape[1]} is no GPT-2 size, so its n_head must be read there")
        cfg = g.config_of(w, heads)
        if g.needs_bpe(folder, cfg.vocab):
            error = fetch(folder, list(g.FILES[1:]), no_download)
        return error or (w, cfg, g.tokenizer_of(folder, cfg.vocab))
    except g.BrokenFile as e:
        return broken(e)
    except ValueError as e:  # heads that do not divide the width
        return f"error: {folder / 'config.json'}: {e}"
    except OSError as e:  # a folder where a file belongs, no permission to read
        return f"error: {e.filename or folder} could not be read ({e.strerror or e})"


def gpt2(args) -> int:
    from . import gpt2 as g
    from .model import Decoder, generate, load_student

    folder = Path(args.weights).expanduser()
    loaded = load_gpt2(folder, args.no_download)
    if isinstance(loaded, str):
        print(loaded, file=sys.stderr)
        return 2
    w, cfg, tok = loaded
    attention_cls, kv_cache_cls = load_student(args.submission)
    model = Decoder(cfg, attention_cls)
    g.load_into(model, w)
    model.eval()
    ids = torch.tensor([tok.encode(args.prompt)[-(cfg.n_ctx - 1) :]])  # room for one new token at least
    print(f"loaded {folder}: {cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads, vocabulary "
          f"{cfg.vocab}, with your CausalSelfAttention in every layer")
    with torch.no_grad():
        ours = model(ids).double()
    ref = g.reference_logits(w, ids, cfg.n_heads)
    diff = float((ours - ref).abs().max())
    scale = float(ref.abs().max())
    ok = math.isfinite(diff) and diff <= 1e-4 * max(1.0, scale)
    print(f"logits on the prompt ({ids.shape[1]} tokens) against the kit's reference forward: largest difference "
          f"{diff:.2e} (largest logit {scale:.1f}): {'they agree' if ok else 'THEY DIFFER'}")
    if not ok:
        return 1
    n = min(args.tokens, cfg.n_ctx - ids.shape[1])  # the position embedding ends at n_ctx
    cached, t_cached = generate(model, ids, n, kv_cache_cls)
    full, t_full = generate(model, ids, n)
    same = torch.equal(cached, full)
    print(f"generated with your KV cache: {tok.decode(cached[0].tolist())!r}")
    print(f"  {n} new tokens: with cache {n / t_cached:.1f} tok/s, without {n / t_full:.1f} tok/s; "
          f"the same tokens: {'yes' if same else 'NO'}")
    return 0 if same else 1


def main(args) -> int:
    args.submission = Path(args.submission)
    if args.model != "gpt2" and args.steps < 1:
        print(f"error: STEPS={args.steps}: the model needs at least one training step (300 by default)", file=sys.stderr)
        return 2
    if not gate(args.submission):
        return 1
    return gpt2(args) if args.model == "gpt2" else toy(args)
