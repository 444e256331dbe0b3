"""`make mutants`: how many small mistakes in solutions/ the grader catches, on the autograder and
locally in the student repo. A report, like `make bench`; not a test.

    python bench/mutants.py [--limit N] [--jobs N] [--files softmax.py,masking.py]

Mutants come from mutmut's mutation operators (numbers, comparisons, arithmetic and boolean operators,
arguments dropped or replaced by None, assignments); each is solutions/ with one such change. Each is
graded twice on the stages its file belongs to and those that call them:
- by the autograder: every check for its points, hidden checks on a seed that is not 0;
- locally, as the student repo grades it: the public checks and the hidden checks' public twins on
  the seed-0 inputs, answered from the fixtures that `make release` records (no attn_ref).
A mutant is killed when a stage fails. A survivor is a blind spot, unless bench/mutants-equivalent.txt
lists it as equivalent (it behaves as the original for every input the contract allows), with why.
Mutations of string literals (error messages, which no check reads) are left out.
Writes bench/mutants.json and bench/mutants.md.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
EQUIVALENT = ROOT / "bench" / "mutants-equivalent.txt"
HIDDEN_SEED = 20261130


def mutants(files: list[str] | None) -> list[dict]:
    """Every mutant of solutions/: file, line, the original and mutated code, and the mutated source."""
    import libcst as cst

    work = Path(tempfile.mkdtemp(prefix="attn-mutmut-"))
    (work / "setup.cfg").write_text("[mutmut]\nsource_paths=solutions\n")  # mutmut asks where the code is
    cwd = os.getcwd()
    os.chdir(work)
    try:
        from mutmut.mutation.file_mutation import create_mutations

        out = []
        for path in sorted((ROOT / "solutions").glob("*.py")):
            if path.name == "__init__.py" or (files and path.name not in files):
                continue
            code = path.read_text()
            module, found, _, _ = create_mutations(path.name, code)
            positions = cst.MetadataWrapper(module, unsafe_skip_copy=True).resolve(cst.metadata.PositionProvider)
            seen: dict[str, int] = {}
            for m in found:
                if isinstance(m.mutated_node, cst.SimpleString) or isinstance(m.original_node, cst.SimpleString):
                    continue
                before = module.code_for_node(m.original_node).strip()
                after = module.code_for_node(m.mutated_node).strip()
                key = f"{path.name} | {before} -> {after}"
                seen[key] = seen.get(key, 0) + 1
                line = positions[m.original_node].start.line if m.original_node in positions else 0
                out.append({"id": f"{key} | {seen[key]}", "file": path.name, "line": line, "before": before,
                            "after": after, "source": module.deep_replace(m.original_node, m.mutated_node).code})
        return out
    finally:
        os.chdir(cwd)
        shutil.rmtree(work, ignore_errors=True)


def equivalents() -> dict[str, str]:
    """id (file | before -> after | n) -> why it is equivalent, from bench/mutants-equivalent.txt."""
    out = {}
    for line in EQUIVALENT.read_text().splitlines() if EQUIVALENT.is_file() else []:
        if line.strip() and not line.startswith("#"):
            key, _, why = line.partition(" # ")
            out[key.strip()] = why.strip()
    return out


_server = None
_fixtures = None


def _grade_pair(m: dict, fixtures_path: str) -> dict:
    """Grade one mutant the autograder's way and the student repo's way; which stages failed in each."""
    global _server, _fixtures
    from autograder.grade import grade
    from autograder.sandbox.launchers import ForkServer
    from autograder.stages import STAGES, stage_of_file
    from autograder.stages.fixtures import Replayer
    from autograder.watch import affected_stages

    if _server is None or not _server.alive():
        _server = ForkServer()
    if _fixtures is None:
        _fixtures = json.loads(Path(fixtures_path).read_text())
    stages = affected_stages({m["file"]})
    assert stage_of_file(m["file"]) in stages and all(s in {x.name for x in STAGES} for s in stages)
    sub = Path(tempfile.mkdtemp(prefix="attn-mutant-"))
    try:
        for f in (ROOT / "solutions").glob("*.py"):
            shutil.copy2(f, sub / f.name)
        (sub / m["file"]).write_text(m["source"])
        remote = grade(sub, stages, seed=HIDDEN_SEED, zygote=_server)
        local = grade(sub, stages, seed=0, zygote=_server, public_only=True,
                      ref=Replayer("ref", _fixtures), mistakes=Replayer("mistakes", _fixtures))
    finally:
        shutil.rmtree(sub, ignore_errors=True)

    def failed(res):
        return [n for n, s in res.stages.items() if s.status != "passed"]

    return {**{k: v for k, v in m.items() if k != "source"},
            "autograder": failed(remote), "local": failed(local),
            "points_lost": round(remote.max_score + remote.bonus_max_score - remote.score - remote.bonus_score, 2)}


def report(rows: list[dict], eq: dict[str, str], seconds: float) -> str:
    by_file: dict[str, list[dict]] = {}
    for r in rows:
        by_file.setdefault(r["file"], []).append(r)
    lines = ["| file | mutants | killed by the autograder | killed locally | equivalent | blind spots |",
             "|---|---|---|---|---|---|"]
    tot = [0, 0, 0, 0, 0]
    for f, rs in sorted(by_file.items()):
        a = sum(bool(r["autograder"]) for r in rs)
        loc = sum(bool(r["local"]) for r in rs)
        survivors = [r for r in rs if not r["autograder"] and not r["local"]]
        e = sum(r["id"] in eq for r in survivors)
        blind = len(survivors) - e
        for i, v in enumerate((len(rs), a, loc, e, blind)):
            tot[i] += v
        lines.append(f"| {f} | {len(rs)} | {a} | {loc} | {e} | {blind} |")
    lines.append(f"| all | {tot[0]} | {tot[1]} ({100 * tot[1] / max(tot[0], 1):.1f}%) | "
                 f"{tot[2]} ({100 * tot[2] / max(tot[0], 1):.1f}%) | {tot[3]} | {tot[4]} |")
    only_remote = [r for r in rows if r["autograder"] and not r["local"]]
    lines += ["", f"Killed by the autograder but not locally: {len(only_remote)}."]
    lines += [f"- `{r['id']}` (line {r['line']}): stages {', '.join(r['autograder'])}" for r in only_remote]
    survivors = [r for r in rows if not r["autograder"] and not r["local"]]
    lines += ["", "Survivors accepted as equivalent (bench/mutants-equivalent.txt):"]
    lines += [f"- `{r['id']}` (line {r['line']}): {eq[r['id']]}" for r in survivors if r["id"] in eq] or ["- none"]
    lines += ["", "Blind spots (survivors not known to be equivalent):"]
    lines += [f"- `{r['id']}` (line {r['line']})" for r in survivors if r["id"] not in eq] or ["- none"]
    lines += ["", f"{len(rows)} mutants in {seconds / 60:.1f} min."]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, help="grade only the first N mutants (a quick look)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--files", help="only these solution files, comma-separated")
    args = p.parse_args()
    from autograder.instructor.build import release

    t0 = time.monotonic()
    student = release(Path(tempfile.mkdtemp(prefix="attn-release-")) / "student")
    fixtures = str(student / "autograder" / "fixtures.json")
    found = mutants(args.files.split(",") if args.files else None)[: args.limit]
    print(f"{len(found)} mutants of solutions/; grading each twice", file=sys.stderr)
    rows = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(_grade_pair, m, fixtures) for m in found]
        for i, fut in enumerate(as_completed(futures), 1):
            rows.append(fut.result())
            print(f"\r{i}/{len(found)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    rows.sort(key=lambda r: (r["file"], r["line"], r["id"]))
    eq = equivalents()
    text = report(rows, eq, time.monotonic() - t0)
    (ROOT / "bench" / "mutants.json").write_text(json.dumps(rows, indent=1) + "\n")
    (ROOT / "bench" / "mutants.md").write_text(text)
    print(text)
    shutil.rmtree(student.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
