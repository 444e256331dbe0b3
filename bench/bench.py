"""make bench: feedback latency, batch throughput and the Gradescope run, each against a floor
measured in the same run. Prints a table and writes bench/results.json. Figures, not assertions:
the machines are shared and noisy, so each is the median of several runs.

    python bench/bench.py [--runs 5] [--batch 40] [--quick]
"""
import argparse
import atexit
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the catalogue mutants live beside the tests
PY = sys.executable


def timed(cmd: list[str], runs: int, cwd: Path = ROOT, env: dict | None = None) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                       env={**os.environ, **(env or {})})
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def side_by_side(a: list[str], b: list[str], runs: int) -> tuple[float, float]:
    """The medians of `a` and `b` run in turns (a, b, a, b, ...), so both meet the same moments of a shared machine."""
    ta, tb = [], []
    for _ in range(runs):
        ta.append(timed(a, 1))
        tb.append(timed(b, 1))
    return statistics.median(ta), statistics.median(tb)


def as_student(cmd: list[str]) -> list[str] | None:
    """`cmd` run as an ordinary user (uid 65534, a home of its own), when this is root and that user can run
    this interpreter; else None."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    home = Path(tempfile.mkdtemp(prefix="attn-bench-home-"))
    atexit.register(shutil.rmtree, home, True)  # found by a stranger TA: each bench left one behind
    os.chown(home, 65534, 65534)
    wrapped = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", f"HOME={home}", *cmd]
    # that user must be able to run the whole command here (a checkout in a private folder: it cannot)
    ok = subprocess.run(wrapped, cwd=ROOT, capture_output=True)
    return wrapped if ok.returncode == 0 else None


def make_batch(folder: Path, n: int, mistakes: bool = True) -> None:
    """n submissions, round robin: copies of the solutions and (with `mistakes`) a syntax error, a file whose
    loading never ends, and each of the catalogued mistakes, as a class hands them in."""
    from conftest import MUTANTS, variant

    broken = {"syntax-error": ("softmax.py", "\ndef broken(:\n"), "hang": ("masking.py", "\nwhile True:\n    pass\n")}
    kinds = [None, *broken, *sorted(MUTANTS)] if mistakes else [None]
    for i in range(n):
        kind = kinds[i % len(kinds)]
        dest = folder / f"sub{i:03d}"
        if kind in MUTANTS:
            with tempfile.TemporaryDirectory() as tmp:
                shutil.move(str(variant(Path(tmp), MUTANTS[kind][0])), dest)
            continue
        shutil.copytree(ROOT / "solutions", dest)
        if kind is not None:
            name, text = broken[kind]
            with open(dest / name, "a") as f:
                f.write(text)


def watch_latency(saves: int, env: dict | None = None) -> list[dict]:
    """`make watch` on a copy of the solutions: from the write of a stage file to its stage's verdict on
    the screen, and to the whole screen (the stages that use it included), median over `saves` saves.
    `env` adds variables (ATTN_NO_FORK=1: new interpreters instead of the fork server, as on macOS)."""
    import re
    import threading

    from autograder.stages import BY_NAME

    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp) / "exercises"
        shutil.copytree(ROOT / "solutions", sub)
        p = subprocess.Popen([PY, "-m", "autograder", "watch", "--submission", str(sub)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env={**os.environ, "NO_COLOR": "1", **(env or {})})
        log: list[tuple[float, bytes]] = []
        threading.Thread(target=lambda: [log.append((time.perf_counter(), c)) for c in iter(lambda: p.stdout.read1(65536), b"")],
                         daemon=True).start()

        def when(pattern: bytes, after: float, limit: float = 300) -> float:
            # generous limits: on a busy machine a slow screen is a figure to print, not a reason to stop
            deadline = time.perf_counter() + limit
            while time.perf_counter() < deadline:
                text, t_at = b"", None
                for t, chunk in list(log):
                    if t >= after:
                        text += chunk
                        if re.search(pattern, text):
                            t_at = t
                            break
                if t_at is not None:
                    return t_at - after
                time.sleep(0.005)
            raise TimeoutError(pattern)

        rows = []
        try:
            when(rb"Next step: (?!grading)", 0.0, 600)  # the first screen
            for name, stage in (("softmax.py", "softmax"), ("masking.py", "masking"), ("module.py", "heads")):
                verdict, screen = [], []
                for _ in range(saves):
                    time.sleep(0.6)
                    text = (sub / name).read_text()
                    t0 = time.perf_counter()
                    (sub / name).write_text(text)
                    verdict.append(when(rf"stage {BY_NAME[stage].number} {stage}: passed".encode(), t0))
                    screen.append(when(rb"Next step: (?!grading)", t0))
                torch = BY_NAME[stage].torch
                rows.append({"file": name, "stage": stage, "saves": saves,
                             "verdict_s": round(statistics.median(verdict), 3),
                             "screen_s": round(statistics.median(screen), 3),
                             "target_verdict_s": 0.5 if torch else 0.3, "target_screen_s": 1.5})
        finally:
            p.send_signal(2)
            p.wait(timeout=30)
        return rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--batch", type=int, default=40)
    p.add_argument("--quick", action="store_true",
                   help="one run of each, a batch of 6, and none of the with/without comparisons (namespaces, the "
                        "run-time guard, the plain regrade, the one-core regrade, the batch of solutions only, watch "
                        "without fork): rough figures, to see the bench works")
    args = p.parse_args()
    if args.quick:
        args.runs, args.batch = 1, 6
    rows = []

    def row(name, seconds, floor_name, floor, target=None, note=""):
        rows.append({"measure": name, "seconds": round(seconds, 3), "floor": floor_name,
                     "floor_seconds": round(floor, 3), "ratio": round(seconds / floor, 2), "target": target, "note": note})

    floor_np_torch = timed([PY, "-c", "import numpy, torch"], args.runs)
    floor_np = timed([PY, "-c", "import numpy"], args.runs)
    grade = [PY, "-m", "autograder", "grade", "--submission", "solutions"]
    fresh = grade + ["--fresh"]  # every cost check measured, as in a first grade of these files
    imports = [PY, "-c", "import numpy, torch"]
    timed(grade, 1)  # the passes of the cost checks are kept from here on (grade/kept.py)
    again, floor = side_by_side(grade, imports, args.runs)
    row("make grade (solutions, all stages), files unchanged since the last grade", again, "import numpy, torch", floor,
        "<= 1.25x", "the cost checks' passes kept from the grade before (grade/kept.py)")
    first, floor = side_by_side(fresh, imports, args.runs)
    row("make grade FRESH=1 (solutions, all stages): every cost check measured", first, "import numpy, torch", floor,
        None, "what a first grade of these files costs")
    row("make grade STAGE=softmax", timed(grade + ["--stage", "softmax"], args.runs), "import numpy", floor_np,
        "<= 3x and < 1 s")
    student = as_student(grade)
    if student and not args.quick:  # as root: the same grade as an ordinary user, the way a student runs it
        row("make grade as a student (not root)", timed(student, args.runs), "import numpy, torch",
            timed(as_student([PY, "-c", "import numpy, torch"]), args.runs), "<= 1.1x")
    # what the namespace boundary and the run-time guard cost a grade (the same grade without them is the floor)
    plain = {"ATTN_NO_NAMESPACES": "1"}
    if not args.quick:
        row("make grade FRESH=1, in namespaces", timed(fresh, args.runs), "same, no namespaces",
            timed(fresh, args.runs, env=plain))
        row("make grade FRESH=1, run-time guard on", timed(fresh, args.runs), "same, ATTN_GUARD=off",
            timed(fresh, args.runs, env={"ATTN_GUARD": "off"}))

    from autograder.instructor.build import autograder_zip, gradescope_local

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        z = autograder_zip(tmp / "autograder.zip", "bench-secret")
        t = []
        for i in range(args.runs):
            t0 = time.perf_counter()
            gradescope_local(ROOT / "solutions", z, tmp / f"gs{i}", python=PY)
            t.append(time.perf_counter() - t0)
        row("Gradescope run_autograder (one submission)", statistics.median(t), "import numpy, torch", floor_np_torch)

        batch = tmp / "batch"
        batch.mkdir()
        make_batch(batch, args.batch)
        per_min = {}
        for jobs in ((os.cpu_count() or 1,) if args.quick else (1, os.cpu_count() or 1)):
            if jobs in per_min:
                continue
            # one core: the whole regrade (grader, fork server, children) pinned to core 0 with taskset
            pin = ["taskset", "-c", "0"] if jobs == 1 and shutil.which("taskset") else []
            t0 = time.perf_counter()
            subprocess.run([*pin, PY, "-m", "autograder", "regrade", str(batch), "--jobs", str(jobs), "--out",
                            str(tmp / f"out{jobs}")], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            per_min[jobs] = args.batch / (time.perf_counter() - t0) * 60
        cores = os.cpu_count() or 1
        if not args.quick:
            t0 = time.perf_counter()  # the same batch on every core, with the fork server and no namespaces
            subprocess.run([PY, "-m", "autograder", "regrade", str(batch), "--jobs", str(cores), "--trust", "--out",
                            str(tmp / "out-plain")], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env={**os.environ, **plain})
            per_min["plain"] = args.batch / (time.perf_counter() - t0) * 60
        if not args.quick:  # the same number of submissions, every one the solutions: the rate without mistakes
            honest = tmp / "honest"
            honest.mkdir()
            make_batch(honest, args.batch, mistakes=False)
            t0 = time.perf_counter()
            subprocess.run([PY, "-m", "autograder", "regrade", str(honest), "--jobs", str(cores), "--out",
                            str(tmp / "out-honest")], cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            per_min["honest"] = args.batch / (time.perf_counter() - t0) * 60
    rate = {k: round(v, 1) for k, v in per_min.items()}
    throughput = {"submissions": args.batch, "per_minute_1_core": rate.get(1),
                  f"per_minute_{cores}_cores": rate[cores],
                  "speedup": round(per_min[cores] / per_min[1], 2) if 1 in per_min else None,
                  "target": ">= 60/min on 2 cores, near-linear",
                  f"per_minute_{cores}_cores_fork_server_no_namespaces": rate.get("plain"),
                  f"per_minute_{cores}_cores_solutions_only": rate.get("honest")}
    watch = watch_latency(2 if args.quick else 10)
    no_fork = [] if args.quick else watch_latency(5, {"ATTN_NO_FORK": "1"})  # how macOS's watch compares
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.machine()) if Path("/proc/cpuinfo").exists() else platform.machine()
    machine = {"cpu": model, "cores": cores, "python": platform.python_version()}
    print(f"{'measure':<44} {'median s':>9} {'floor':>20} {'floor s':>8} {'ratio':>6}  target")
    for r in rows:
        print(f"{r['measure']:<44} {r['seconds']:>9.3f} {r['floor']:>20} {r['floor_seconds']:>8.3f} "
              f"{r['ratio']:>6.2f}  {r['target'] or ''}")
    print(f"\nregrade of {args.batch} submissions (the solutions, a syntax error, a hang and the catalogued mistakes; "
          f"every child in namespaces): {rate[cores]}/min on {cores} cores"
          + (f", {rate[1]}/min on 1 core (x{throughput['speedup']})" if 1 in rate and cores != 1 else "")
          + (f"; {rate['plain']}/min on {cores} cores with the fork server and no namespaces" if "plain" in rate else "")
          + (f"; {rate['honest']}/min on {cores} cores when every submission is the solutions" if "honest" in rate else "")
          + ("\n(QUICK: one run of each, no with/without comparisons; written to bench/results-quick.json)"
             if args.quick else ""))
    print(f"\n{'make watch: save of':<20} {'its verdict s':>14} {'whole screen s':>15}  targets (median of {watch[0]['saves']})")
    for w in watch:
        print(f"{w['file']:<20} {w['verdict_s']:>14.3f} {w['screen_s']:>15.3f}  <= {w['target_verdict_s']} s, "
              f"<= {w['target_screen_s']} s")
    if no_fork:
        print(f"\n{'watch without fork:':<20} {'its verdict s':>14} {'whole screen s':>15}  (ATTN_NO_FORK=1, as on macOS)")
    for w in no_fork:
        print(f"{w['file']:<20} {w['verdict_s']:>14.3f} {w['screen_s']:>15.3f}")
    out = ROOT / "bench" / ("results-quick.json" if args.quick else "results.json")  # QUICK keeps the real figures
    out.write_text(json.dumps({"machine": machine, "latency": rows, "throughput": throughput, "watch": watch,
                               "watch_no_fork": no_fork}, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
