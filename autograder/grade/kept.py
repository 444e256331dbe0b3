"""Passes of the measured checks (the cost rules: Check.measured), kept between grades of the same files.

A measured check runs the submission again in fresh children at three sizes, which is most of what a grade of the
later stages costs; graded again with not one byte of the files it loads changed, it would measure the same code
(on other rows of its outputs, drawn afresh). `make grade` and `make watch` keep such a check's pass, keyed by the
digests of the files its stage loads (its own, and the stage files they import, read from their import statements:
read_by), the check, its seed, the grader's own code, numpy, the interpreter and torch, the call's time limit and the
children's switches. Once measured passing twice in a row (CONFIRMED), a pass is taken back instead of measuring
again, for at most REUSES grades and MAX_AGE_S seconds, then measured again; the report says so, and `make grade
FRESH=1` measures every one again (keeping what it measured). A measured failure is never kept and drops what was
kept, so neither a moment's load nor a lucky draw sticks. Gradescope, Classroom, regrade and the notebooks always
measure. Kept only where no child can write the user's cache (common._baseline_file, growth.kept_here), beside the
grader's kept baselines.
"""
import ast
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


CONFIRMED = 2  # passes measured in a row before one is taken back: a lucky pass (code right only at some draws of
# the grader's rows, or on a coin flip) must be lucky twice (a stranger's coin-flip softmax stuck at 12/12 after one)
REUSES = 8  # grades that take a kept pass back before it is measured again, and ...
MAX_AGE_S = 3600.0  # ... seconds: code whose cost depends on the clock (a stranger's) is stale for a bounded while


def settings(timeout: float) -> tuple:
    """What else decides a measured check's verdict: a call's time limit, numpy's version (torch's is in
    common._baseline_file), and the switches and thread counts the children read."""
    import os

    import numpy

    switches = sorted((k, v) for k, v in os.environ.items() if k.startswith(("ATTN_", "OMP_", "OPENBLAS_", "MKL_")))
    return (timeout, numpy.__version__, tuple(switches))


class Keeper:
    """The kept passes of one grade's measured checks: `taken` before a check runs, `keep` after it passes,
    `drop` after it runs and does not. Nothing here can fail a grade: a cache it cannot read or write is a cache
    with nothing kept."""

    def __init__(self, snap: Snapshot, public_only: bool, timeout: float, fresh: bool = False) -> None:
        self.snap, self.public_only, self.fresh = snap, public_only, fresh
        self.where = kept_here()  # only where no child can write the user's cache
        self.base = (grader_digest(), container_memory(), settings(timeout)) if self.where else None

    def _path(self, check: Check, seed: int) -> Path | None:
        if not self.where:
            return None
        files = tuple((n, self.snap.sha256[n]) for n in read_by(check.stage, self.snap))
        return _baseline_file(("pass", check.id, check.twin, check.visibility, seed, self.public_only, files,
                               *self.base))

    def _read(self, path: Path) -> dict | None:
        try:
            kept = json.loads(path.read_text())
        except ValueError:
            kept = None
        fields = {"note": str, "called": list, "at": str, "t": (int, float), "passes": int, "uses": int}
        if not isinstance(kept, dict) or any(not isinstance(kept.get(k), t) for k, t in fields.items()) or \
                not all(isinstance(c, str) for c in kept["called"]):
            path.unlink(missing_ok=True)  # not what keep() writes: gone, and measured again
            return None
        return kept

    def taken(self, check: Check, seed: int) -> dict | None:
        """The kept pass of `check` on these files at `seed` ({"note", "called", "at"}) where it was measured
        CONFIRMED times in a row, less than MAX_AGE_S ago, and taken back fewer than REUSES times since; else None."""
        if self.fresh:
            return None
        try:
            path = self._path(check, seed)
            kept = self._read(path) if path and path.exists() else None
            if kept is None or kept["passes"] < CONFIRMED or kept["uses"] >= REUSES or \
                    not 0 <= time.time() - kept["t"] < MAX_AGE_S:
                return None
            self._write(path, {**kept, "uses": kept["uses"] + 1})  # and the oldest-used go first (_write)
            return {"note": kept["note"], "called": tuple(kept["called"]), "at": kept["at"]}
        except Exception:  # noqa: BLE001 - a cache this grade cannot use: nothing kept
            return None

    def keep(self, check: Check, seed: int, note: str, called: tuple) -> None:
        """A pass of `check` just measured: one more in a row (whole or none: grades may run side by side)."""
        try:
            path = self._path(check, seed)
            if path is None:
                return
            before = self._read(path) if path.exists() else None
            self._write(path, {"note": note, "called": list(called), "at": time.strftime("%Y-%m-%d %H:%M:%S"),
                               "t": time.time(), "passes": (before["passes"] if before else 0) + 1, "uses": 0})
        except Exception:  # noqa: BLE001 - a cache this grade cannot write: nothing kept
            pass

    def drop(self, check: Check, seed: int) -> None:
        """`check` was measured and did not pass: whatever was kept of it goes (FRESH=1's failure too)."""
        try:
            path = self._path(check, seed)
            if path is not None:
                path.unlink(missing_ok=True)
        except Exception:  # noqa: BLE001
            pass

    @staticmethod
    def _write(path: Path, kept: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.part{time.monotonic_ns()}")
        try:
            part.write_text(json.dumps(kept))
            part.replace(path)
        finally:
            part.unlink(missing_ok=True)
        _prune(path.parent)


def _prune(folder: Path) -> None:
    """Remove the kept passes used longest ago past KEEP_AT_MOST (one that vanishes or cannot be read meanwhile is
    passed over)."""
    def used(p: Path) -> float:
        try:
            return p.lstat().st_mtime
        except OSError:
            return 0.0

    for old in sorted(folder.glob("pass-*"), key=used)[:-KEEP_AT_MOST]:
        try:
            old.unlink()
        except OSError:
            pass
