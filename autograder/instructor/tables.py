"""The stage tables of both READMEs, from the stage declarations (never copied by hand).

    python -m autograder.instructor.tables [--check]   (`make readme`; a test runs --check)

README.md holds its table between two marker lines; this rewrites what lies between them. The
student README (instructor/build.py) calls `student_table` and `student_totals`.
"""
import argparse
import sys
from pathlib import Path

from ..stages import BONUS, BONUS_POINTS, CORE, CORE_POINTS, SHOWN_ORDER, numbers

ROOT = Path(__file__).resolve().parents[2]
BEGIN = "<!-- stage table: written by `make readme` from the stage declarations; edit those, not this -->"
END = "<!-- end of the stage table -->"


def _files(stage) -> str:
    return ", ".join(f"`{f}`" for f in stage.files)


def _name(stage) -> str:
    return stage.name + (" (bonus)" if stage.bonus else "")


def readme_table() -> str:
    """The main README's table and the sentence on the totals under it."""
    rows = "\n".join(f"| {s.number} | {_name(s)} | {_files(s)} | {s.points} | {s.reread} |" for s in SHOWN_ORDER)
    return (f"| # | stage | file | points | reread |\n|---|---|---|---|---|\n{rows}\n\n"
            f"The bonus stages ({numbers(BONUS)}, {BONUS_POINTS} points) are graded apart from the {CORE_POINTS} "
            "core points: the report\nshows a separate bonus total, and `results.json` has them in "
            "`extra_data.stages` and `extra_data.bonus`.")


def student_table() -> str:
    rows = "\n".join(f"| {s.number} | {_name(s)} | {_files(s)} | {s.points} |" for s in SHOWN_ORDER)
    return f"| # | stage | files | points |\n|---|---|---|---|\n{rows}"


def student_totals() -> str:
    return (f"The core stages ({numbers(CORE, ' to ')}) make {CORE_POINTS} points; the bonus stages "
            f"({numbers(BONUS, ' to ')}) are graded apart.")


def with_table(text: str) -> str:
    """README text with what lies between the markers replaced by readme_table()."""
    head, sep, rest = text.partition(BEGIN + "\n")
    _, end, tail = rest.partition(END)
    if not sep or not end:
        raise ValueError(f"README.md lacks the marker lines {BEGIN!r} and {END!r}")
    return f"{head}{BEGIN}\n{readme_table()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder.instructor.tables")
    p.add_argument("--check", action="store_true", help="exit 1 if README.md's table is not the generated one")
    args = p.parse_args(argv)
    path = ROOT / "README.md"
    text = path.read_text()
    new = with_table(text)
    if args.check:
        if new != text:
            print("README.md's stage table differs from the declarations: run `make readme`", file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    print("wrote the stage table of README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
