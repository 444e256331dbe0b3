"""Passes of the measured checks (the cost rules: Check.measured), kept between grades of the same files.

A measured check runs the submission again in fresh children at three sizes, which is most of what a grade of the
later stages costs; graded again with not one byte of the submission changed, it would measure the same code (on
other rows of its outputs, drawn afresh). `make grade` and `make watch` keep such a check's pass, keyed by the digest
of every submission file, the check, its seed, the grader's own code, Python, numpy and torch, the call's time limit,
the children's switches and how they start. Once measured passing twice in a row (CONFIRMED), a pass is taken back
instead of measuring again, for at most REUSES grades and MAX_AGE_S seconds; then two more measured passes are needed.
The report says so, and `make grade FRESH=1` measures every one again (keeping what it measured). A measured failure
is never kept, drops what was, and is counted: each asks CONFIRMED more passes in a row of those files. Gradescope,
Classroom, regrade and the notebooks always measure. Kept only where no child can write the user's cache
(common._baseline_file, growth.kept_here), beside the grader's kept baselines.
What strangers showed stays bounded, not closed: code whose cost follows the clock or a coin, or whose measured
output is wrong at a few rows, can show a kept pass locally for up to REUSES grades or MAX_AGE_S (the autograder
always measures), and two grades of the same files at once may each take a pass back, or one's failure be written
over by the other's pass.
"""
import hashlib
import json
import os
import re
import shutil
import stat
import time
from pathlib import Path

from ..child.policy import container_memory
from ..declarations import Check
from ..outcomes import plain
from ..sandbox.safe_files import Snapshot
from ..stages import SUBMISSION_FILES
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


CONFIRMED = 2  # passes measured in a row before one is taken back, again after each REUSES, and CONFIRMED more for
# each failure these files' check has had: a lucky pass (code right only at some of the rows the grader draws, or on
# a coin flip) must be lucky again and again (a stranger's chunked fused call, one row in 512 wrong, passed 8 of 30
# fresh grades and showed a pass in 23 of 30 with two passes enough)
REUSES = 8  # grades that take a kept pass back before it is measured again, and ...
MAX_AGE_S = 3600.0  # ... seconds: code whose cost depends on the clock (a stranger's) is stale for a bounded while
AT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")  # what keep() writes as `at`, the report shows
MOST_BYTES = 1 << 16  # a kept file is a few hundred bytes: a larger one is not the grader's


def settings(timeout: float) -> tuple:
    """What else decides a measured check's verdict: a call's time limit, Python's and numpy's versions (torch's is
    in common._baseline_file), and the switches and thread counts the children read."""
    import platform

    import numpy

    switches = sorted((k, v) for k, v in os.environ.items() if k.startswith(("ATTN_", "OMP_", "OPENBLAS_", "MKL_")))
    return (timeout, platform.python_version(), numpy.__version__, tuple(switches))


def sides(workers: dict | None, zygote) -> tuple:
    """How the grade's children start, per side: forked or not, from a server holding torch or not (`make watch`
    forks both sides from one torch server, where a softmax that loads torch is not seen doing it: a stranger's
    watch pass was taken back by `make grade`)."""
    launchers = {k: w.launcher for k, w in workers.items()} if workers else \
        (zygote if isinstance(zygote, dict) else {"both": zygote})
    return tuple(sorted((k, bool(getattr(v, "forks", False)), getattr(v, "torch", None)) for k, v in launchers.items()))


class Keeper:
    """The kept passes of one grade's measured checks: `taken` before a check runs, `keep` after it passes,
    `drop` after it runs and does not. Nothing here can fail or stop a grade: a cache it cannot read or write is a
    cache with nothing kept."""

    def __init__(self, snap: Snapshot, public_only: bool, timeout: float, fresh: bool = False,
                 started: tuple = ()) -> None:
        self.fresh = fresh
        self.where = kept_here()  # only where no child can write the user's cache
        # every submission file counts: what a check's children load is theirs to choose (a stranger loaded another
        # stage's file through numpy's add_newdoc, and patched a class from another stage's file in the shared child)
        files = tuple(sorted((n, h) for n, h in snap.sha256.items() if n in SUBMISSION_FILES))
        self.base = (public_only, files, grader_digest(), container_memory(), settings(timeout), started) \
            if self.where else None
        self._paths: dict = {}  # (check id, seed) -> its file: taken, then keep or drop, ask for it once

    def _path(self, check: Check, seed: int) -> Path | None:
        if not self.where:
            return None
        key = (check.id, check.twin, check.visibility, seed)
        if key not in self._paths:
            self._paths[key] = _baseline_file(("pass", *key, *self.base))
        return self._paths[key]

    @staticmethod
    def _read(path: Path) -> dict | None:
        """What keep() wrote there, or None (and the file removed where it is anything else: a folder, a link, a
        pipe, a file of other contents, a count out of range)."""
        try:
            info = path.lstat()
        except FileNotFoundError:
            return None
        kept = None
        if stat.S_ISREG(info.st_mode) and info.st_size <= MOST_BYTES:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as f:
                try:
                    kept = json.loads(f.read(MOST_BYTES))
                except ValueError:
                    kept = None
        fields = {"note": str, "called": list, "at": str, "t": (int, float), "passes": int, "uses": int, "fails": int}
        if not isinstance(kept, dict) or any(not isinstance(kept.get(k), t) for k, t in fields.items()) or \
                not all(isinstance(c, str) for c in kept["called"]) or not AT.fullmatch(kept["at"]) or \
                not (0 <= kept["passes"] and 0 <= kept["uses"] <= REUSES and 0 <= kept["fails"] and
                     kept["t"] <= time.time() + 60):
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)  # not what keep() writes: gone, and measured again
            return None
        return kept

    @staticmethod
    def _current(kept: dict | None) -> bool:
        """Whether a kept pass may still be taken back: taken back fewer than REUSES times, within MAX_AGE_S."""
        return kept is not None and kept["uses"] < REUSES and 0 <= time.time() - kept["t"] < MAX_AGE_S

    def taken(self, check: Check, seed: int) -> dict | None:
        """The kept pass of `check` on these files at `seed` ({"note", "called", "at"}) where it was measured
        passing CONFIRMED times in a row (and CONFIRMED more for each failure it had), less than MAX_AGE_S ago, and
        taken back fewer than REUSES times since; else None."""
        if self.fresh:
            return None
        try:
            path = self._path(check, seed)
            kept = self._read(path) if path else None
            if not self._current(kept) or kept["passes"] < CONFIRMED * (1 + kept["fails"]):
                return None
            self._write(path, {**kept, "uses": kept["uses"] + 1})  # and the oldest-used go first (_write)
            return {"note": plain(kept["note"]), "called": tuple(kept["called"]), "at": kept["at"]}
        except Exception:  # noqa: BLE001 - a cache this grade cannot use: nothing kept
            return None

    def keep(self, check: Check, seed: int, note: str, called: tuple) -> None:
        """A pass of `check` just measured: one more in a row, or the first of a new run of them once the one kept
        was spent (REUSES, MAX_AGE_S). Whole or none: grades may run side by side."""
        try:
            path = self._path(check, seed)
            if path is None:
                return
            before = self._read(path)
            passes = before["passes"] + 1 if self._current(before) else 1
            self._write(path, {"note": note, "called": list(called), "at": time.strftime("%Y-%m-%d %H:%M:%S"),
                               "t": time.time(), "passes": passes, "uses": 0, "fails": before["fails"] if before else 0})
        except Exception:  # noqa: BLE001 - a cache this grade cannot write: nothing kept
            pass

    def drop(self, check: Check, seed: int) -> None:
        """`check` was measured and did not pass: whatever pass was kept of it goes (FRESH=1's failure too), and
        the failure is counted: these files need CONFIRMED more passes in a row before one is taken back."""
        try:
            path = self._path(check, seed)
            if path is None:
                return
            before = self._read(path)
            self._write(path, {"note": "", "called": [], "at": time.strftime("%Y-%m-%d %H:%M:%S"), "t": time.time(),
                               "passes": 0, "uses": 0, "fails": (before["fails"] if before else 0) + 1})
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
