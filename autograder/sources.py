"""Places in the student's files: the stub a stage still holds, the line of a function's def,
and paths shown relative to where the student runs the grader."""
import os
import re
from pathlib import Path

from .stages import STAGE

_STUB = re.compile(r"raise NotImplementedError\(\s*[\"'](\w+):")


def first_stub(submission: Path, stage: str) -> tuple[Path, int] | None:
    """file:line of the first stub that belongs to `stage` (a `raise NotImplementedError("stage: ...")`)."""
    for name in STAGE[stage].files:
        path = submission / name
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines, 1):
            m = _STUB.search(line)
            if m and m.group(1) == stage:
                return path, i
    return None


def rel(path: Path) -> str:
    """Relative to the working directory when inside it, else absolute."""
    try:
        r = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if r.startswith("..") else r


def def_line(submission: Path, where: str) -> str:
    """'softmax.py:softmax' -> 'exercises/softmax.py:9' (the line of that def), or the file alone."""
    name, func = where.split(":")
    path = submission / name
    try:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(rf"\s*def {func}\(", line):
                return f"{rel(path)}:{i}"
    except OSError:
        pass
    return rel(path)
