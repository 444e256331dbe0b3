"""Reading what a submission hands in: regular files only, never through a symbolic link, never a
device or a FIFO, each size-capped. Every place that reads a submission's file uses this (the sandbox
copy, the zip reader, `make submit`, regrade, the checks that parse a student's source).
Standard library only: the grader reads files before numpy loads."""
import errno
import os
import stat
from pathlib import Path

MAX_FILE_BYTES = 2 * 2**20  # one stage module; far above any real one


class UnusableFile(Exception):
    """A submission file that is not a plain, readable, reasonably sized file: the message says why."""


def problem(path: Path) -> str | None:
    """Why `path` cannot be used as a submission file (None: it can), without opening it."""
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
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        why = problem(path) if e.errno in (errno.ELOOP, errno.ENOENT, errno.ENXIO) else None
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
