"""Reading what a submission hands in: regular files only, never through a symbolic link, never a
device or a FIFO, each size-capped.

A grade reads its folder once: `take(folder)` reads its top-level .py files into a Snapshot (bytes and
SHA-256, or why the file cannot be used), and the grade hands that Snapshot down as a value to whatever reads
the student's files while it runs: the static check, the child's copy (sandbox.runner.Worker.snapshot), the
checks that parse source (`ctx.snapshot`, stages.common.worker_snapshot), localisation, the pointers, the reach
analysis and repair ask it (`snap.read_bytes(name)`, `snap.read_text(name)`, `snap.problem(name)`), never a
path. So they all see the same bytes, whatever happens to the folder during the grade. There is no registry of
snapshots: a path given to `read_bytes`, `read_text` or `problem` is always read from disk, for code outside a
grade (the zip reader, `make submit`, regrade, the instructor tools). Standard library only: the grader reads
files before numpy loads."""
import errno
import hashlib
import os
import stat
from pathlib import Path

MAX_FILE_BYTES = 2 * 2**20  # one stage module; far above any real one
MAX_NOTEBOOK_BYTES = 16 * 2**20  # a notebook edition handed in, outputs and all; its modules are capped one by one


class UnusableFile(Exception):
    """A submission file that is not a plain, readable, reasonably sized file: the message says why."""


def problem(path: Path) -> str | None:
    """Why `path` cannot be used as a submission file (None: it can), without opening it."""
    return _problem(path)


def _problem(path: Path) -> str | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"is a symbolic link (to {os.readlink(path)}), not a file: hand in the file itself"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a folder, device or pipe)"
    if st.st_size > MAX_FILE_BYTES:
        return f"is larger than {MAX_FILE_BYTES // 2**20} MiB"
    return None


def read_bytes(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The contents of a regular file read from disk now, refusing links, devices, pipes and files over `limit`
    (outside a grade: a grade reads its Snapshot)."""
    return _read(Path(path), limit)


def _read(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        why = _problem(path) if e.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO) else None
        raise UnusableFile(f"{path.name} {why or f'cannot be read ({e.strerror})'}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnusableFile(f"{path.name} is not a regular file (a folder, device or pipe)")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise UnusableFile(f"{path.name} is larger than {limit // 2**20} MiB")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: Path) -> str | None:
    """The text of a regular submission file read from disk now, or None when it cannot be used."""
    try:
        return read_bytes(path).decode("utf-8", "replace")
    except UnusableFile:
        return None


# ------------------------------------------------------------------------------------ snapshots --
MAX_FILES = 64  # top-level .py files read into a snapshot; a folder with more is read up to this many


class Snapshot:
    """The top-level .py files of one submission folder, each read once (`take`): `data` (bytes), `sha256`
    (hex), or `problems` (why it cannot be used, as `problem` words it). A value: nothing reads the folder
    again through it; `folder` is where the files were read, for the paths shown to the student; `complete` is
    False where the folder held more than MAX_FILES .py files (those past the cap were not read)."""

    def __init__(self, folder: Path, data: dict[str, bytes], problems: dict[str, str], complete: bool = True) -> None:
        self.folder = Path(folder)
        self.data = dict(data)
        self.problems = {n: why for n, why in problems.items() if n not in self.data}
        self.complete = complete
        self.sha256 = {n: hashlib.sha256(b).hexdigest() for n, b in self.data.items()}

    def problem(self, name: str) -> str | None:
        """Why `name` cannot be used (a file absent when the snapshot was taken is 'missing'), or None."""
        if name in self.data:
            return None
        if name in self.problems:
            return self.problems[name]
        return "missing" if self.complete else f"was not read: the folder holds more than {MAX_FILES} .py files"

    def read_bytes(self, name: str) -> bytes:
        """The bytes of `name` as taken; UnusableFile (saying why) for a file that could not be used or was absent."""
        why = self.problem(name)
        if why:
            raise UnusableFile(f"{name} {why}")
        return self.data[name]

    def read_text(self, name: str) -> str | None:
        """The text of `name` as taken, or None when it cannot be used."""
        data = self.data.get(name)
        return None if data is None else data.decode("utf-8", "replace")

    def path(self, name: str) -> Path:
        """Where `name` was read: for the paths shown to the student, never to read it again."""
        return self.folder / name

    def with_file(self, name: str, data: bytes) -> "Snapshot":
        """A copy of this snapshot with `name` holding `data` (feedback/repair.py's edited copy)."""
        return Snapshot(self.folder, {**self.data, name: data}, self.problems, self.complete)

    @property
    def names(self) -> list[str]:
        return sorted(self.data)


def take(folder: Path) -> Snapshot:
    """Read `folder`'s top-level .py files now (at most MAX_FILES) into a new Snapshot: the one read of them a
    grade makes. It registers nothing: whoever takes it hands it on."""
    folder = Path(folder).resolve()
    data: dict[str, bytes] = {}
    problems: dict[str, str] = {}
    names = sorted(p.name for p in folder.glob("*.py"))
    for name in names[:MAX_FILES]:
        why = _problem(folder / name)
        if why:
            problems[name] = why
            continue
        try:
            data[name] = _read(folder / name)
        except UnusableFile as e:
            problems[name] = str(e).removeprefix(f"{name} ")
    return Snapshot(folder, data, problems, complete=len(names) <= MAX_FILES)
