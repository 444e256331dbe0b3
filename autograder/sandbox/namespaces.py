"""The operating system's boundary around a child, where Linux offers one: namespaces (util-linux's
`unshare`, and `setpriv` to drop to the sandbox uid as root; an ordinary user gets a user namespace).

Inside, the child has its own pid space (when its first process ends, every process it started ends
with it: the sweep is complete), no network (an empty network namespace), a private /tmp, /var/tmp
and /dev/shm (tmpfs with a size cap, gone when the child ends), and the user's home, the grader's
checkout and any folder the caller names (a batch of submissions, its results) hidden under empty
tmpfs; only its scratch folder, the interpreter and its packages are put back. Where `unshare` is missing or refused (macOS,
a container without namespaces) `wrap` is not used and the report says so (sandbox.protections).
"""
import functools
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout (or the autograder's source)
TMP_SIZE = "256m"  # each private tmpfs (/tmp, /dev/shm, the hidden folders) holds at most this
HOLD = "/dev/shm/.attn-keep"  # where kept folders wait while the folders above them are hidden


def _flags() -> list[str]:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child"]


@functools.cache
def available() -> bool:
    """Whether namespaces can be made here (tried once: a pid, mount and network namespace with a tmpfs)."""
    if not sys.platform.startswith("linux") or os.environ.get("ATTN_NO_NAMESPACES"):
        return False
    if not shutil.which("unshare") or (os.geteuid() == 0 and not shutil.which("setpriv")):
        return False
    probe = "mount -t tmpfs -o size=1m tmpfs /tmp && mount -t proc proc /proc"
    try:
        return subprocess.run([*_flags(), "sh", "-c", probe], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _hidden(extra: list[Path]) -> list[str]:
    home = Path(os.path.expanduser("~"))
    found = [Path("/tmp"), Path("/var/tmp"), home, ROOT, *extra]
    if os.environ.get("XDG_RUNTIME_DIR"):
        found.append(Path(os.environ["XDG_RUNTIME_DIR"]))
    paths = sorted(dict.fromkeys(str(p.resolve()) for p in found if p.is_dir() and p.resolve() != Path("/")), key=len)
    return [p for i, p in enumerate(paths) if not any(p.startswith(h + "/") or p == h for h in paths[:i])]


def _kept(scratch: Path) -> list[str]:
    """What the child must still reach: its scratch, and the interpreter with its packages."""
    import sysconfig

    paths = [scratch, Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent,
             *(Path(p) for p in {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")})]
    # each both as the child names it (a venv reached through a link) and as it resolves; a folder inside
    # another kept one comes with it (fewer mounts: each costs a few milliseconds)
    found = list(dict.fromkeys(str(q) for p in paths if p.exists() for q in (Path(os.path.abspath(p)), p.resolve())))
    outer = sorted(found[1:], key=len)
    outer = [p for i, p in enumerate(outer) if not any(p.startswith(o + "/") or p == o for o in outer[:i])]
    return [found[0], *outer]


def script(scratch: Path, uid: int | None, hide: list[Path] = ()) -> str:
    """The sh script run inside the new namespaces before the child's interpreter (exec "$@")."""
    hidden, kept = _hidden(list(hide)), _kept(scratch)
    q = shlex.quote
    # its own /proc first: the pid namespace's, and what umount reads (even where /proc was hidden outside)
    lines = ["set -e", "mount --make-rprivate /", "mount -t proc proc /proc",
             f"mount -t tmpfs -o size={TMP_SIZE},mode=1777 tmpfs /dev/shm", f"mkdir -p {HOLD}"]
    held = [k for k in kept if any(k == h or k.startswith(h + "/") for h in hidden)]
    for i, k in enumerate(held):
        lines += [f"mkdir -p {HOLD}/{i}", f"mount --rbind {q(k)} {HOLD}/{i}"]
    for h in sorted(hidden, key=len):
        lines.append(f"mount -t tmpfs -o size={TMP_SIZE},mode=1777 tmpfs {q(h)}")
    for i, k in enumerate(held):
        lines += [f"mkdir -p {q(k)}", f"mount --rbind {HOLD}/{i} {q(k)}", f"umount -l {HOLD}/{i}"]
    for k in kept[1:]:  # the interpreter and its packages: read-only (nothing planted for a later run)
        lines += [f"mount --bind {q(k)} {q(k)}", f"mount -o remount,bind,ro {q(k)}"]
    lines += [f"rm -rf {HOLD}", f"cd {q(str(scratch))}"]
    drop = f"setpriv --reuid={uid} --regid={uid} --clear-groups -- " if uid is not None else ""
    lines.append(f'exec {drop}"$@"')
    return "\n".join(lines)


def wrap(cmd: list[str], scratch: Path, uid: int | None, hide: list[Path] = ()) -> list[str]:
    """`cmd` run inside new namespaces (see the module docstring), as `uid` when one is given (root)."""
    return [*_flags(), "sh", "-c", script(scratch, uid, hide), "attn-child", *cmd]
