"""Generate exercises/ from solutions/: each `# BEGIN SOLUTION` ... `# END SOLUTION` block becomes a stub.

    python -m autograder.instructor.make_exercises [--check]

A marker may name the stage it belongs to (`# BEGIN SOLUTION stage=kv_cache`); otherwise
the file's stage is used. The stub raises NotImplementedError("<stage>: ...") so the grader
can tell an unstarted stage from a broken one. --check exits 1 if exercises/ is stale.
"""
import argparse
import re
import sys
from pathlib import Path

from .. import messages as say
from ..stages import stage_of_file

ROOT = Path(__file__).resolve().parents[2]
BEGIN = re.compile(r"^(\s*)# BEGIN SOLUTION(?:\s+stage=(\w+))?\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
DEF = re.compile(r"^\s*(?:def|class)\s+(\w+)")
HEADER = say.STUB_HEADER


def stub_source(text: str, filename: str) -> str:
    out, inside, where = [], False, None
    default_stage = stage_of_file(filename) or "heads"
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        m = BEGIN.match(line)
        if m:
            if inside:
                raise ValueError(f"{filename}:{n}: nested BEGIN SOLUTION")
            inside = True
            stage = m.group(2) or default_stage
            out.append(f'{m.group(1)}raise NotImplementedError("{stage}: write this part of {where or filename}")\n')
            continue
        if END.match(line):
            if not inside:
                raise ValueError(f"{filename}:{n}: END SOLUTION without BEGIN")
            inside = False
            continue
        if not inside:
            d = DEF.match(line)
            if d:
                where = d.group(1) if not line.startswith(" ") or where is None or line.lstrip().startswith("class") \
                    else f"{where.split('.')[0]}.{d.group(1)}"
            out.append(line)
    if inside:
        raise ValueError(f"{filename}: BEGIN SOLUTION without END")
    return "".join(out)


def generate(src: Path = ROOT / "solutions") -> dict[str, str]:
    files = {}
    for path in sorted(src.glob("*.py")):
        text = path.read_text()
        body = stub_source(text, path.name)
        files[path.name] = body if path.name == "__init__.py" else HEADER + body
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="fail if exercises/ differs from what would be generated")
    p.add_argument("--out", default=str(ROOT / "exercises"))
    args = p.parse_args(argv)
    out = Path(args.out)
    files = generate()
    if args.check:
        stale = [n for n, body in files.items() if not (out / n).is_file() or (out / n).read_text() != body]
        extra = [p.name for p in out.glob("*.py") if p.name not in files]
        if stale or extra:
            print(f"exercises/ is out of date: {', '.join(stale + extra)}; run `make exercises`", file=sys.stderr)
            return 1
        print("exercises/ matches solutions/")
        return 0
    out.mkdir(exist_ok=True)
    for n, body in files.items():
        (out / n).write_text(body)
    print(f"wrote {len(files)} files to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
