"""Shared fixtures: graded copies of the solutions, and submissions that make one change to them."""
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.grade import grade  # noqa: E402

SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"


def variant(tmp_path: Path, edits: dict[str, list[tuple[str, str]]], base: Path = SOLUTIONS) -> Path:
    """A copy of `base` with each (old, new) text replaced once in the named file; old must be there."""
    dest = tmp_path / "submission"
    shutil.copytree(base, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for name, pairs in edits.items():
        path = dest / name
        text = path.read_text()
        for old, new in pairs:
            assert text.count(old) == 1, f"{name}: {old!r} occurs {text.count(old)} times"
            text = text.replace(old, new)
        path.write_text(text)
    return dest


@pytest.fixture(scope="session")
def solutions_result():
    return grade(SOLUTIONS, seed=0)


@pytest.fixture(scope="session")
def stubs_result():
    return grade(EXERCISES, seed=0)
