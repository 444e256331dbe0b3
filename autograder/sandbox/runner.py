"""Run student code in a child process, one call at a time, with a time limit per call.

The parent sends plain data, the child answers with plain data (autograder/child/wire.py).
A call that hangs or kills the child raises StudentTimeout / StudentCrash here; the caller
decides what that costs, and a new child is started for what comes next. How the child is
started (a new interpreter, or a fork of the fork server) is autograder.sandbox.launchers' job.
"""
import os
import re
import secrets
import select
import shutil
import signal
import stat
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable

from .. import messages as say
from ..child import no_processes, no_writes
from ..child.policy import Limits, child_memory, plan
from ..outcomes import (
    BudgetSpent,
    GraderEnvironment,
    NeverLoaded,
    ServerGone,
    ServerNeverStarted,
    StudentCrash,
    StudentError,
    StudentTimeout,
    plain,
    plain_data,
)
from . import launchers, namespaces
from .launchers import (
    FIXED_ALLOCATOR,
    ONE_THREAD,
    ForkServer,
    Launched,
    SubprocessLauncher,
    descendants,
    fork_is_safe,
    kept_env,
    kill_everything,
    sandbox_uid,
    separate_user_possible,
    sweep_notes,
)
from .safe_files import Snapshot, take

PACKAGE = "submission"
OUTPUT_LIMIT = 64 * 1024  # bytes of student output kept for messages
# one answer from a child: a solutions grade's largest is under 1 MiB, a full trace (child/tracer.py) under 17 MiB.
# Every child a grade runs at once (the grading children and their measuring ones) may flood the parent up to it
MAX_REPLY_BYTES = 32 * 2**20
# what a child may leave in its own folder (its temp folder: libraries cache a few MiB there as they load), read by the
# grader every SCRATCH_EVERY_S of a call: each file is capped by the child's own limit, their sum and number only here
# (ATTN_SCRATCH_MIB sets the first: the operator's switch, and the tests')
SCRATCH_CAP_ENTRIES, SCRATCH_EVERY_S = 10_000, 0.25


def scratch_cap_bytes() -> int:
    try:
        return int(os.environ.get("ATTN_SCRATCH_MIB", "256")) * 2**20
    except ValueError:
        return 256 * 2**20
PRINTED_LIMIT = 2048  # characters of what one call (and one check) printed that the report shows
FIRST_CALL_FACTOR = 3  # the first call in a fresh child may take this many times the per-call limit
# A call's limit counts the time its child ran, slept or read, not the time it stood ready while the machine ran
# others (a busy grading machine, a batch's other submissions): that wait is added to the limit, up to this many
# times the limit again. Where /proc is missing (macOS) the limit is wall-clock time alone.
CPU_WAIT_FACTOR = 3
SIGNALS = {getattr(signal, name): words for name, words in say.SIGNAL_WORDS.items()}


_NOTES: dict = {}


def protections(limits: Limits | None = None) -> list[str]:
    """Which protections of the sandbox this machine turns off or weakens, one sentence each; empty on
    Linux as usual. Found once per process (the limits tried on this process's soft values, the sweep's
    reach, whether a warm server may fork) and said once in the report."""
    limits = limits or Limits()
    key = tuple(limits.as_dict().values())
    if key not in _NOTES:
        uid = 0 if separate_user_possible() else None
        notes = plan(limits, uid) + sweep_notes(uid)
        if not namespaces.available():
            notes.append(say.OFF_NAMESPACES)
        if not no_writes.available():
            notes.append(say.OFF_LANDLOCK)
        if not no_processes.supported():
            notes.append(say.OFF_SECCOMP)
        if not fork_is_safe():
            notes.append(say.OFF_FORK)
        _NOTES[key] = notes
    return list(_NOTES[key])


RETIRED_MESSAGE = say.WORKER_RETIRED
LINGER_S = 15.0  # how long a measuring child may take to end once its one call is answered (an exit takes < 1 s)

_STARTED: "weakref.WeakSet[Worker]" = weakref.WeakSet()  # every worker whose scratch folder may still exist
_STARTING = threading.Lock()
_ENDED = threading.Event()


def end_every_child() -> None:
    """Leaving the process (watch stopped by its terminal): end every child still running and remove every scratch
    folder this process made, whichever thread owns it and however far its grade got; no worker starts after.
    A grading thread that is still closing its own worker finds the work done (close and rmtree are idempotent)."""
    with _STARTING:
        _ENDED.set()
        workers = list(_STARTED)
    running = [w for w in workers if getattr(w, "child", None) is not None and not w._sealed]
    for w in workers:
        w.stop()
    for w in workers:  # what escaped a running child's group (one that could start processes), then its folder
        if w in running:
            kill_everything(w.token, w.uid, [], temp=False)
        if getattr(w, "scratch", None) is not None:
            shutil.rmtree(w.scratch, ignore_errors=True)


def await_end(child: Launched, linger_s: float, cancelled: Callable[[], bool]) -> int | None:
    """The exit code of a measuring child once it ends, None if it is still running after `linger_s`. Its fork
    server gone (a grade being stopped, or a server killed), nobody can say any more: that raises at once rather
    than asking the dead server again until the wait is over (a core spun for `linger_s`, then the child blamed)."""
    deadline = time.monotonic() + linger_s
    while (status := child.reap(0.2)) is None and time.monotonic() < deadline:
        if child.gone:
            if cancelled():
                raise BudgetSpent(say.GRADE_CANCELLED)
            raise ServerGone(say.SERVER_GONE)
    return status


class Worker:
    """One child process holding the student's package, started lazily, restarted after a crash.

    Started by a new interpreter, or forked by a ForkServer (batches: torch is already imported there)."""

    def __init__(self, submission: "Path | Snapshot", timeout: float = 10.0, limits: Limits | None = None,
                 zygote: ForkServer | None = None, reuse_memory: bool = False, files=None) -> None:
        # the bytes every child of this worker is given: a grade hands its Snapshot in (here, or as `snapshot`
        # before the first call); a folder alone is read (safe_files.take) when the first child starts, once
        self.snapshot: Snapshot | None = submission if isinstance(submission, Snapshot) else None
        self.submission = submission.folder if isinstance(submission, Snapshot) else Path(submission)
        # the file names a child may load, the stages' (the grade sets them: the sandbox knows no stage); None
        # is every top-level .py file of the submission. Any other file is removed from its package unread.
        self.files: frozenset[str] | None = None if files is None else frozenset(files)
        self.reuse_memory = reuse_memory  # numpy child: see child/worker.py's reuse_memory
        self.launcher = zygote or SubprocessLauncher()
        self.limits = limits or Limits(timeout_s=timeout, memory_bytes=child_memory(torch=not reuse_memory))
        self.timeout = self.limits.timeout_s
        self.child: Launched | None = None
        self.changed: list[dict] = []
        self.aliased: list[dict] = []  # numpy arguments the last call returned (or a view of), child/invariants.py
        self.trace: list | None = None  # what the last traced call recorded (call(trace=True))
        self.printed = ""  # what the last call printed (stdout and stderr), at most PRINTED_LIMIT characters
        self._printed_from: int | None = None  # the log's size when the call in progress began
        self.deadline: float | None = None  # time.monotonic() at which the whole grade's budget runs out
        self.budget_s: float = 0.0  # that budget, for the message
        self._next_id = 0
        self._buf = bytearray()
        self.retired = False  # see retire
        self._sealed = False  # the child said, before any of the submission ran, that it can start no process
        self.preload: str | None = None  # "driver" or "npdriver": loaded before the child says it is ready
        self.preload_libraries: tuple = ()  # numpy's and torch's modules the submission imports: loaded in the start
        self._start_cpu: float | None = None  # and how much CPU time its start took (said at the same moment)
        self._soon: dict = {}  # measurements started ahead (measure_soon): key -> (thread, box)
        self._fresh: set = set()  # the fresh children measuring now: retired with this worker
        self.measurements = 0  # measure() and measure_calls() answered so far (a check that takes one is measured)
        self.package_from: Path | None = None  # a folder with this submission's files to link them from (see place)
        self.hung: dict[str, int] = {}  # files whose body never finished loading: {file: line}, shared by a grade's workers
        self.lent_s = 0.0  # what the last call's limit was lengthened by: the time its child waited for a CPU

    # -- life cycle -------------------------------------------------------
    def start(self) -> None:
        with _STARTING:
            if self.retired or _ENDED.is_set():
                raise BudgetSpent(RETIRED_MESSAGE)
            self.scratch = Path(tempfile.mkdtemp(prefix="attn-grade-", dir=getattr(self.launcher, "scratch_root", None)))
            _STARTED.add(self)
        pkg_dir = self.scratch / PACKAGE
        pkg_dir.mkdir()
        for name, data in self.taken().data.items():  # regular files only: never a link to the grader's own files
            place(pkg_dir / name, data, self.package_from)  # an unusable one is left out: the stage that needs it says why
        self._log = open(self.scratch / "output.txt", "wb")
        # read back through a descriptor of its own, opened before the child runs: whatever the child later puts
        # at that name in its folder, the grader reads the file it made
        self._log_r = open(self.scratch / "output.txt", "rb")
        self.token = secrets.token_hex(8)
        self.uid = sandbox_uid()
        env = kept_env()
        env.update(HOME=str(self.scratch), TMPDIR=str(self.scratch), ATTN_GRADE_TOKEN=self.token)
        # one thread per child: two children (and in a batch, several submissions) already share the
        # cores, and spinning BLAS/OpenMP threads fighting over them cost more than they bring
        env.update(ONE_THREAD)
        env.update(FIXED_ALLOCATOR)  # resident memory that follows what the code holds (launchers.FIXED_ALLOCATOR)
        if self.reuse_memory:
            env["ATTN_REUSE_MEMORY"] = "1"
        if self.preload:
            env["ATTN_PRELOAD"] = self.preload
        if self.preload_libraries:
            env["ATTN_PRELOAD_LIBRARIES"] = ",".join(self.preload_libraries)
        for switch in ("ATTN_GUARD", "ATTN_SECCOMP", "ATTN_LANDLOCK"):  # the operator's switches, to measure what each costs
            if os.environ.get(switch) == "off":
                env[switch] = "off"
        if self.uid is not None:  # its folder, for what it writes there (the submission's files stay the grader's)
            os.chown(self.scratch, self.uid, self.uid)
        self._buf, self._ready, self._vetted, self._next_id, self._sealed = bytearray(), False, False, 0, False
        self._worker_pid: int | None = None  # the process running the child's code, once it has said it is ready
        # when _read_line first asks whether a forked child that has not opened its FIFO yet lives (one that opens it
        # in its first quarter second, nearly all, costs the shared server no question)
        self._next_alive_check = time.monotonic() + 0.25
        self._next_scratch_check = time.monotonic() + SCRATCH_EVERY_S
        self._start_cpu = None
        try:
            self.child = self.launcher.launch(self.scratch, pkg_dir, PACKAGE, env, self.limits, self.uid,
                                              self._log)
        except OSError as e:  # the interpreter is missing or cannot be run: nothing of the submission ran
            self._log.close()
            self._log_r.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise GraderEnvironment(say.START_NO_INTERPRETER.format(
                what=f"{e.filename or launchers.interpreter()[0]}: {e.strerror or e}")) from None
        except ServerNeverStarted:  # its interpreter or numpy is missing: new interpreters say which, in words
            self._log.close()
            self._log_r.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.launcher = SubprocessLauncher(hide=getattr(self.launcher, "hide", []))
            return self.start()
        except BaseException:  # the fork server is gone, or the grade was stopped: no scratch folder stays behind
            self._log.close()
            self._log_r.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        if self.retired:  # retired while it was starting (watch stopping): end what just started
            self.close()
            raise BudgetSpent(RETIRED_MESSAGE)

    def taken(self) -> Snapshot:
        """The snapshot this worker's children are given: the one handed in, else the folder read now, once."""
        if self.snapshot is None:
            self.snapshot = take(self.submission)
        return self.snapshot

    def retire(self) -> None:
        """End the child now and refuse to start another: a cancelled grade's remaining calls fail at once
        (as BudgetSpent: checks not run) instead of each starting a fresh child."""
        self.retired = True
        for fresh in list(self._fresh):
            fresh.stop()
        self.close()

    def stop(self) -> None:
        """From another thread: refuse to start a child, and end the running one's process group. The thread that
        owns this worker sees its call fail and closes it itself (one thread reaps, closes and removes)."""
        self.retired = True
        child = self.child
        if child is not None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        if self.child is None:
            return
        if self._printed_from is not None:  # a call that hung or crashed: what it printed, before the log goes
            self.printed = self._printed_since(self._printed_from)
            self._printed_from = None
        # a sealed child (the seccomp filter was in force before any of the submission ran) has started no
        # process: ending its group is enough. Otherwise its tree is found before it ends (orphans are harder to
        # find), and every process carrying its marker or its uid is swept after
        tree = [] if self._sealed else descendants(self.child.pid)
        try:
            os.killpg(self.child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        kill_everything(self.token, self.uid, tree, processes=not self._sealed, temp=not self.child.private_tmp)
        self.child.reap(None)
        for fd in (self.child.requests, self.child.results):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        self._log_r.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.child = None

    def _vet(self) -> None:
        from .static_check import vet

        vet(self.scratch / PACKAGE, sorted(self.files if self.files is not None else self._placed()))
        self._vetted = True

    def _placed(self) -> set[str]:
        """The .py files in the child's package (where `files` is None: every one the submission has)."""
        scratch = getattr(self, "scratch", None)
        return {p.name for p in (scratch / PACKAGE).glob("*.py")} if scratch is not None else set()

    def measure_soon(self, target: str, *args: Any, timeout: float | None = None, loads: tuple = (),
                     **kwargs: Any) -> None:
        """Start `measure(target, *args, **kwargs)` now, in a thread of its own, so that it runs beside the calls
        made before a check asks for it: the first `measure` with the same arguments takes its result (or its
        error) instead of starting another child. The measurement is the same fresh child either way."""
        import threading

        key = repr((target, args, sorted(kwargs.items())))
        if key in self._soon or self.retired:
            return
        box: dict = {}

        def run() -> None:
            try:
                box["value"] = self._measure_now(target, *args, timeout=timeout, loads=loads, **kwargs)
            except BaseException as e:  # noqa: BLE001 - handed to whoever asks for this measurement
                box["error"] = e

        thread = threading.Thread(target=run, daemon=True)
        self._soon[key] = (thread, box)
        thread.start()

    def end_measurements(self) -> None:
        """End the measurements started ahead that no check took (a stage stopped before its measuring check):
        their children are ended and their threads joined, so nothing outlives the grade."""
        for thread, _ in self._soon.values():
            while thread.is_alive():  # again until it ends: a child caught between fork and its own group
                for fresh in list(self._fresh):
                    fresh.stop()
                thread.join(0.2)
        self._soon.clear()

    def measure(self, target: str, *args: Any, timeout: float | None = None, loads: tuple = (),
                **kwargs: Any) -> tuple[Any, int | None, float | None]:
        """Call `target` in a fresh child of its own that ends after this one call: its value, the child's
        peak resident memory in bytes and its CPU time in seconds, as the kernel counted them for its whole
        life (read here, in the parent, when it is reaped: nothing the child runs can lower or rewrite them).
        None where the system does not count them. A measurement started ahead by measure_soon is used once, then
        forgotten. `loads` names modules of numpy and torch the child imports as part of its start, before any of
        the submission runs (a measurement and its baseline alike: what a library costs to load is not the call's)."""
        self.measurements += 1
        ahead = self._soon.pop(repr((target, args, sorted(kwargs.items()))), None)
        if ahead is None:
            return self._measure_now(target, *args, timeout=timeout, loads=loads, **kwargs)
        thread, box = ahead
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _measure_now(self, target: str, *args: Any, timeout: float | None = None, loads: tuple = (), **kwargs: Any):
        return self._in_fresh_child(target, lambda fresh: fresh.call(target, *args, timeout=timeout, **kwargs), loads)

    def measure_calls_soon(self, key: str, calls: list, timeout: float | None = None, loads: tuple = (),
                           enough=None) -> None:
        """Start `measure_calls(calls, ...)` now, in a thread of its own; the first measure_calls with the same `key`
        takes its result (or its error)."""
        import threading

        key = repr(("calls", key))
        if key in self._soon or self.retired:
            return
        box: dict = {}

        def run() -> None:
            try:
                box["value"] = self._measure_calls_now(calls, timeout=timeout, loads=loads, enough=enough)
            except BaseException as e:  # noqa: BLE001 - handed to whoever asks for this measurement
                box["error"] = e

        thread = threading.Thread(target=run, daemon=True)
        self._soon[key] = (thread, box)
        thread.start()

    def measure_calls(self, calls: list, timeout: float | None = None, loads: tuple = (),
                      key: str | None = None, enough=None) -> tuple[list, Any, Any]:
        """Make `calls`, [(target, args, kwargs, counted), ...], in order in one fresh child of their own that ends
        after the last. Returns (results, whole-life peak bytes, whole-life CPU seconds): results holds each call's
        (value, per_call.Cost or None), the Cost for a `counted` call being what that call alone added, read by this
        process around it (sandbox/per_call.py: the child's high-water mark reset just before, read just after;
        the child waits on its request pipe between calls). A Cost's fields are None where the system cannot
        tell (no /proc): the whole-life counts (the kernel's, at reaping, its start taken off the CPU time) are
        the fallback. With `key`, a measure_calls_soon of that key started ahead is used once. With `enough`, a
        predicate enough(index, value, cost) asked after each counted call, the calls after the first counted one it
        holds true for are not made (results is then shorter than calls): what is already known decides, and code
        far too slow is not run to its end."""
        self.measurements += 1
        ahead = self._soon.pop(repr(("calls", key)), None) if key is not None else None
        if ahead is None:
            return self._measure_calls_now(calls, timeout=timeout, loads=loads, enough=enough)
        thread, box = ahead
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _measure_calls_now(self, calls: list, timeout: float | None = None, loads: tuple = (), enough=None):
        from .per_call import Meter

        def run(fresh: "Worker") -> list:
            results, meter = [], None
            for target, args, kwargs, counted in calls:
                if not counted:
                    results.append((fresh.call(target, *args, timeout=timeout, **kwargs), None))
                    continue
                meter = meter or Meter(fresh.child.pid)
                meter.start()
                value = fresh.call(target, *args, timeout=timeout, **kwargs)
                results.append((value, meter.stop()))
                if enough is not None and enough(len(results) - 1, *results[-1]):
                    break
            return results

        return self._in_fresh_child(calls[0][0], run, loads)

    def _in_fresh_child(self, target: str, run, loads: tuple = ()):
        """run(fresh) in a fresh child of its own (preloading `target`'s module), which then must end: (what run
        returned, the child's whole-life peak bytes, its CPU seconds less its start), as in _measure_now."""
        if self.retired:
            raise BudgetSpent(say.GRADE_CANCELLED)
        fresh = Worker(self.taken(), limits=self.limits, zygote=self.launcher, files=self.files)
        fresh.deadline, fresh.budget_s = self.deadline, self.budget_s
        fresh.preload = target.split(":")[0]  # its libraries load in its start, which its CPU time leaves out
        fresh.preload_libraries = tuple(loads)
        fresh.package_from = self.scratch / PACKAGE if self.child is not None else None
        fresh.hung = self.hung
        self._fresh.add(fresh)
        try:
            if self.retired:  # retired between the check above and the line before
                raise BudgetSpent(say.GRADE_CANCELLED)
            value = run(fresh)
            os.close(fresh.child.requests)  # the child's request loop ends, and so does the child
            fresh.child.requests = -1
            status = await_end(fresh.child, LINGER_S, cancelled=lambda: self.retired or _ENDED.is_set())
            if status is None:
                # It would not end by itself. Ending it from here cannot give its count back: the kill may
                # reach only the process in front of it (unshare, the spawner), which is then reaped before
                # the child's own peak reaches it. A measurement it kept from being read is not a pass.
                raise StudentCrash(say.CHILD_LINGERED.format(seconds=LINGER_S))
            # the CPU time of the calls: the kernel's count for the child's life, less its start (the interpreter
            # and libraries), which it said before any of the submission ran
            cpu = fresh.child.cpu_s
            if cpu is not None and fresh._start_cpu is not None:
                cpu = max(cpu - fresh._start_cpu, 0.0)
            return value, fresh.child.peak_bytes, cpu
        finally:
            self._fresh.discard(fresh)
            fresh.close()

    def _refuse_hung(self, target: str) -> None:
        """Fail a call at once whose module loads (itself, or through the submission's other modules) a file
        whose body never finished loading earlier in this grade: its import would hang again, whatever the call,
        and each call would wait out its limit for nothing. Calls that load none of those files run as usual.
        (The record comes from the child's stack: forged, it costs only the forger's own calls.)"""
        if not self.hung:
            return
        from .static_check import loaded_files

        for file in sorted(loaded_files(self.taken().data, target.split(":")[0]) & set(self.hung)):
            line = self.hung[file]
            raise NeverLoaded(say.CHILD_NEVER_LOADED.format(file=file, line=line), file)

    def hang_site(self, wait: float = 1.0) -> tuple[str, int, str] | None:
        """(file, line, function) of the submission that a call past its limit was running: the innermost
        frame in a submission file of the stack the child wrote just before the limit (child/worker.py's
        watch_for_a_hang). None when it wrote none (it never reached the student's code) or it cannot be read."""
        frames = self.hang_frames(wait)
        return frames[0] if frames else None

    def hang_frames(self, wait: float = 1.0) -> list[tuple[str, int, str]]:
        """The submission's frames, innermost first, of the stack a call past its limit left (see hang_site):
        those of the first thread that was running any."""
        files = self.files if self.files is not None else self._placed()
        path, deadline = self.scratch / "stack.txt", time.monotonic() + wait
        text = ""
        while True:
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # the child's file, never a link
                try:
                    text = os.read(fd, 1 << 20).decode(errors="replace")
                finally:
                    os.close(fd)
            except OSError:
                pass
            if text or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        for block in re.split(r"^(?:Current thread|Thread) ", text, flags=re.M):  # one per thread
            frames = [(Path(m.group(1)).name, int(m.group(2)), m.group(3))  # most recent call first
                      for m in re.finditer(r'File "([^"]+)", line (\d+) in (\S+)', block)
                      if Path(m.group(1)).parent.name == PACKAGE and Path(m.group(1)).name in files]
            if frames:
                return frames
        return []

    def _read_log(self, offset: int, n: int) -> bytes:
        """At most `n` bytes of the child's log from `offset` (b"" once it is closed)."""
        try:
            self._log_r.seek(offset)
            return self._log_r.read(n)
        except (OSError, ValueError):
            return b""

    def _log_size(self) -> int:
        try:
            return os.fstat(self._log.fileno()).st_size
        except (OSError, ValueError):
            return 0

    def _printed_since(self, start: int) -> str:
        """What the child wrote to its log from byte `start` on: printable text, cut at PRINTED_LIMIT."""
        if self._log_size() <= start:  # most calls print nothing: nothing to read
            return ""
        data = self._read_log(start, 4 * PRINTED_LIMIT)
        text = data.decode("utf-8", "replace")
        for folder in {str(self.scratch / PACKAGE), os.path.realpath(self.scratch / PACKAGE)}:
            text = text.replace(folder + os.sep, "")  # a warning names the file, not the grader's scratch folder
        return capped(printable(text), max(0, self._log_size() - start - len(data)))

    def output_tail(self, n: int = 600) -> str:
        data = self._read_log(max(self._log_size() - OUTPUT_LIMIT, 0), OUTPUT_LIMIT)
        return plain(data.decode("utf-8", "replace"))[-n:]

    # -- calls ------------------------------------------------------------
    def call(self, target: str, *args: Any, timeout: float | None = None, trace: bool = False, **kwargs: Any) -> Any:
        """Call `module:function` (or `driver:name`) in the child and return its value. With `trace`, the child
        also records the arrays each line of the submission made during the call (child/tracer.py): they are
        left in `self.trace` (a list of records, or None when none came back)."""
        from ..child import wire  # imported here, not above: prestart starts the children before numpy loads

        self._refuse_hung(target)
        if self.child is None:
            self.start()
        if not self._vetted:  # before the child imports anything of the submission (it does so lazily)
            self._vet()
        self._next_id += 1
        req_id = self._next_id
        self.printed, self.changed, self.aliased, self.trace = "", [], [], None
        self._printed_from = self._log_size()
        # the first call in a fresh child also pays its one-time work (imports, a first torch call): it gets
        # FIRST_CALL_FACTOR times the limit, every later call the limit itself
        limit = timeout if timeout is not None else self.timeout * (FIRST_CALL_FACTOR if req_id == 1 else 1)
        capped = self.deadline is not None and self.deadline - time.monotonic() < limit
        if capped:  # the grade's budget ends first: the call gets what is left of it
            limit = self.deadline - time.monotonic()
            if limit <= 0:
                raise BudgetSpent(say.BUDGET_SPENT.format(budget=self.budget_s))
        try:  # the child is told the limit: just before it, it leaves its stack for hang_site
            request = {"id": req_id, "target": target, "args": list(args), "kwargs": kwargs, "limit": limit}
            if trace:
                request["trace"] = True
            os.write(self.child.requests, wire.dumps(request))
        except BrokenPipeError:
            died = self._died(say.CHILD_EXITED_BEFORE)
            if not self._ready:  # it ended before loading any of the submission: the environment's fault
                raise GraderEnvironment(environment_fault(str(died))) from None
            raise died from None
        try:
            if not self._ready:  # the child's first line says it has loaded
                try:
                    first = self._read_line(limit, lend=not capped)
                except StudentCrash as e:  # it ended before loading any of the submission: the environment's fault
                    raise GraderEnvironment(environment_fault(str(e))) from None
                hello = wire.loads(first)
                if hello.get("value") != "ready":
                    raise self._died(say.CHILD_BAD_START)
                self._ready, self._sealed = True, hello.get("sealed") is True
                start_cpu = hello.get("cpu_s")
                self._start_cpu = float(start_cpu) if isinstance(start_cpu, (int, float)) else None
            line = self._read_line(limit, lend=not capped)
            self._check_scratch()  # a call that answered fast may have written its files all the same
        except StudentTimeout:
            if capped:
                raise BudgetSpent(say.BUDGET_SPENT.format(budget=self.budget_s)) from None
            raise
        self.printed, self._printed_from = self._printed_since(self._printed_from), None
        reply = plain_data(wire.loads(line))  # every string a submission sends is shown as text, never run
        if reply.get("id") != req_id:
            raise self._died(say.CHILD_OUT_OF_TURN)
        if not reply["ok"]:
            raise StudentError(reply["error"])
        self.changed = reply.get("changed") or []  # arguments the call modified in place (child/invariants.py)
        self.aliased = reply.get("aliased") or []
        trace = reply.get("trace")
        self.trace = trace if isinstance(trace, list) else None
        return reply["value"]

    def _read_line(self, timeout: float, lend: bool = True) -> bytes:
        """The child's next line, within `timeout` s plus (with `lend`) the time it waited for a CPU meanwhile
        (CPU_WAIT_FACTOR): a starved child is not an endless loop."""
        deadline = time.monotonic() + timeout
        waited0 = self._queue_wait() if lend else None
        self.lent_s = 0.0
        pending = b"\n" not in self._buf
        while pending:
            left = deadline - time.monotonic()
            if left <= 0 and waited0 is not None:
                waited = self._queue_wait()
                owed = 0.0 if waited is None else min(waited - waited0, CPU_WAIT_FACTOR * timeout) - self.lent_s
                if owed > 0.01:
                    deadline += owed
                    self.lent_s += owed
                    continue
            if left <= 0:
                frames = self.hang_frames()
                site = frames[0] if frames else None
                # the innermost module body on the stack: an import that never finished (not tried again, _refuse_hung)
                loading = next((f for f in frames if f[2] == "<module>"), None)
                if loading:
                    self.hung.setdefault(loading[0], loading[1])
                self.close()
                at = say.CHILD_TIMEOUT_AT.format(file=site[0], line=site[1], function=site[2]) if site else ""
                lent = say.CHILD_TIMEOUT_LENT.format(seconds=self.lent_s) if self.lent_s >= 0.1 else ""
                raise StudentTimeout(say.CHILD_TIMEOUT.format(timeout=timeout, lent=lent, at=at),
                                     where=site, loading=loading[0] if loading else None)
            self._check_scratch()
            ready, _, _ = select.select([self.child.results], [], [], min(left, SCRATCH_EVERY_S))
            if ready:
                try:
                    chunk = os.read(self.child.results, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    if self.retired:  # stopped from another thread: the grade was cancelled, nothing the child did
                        self.close()
                        raise BudgetSpent(RETIRED_MESSAGE)
                    # a FIFO reads as ended until the child opens it; a child ended before it did (killed in its
                    # start) never will, so that is asked of the server now and then rather than waited out
                    if self.child.forked and not self._ready:
                        time.sleep(0.005)
                        if time.monotonic() < self._next_alive_check:
                            continue
                        self._next_alive_check = time.monotonic() + 0.25
                        if self.child.reap(0) is None:
                            continue
                    raise self._died(say.CHILD_EXITED)
                if len(self._buf) + len(chunk) > MAX_REPLY_BYTES:  # a flood, not an answer: stop reading it
                    self.close()
                    raise StudentCrash(say.CHILD_REPLY_TOO_LARGE.format(mib=MAX_REPLY_BYTES // 2**20))
                self._buf += chunk  # a bytearray: appending is not a copy of what came before
                pending = b"\n" not in chunk  # only the new bytes can hold the line's end
        line, _, rest = self._buf.partition(b"\n")
        self._buf = bytearray(rest)
        return bytes(line)

    def _queue_wait(self) -> float | None:
        """The seconds the child's main thread has waited for a CPU so far (per_call.queue_wait_s), or None."""
        from .per_call import queue_wait_s, worker_pid

        if self.child is None:
            return None
        pid = self._worker_pid or worker_pid(self.child.pid)
        if self._ready:  # its launcher's chain (unshare, new_root.py) is complete only once the child has loaded
            self._worker_pid = pid
        return None if pid is None else queue_wait_s(pid)

    def _check_scratch(self) -> None:
        """End the child if what it wrote in its own folder passes scratch_cap_bytes() or SCRATCH_CAP_ENTRIES (found
        by a stranger attacker: 64 files of 16 MiB a call, through torch.from_file, filled the host's disk). Read
        at most every SCRATCH_EVERY_S, during a call and after an answer alike: a stream of fast calls costs one
        read of the folder a quarter second, not one a call."""
        if time.monotonic() < self._next_scratch_check:
            return
        self._next_scratch_check = time.monotonic() + SCRATCH_EVERY_S
        size, entries = folder_usage(self.scratch, SCRATCH_CAP_ENTRIES)
        cap = scratch_cap_bytes()
        if size > cap or entries > SCRATCH_CAP_ENTRIES:
            self.close()
            raise StudentCrash(say.CHILD_SCRATCH_FULL.format(
                size=size / 2**20, entries=entries, more="+" if entries > SCRATCH_CAP_ENTRIES else "", cap=cap // 2**20,
                limit=SCRATCH_CAP_ENTRIES))

    def _died(self, why: str) -> StudentCrash:
        tail = self.output_tail()
        if self.child.forked:
            time.sleep(0.05)  # let it finish dying, so the fork server can report how
        code = self.child.reap(2)
        self.close()
        if code is None or code >= 0:
            detail = say.CHILD_EXIT_CODE.format(code=code)
        else:
            detail = say.CHILD_SIGNAL.format(words=SIGNALS.get(-code, say.SIGNAL_OTHER), number=-code)
        msg = say.CHILD_DIED.format(why=why, detail=detail)
        if tail.strip():
            msg += say.CHILD_LAST_OUTPUT + tail.strip()[-300:]
        return StudentCrash(msg)


def folder_usage(folder: Path, entries: int) -> tuple[int, int]:
    """(bytes the files beneath `folder` take on disk, how many entries there are), counted up to just past
    `entries`; links are counted, never followed. A folder that cannot be read counts as empty."""
    total, count, todo = 0, 0, [str(folder)]
    while todo and count <= entries:
        try:
            with os.scandir(todo.pop()) as found:
                for entry in found:
                    count += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size
                    if stat.S_ISDIR(st.st_mode):
                        todo.append(entry.path)
                    if count > entries:
                        break
        except OSError:
            continue
    return total, count


def place(dest: Path, data: bytes, source: Path | None = None) -> None:
    """Write a submission file for a child: a link to the same file in `source` (another child's copy of this
    grade's submission) where that holds exactly these bytes, else a new file. A file system may charge far more
    for a new file than for a link (ext4 looks for a free inode): a grade's measuring children link theirs. The
    grader owns these files; a child may read them, never change them."""
    if source is not None:
        try:  # a regular file the grader owns (a child under a uid of its own cannot have replaced it), these bytes
            st = os.lstat(source / dest.name)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and (source / dest.name).read_bytes() == data:
                os.link(source / dest.name, dest)
                return
        except OSError:  # gone (that child ended), or another file system: written instead
            pass
    dest.write_bytes(data)


def printable(text: str) -> str:
    """Student output without control characters (a terminal would act on them): lines and tabs stay."""
    return "".join(ch if ch in "\n\t" or (ch.isprintable()) else "?" for ch in text.replace("\r\n", "\n"))


def capped(text: str, unread: int = 0) -> str:
    """At most PRINTED_LIMIT characters of `text` (`unread` more bytes were not even read), saying so if cut."""
    if len(text) <= PRINTED_LIMIT and not unread:
        return text
    return text[:PRINTED_LIMIT].rstrip("\n") + say.PRINTED_CUT.format(limit=PRINTED_LIMIT)


def environment_fault(crash: str) -> str:
    """What kept a child from starting, from how it ended before its first line (`crash`: the StudentCrash
    message, with its exit code and last output), naming the missing package or interpreter where it says which."""
    exe = launchers.interpreter()[0]
    code = re.search(r"\((exit code -?\d+|it [^)]*)\)", crash)
    tail = crash.partition(say.CHILD_LAST_OUTPUT.removeprefix("; "))[2].strip()
    last = tail.splitlines()[-1].strip() if tail else ""
    how = f"{code.group(1) if code else say.START_ENDED}{': ' + last if last else ''}"
    missing = re.search(r"No module named '([\w.]+)'", crash)
    if missing:
        return say.START_MISSING_PACKAGE.format(package=missing.group(1).split(".")[0], exe=exe, how=how)
    if "exit code 127" in crash or "not found" in crash or "No such file" in crash:
        return say.START_NOT_FOUND.format(exe=exe, how=how)
    if "exit code 126" in crash:
        return say.START_NOT_EXECUTABLE.format(exe=exe, how=how)
    return say.START_FAILED.format(exe=exe, how=how)


def start_server(kind: str):
    """The fork server a grade's `kind` side ("torch" or "numpy") forks its children from, started now (its
    interpreter loads numpy, and torch for the torch side, while the caller goes on), or None where that side
    starts a new interpreter per child: where forking is not safe, where the interpreter cannot start (the
    worker reports it when the grade calls), and the numpy side inside a memory-limited container (Gradescope's
    768 MiB: a numpy server beside the torch one, with their children, passed the container's limit in the tests)."""
    from ..child.policy import container_memory

    if not fork_is_safe() or (kind == "numpy" and container_memory() is not None):
        return None
    try:
        return ForkServer(isolate=namespaces.available(), wait=False, torch=kind == "torch")
    except OSError:
        return None


def prestart(submission: Path, kinds: list[str], timeout: float) -> dict:
    """Start the children now, so their interpreters load numpy (and torch) while the grader
    imports its checks: the start-ups overlap instead of adding up. Where forking is safe each side is a fork
    server (start_server, inside namespaces where they exist) that imports torch once (numpy alone, for the numpy
    side): the grading child and every fresh child that measures are forks of it, not new interpreters importing
    again. `kinds`: "torch" and/or "numpy", the sides the grade's stages need (stages.child_kinds), the torch side
    first: its import is the longest start of a grade. The folder is read now (safe_files.take) and every worker
    holds that Snapshot (`snapshot`): the grade that is handed these workers grades those bytes. Close the workers'
    launchers when the grade is done (close_launchers)."""

    def start(kind: str) -> Worker:
        server = start_server(kind)
        if server is not None:
            return Worker(snap, timeout=timeout, zygote=server, reuse_memory=kind == "numpy")  # forked on first use
        w = Worker(snap, timeout=timeout, reuse_memory=kind == "numpy")
        try:
            w.start()
        except GraderEnvironment:  # the grade meets it again when it calls, and reports it there
            pass
        return w

    snap = take(submission)  # the bytes the whole grade sees, from now on (a forked child starts later)
    return {kind: start(kind) for kind in kinds}


def close_launchers(workers: dict) -> None:
    """End what prestart started: the workers' children and the fork server behind them."""
    for w in workers.values():
        w.close()
        w.launcher.close()
