"""make gpu-check: the torch stages on CUDA, proof that the fused call runs a fused kernel, and the
cost of the fused call against a naive softmax(QK^T)V. Under five minutes on one GPU.

Without CUDA it says so and exits 0, claiming nothing. Writes bench/gpu_results.json.

    python bench/gpu_check.py [--submission solutions]
"""
import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from attn_ref import core  # noqa: E402

TOL = {  # per dtype: float32 as the CPU checks; half precisions carry 8 and 11 bits of mantissa
    torch.float32: (1e-4, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}


def load(submission: Path, name: str):
    """Import the submission folder as a package (as the grader does) and return one module."""
    pkg = "gpu_submission"
    if pkg not in sys.modules:
        spec = importlib.util.spec_from_file_location(pkg, submission / "__init__.py",
                                                      submodule_search_locations=[str(submission)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[pkg] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"{pkg}.{name}")


def check_dtypes(sub: Path, device: str = "cuda", dtypes=tuple(TOL)) -> list[dict]:
    """The module, the cached decode and the fused call on the device against the float64 reference."""
    Module = load(sub, "module").CausalSelfAttention
    KVCache = load(sub, "kv_cache").KVCache
    fused = load(sub, "fused").fused_attention
    rng = np.random.default_rng(0)
    B, T, C, H = 2, 64, 128, 4
    x = rng.standard_normal((B, T, C))
    w_qkv, w_out = rng.standard_normal((3 * C, C)) / C**0.5, rng.standard_normal((C, C)) / C**0.5
    want = core.module_forward(x, w_qkv, w_out, H)
    q, k, v = (rng.standard_normal((B, H, T, 32)) for _ in range(3))
    want_fused = core.fused_attention(q, k, v, True)
    rows = []
    for dtype in dtypes:
        rtol, atol = TOL[dtype]
        for fused_flag in (False, True):
            m = Module(C, H, fused=fused_flag).to(device=device, dtype=dtype)
            m.load_state_dict({"qkv.weight": torch.tensor(w_qkv), "out.weight": torch.tensor(w_out)})
            xt = torch.tensor(x, device=device, dtype=dtype)
            with torch.no_grad():
                full = m(xt).double().cpu().numpy()
                cache = KVCache(B, H, T, C // H, dtype=dtype, device=device)
                steps = torch.cat([m(xt[:, t : t + 1], cache) for t in range(T)], dim=1).double().cpu().numpy()
            for what, got in (("forward", full), ("decode", steps)):
                ok = bool(np.allclose(got, want, rtol=rtol * 10, atol=atol * 10))  # C = 128 sums: 10x the tolerance
                rows.append({"check": f"module {what} fused={fused_flag}", "dtype": str(dtype), "ok": ok,
                             "max_abs_err": float(np.abs(got - want).max())})
        qt, kt, vt = (torch.tensor(a, device=device, dtype=dtype) for a in (q, k, v))
        got = fused(qt, kt, vt, causal=True).double().cpu().numpy()
        rows.append({"check": "fused_attention", "dtype": str(dtype),
                     "ok": bool(np.allclose(got, want_fused, rtol=rtol, atol=atol)),
                     "max_abs_err": float(np.abs(got - want_fused).max())})
    return rows


FUSED_OPS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention")  # aten ops of the fused backends (CPU: ..._for_cpu)


def fused_kernel_proof(sub: Path, device: str = "cuda", dtypes=(torch.float16, torch.bfloat16),
                       T: int = 1024) -> list[dict]:
    """The fused call passes with the math backend excluded, and the profiler shows a fused backend's
    op ran (with the device kernels it launched, on CUDA). Code that never calls sdpa also passes
    the exclusion, so the profile, not the absence of an error, is the proof."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    fused = load(sub, "fused").fused_attention
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    rows = []
    for dtype in dtypes:
        q, k, v = (torch.randn(2, 16, T, 128, device=device, dtype=dtype) for _ in range(3))
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
                with profile(activities=activities) as prof:
                    fused(q, k, v, causal=True)
                    if device == "cuda":
                        torch.cuda.synchronize()
        except RuntimeError as e:
            rows.append({"dtype": str(dtype), "fused_kernel": False, "error": str(e)[:300]})
            continue
        keys = {e.key for e in prof.key_averages()}
        ops = sorted(k for k in keys if k.startswith("aten::") and any(f in k for f in FUSED_OPS))
        kernels = sorted(k for k in keys if not k.startswith("aten::")
                         and any(s in k.lower() for s in ("flash", "fmha", "cudnn", "attention")))
        row = {"dtype": str(dtype), "fused_kernel": bool(ops), "ops": ops, "kernels": kernels[:5]}
        if not ops:
            row["error"] = ("no fused attention op ran: the call does not reach "
                            "scaled_dot_product_attention's fused kernels")
        rows.append(row)
    return rows


def timed(fn, device: str, reps: int = 10) -> float:
    """Median seconds of fn(): CUDA events on the GPU, a wall clock on the CPU."""
    fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def naive(q, k, v):
    """softmax(QK^T / sqrt(D)) V with a materialised T x T causal mask: what the fused call avoids."""
    T = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5  # [B, H, T, T]
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    return s.softmax(-1) @ v  # [B, H, T, D]


def costs(sub: Path, device: str = "cuda", Ts=(4096, 16384), H: int = 16, D: int = 128,
          dtype=torch.bfloat16, reps: int = 10) -> list[dict]:
    """Time, TFLOP/s and (CUDA only) peak memory of the fused call and of `naive`, per T."""
    fused = load(sub, "fused").fused_attention
    rows = []
    B = 1
    for T in Ts:
        q, k, v = (torch.randn(B, H, T, D, device=device, dtype=dtype) for _ in range(3))
        flops = 2 * B * H * T * T * D  # causal forward, counted as the issue states
        for name, fn in (("fused (solutions)", lambda: fused(q, k, v, causal=True)),
                         ("naive softmax(QK^T)V", lambda: naive(q, k, v))):
            if device == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            try:
                seconds = timed(fn, device, reps)
            except torch.cuda.OutOfMemoryError:
                rows.append({"T": T, "impl": name, "error": "out of memory"})
                continue
            peak = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1) if device == "cuda" else None
            rows.append({"T": T, "impl": name, "ms": round(seconds * 1e3, 3),
                         "TFLOP/s": round(flops / seconds / 1e12, 3), "peak_MiB": peak})
    return rows


def show(result: dict) -> None:
    for r in result["dtypes"]:
        print(f"  {'ok ' if r['ok'] else 'BAD'} {r['check']:<30} {r['dtype']:<16} max err {r['max_abs_err']:.2e}")
    for r in result["fused_kernel"]:
        print(f"  fused kernel {r['dtype']}: {r['fused_kernel']} {r.get('error') or r['ops'] + r['kernels']}")
    print(f"  {'T':>6} {'implementation':<22} {'ms':>9} {'TFLOP/s':>8} {'peak MiB':>9}")
    for r in result["costs"]:
        print(f"  {r['T']:>6} {r['impl']:<22} {r.get('ms', '-'):>9} {r.get('TFLOP/s', '-'):>8} "
              f"{str(r.get('peak_MiB', r.get('error'))):>9}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--submission", default=str(ROOT / "solutions"))
    p.add_argument("--out", default=str(ROOT / "bench" / "gpu_results.json"))
    p.add_argument("--cpu-smoke", action="store_true", help="run the float32 checks on the CPU (tests the script)")
    args = p.parse_args()
    sub = Path(args.submission).resolve()
    if args.cpu_smoke:  # the same code at CPU sizes, float32: the script's own test where no GPU is lent
        result = {"dtypes": check_dtypes(sub, "cpu", (torch.float32,)),
                  "fused_kernel": fused_kernel_proof(sub, "cpu", (torch.float32,), T=256),
                  "costs": costs(sub, "cpu", Ts=(256, 512), H=4, D=64, dtype=torch.float32, reps=3)}
    elif not torch.cuda.is_available():
        print("gpu-check: no CUDA device here (torch.cuda.is_available() is False); nothing was checked.")
        return 0
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "dtypes": check_dtypes(sub),
                  "fused_kernel": fused_kernel_proof(sub), "costs": costs(sub)}
        print(f"GPU: {result['gpu']}  torch {result['torch']}")
    show(result)
    if not args.cpu_smoke:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    ok = all(r["ok"] for r in result["dtypes"]) and all(r["fused_kernel"] for r in result["fused_kernel"])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
