"""The operating system's boundary around a child, where Linux offers one: namespaces (util-linux's
`unshare`; an ordinary user gets a user namespace), and new_root.py inside them, which builds the view and
drops to the sandbox uid as root.

Inside, the child has its own pid space (when its first process ends, every process it started ends
with it: the sweep is complete), no network (an empty network namespace), a private /tmp, /var/tmp
and /dev/shm (tmpfs with a size cap, gone when the child ends), and a file system that is an
allowlist: the system's software folders and the interpreter with its packages (read-only), its own
scratch folder, and nothing else (see `spec` and new_root.py). Home, the grader's checkout, dist/, a batch of
submissions and its results are not hidden one by one: they are simply not there, wherever they lie.
Where `unshare` is missing or refused (macOS, a container without namespaces) `wrap` is not used and
the report says so (sandbox.protections).
"""
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout (or the autograder's source)
TMP_SIZE = "256m"  # each private tmpfs (/tmp, /dev/shm, the hidden folders) holds at most this
# a private tmpfs is mounted on the first of these that holds nothing the child keeps (a fork server's home may
# lie in /dev/shm); the child's new root is made inside it
ROOT_PARENTS = ("/dev/shm", "/tmp", "/mnt")


def _flags(pid_namespace: bool = True) -> list[str]:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    pid = ["--pid"] if pid_namespace else []
    return ["unshare", *user, "--mount", *pid, "--net", "--ipc", "--uts", "--fork", "--kill-child"]


@functools.cache
def available() -> bool:
    """Whether namespaces can be made here: the whole set-up (wrap) tried once, around `true`."""
    if not sys.platform.startswith("linux") or os.environ.get("ATTN_NO_NAMESPACES"):
        return False
    if not shutil.which("unshare"):
        return False
    import tempfile

    with tempfile.TemporaryDirectory(prefix="attn-probe-") as scratch:  # the whole set-up, once, around `true`
        try:
            return subprocess.run(wrap(["true"], Path(scratch), None), capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")  # shared software, read-only
DEVICES = ("null", "zero", "full", "random", "urandom")


def _hidden(extra: list[Path]) -> list[str]:
    """Folders that must stay out of sight even where a system folder holds them (a checkout under /usr/src)."""
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


def _inside(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def spec(scratch: Path, uid: int | None, hide: list[Path] = (), pid_namespace: bool = True) -> dict:
    """What new_root.py makes visible to the child (see its docstring): an allowlist, nothing else."""
    system = [d for d in SYSTEM if os.path.lexists(d)]
    real = [d for d in system if not os.path.islink(d)]
    hidden = [h for h in _hidden(list(hide)) if _inside(h, real)]  # out of sight even inside a system folder
    kept = _kept(scratch)
    kept = [kept[0], *(k for k in kept[1:] if not _inside(k, real) or _inside(k, hidden))]  # others are there
    proc = "own" if pid_namespace else "hidepid" if os.geteuid() == 0 else "machine"
    parent = next((p for p in ROOT_PARENTS if os.path.isdir(p) and not any(_inside(k, [p]) for k in kept)),
                  ROOT_PARENTS[0])
    return {"parent": parent, "root": parent + "/.attn-root", "tmp_size": TMP_SIZE, "system": real, "hidden": hidden,
            "links": {d: os.readlink(d) for d in system if os.path.islink(d)}, "kept": kept,
            "devices": list(DEVICES), "proc": proc, "scratch": str(scratch), "uid": uid}


def wrap(cmd: list[str], scratch: Path, uid: int | None, hide: list[Path] = (), pid_namespace: bool = True) -> list[str]:
    """`cmd` run inside new namespaces (see the module docstring), as `uid` when one is given (root).
    Without `pid_namespace` (a fork server: the pids it hands back are the parent's) the rest still holds."""
    setup = [sys.executable, "-I", "-S", "-B", str(Path(__file__).with_name("new_root.py"))]
    return [*_flags(pid_namespace), *setup, json.dumps(spec(scratch, uid, hide, pid_namespace)), "--", *cmd]
