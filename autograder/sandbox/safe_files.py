"""Reading what a submission hands in: regular files only, never through a symbolic link, never a
device or a FIFO, each size-capped. Every place that reads a submission's file uses this (the sandbox
copy, the zip reader, `make submit`, regrade, the checks that parse a student's source).

A grade reads its folder once: `take(folder)` reads every top-level .py file into a Snapshot (bytes and
SHA-256, or why the file cannot be used), and while it is the folder's current snapshot, `read_bytes`,
`read_text` and `problem` answer from it for those files. So the static check, the child's copy,
localisation, the pointers and the reach analysis all see the same bytes, whatever happens to the
folder during the grade. Standard library only: the grader reads files before numpy loads."""
import errno
import hashlib
import os
import stat
import threading
from pathlib import Path

MAX_FILE_BYTES = 2 * 2**20  # one stage module; far above any real one
MAX_NOTEBOOK_BYTES = 16 * 2**20  # a notebook edition handed in, outputs and all; its modules are capped one by one


class UnusableFile(Exception):
    """A submission file that is not a plain, readable, reasonably sized file: the message says why."""


def problem(path: Path) -> str | None:
    """Why `path` cannot be used as a submission file (None: it can), without opening it."""
    snap = _held(path)
    if snap is not None:
        return snap.why(Path(path).name)
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
    """The contents of a regular file, refusing links, devices, pipes and files over `limit`."""
    path = Path(path)
    snap = _held(path)
    if snap is not None:
        why = snap.why(path.name)
        if why:
            raise UnusableFile(f"{path.name} {why}")
        return snap.data[path.name]
    return _read(path, limit)


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
    """The text of a regular submission file, or None when it cannot be used."""
    try:
        return read_bytes(path).decode("utf-8", "replace")
    except UnusableFile:
        return None


# ------------------------------------------------------------------------------------ snapshots --
MAX_FILES = 64  # top-level .py files read into a snapshot; a folder with more is read up to this many


class Snapshot:
    """The top-level .py files of one submission folder, each read once: `data` (bytes), `sha256` (hex),
    or `problems` (why it cannot be used, as `problem` words it)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.data: dict[str, bytes] = {}
        self.problems: dict[str, str] = {}
        names = sorted(p.name for p in self.folder.glob("*.py"))[:MAX_FILES]
        for name in names:
            why = _problem(self.folder / name)
            if why:
                self.problems[name] = why
                continue
            try:
                self.data[name] = _read(self.folder / name)
            except UnusableFile as e:
                self.problems[name] = str(e).removeprefix(f"{name} ")
        self.sha256 = {n: hashlib.sha256(b).hexdigest() for n, b in self.data.items()}

    def why(self, name: str) -> str | None:
        """Why `name` cannot be used (a file absent when the snapshot was taken is 'missing'), or None."""
        return None if name in self.data else self.problems.get(name, "missing")

    @property
    def names(self) -> list[str]:
        return sorted(self.data)


_CURRENT: dict[str, Snapshot] = {}
_LOCK = threading.Lock()


def take(folder: Path) -> Snapshot:
    """Read `folder` now and make that its current snapshot (replacing an older one)."""
    snap = Snapshot(Path(folder).resolve())
    with _LOCK:
        _CURRENT[str(snap.folder)] = snap
    return snap


def release(snap: Snapshot) -> None:
    """The folder is read live again (unless a newer snapshot has replaced this one)."""
    with _LOCK:
        if _CURRENT.get(str(snap.folder)) is snap:
            del _CURRENT[str(snap.folder)]


def current(folder: Path) -> Snapshot | None:
    with _LOCK:
        return _CURRENT.get(str(Path(folder).resolve()))


def _held(path: Path) -> "Snapshot | None":
    """The snapshot that answers for `path`: its folder's current one, for a top-level .py file."""
    if not _CURRENT:
        return None
    path = Path(path)
    if path.suffix != ".py":
        return None
    snap = _CURRENT.get(str(path.parent)) or _CURRENT.get(str(path.parent.resolve()))
    if snap is not None and path.name not in snap.data and path.name not in snap.problems:
        return snap if len(snap.data) + len(snap.problems) < MAX_FILES else None
    return snap
