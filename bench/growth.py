"""The cost rules' figures over seeds: for each rule, the lengths each seed drew and the growth per doubling the grade
measured, for correct code written several ways and for the catalogued quadratic mistakes, as whole grades give them.

    python -m bench.growth [--seeds 10] [--json bench/growth.json]

Prints one table per rule (min and max of each growth over the seeds, how many seeds kept or lost the rule's points)
and the time a grade of the three measured stages took. Figures, not assertions: the tests decide (tests/
test_cost_growth*.py, `make sweep`); this shows the margins."""
import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autograder.grade import grade  # noqa: E402
from autograder.sandbox import launchers, namespaces  # noqa: E402
from autograder.stages import CATALOGUE  # noqa: E402

SOLUTIONS = ROOT / "solutions"
RULES = {  # rule -> (stage, check)
    "kv_cache decode: memory and CPU of 8 steps vs cache length": ("kv_cache", "decode_step_cost_linear"),
    "fused: one causal call's memory vs T": ("fused", "no_quadratic_memory"),
    "tiled: one causal call's memory vs n": ("tiled", "tiled_memory_linear"),
}
# correct code written otherwise (the styles strangers used), as (old, new) edits of the solutions
APPEND = "            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included\n"
TRIL_HEADS = [("class CausalSelfAttention(nn.Module):\n",
               "class Head(nn.Module):\n    def __init__(self) -> None:\n        super().__init__()\n"
               "        self.register_buffer('tril', torch.tril(torch.ones(1024, 1024)))\n\n\n"
               "class CausalSelfAttention(nn.Module):\n"),
              ("        self.out = nn.Linear(d_model, d_model, bias=False)\n",
               "        self.out = nn.Linear(d_model, d_model, bias=False)\n"
               "        self.heads = nn.ModuleList(Head() for _ in range(n_heads))\n"),
              ("        allowed = torch.ones(T, T_k, dtype=torch.bool, device=q.device).tril(diagonal=T_k - T)  # [T, T_k]\n",
               "        allowed = self.heads[0].tril[T_k - T : T_k, :T_k] != 0  # [T, T_k]\n")]
SUBMISSIONS = {  # name -> (stage, kind, {file: [(old, new)]})
    "solutions": (None, "correct", {}),
    "per-head 1,024 x 1,024 tril buffers (Let's build GPT)": ("kv_cache", "correct", {"module.py": TRIL_HEADS}),
    "fused with causal_lower_right as attn_mask": ("fused", "correct", {"fused.py": [(
        "    if T_q == T_k:\n",
        "    if causal:  # PyTorch's documented bottom-right mask, a lazy CausalBias\n"
        "        from torch.nn.attention.bias import causal_lower_right\n\n"
        "        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T_q, T_k), "
        "dropout_p=p)\n    if T_q == T_k:\n")]}),
}
SUBMISSIONS["kv_cache as a growing torch.cat (a list cache)"] = ("kv_cache", "correct", {"kv_cache.py": [(
    "        self.k = torch.zeros(batch, n_heads, max_len, d_head, dtype=dtype, device=device)  # [B, H, max_len, D]\n"
    "        self.v = torch.zeros(batch, n_heads, max_len, d_head, dtype=dtype, device=device)  # [B, H, max_len, D]\n",
    "        self.k = torch.zeros(batch, n_heads, 0, d_head, dtype=dtype, device=device)  # [B, H, 0, D], grows\n"
    "        self.v = torch.zeros(batch, n_heads, 0, d_head, dtype=dtype, device=device)\n"), (
    "        self.k[:, :, self.length : end] = k_new\n        self.v[:, :, self.length : end] = v_new\n",
    "        self.k = torch.cat([self.k, k_new.to(self.k.dtype)], dim=2)  # [B, H, end, D]\n"
    "        self.v = torch.cat([self.v, v_new.to(self.v.dtype)], dim=2)\n")]})
SUBMISSIONS["fused in 512-query chunks, a bool mask per chunk"] = ("fused", "correct", {"fused.py": [(
    "    if T_q == T_k:\n",
    "    if causal:  # 512 queries at a time, each with its own bottom-right mask: [c, T_k]\n"
    "        outs = []\n"
    "        for s0 in range(0, T_q, 512):\n"
    "            qc = q[..., s0:s0 + 512, :]  # [B, H, c, d]\n"
    "            rows = torch.arange(s0, s0 + qc.shape[-2], device=q.device)[:, None] + (T_k - T_q)\n"
    "            allowed = torch.arange(T_k, device=q.device)[None, :] <= rows  # [c, T_k]\n"
    "            outs.append(F.scaled_dot_product_attention(qc, k, v, attn_mask=allowed, dropout_p=p))\n"
    "        return torch.cat(outs, dim=-2)  # [B, H, T_q, d]\n"
    "    if T_q == T_k:\n")]})
SUBMISSIONS["tiled as 256-row blocks against every key (a block_q x n_k strip)"] = ("tiled", "correct", {"tiled.py": (
    "import numpy as np\n\n\ndef tiled_attention(q, k, v, causal=True, block_q=64, block_k=64):\n"
    "    n_q, n_k = q.shape[0], k.shape[0]\n"
    "    out = np.empty((n_q, v.shape[1]))\n"
    "    for i0 in range(0, n_q, 256):\n"
    "        s = q[i0:i0 + 256] @ k.T / np.sqrt(q.shape[1])  # [256, n_k]\n"
    "        if causal:\n"
    "            rows = np.arange(i0, min(i0 + 256, n_q))[:, None] + n_k - n_q\n"
    "            s = np.where(np.arange(n_k)[None, :] <= rows, s, -np.inf)\n"
    "        if np.isneginf(s.max(axis=1)).any():\n"
    "            raise ValueError('a query row has no allowed key')\n"
    "        w = np.exp(s - s.max(axis=1, keepdims=True))\n"
    "        out[i0:i0 + 256] = (w / w.sum(axis=1, keepdims=True)) @ v\n"
    "    return out\n")})
SUBMISSIONS["mistake: tiled as the whole n x n scores"] = ("tiled", "mistake", {"tiled.py": (
    "import numpy as np\n\n\ndef tiled_attention(q, k, v, causal=True, block_q=64, block_k=64):\n"
    "    n_q, n_k = q.shape[0], k.shape[0]\n"
    "    if causal and n_q > n_k:\n        raise ValueError('a query row has no allowed key')\n"
    "    s = q @ k.T / np.sqrt(q.shape[1])  # [n_q, n_k]\n"
    "    if causal:\n        s = np.where(np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + n_k - n_q, s, -np.inf)\n"
    "    w = np.exp(s - s.max(axis=1, keepdims=True))\n"
    "    return (w / w.sum(axis=1, keepdims=True)) @ v\n")})
for mid in ("cache-quadratic-step", "fused-materialized-mask", "fused-not-fused"):
    m = CATALOGUE[mid]
    edits: dict = {}
    for e in m.mutant:
        edits.setdefault(e.file, []).append((e.old, e.new))
    SUBMISSIONS[f"mistake {mid}"] = (m.stage, "mistake", edits)
GREW = re.compile(r"grew ([\d.]+)x(?:, then ([\d.]+)x)?")
AT = re.compile(r"(?:at|T =|n =) ([\d,]+(?:, [\d,]+)+)")


def variant(dest: Path, edits: dict) -> Path:
    shutil.copytree(SOLUTIONS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for name, pairs in edits.items():
        if isinstance(pairs, str):  # the whole file
            (dest / name).write_text(pairs)
            continue
        text = (dest / name).read_text()
        for old, new in pairs:
            if text.count(old) != 1:
                raise SystemExit(f"{name}: {old[:60]!r} occurs {text.count(old)} times")
            text = text.replace(old, new)
        (dest / name).write_text(text)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", help="the submissions whose name holds this text")
    args = ap.parse_args()
    servers = {k: launchers.warm_launcher(isolate=namespaces.available(), wait=False, torch=k == "torch")
               for k in ("numpy", "torch")}
    rows, times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (stage, kind, edits) in SUBMISSIONS.items():
            if args.only and args.only not in name:
                continue
            sub = variant(Path(tmp) / str(len(rows)) / "submission", edits)
            stages = [stage] if stage else [s for s, _ in RULES.values()]
            for seed in range(args.seeds):
                t0 = time.perf_counter()
                res = grade(sub, stages=stages, seed=seed, zygote=servers)
                if stage is None:
                    times.append(time.perf_counter() - t0)
                for rule, (st, check) in RULES.items():
                    if st not in stages:
                        continue
                    r = {c.check.name: c for c in res.stages[st].checks}[check]
                    text = r.note or r.message or ""
                    grew = [float(g) for m in GREW.finditer(text) for g in m.groups() if g]
                    rows.append({"rule": rule, "submission": name, "kind": kind, "seed": seed, "kept": r.passed,
                                 "grew": grew, "text": text})
                print(f"  {name} seed {seed}: " + ", ".join(
                    f"{x['rule'].split(':')[0]} {'kept' if x['kept'] else 'LOST'} {x['grew']}"
                    for x in rows if x["submission"] == name and x["seed"] == seed), flush=True)
    for s in servers.values():
        s.close()
    print()
    for rule in RULES:
        print(f"## {rule}")
        print("| submission | kept / seeds | growth per doubling, min | max |")
        print("|---|---|---|---|")
        for name, (_, kind, _) in SUBMISSIONS.items():
            mine = [x for x in rows if x["rule"] == rule and x["submission"] == name]
            if not mine:
                continue
            g = [v for x in mine for v in x["grew"]]
            print(f"| {name} | {sum(x['kept'] for x in mine)} / {len(mine)} | "
                  f"{min(g):.1f}x | {max(g):.1f}x |" if g else f"| {name} | {sum(x['kept'] for x in mine)} / "
                  f"{len(mine)} | - | - |")
        print()
    if times:
        times.sort()
        print(f"a grade of kv_cache, fused and tiled (solutions): median {times[len(times) // 2]:.1f} s, "
              f"min {times[0]:.1f} s, max {times[-1]:.1f} s over {len(times)} seeds")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "grade_s": times}, indent=1))


if __name__ == "__main__":
    main()
