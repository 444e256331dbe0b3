"""How a child process is started and ended. Two launchers, one interface: `launch(...)` returns
a Launched (the pid, the request and result pipes, a way to reap it). `SubprocessLauncher` starts a
new interpreter; `ForkServer` forks one from a server that imported numpy and torch once (batches).
"""
import functools
import itertools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.sharedctypes import RawValue
from pathlib import Path
from typing import Callable

from ..child import policy
from ..outcomes import ServerGone, ServerNeverStarted
from . import namespaces

CHILD_DIR = Path(__file__).resolve().parent.parent / "child"  # all of the grader a child can see
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TZ")  # plus OPENBLAS_*/OMP_*/MKL_*: some CPUs need them for correct BLAS
SANDBOX_UID_BASE = 200000  # uids of sandboxed children (above any real account; no /etc/passwd entry needed)


@dataclass
class Launched:
    """A started child: write requests to `requests`, read replies from `results`."""

    pid: int
    requests: int  # file descriptor
    results: int  # file descriptor
    reap: Callable[[float | None], int | None]  # exit code (negative: the signal), None while it runs
    forked: bool = False  # by the fork server: its result FIFO reads as ended until the child opens it
    peak_bytes: int | None = None  # once reaped: its peak resident memory, as the kernel counted it
    cpu_s: float | None = None  # once reaped: the CPU time (user + system) the kernel counted for it
    status: int | None = None  # once reaped: its exit code
    private_tmp: bool = False  # inside namespaces: the temp folders it can write are not the ones the grader sees
    gone: bool = False  # its fork server stopped answering: reap can no longer tell whether it ended


def copy_child_files(dest: Path) -> Path:
    """dest/autograder/child/, a copy of the only grader folder a child may see; returns the worker script."""
    grader = dest / "autograder"
    grader.mkdir(parents=True)
    (grader / "__init__.py").write_text("")
    shutil.copytree(CHILD_DIR, grader / "child", ignore=shutil.ignore_patterns("__pycache__"))
    return grader / "child" / "worker.py"


def _others_can_use(path: Path) -> bool:
    """Every folder above `path` is searchable by other users, and `path` itself readable: both along
    the path as given (how a child reaches it: a venv may sit in a private folder and link out of it)
    and along the path it resolves to."""
    try:
        for p in {Path(os.path.abspath(path)), Path(path).resolve()}:
            if not p.stat().st_mode & stat.S_IROTH or not all(d.stat().st_mode & stat.S_IXOTH for d in p.parents):
                return False
        return True
    except OSError:
        return False


def separate_user_possible() -> bool:
    """Root, and an interpreter and numpy that another user can run (not under a private /root)."""
    if os.geteuid() != 0 or os.environ.get("ATTN_SANDBOX_SAME_USER"):
        return False
    return _interpreter_shared()


@functools.cache
def _interpreter_shared() -> bool:
    """Whether other users can run this interpreter and its numpy: walked once per process (every child asks)."""
    import importlib.util

    numpy = importlib.util.find_spec("numpy")  # found, not imported: the children start before numpy loads here
    return (_others_can_use(Path(child_executable())) and numpy is not None
            and _others_can_use(Path(numpy.origin).resolve()))


def child_executable() -> str:
    """The interpreter a child runs: this one, named through the folders it really lies in (a venv reached by a
    link from a private folder, a checkout's copy sharing its .venv, is run from where the link points; the
    file itself stays the venv's, so the child still finds the venv's packages)."""
    path = os.path.abspath(sys.executable)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def contained() -> bool:
    """Whether the children can reach none of the grader's own files: each runs inside namespaces (the
    allowlist view), or under a user of its own (root)."""
    return namespaces.available() or separate_user_possible()


_uids = itertools.count()


ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}  # BLAS/OpenMP, per child
# glibc's malloc with a fixed mmap threshold (its starting 128 KiB, which also fixes the trim threshold): a block that
# large is mapped when made and unmapped when freed, so a child's resident memory follows what its code holds. Left
# dynamic, the threshold rises to the largest block freed so far (up to 32 MiB) and later blocks of that size stay in
# the heap: a fused call in 512-query chunks, linear by design, kept 12, 45, 173 MiB at T = 1,043, 3,098, 6,976 (3.8x
# per 2.25x of T) and lost the memory rule at 8 of 10 seeds; fixed, 10.5, 20.3, 38.2 MiB. Other C libraries ignore it.
FIXED_ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}


def kept_env() -> dict[str, str]:
    """The only variables a child inherits: PATH and locale, and BLAS settings some CPUs need."""
    return {k: v for k, v in os.environ.items() if k in KEEP_ENV or k.startswith(("OPENBLAS_", "OMP_", "MKL_"))}


def sandbox_uid() -> int | None:
    """A fresh uid for each child when that is possible, else None. Unique among this process's
    children (a counter) and across grading processes (the pid), so a sweep by uid hits only its own."""
    if not separate_user_possible():
        return None
    return SANDBOX_UID_BASE + (os.getpid() % 2000) * 256 + next(_uids) % 256


def _psutil():
    """psutil where it can see this machine's processes (it reads /proc on Linux, sysctl on macOS), else None."""
    try:
        import psutil

        return psutil if os.getpid() in psutil.pids() else None
    except Exception:  # noqa: BLE001 - not installed, or no /proc: the sweep falls back to the process group
        return None


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs (empty where processes cannot be listed)."""
    ps = _psutil()
    if ps is None:
        return []
    try:
        return [p.pid for p in ps.Process(pid).children(recursive=True)]
    except Exception:  # noqa: BLE001 - it has just ended, or cannot be read
        return []


def sweep_notes(uid: int | None) -> list[str]:
    """What the sweep of a child's processes cannot do here (empty where it is complete)."""
    if uid is not None or namespaces.available() or _psutil() is not None:
        return []
    return ["the sweep of leftover processes covers the child's process group only (the grader cannot list "
            "this system's processes: no /proc, or no psutil)"]


def kill_everything(token: str, uid: int | None, tree: list[int] = (), processes: bool = True,
                    temp: bool = True) -> None:
    """End every process the child started: every process of its uid (when sandboxed under one), the tree
    found under it before it was ended, and any process carrying its marker in the environment; and remove
    what its uid left in the shared temp folders. Without `processes` (a child that could start none) only
    the folders are cleaned; without `temp` (a child inside namespaces, whose temp folders are its own or its
    server's, never these) they are not."""
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass
    for _ in range(2 if processes else 0):  # twice: a process may have forked while we looked
        if uid is not None:  # `user=`, not a preexec_fn: no Python runs between fork and exec, whatever other
            # threads hold (a preexec_fn takes the at-fork locks, logging's among them, in a grader with threads)
            try:
                subprocess.run(["kill", "-9", "-1"], user=uid, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except (OSError, subprocess.SubprocessError):
                pass
        ps = _psutil()
        if ps is None:
            continue
        needle = f"ATTN_GRADE_TOKEN={token}"
        for proc in ps.process_iter():
            if proc.pid == os.getpid():
                continue
            try:
                env = proc.environ()
                if f"ATTN_GRADE_TOKEN={env.get('ATTN_GRADE_TOKEN')}" == needle:
                    proc.kill()
            except Exception:  # noqa: BLE001 - gone, or not ours to read
                continue
    if uid is not None and temp:  # what it left in the shared temp folders (without namespaces it has no private ones)
        for folder in (Path(tempfile.gettempdir()), Path("/dev/shm"), Path("/var/tmp")):
            try:
                entries = list(folder.iterdir())
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.lstat().st_uid == uid:
                        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
                except OSError:
                    continue


def interpreter() -> list[str]:
    """How a child's interpreter starts: this one, isolated (no user site, no PYTHON* variables, no
    bytecode written), with this process's -W options (a test under -W error holds the children to it). Named
    without `..` (found by a stranger TA: `../../.venv/bin/python` names folders a namespaced child cannot see)."""
    return [child_executable(), "-I", "-B", *(f"-W{w}" for w in sys.warnoptions)]


def fork_is_safe() -> bool:
    """Whether a warm server may fork children after importing numpy and torch. Not on macOS (Accelerate
    and libdispatch are not fork-safe), not where there is no fork; ATTN_NO_FORK=1 says so by hand."""
    return hasattr(os, "fork") and sys.platform != "darwin" and not os.environ.get("ATTN_NO_FORK")


class SubprocessLauncher:
    """A new interpreter per child: `python -I -B worker.py`, started by child/spawn.py, which enters the
    policy before exec and reports the child's peak memory. Also what
    watch and regrade use where forking a warm server is not safe (fork_is_safe): slower, never unsafe."""

    forks = False
    scratch_root = None  # the children's scratch folders go in the temp folder

    def __init__(self, hide: list[Path] = ()) -> None:
        self.hide = list(hide)  # folders a namespaced child must not see, besides home and the checkout

    def launch(self, scratch: Path, pkg_dir: Path, pkg: str, env: dict, limits: policy.Limits,
               uid: int | None, log) -> Launched:
        worker_py = copy_child_files(scratch / "_grader")  # a new interpreter loads the grader's child code from here
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        st_r, st_w = os.pipe()
        cmd = [*interpreter(), str(worker_py), str(pkg_dir), pkg, str(req_r), str(res_w)]
        isolated = namespaces.available()
        if isolated:  # its own pid space, no network, private /tmp; the uid is dropped inside, after the mounts
            cmd = namespaces.wrap(cmd, scratch, uid, self.hide)
        # started through child/spawn.py, a small process: the child's peak then counts only itself, never the
        # pages of this (possibly large) process that a fork copies
        spec = json.dumps({"limits": limits.as_dict(), "uid": uid, "drop": not isolated})
        try:
            proc = subprocess.Popen(
                [*interpreter(), "-S", str(CHILD_DIR / "spawn.py"), str(st_w), spec, "--", *cmd],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(req_r, res_w, st_w), cwd=scratch, env=env, start_new_session=True,
            )
        finally:
            for fd in (req_r, res_w, st_w):
                os.close(fd)
        status = os.fdopen(st_r, "rb")
        try:
            first = json.loads(status.readline() or "{}")
        except ValueError:
            first = {}
        pid = first.get("pid") if isinstance(first, dict) and isinstance(first.get("pid"), int) else proc.pid
        launched = Launched(pid=pid, requests=req_w, results=res_r, reap=lambda t=None: None, private_tmp=isolated)

        def reap(timeout: float | None = None) -> int | None:
            """Wait for the exit; spawn.py then reports the child's status and the kernel's count of its peak.
            Without a timeout the wait is still bounded: a spawner whose child escaped its group and lives on is
            ended after 10 s (its report is then lost: the exit code is its own)."""
            if proc.returncode is not None:
                return launched.status if launched.status is not None else proc.returncode
            try:
                proc.wait(10 if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                if timeout is not None:
                    return None
                proc.kill()
                proc.wait()
            os.set_blocking(status.fileno(), False)  # whatever is there now: a writer that lives on cannot hold us
            try:
                lines = (status.read() or b"").splitlines()
            except OSError:
                lines = []
            status.close()
            try:  # spawn.py's report is the last line it wrote, after the child was reaped
                last = json.loads(lines[-1]) if lines else {}
            except ValueError:
                last = {}
            last = last if isinstance(last, dict) else {}
            peak, code, cpu = last.get("peak_bytes"), last.get("status"), last.get("cpu_s")
            launched.peak_bytes = peak if isinstance(peak, int) else None
            launched.cpu_s = float(cpu) if isinstance(cpu, (int, float)) else None
            launched.status = code if isinstance(code, int) else proc.returncode
            return launched.status

        launched.reap = reap
        return launched

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        pass


def warm_launcher(lock=None, isolate: bool = False, hide: list[Path] = (), wait: bool = True,
                  torch: bool = True) -> "ForkServer | SubprocessLauncher":
    """What a session of many grades (watch, regrade) starts its children with: a fork server where
    forking is safe (inside namespaces with `isolate`), else a new interpreter per child (fork_is_safe).
    Without `wait`, a fork server may still be loading torch: the first request waits for it.
    Without `torch`, a server for numpy's children only (it never loads torch)."""
    return ForkServer(lock, isolate, hide, wait, torch) if fork_is_safe() else SubprocessLauncher(hide)


class ForkServer:
    """A fork server (autograder/child/fork_server.py) that has imported numpy and torch once (or numpy alone, with
    torch=False); for batches.

    Processes forked after it started may share it when it was given a multiprocessing lock:
    one request and its reply at a time, whichever process asks. With `wait=False` the constructor returns
    at once and the first request waits for the server to be ready (make grade: torch loads there while
    the grader imports its checks)."""

    forks = True

    def __init__(self, lock=None, isolate: bool = False, hide: list[Path] = (), wait: bool = True,
                 torch: bool = True) -> None:
        self.torch = torch  # False: numpy alone is loaded there, for the numpy children (lighter to fork and end)
        self.hide = list(hide)  # what its children's view leaves out (and a fallback launcher's: Worker.start)
        self.home = Path(tempfile.mkdtemp(prefix="attn-zygote-"))
        script = copy_child_files(self.home).with_name("fork_server.py")
        self.home.chmod(0o755)
        cmd = [*interpreter(), str(script), str(self.home)]
        self.scratch_root: Path | None = None  # where the children's scratch folders go (None: the temp folder)
        if isolate:  # one set of namespaces for the server and all it forks: no network, the allowlist view, in
            # which the children's scratch folders lie inside its home; each child still drops to a uid of its own
            self.scratch_root = self.home / "grades"
            self.scratch_root.mkdir(mode=0o711)
            cmd = namespaces.wrap(cmd, self.home, None, list(hide), pid_namespace=False)
        # one BLAS/OpenMP thread and the fixed allocator, as every child gets: a library sizes its thread pool when it
        # loads and malloc reads its settings when it starts, both here, before the fork, so the children's own
        # settings would come too late
        env = {**kept_env(), **ONE_THREAD, **FIXED_ALLOCATOR, **({} if torch else {"ATTN_SERVER_TORCH": "0"})}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self.home,
                                     env=env, start_new_session=True)
        self.lock = lock or threading.Lock()
        self.ready = False  # read on the first request: until then the caller goes on while torch loads there
        # whether any process sharing this server (forked from this one after now) has read its ready line: in
        # memory they share, so the processes of a batch may start before the server is ready
        self._line_read = RawValue("b", 0)
        if not wait:
            return
        with self.lock:
            self._await_ready()

    def _await_ready(self) -> None:
        """Read the server's ready line (under the lock), once among the processes that share the server."""
        if self.ready or self._line_read.value:
            self.ready = True
            return
        try:
            line = json.loads(self.proc.stdout.readline() or "{}")
        except (OSError, ValueError):
            line = {}
        if not isinstance(line, dict) or line.get("ready") is not True:
            raise ServerNeverStarted("the fork server did not start")
        self.ready = True
        self._line_read.value = 1

    def ask(self, req: dict) -> dict:
        with self.lock:
            self._await_ready()
            try:
                self.proc.stdin.write((json.dumps(req) + "\n").encode())
                self.proc.stdin.flush()
                return json.loads(self.proc.stdout.readline())
            except (OSError, ValueError) as e:
                raise ServerGone(f"the fork server stopped answering ({type(e).__name__})") from None

    def alive(self) -> bool:
        """Whether the server still answers (a submission running as the grader's user can kill it)."""
        try:
            return self.ask({"ping": 1}).get("pong") is True
        except ServerGone:
            return False

    def launch(self, scratch: Path, pkg_dir: Path, pkg: str, env: dict, limits: policy.Limits,
               uid: int | None, log) -> Launched:
        """Fork a child of the server: it already holds the grader's child code, so none is copied for it."""
        requests, results = scratch / "requests", scratch / "results"
        os.mkfifo(requests)
        os.mkfifo(results)
        if uid is not None:
            for path in (requests, results):
                os.chown(path, uid, uid)
        res_r = os.open(results, os.O_RDONLY | os.O_NONBLOCK)
        pid = self.ask({"fork": {
            "scratch": str(scratch), "log": str(scratch / "output.txt"), "env": env, "uid": uid,
            "limits": limits.as_dict(), "pkg_dir": str(pkg_dir), "pkg": pkg,
            "req_fifo": str(requests), "res_fifo": str(results)}})["pid"]
        req_w = os.open(requests, os.O_RDWR)  # never blocks, even before the child opens it

        launched = Launched(pid=pid, requests=req_w, results=res_r, reap=lambda t=None: None, forked=True,
                            private_tmp=self.scratch_root is not None)

        def reap(timeout: float | None = None) -> int | None:
            # The server is asked to look once, and the waiting is done here, between questions: one server
            # serves every grading process of a batch, and a question it sat on would hold up their forks
            deadline = time.monotonic() + (2 if timeout is None else timeout)
            while True:
                try:
                    reply = self.ask({"wait": pid, "timeout": 0})
                except ServerGone:
                    launched.gone = True
                    return None
                if reply.get("status") is not None or reply.get("gone") or time.monotonic() >= deadline:
                    launched.peak_bytes, launched.cpu_s = reply.get("peak_bytes"), reply.get("cpu_s")
                    return reply.get("status")
                time.sleep(0.005)

        launched.reap = reap
        return launched

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):  # a closed server's pipes: no ResourceWarning at exit
            try:
                pipe.close()
            except OSError:
                pass
        shutil.rmtree(self.home, ignore_errors=True)
