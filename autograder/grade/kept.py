"""Passes of the measured checks (the cost rules: Check.measured), kept between grades of the same files.

A measured check runs the submission again in fresh children at three sizes, which is most of what a grade of the
later stages costs; graded again with not one byte of the files it loads changed, it would measure the same code on
the same inputs (the same seed). `make grade` and `make watch` keep such a check's pass, keyed by the digests of the
files its stage loads (its own, and the stage files they import, read from their import statements: read_by), the
check, its seed, the grader's own code, the interpreter and torch, and take it back the next time instead of
measuring again, saying so in the report (`make grade FRESH=1` measures every one again, and keeps what it
measured). A failure is never kept:
it is measured again in every grade, so a moment's load never sticks. Gradescope, regrade and the notebooks always
measure. Kept only where no child can write the user's cache (common._baseline_file, growth.kept_here), beside the
grader's kept baselines.
"""
import ast
import functools
import hashlib
import json
import time
from pathlib import Path

from ..child.policy import container_memory
from ..declarations import Check
from ..sandbox.safe_files import Snapshot
from ..sandbox.static_check import loaded_files
from ..stages import BY_NAME, SUBMISSION_FILES
from ..stages.common import _baseline_file
from ..stages.growth import kept_here

KEEP_AT_MOST = 256  # kept passes in the user's cache; past it the oldest are removed (each is a few hundred bytes)


@functools.cache
def grader_digest() -> str:
    """A digest of the grader's code and data (autograder/, and attn_ref/ where the full repo has it): a kept
    pass is the verdict of this grader only."""
    root = Path(__file__).resolve().parent.parent.parent
    h = hashlib.sha256()
    for folder in ("autograder", "attn_ref"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


# names through which a file can load another without an import statement: where one appears, every file counts
DYNAMIC = frozenset({"importlib", "import_module", "__import__", "exec", "eval", "compile", "runpy", "modules",
                     "spec_from_file_location", "SourceFileLoader", "__loader__", "__spec__", "open", "read_text",
                     "read_bytes"})


def _loads_dynamically(source: bytes) -> bool:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return True
    return any((isinstance(n, ast.Name) and n.id in DYNAMIC) or (isinstance(n, ast.Attribute) and n.attr in DYNAMIC)
               or (isinstance(n, ast.alias) and n.name.split(".")[0] in DYNAMIC) for n in ast.walk(tree))


def read_by(stage: str, snap: Snapshot) -> list[str]:
    """The submission files a measured check of `stage` loads: the stage's files and its functions' (Function.reads),
    and every stage file they import, by name or relatively (static_check.loaded_files); every file where one of
    them could load another some other way (DYNAMIC)."""
    sources = {n: b for n, b in snap.data.items() if n in SUBMISSION_FILES}
    s = BY_NAME[stage]
    files: set[str] = set()
    for root in {*s.files, *(f for fn in s.functions for f in fn.reads)}:
        files |= loaded_files(sources, root.removesuffix(".py"))
    return sorted(sources if any(_loads_dynamically(sources[f]) for f in files) else files)


def _path(check: Check, seed: int, public_only: bool, snap: Snapshot) -> Path | None:
    files = tuple((n, snap.sha256[n]) for n in read_by(check.stage, snap))
    key = ("pass", check.id, check.twin, check.visibility, seed, public_only, files, grader_digest(),
           container_memory())
    return _baseline_file(key) if kept_here() else None


def taken(check: Check, seed: int, public_only: bool, snap: Snapshot) -> dict | None:
    """The kept pass of `check` on these files at `seed` ({"note", "called", "at"}), or None."""
    try:
        path = _path(check, seed, public_only, snap)
        kept = json.loads(path.read_text()) if path else None
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or not isinstance(kept.get("note"), str) or not isinstance(kept.get("at"), str):
        return None
    return {"note": kept["note"], "called": tuple(str(c) for c in kept.get("called", ())), "at": kept["at"]}


def keep(check: Check, seed: int, public_only: bool, snap: Snapshot, note: str, called: tuple) -> None:
    """Keep a pass of `check` just measured (whole or none: grades may run side by side), and remove the oldest
    kept passes past KEEP_AT_MOST."""
    try:
        path = _path(check, seed, public_only, snap)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.part{time.monotonic_ns()}")
        part.write_text(json.dumps({"note": note, "called": list(called), "at": time.strftime("%Y-%m-%d %H:%M:%S")}))
        part.replace(path)
        passes = sorted(path.parent.glob("pass-*"), key=lambda p: p.stat().st_mtime)
        for old in passes[:-KEEP_AT_MOST]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
