"""Run student code in a child process, one call at a time, with a time limit per call.

The parent sends plain data, the child answers with plain data (autograder.wire).
A call that hangs or kills the child raises StudentTimeout / StudentCrash here;
the caller decides what that costs, and a new child is started for what comes next.
"""
import itertools
import json
import os
import resource
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHILD_FILES = ("worker.py", "wire.py", "drivers.py", "np_drivers.py", "zygote.py")  # all of the grader a child can see
PACKAGE = "submission"
OUTPUT_LIMIT = 64 * 1024  # bytes of student output kept for messages
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TZ")  # plus OPENBLAS_*/OMP_*/MKL_*: some CPUs need them for correct BLAS
SANDBOX_UID_BASE = 200000  # uids of sandboxed children (above any real account; no /etc/passwd entry needed)
SIGNALS = {signal.SIGXFSZ: "wrote more output than allowed", signal.SIGXCPU: "used up its CPU time",
           signal.SIGSEGV: "crashed (segmentation fault)", signal.SIGABRT: "aborted",
           signal.SIGKILL: "was killed (memory or time limit, or it ended itself)"}


@dataclass
class Limits:
    """What one child may use. Memory is address space (RLIMIT_AS): numpy raises MemoryError past it."""

    timeout_s: float = 10.0  # wall clock, per call
    cpu_s: int = 300  # for the child's whole life
    memory_bytes: int = 4 * 2**30
    output_bytes: int = 16 * 2**20  # largest file the child may write, its stdout included
    processes: int = 256  # when sandboxed under its own uid


class ServerGone(RuntimeError):
    """The batch's fork server died (see Zygote.alive)."""


class StudentError(Exception):
    """The student's code raised. `info` has type, message, file, line."""

    def __init__(self, info: dict) -> None:
        self.info = info
        super().__init__(f"{info['type']}: {info['message']}")


class StudentAborted(Exception):
    """The child did not answer: it hung (timeout) or died (crash)."""


class StudentTimeout(StudentAborted):
    pass


class StudentCrash(StudentAborted):
    pass


def _others_can_use(path: Path) -> bool:
    """Every folder above `path` is searchable by other users, and `path` itself readable."""
    path = path.resolve()
    try:
        if not path.stat().st_mode & stat.S_IROTH:
            return False
        return all(p.stat().st_mode & stat.S_IXOTH for p in path.parents)
    except OSError:
        return False


def separate_user_possible() -> bool:
    """Root, and an interpreter and numpy that another user can run (not under a private /root)."""
    if os.geteuid() != 0 or os.environ.get("ATTN_SANDBOX_SAME_USER"):
        return False
    import importlib.util

    numpy = importlib.util.find_spec("numpy")  # found, not imported: the children start before numpy loads here
    return _others_can_use(Path(sys.executable)) and numpy is not None and _others_can_use(Path(numpy.origin))


_uids = itertools.count()


def kept_env() -> dict[str, str]:
    """The only variables a child inherits: PATH and locale, and BLAS settings some CPUs need."""
    return {k: v for k, v in os.environ.items() if k in KEEP_ENV or k.startswith(("OPENBLAS_", "OMP_", "MKL_"))}


def sandbox_uid() -> int | None:
    """A fresh uid for each child when that is possible, else None. Unique among this process's
    children (a counter) and across grading processes (the pid), so a sweep by uid hits only its own."""
    if not separate_user_possible():
        return None
    return SANDBOX_UID_BASE + (os.getpid() % 2000) * 256 + next(_uids) % 256


def kill_everything(token: str, uid: int | None) -> None:
    """End every process the child started: by its marker in the environment, and by its uid."""
    for _ in range(2):  # twice: a process may have forked while we looked
        if uid is not None:
            subprocess.run(["kill", "-9", "-1"], preexec_fn=lambda: os.setuid(uid),  # noqa: PLW1509
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        needle = f"ATTN_GRADE_TOKEN={token}".encode()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if needle in f.read():
                        os.kill(int(pid), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                continue


def copy_child_files(dest: Path) -> Path:
    """dest/autograder/ with the only grader files a child may see; returns the worker script."""
    grader = dest / "autograder"
    grader.mkdir(parents=True)
    (grader / "__init__.py").write_text("")
    for name in CHILD_FILES:
        shutil.copy2(HERE / name, grader / name)
    return grader / "worker.py"


class Zygote:
    """A fork server (autograder.zygote) that has imported numpy and torch once; for batches.

    Processes forked after it started may share it when it was given a multiprocessing lock:
    one request and its reply at a time, whichever process asks."""

    def __init__(self, lock=None) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="attn-zygote-"))
        script = copy_child_files(self.home).with_name("zygote.py")
        self.home.chmod(0o755)
        env = kept_env()
        self.proc = subprocess.Popen([sys.executable, "-I", "-B", str(script)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, cwd=self.home, env=env, start_new_session=True)
        self.lock = lock or threading.Lock()
        if json.loads(self.proc.stdout.readline() or "{}").get("ready") is not True:
            raise RuntimeError("the fork server did not start")

    def ask(self, req: dict) -> dict:
        with self.lock:
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

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)


class Worker:
    """One child process holding the student's package, started lazily, restarted after a crash.

    Started with subprocess, or forked by a Zygote (batches: torch is already imported there)."""

    def __init__(self, submission: Path, timeout: float = 10.0, limits: Limits | None = None,
                 zygote: "Zygote | None" = None, reuse_memory: bool = False) -> None:
        self.submission = Path(submission)
        self.reuse_memory = reuse_memory  # numpy child: see worker.reuse_memory
        self.zygote = zygote
        self.pid: int | None = None
        self.limits = limits or Limits(timeout_s=timeout)
        self.timeout = self.limits.timeout_s
        self.proc: subprocess.Popen | None = None
        self._next_id = 0
        self._buf = b""

    # -- life cycle -------------------------------------------------------
    def start(self) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="attn-grade-"))
        worker_py = copy_child_files(self.scratch / "_grader")
        pkg_dir = self.scratch / PACKAGE
        pkg_dir.mkdir()
        for f in self.submission.glob("*.py"):
            shutil.copy2(f, pkg_dir / f.name)
        self._log = open(self.scratch / "output.txt", "wb")
        self.token = secrets.token_hex(8)
        self.uid = sandbox_uid()
        env = kept_env()
        env.update(HOME=str(self.scratch), TMPDIR=str(self.scratch), ATTN_GRADE_TOKEN=self.token)
        # one thread per child: two children (and in a batch, several submissions) already share the
        # cores, and spinning BLAS/OpenMP threads fighting over them cost more than they bring
        env.update({k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
        if self.reuse_memory:
            env["ATTN_REUSE_MEMORY"] = "1"
        if self.zygote:
            os.mkfifo(self.scratch / "requests")
            os.mkfifo(self.scratch / "results")
        if self.uid is not None:
            for path in [self.scratch, *self.scratch.rglob("*")]:
                os.chown(path, self.uid, self.uid)
        self._buf, self._ready = b"", False
        if self.zygote:
            self._res_r = os.open(self.scratch / "results", os.O_RDONLY | os.O_NONBLOCK)
            self.pid = self.zygote.ask({"fork": {
                "scratch": str(self.scratch), "log": str(self.scratch / "output.txt"), "env": env, "uid": self.uid,
                "limits": vars(self.limits), "pkg_dir": str(pkg_dir), "pkg": PACKAGE,
                "req_fifo": str(self.scratch / "requests"), "res_fifo": str(self.scratch / "results")}})["pid"]
            self._req_w = os.open(self.scratch / "requests", os.O_RDWR)  # never blocks, even before the child opens
            self.proc = True
            return
        req_r, self._req_w = os.pipe()
        self._res_r, res_w = os.pipe()
        limits, uid = self.limits, self.uid

        def enter_sandbox() -> None:
            resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_bytes, limits.output_bytes))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if uid is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)

        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", str(worker_py), str(pkg_dir), PACKAGE, str(req_r), str(res_w)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            pass_fds=(req_r, res_w), cwd=self.scratch, env=env,
            start_new_session=True, preexec_fn=enter_sandbox,  # noqa: PLW1509
        )
        self.pid = self.proc.pid
        os.close(req_r)
        os.close(res_w)

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        kill_everything(self.token, self.uid)
        self._reap()
        for fd in (self._req_w, self._res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.proc = None

    def _reap(self, timeout: float | None = None) -> int | None:
        """The child's exit code (negative: the signal), None if it is still running."""
        if self.zygote:
            try:
                return self.zygote.ask({"wait": self.pid})["status"]
            except ServerGone:
                return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def output_tail(self, n: int = 600) -> str:
        try:
            data = (self.scratch / "output.txt").read_bytes()[-OUTPUT_LIMIT:]
        except OSError:
            return ""
        return data.decode("utf-8", "replace")[-n:]

    # -- calls ------------------------------------------------------------
    def call(self, target: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Call `module:function` (or `driver:name`) in the child and return its value."""
        from . import wire  # imported here, not above: prestart starts the children before numpy loads

        if self.proc is None:
            self.start()
        self._next_id += 1
        req_id = self._next_id
        try:
            os.write(self._req_w, wire.dumps({"id": req_id, "target": target, "args": list(args), "kwargs": kwargs}))
        except BrokenPipeError:
            raise self._died("the child process had already exited") from None
        limit = timeout if timeout is not None else self.timeout
        if not self._ready:  # the child's first line says it has loaded
            if wire.loads(self._read_line(limit)).get("value") != "ready":
                raise self._died("the child did not start properly")
            self._ready = True
        line = self._read_line(limit)
        reply = wire.loads(line)
        if reply.get("id") != req_id:
            raise self._died("the child answered out of turn")
        if not reply["ok"]:
            raise StudentError(reply["error"])
        return reply["value"]

    def _read_line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise StudentTimeout(f"no answer within {timeout:g} s (an endless loop, or far too slow)")
            ready, _, _ = select.select([self._res_r], [], [], left)
            if ready:
                try:
                    chunk = os.read(self._res_r, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    if self.zygote and not self._ready:  # a FIFO reads as ended until the child opens it
                        time.sleep(0.005)
                        continue
                    raise self._died("the process exited")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def _died(self, why: str) -> StudentCrash:
        tail = self.output_tail()
        if self.zygote:
            time.sleep(0.05)  # let it finish dying, so the fork server can report how
        code = self._reap(timeout=2)
        self.close()
        if code is None or code >= 0:
            detail = f"exit code {code}"
        else:
            detail = f"it {SIGNALS.get(-code, 'was killed')}: signal {-code}"
        msg = f"{why} ({detail})"
        if tail.strip():
            msg += "; its last output: " + tail.strip()[-300:]
        return StudentCrash(msg)


def prestart(submission: Path, stages: list[str] | None, timeout: float) -> dict:
    """Start the children now, so their interpreters load numpy (and torch) while the grader
    imports its checks: the two start-ups overlap instead of adding up."""
    from .registry import STAGE as _S

    names = stages or list(_S)
    out = {}
    for kind, wanted in (("numpy", [n for n in names if not _S[n].torch]), ("torch", [n for n in names if _S[n].torch])):
        if wanted:
            out[kind] = Worker(Path(submission).resolve(), timeout=timeout, reuse_memory=kind == "numpy")
            out[kind].start()
    return out
