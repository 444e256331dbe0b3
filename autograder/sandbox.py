"""Run student code in a child process, one call at a time, with a time limit per call.

The parent sends plain data, the child answers with plain data (autograder.wire).
A call that hangs or kills the child raises StudentTimeout / StudentCrash here;
the caller decides what that costs, and a new child is started for what comes next.
"""
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import wire

WORKER = Path(__file__).with_name("worker.py")
PACKAGE = "submission"
OUTPUT_LIMIT = 64 * 1024  # bytes of student output kept for messages
CPU_LIMIT_S = 300


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


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class Worker:
    """One child process holding the student's package, started lazily."""

    def __init__(self, submission: Path, timeout: float = 10.0, threads: int | None = None) -> None:
        self.submission = Path(submission)
        self.timeout = timeout
        self.threads = threads
        self.proc: subprocess.Popen | None = None
        self._next_id = 0
        self._buf = b""

    # -- life cycle -------------------------------------------------------
    def start(self) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="attn-grade-"))
        pkg_dir = self.scratch / PACKAGE
        pkg_dir.mkdir()
        for f in self.submission.glob("*.py"):
            shutil.copy2(f, pkg_dir / f.name)
        req_r, self._req_w = os.pipe()
        self._res_r, res_w = os.pipe()
        self._log = open(self.scratch / "output.txt", "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONHASHSEED"] = "0"
        if self.threads:
            env["OMP_NUM_THREADS"] = str(self.threads)
        self.proc = subprocess.Popen(
            [sys.executable, "-B", str(WORKER), str(pkg_dir), PACKAGE, str(req_r), str(res_w)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            pass_fds=(req_r, res_w), cwd=self.scratch, env=env,
            start_new_session=True, preexec_fn=_limits,
        )
        os.close(req_r)
        os.close(res_w)
        self._buf = b""

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for fd in (self._req_w, self._res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.proc = None

    def output_tail(self, n: int = 600) -> str:
        try:
            data = (self.scratch / "output.txt").read_bytes()[-OUTPUT_LIMIT:]
        except OSError:
            return ""
        return data.decode("utf-8", "replace")[-n:]

    # -- calls ------------------------------------------------------------
    def call(self, target: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Call `module:function` (or `driver:name`) in the child and return its value."""
        if self.proc is None:
            self.start()
        self._next_id += 1
        req_id = self._next_id
        try:
            os.write(self._req_w, wire.dumps({"id": req_id, "target": target, "args": list(args), "kwargs": kwargs}))
        except BrokenPipeError:
            raise self._died("the child process had already exited") from None
        line = self._read_line(timeout if timeout is not None else self.timeout)
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
                chunk = os.read(self._res_r, 1 << 20)
                if not chunk:
                    raise self._died("the process exited")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def _died(self, why: str) -> StudentCrash:
        try:
            code = self.proc.wait(timeout=2) if self.proc else None
        except subprocess.TimeoutExpired:
            code = None
        tail = self.output_tail()
        self.close()
        detail = f"exit code {code}" if code is None or code >= 0 else f"killed by signal {-code}"
        msg = f"{why} ({detail})"
        if tail.strip():
            msg += "; its last output: " + tail.strip()[-300:]
        return StudentCrash(msg)
