"""`make watch`: re-grade whenever a stage file is saved, only the stages that file can affect.

The saved stage's verdict comes first and the stages that use it follow on the same screen (a
progress bar, the whole kit's total, diagnoses, the next step). Ctrl-C leaves cleanly, and so does the end
of the terminal, however it ends: a SIGHUP or SIGTERM, the parent (make, the shell) gone, or the terminal
itself hung up (a killed tmux session hangs up the tty and signals only its session leader, often make,
which then waits for its children). Leaving ends the fork server and every child and removes their
folders under the temporary directory.
"""
import os
import queue
import select
import signal
import sys
import threading
import time
from pathlib import Path

from .stages import DEPENDANTS, STAGES

SLOW_S = 1.0  # a run whose first verdict takes longer shows its stages as being graded meanwhile
CLEAR = "\033[2J\033[H"
HOME, ERASE = "\033[H", "\033[J"  # back to the top (the screen is redrawn over itself), and clear what is left below


def affected_stages(changed: set[str]) -> list[str]:
    """Stages to re-grade when these file names changed, in stage order."""
    hit: set[str] = set()
    for s in STAGES:
        if changed & set(s.files):
            hit |= set(DEPENDANTS[s.name])
    return [s.name for s in STAGES if s.name in hit]


def own_stages(changed: set[str]) -> list[str]:
    """The stages written in these files (their verdict is shown first)."""
    return [s.name for s in STAGES if changed & set(s.files)]


class Session:
    """One `make watch`: a fork server that imported numpy and torch once, from which every grade forks
    fresh children (the student's modules are imported anew each time, under the same limits and
    sandbox as `make grade`). A grade runs in a thread; a save while it runs cancels it."""

    def __init__(self, folder: Path, timeout: float, color: bool, out) -> None:
        from .sandbox.launchers import warm_launcher

        self.folder, self.timeout, self.color, self.out = folder, timeout, color, out
        self.kit: dict = {}  # every stage's latest StageResult, for the whole-kit line
        self.server = warm_launcher()  # a fork server, or new interpreters where forking is not safe
        self.cancel = threading.Event()
        self.workers: dict = {}
        self.lock = threading.Lock()
        self.drawing = threading.Lock()  # one screen written at a time (a run's, or the one that says it is slow)

    def _server(self):
        from .sandbox.launchers import warm_launcher

        if not self.server.alive():  # a submission running as the student's user killed it: start another
            self.server.close()
            self.server = warm_launcher()
        return self.server

    def _grade(self, stages: list[str]):
        from .grade import grade
        from .sandbox.runner import Worker

        if self.cancel.is_set():  # watch is leaving (it closed the server) or a save came: no server is started again
            return None
        server = self._server()
        with self.lock:
            if self.cancel.is_set():  # stopped before this phase began: start no child
                return None
            self.workers = {kind: Worker(self.folder, timeout=self.timeout, zygote=server, reuse_memory=kind == "numpy")
                            for kind in ("numpy", "torch")}
        try:
            return grade(self.folder, stages, timeout=self.timeout, workers=self.workers, confirm=False,
                         keep=True)
        finally:
            with self.lock:
                self.workers = {}

    def run(self, changed: set[str] | None) -> None:
        """Grade what `changed` reaches (everything when None): the saved file's first stage, its other stages,
        then the stages that use them, on one screen whose lines are updated in place. Returns early when cancelled."""
        from .feedback.advice import next_step
        from .feedback.hints import remember_run
        from .report.watch_screen import screen
        from .results import Results

        stages = [s.name for s in STAGES] if changed is None else affected_stages(changed)
        first = [s.name for s in STAGES] if changed is None else own_stages(changed)
        # a file written for several stages (module.py: heads, kv_cache, fused) shows its first stage's verdict
        # before the others are graded (their fresh measuring children take a few tenths of a second)
        split = [first] if changed is None else [first[:1], first[1:]]
        phases = [p for p in (*split, [n for n in stages if n not in first]) if p]
        merged = None
        # a verdict that takes long (a call running into its limit) is not waited for on the old screen: after
        # SLOW_S the stages of this run show as being graded, until their verdicts replace them
        shown = threading.Event()  # set once this run has drawn a screen of its own
        waiting = threading.Timer(SLOW_S, self._show_grading, args=(stages, shown))
        waiting.daemon = True
        waiting.start()
        for i, phase in enumerate(phases):
            res = self._grade(phase)
            if res is None or self.cancel.is_set():
                waiting.cancel()
                return
            self.kit.update(res.stages)
            agree_with_grade(self.kit, res.snapshot)  # the statuses `make grade` would give
            found = {**(merged.stages if merged else {}), **res.stages}
            located = {**(merged.located if merged else {}), **res.located}
            merged = Results(res.submission, {n: found[n] for n in stages if n in found}, res.seed,
                             protections_off=res.protections_off, ignored_files=res.ignored_files,
                             located={n: loc for n, loc in located.items() if n in stages}, snapshot=res.snapshot)
            # the statuses are the kit's, decided again as `make grade` would: so is the next step
            merged.next_step = next_step(merged, {n: sr.status for n, sr in self.kit.items()})
            pending = [n for p in phases[i + 1:] for n in p]
            waiting.cancel()
            with self.drawing:
                # one clear screen per run (drawn over from then on): this one's, unless the slow screen was its first
                self.out.write((HOME if shown.is_set() else CLEAR) + screen(merged, self.kit, stages, self.color, pending)
                               + ERASE + "\n")
                self.out.flush()
                shown.set()
        if merged is not None:
            remember_run(merged)

    def _show_grading(self, stages: list[str], shown: threading.Event) -> None:
        """The screen while a run's first verdict is slow: the header and every stage of the run as being graded."""
        from .report.watch_screen import screen
        from .results import Results

        with self.drawing:
            if shown.is_set() or self.cancel.is_set():
                return
            self.out.write(CLEAR + screen(Results(self.folder, {}, 0), self.kit, stages, self.color, stages) + ERASE
                           + "\n")
            self.out.flush()
            shown.set()

    def stop_grading(self) -> None:
        """Cancel the grade in progress: its children are ended now (a call in flight fails at once) and
        none starts again for it (a retired worker refuses to restart, so the grade runs out quickly)."""
        self.cancel.set()
        with self.lock:
            for w in self.workers.values():
                try:
                    w.retire()
                except Exception:  # noqa: BLE001 - the grading thread may be closing it at the same moment
                    pass

    def close(self) -> None:
        self.server.close()


# File events can be missed: a save in the moment the listener starts, a folder where the system sends none (some
# network or container mounts). So every LOOK_EVERY_S the folder's .py files (size, modification time) are compared
# with what the running grade read: a difference that two looks in a row see and no event announced is a save.
LOOK_EVERY_S = 1.0


def py_files(folder: Path) -> dict[str, tuple[int, int]]:
    """{name: (size, modification time in ns)} of the folder's top-level .py files (one listing, no file read)."""
    found: dict[str, tuple[int, int]] = {}
    try:
        with os.scandir(folder) as entries:
            for e in entries:
                if e.name.endswith(".py"):
                    try:
                        st = e.stat()
                    except OSError:
                        continue
                    found[e.name] = (st.st_size, st.st_mtime_ns)
    except OSError:
        pass
    return found


STOP_SIGNALS = ("SIGINT", "SIGHUP", "SIGTERM")


def ends_with_terminal() -> None:
    """Closing the terminal (SIGHUP) or `kill` (SIGTERM) stops watching as Ctrl-C does; and Ctrl-C stops it even
    where it was started with SIGINT ignored (a job started in the background by a shell without job control)."""
    def stop(signum, frame):
        raise KeyboardInterrupt

    for name in STOP_SIGNALS:
        if hasattr(signal, name) and threading.current_thread() is threading.main_thread():
            signal.signal(getattr(signal, name), stop)


def ignore_stop_signals() -> None:
    """While leaving: a second signal (a closing terminal sends SIGHUP more than once, then SIGCONT) must not
    cut the cleanup short and leave the fork server or scratch folders behind."""
    for name in STOP_SIGNALS:
        if hasattr(signal, name) and threading.current_thread() is threading.main_thread():
            signal.signal(getattr(signal, name), signal.SIG_IGN)


def terminal_fds(out) -> list[int]:
    """The descriptors whose hang-up means nobody can see watch any more: its output, and its input when
    that is a terminal (stdin redirected from a file or /dev/null says nothing about the terminal)."""
    fds = []
    for stream, tty_only in ((out, False), (sys.stdin, True)):
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            continue
        if fd not in fds and (not tty_only or os.isatty(fd)):
            fds.append(fd)
    return fds


def hung_up(fds: list[int]) -> bool:
    """Whether one of `fds` is hung up: a tty whose terminal closed, or a pipe whose reader went away.
    poll() asked for no event reports exactly those (POLLHUP, POLLERR), without reading or writing."""
    if not fds or not hasattr(select, "poll"):
        return False
    p = select.poll()
    for fd in fds:
        p.register(fd, 0)
    try:
        return any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in p.poll(0))
    except OSError:
        return True


def agree_with_grade(kit: dict, snap) -> None:
    """Decide each known stage's status again, in stage order, over every stage's latest result, as one
    `make grade` would over all of them (a save in masking.py grades masking alone: 'blocked by scaling'
    needs scaling's latest result); the source it follows is the latest grade's snapshot (`snap`)."""
    from .grade.verdict import decide_status

    done: dict = {}
    for s in STAGES:
        if s.name in kit:
            sr = kit[s.name]
            sr.blocked_by = None
            decide_status(sr, done, snap)
            done[s.name] = sr


def watch(folder: Path, interval: float = 0.05, timeout: float = 10.0, color: bool = False, out=sys.stdout) -> int:
    """File events (watchfiles) instead of polling: a burst of saves (an editor's temporary file and
    rename) is one change, graded once; a save during a grade cancels it and grades again."""
    import watchfiles

    folder = Path(folder).resolve()
    parent = os.getppid()
    ends_with_terminal()  # before the fork server starts: a SIGHUP while it starts also ends it cleanly
    if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread():
        import faulthandler  # for a maintainer: `kill -USR1 PID` writes every thread's stack to stderr, watch goes on

        faulthandler.register(signal.SIGUSR1, all_threads=True)
    events: queue.Queue = queue.Queue()
    stop = threading.Event()
    session: Session | None = None
    grading: threading.Thread | None = None
    terminal = terminal_fds(out)

    def listen() -> None:
        for changes in watchfiles.watch(folder, step=max(10, int(interval * 1000)), debounce=400, stop_event=stop,
                                        recursive=False, raise_interrupt=False):
            names = {Path(p).name for _, p in changes if p.endswith(".py")}
            if names:
                events.put(names)

    changed: set[str] | None = None  # None: the first grade covers every stage
    try:
        session = Session(folder, timeout, color, out)
        threading.Thread(target=listen, daemon=True).start()
        while True:
            session.cancel.clear()
            graded = py_files(folder)  # what this run reads, as far as the folder's listing tells
            grading = threading.Thread(target=session.run, args=(changed,), daemon=True)
            grading.start()
            changed, unsaid, next_look = None, None, time.monotonic() + LOOK_EVERY_S
            while changed is None:
                try:
                    changed = events.get(timeout=0.1)
                except queue.Empty:
                    if os.getppid() != parent or hung_up(terminal):  # the parent is gone, or the terminal is
                        raise KeyboardInterrupt from None
                    if time.monotonic() >= next_look:  # a save no event announced (see LOOK_EVERY_S)
                        next_look = time.monotonic() + LOOK_EVERY_S
                        now = py_files(folder)
                        if now != graded and now == unsaid:  # the same difference, two looks in a row
                            changed = {n for n in now.keys() | graded.keys() if now.get(n) != graded.get(n)}
                        unsaid = now if now != graded else None
                    continue
                while not events.empty():
                    changed |= events.get()
            if grading.is_alive():  # saved again before the verdict: start over with both changes
                session.stop_grading()
                grading.join()
    except KeyboardInterrupt:
        pass
    ignore_stop_signals()
    stop.set()
    if session is not None:
        from .sandbox.runner import end_every_child

        # Nothing here waits on the fork server, which a busy machine may keep from answering: every child is ended
        # by its process group and its folder removed from here, then the server; a grading thread waiting on it
        # gets its answer at once (the server is gone) and ends, its workers retired
        session.cancel.set()
        end_every_child()
        session.close()
        if grading is not None:
            grading.join(timeout=10)
    try:
        out.write("\nstopped watching.\n")
        out.flush()
    except (OSError, ValueError):  # the terminal is gone: nobody to tell
        pass
    return 0
