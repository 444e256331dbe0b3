"""`make watch` ends with its terminal however that ends, and leaves nothing behind.

Each test starts the real `make watch` with a temporary directory of its own (TMPDIR), lets it grade, saves
a stage file whose import hangs (so a grade is in flight: a fork server, children, scratch folders), then
ends the terminal one way: the terminal closes (a killed tmux session, a closed window), the shell dies,
the shell's SIGHUP reaches the job, make is killed, or tmux itself kills the session. Then make, the
watcher, its fork server and every child it started are gone, and the temporary directory is empty.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import EXERCISES, ROOT

# serial: each test catches a grade in flight; four workers on two cores kept the first grade of the stubs from
# ending for minutes, and CI's dumps showed the watcher waiting on its fork server meanwhile (a lead, see the note)
pytestmark = [pytest.mark.skipif(not shutil.which("make") or not hasattr(os, "openpty"),
                                 reason="needs make and a pseudo-terminal"), pytest.mark.serial]

HANG = "while True:  # a grade that stays in flight\n    pass\n"


# run a command as a terminal's session leader: a new session, stdin its controlling terminal, then exec (same pid)
LEAD_A_TERMINAL = ("import fcntl, os, sys, termios; os.setsid(); fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
                   "os.execvp(sys.argv[1], sys.argv[1:])")


def make_watch(sub: Path) -> list[str]:
    """`make watch` in this checkout, with this interpreter and without (re)building the venv."""
    return ["make", "-s", "-o", ".venv/.student", "watch", f"PY={sys.executable}", f"SUBMISSION={sub}"]


class Job:
    """A command run as a terminal runs it: in its own session, with a pseudo-terminal as its controlling
    terminal (`tty=True`; the session leader, as under `tmux new-session 'make watch'`), or with a pipe and
    no terminal at all. `text` collects what it writes."""

    def __init__(self, cmd: list[str], tmp: Path, tty: bool) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "MAKEFLAGS", "MAKELEVEL")}
        env["TMPDIR"] = str(tmp)
        self.seen: list[bytes] = []
        self.closing = threading.Event()
        if tty:
            self.fd, slave = os.openpty()
            self.proc = subprocess.Popen([sys.executable, "-c", LEAD_A_TERMINAL, *cmd], cwd=ROOT, env=env,
                                         stdin=slave, stdout=slave, stderr=slave)
            os.close(slave)
        else:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, start_new_session=True)
            self.fd = self.proc.stdout.fileno()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        import select

        while not self.closing.is_set():  # select with a timeout: close_terminal can stop it, then close the fd
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    chunk = os.read(self.fd, 1 << 16)
                except OSError:  # EIO: the terminal hung up
                    return
                if not chunk:
                    return
                self.seen.append(chunk)

    @property
    def text(self) -> str:
        return b"".join(self.seen).decode(errors="replace")

    def close_terminal(self) -> None:
        """What a killed tmux session or a closed terminal window does: the terminal's master side closes,
        the kernel hangs the terminal up and signals its session leader."""
        self.closing.set()
        self.reader.join()
        os.close(self.fd)


def processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command line) of every process, from ps."""
    out = subprocess.run(["ps", "-ww", "-A", "-o", "pid=", "-o", "ppid=", "-o", "stat=", "-o", "args="],
                         capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        pid, ppid, state, *args = line.split(None, 3)
        table[int(pid)] = (int(ppid), state, args[0] if args else "")
    return table


def tree(root: int) -> dict[int, str]:
    """root and all its descendants: pid -> command line."""
    table = processes()
    found = {root: table.get(root, (0, "", ""))[2]}
    grew = True
    while grew:
        new = {pid: args for pid, (ppid, _, args) in table.items() if ppid in found and pid not in found}
        found.update(new)
        grew = bool(new)
    return found


def running(pids) -> set[int]:
    """Those of `pids` still running (a zombie has ended: it only waits to be reaped)."""
    table = processes()
    return {pid for pid in pids if pid in table and not table[pid][1].startswith("Z")}


def wait_until(condition, timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not condition():
        time.sleep(0.1)
    return bool(condition())


@pytest.fixture
def tmp(tmp_path):
    """The watcher's own temporary directory (TMPDIR), open to all as /tmp is: a child running as the
    sandbox's uid must reach its scratch folder there (pytest's tmp_path lies in a private folder)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="watch-test-", dir=os.environ.get("TMPDIR", "/tmp")))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def submission(tmp_path: Path) -> Path:
    sub = tmp_path / "exercises"
    shutil.copytree(EXERCISES, sub, ignore=shutil.ignore_patterns("__pycache__"))
    return sub


def hang_a_grade(sub: Path, tmp: Path, root: int, output, log: bool = True) -> dict[int, str]:
    """After the first screen: a save whose import hangs, and a wait until the child is in it. Returns the
    tree under `root` then (pid -> command line), a forked child of the hanging grade in it. `output` is the
    whole output so far (`log`), or what the terminal shows now (a tmux pane)."""
    # the first grade's own screen: a slow one first draws "Next step: grading ..." (watch.SLOW_S), which is not it
    # (found by CI: the hang was saved while that grade still ran, and no child of the second was ever seen)
    assert wait_until(lambda: re.search(r"Next step: (?!grading)", output())), output()[-2000:]
    shown = len(output()) if log else 0
    (sub / "softmax.py").write_text(HANG + (sub / "softmax.py").read_text())
    # the grade is in flight (a second after it began, its screen says so; a measuring child of the first grade
    # may still be ending before that, so a child counts once it is still there a second later): its scratch
    # folders exist, and so does a child of the fork server
    assert wait_until(lambda: "grading ..." in output()[shown:]), output()[-2000:]
    found: dict[int, str] = {}

    def hanging() -> bool:
        before = forked_children(root)
        time.sleep(1)
        found.clear()
        found.update(tree(root))
        return bool(any(tmp.glob("attn-grade-*")) and set(before) & set(forked_children(root)) & set(found))

    if not wait_until(hanging):
        watcher = [p for p, args in tree(root).items() if " -m autograder watch " in args]
        for pid in watcher:  # where its threads wait: the stacks reach its output (see autograder/watch.py)
            os.kill(pid, signal.SIGUSR1)
        time.sleep(2)
        raise AssertionError((output()[-6000:], list(tmp.iterdir())))
    return dict(found)


def forked_children(root: int) -> list[int]:
    """The live children of the fork server under `root`."""
    table, found = processes(), tree(root)
    servers = {pid for pid, args in found.items() if "fork_server.py" in args}
    return [pid for pid, (ppid, state, _) in table.items() if ppid in servers and not state.startswith("Z")]


def assert_all_gone(started: dict[int, str], tmp: Path, reap=None) -> None:
    assert any("fork_server.py" in args for args in started.values()), started  # the tree held the server...
    assert len(started) >= 4, started  # ...and make, the watcher, and a child at least
    if reap:
        reap()
    assert wait_until(lambda: not running(started)), {p: started[p] for p in running(started)}
    left = sorted(p.name for p in tmp.iterdir())
    assert left == [], f"left in the temporary directory: {left}"


def end_job(job: Job) -> None:
    """Whatever a failed test left running ends here (by the ids it started, never by name)."""
    for pid in running(tree(job.proc.pid)):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if job.proc.poll() is None:
        job.proc.kill()
    job.proc.wait(timeout=30)


def test_watch_ends_when_its_terminal_closes(tmp_path, tmp):
    """make is the terminal's session leader (tmux new-session 'make watch'): the hang-up signals make alone,
    and make waits for its children; the watcher sees its terminal hung up and leaves, and make with it."""
    sub = submission(tmp_path)
    job = Job(make_watch(sub), tmp, tty=True)
    try:
        started = hang_a_grade(sub, tmp, job.proc.pid, lambda: job.text)
        job.close_terminal()
        assert_all_gone(started, tmp, reap=lambda: job.proc.wait(timeout=120))
    finally:
        end_job(job)


@pytest.mark.parametrize("how", ["the shell dies", "the shell's SIGHUP reaches the job", "make is killed",
                                 "the watcher itself is killed", "tmux kills the session"])
@pytest.mark.slow
def test_watch_ends_however_its_terminal_ends(tmp_path, tmp, how):
    sub = submission(tmp_path)
    if how == "tmux kills the session":
        tmux_ends_it(sub, tmp, tmp_path)
        return
    if how == "the shell dies":  # a shell leads the terminal's session; make runs in its (foreground) group
        cmd, tty = ["sh", "-c", " ".join(make_watch(sub)) + "; echo make ended"], True
    else:
        cmd, tty = make_watch(sub), False
    job = Job(cmd, tmp, tty=tty)
    try:
        started = hang_a_grade(sub, tmp, job.proc.pid, lambda: job.text)
        if how == "the shell dies":  # the kernel sends SIGHUP to the terminal's foreground process group
            os.kill(job.proc.pid, signal.SIGKILL)
        elif how == "make is killed":  # no terminal here: only the parent's death tells the watcher
            os.kill(job.proc.pid, signal.SIGKILL)
        elif how == "the watcher itself is killed":  # no cleanup of its own: the fork server, orphaned, does it
            os.kill(next(p for p, args in started.items() if " -m autograder watch " in args), signal.SIGKILL)
        else:  # an interactive shell passes the hang-up on to each job's process group
            os.killpg(job.proc.pid, signal.SIGHUP)
        assert_all_gone(started, tmp, reap=lambda: job.proc.wait(timeout=120))
    finally:
        end_job(job)


def tmux_ends_it(sub: Path, tmp: Path, tmp_path: Path) -> None:
    """The session the issue names: `make watch` in a tmux session, then `tmux kill-session`."""
    if not shutil.which("tmux"):
        pytest.skip("needs tmux")
    sock = tmp_path / "tmux"
    sock.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "MAKEFLAGS", "MAKELEVEL")}
    env.update(TMUX_TMPDIR=str(sock))
    tmux = ["tmux", "-L", "watch-test", "-f", os.devnull]
    cmd = f"cd {ROOT} && TMPDIR={tmp} {' '.join(make_watch(sub))}"
    subprocess.run([*tmux, "new-session", "-d", "-s", "w", "-x", "100", "-y", "40", cmd], env=env, check=True)
    pane = int(subprocess.run([*tmux, "list-panes", "-t", "w", "-F", "#{pane_pid}"], env=env, capture_output=True,
                              text=True, check=True).stdout.split()[0])

    def output() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "w"], env=env, capture_output=True,
                              text=True).stdout

    started: dict[int, str] = {}
    try:
        started = hang_a_grade(sub, tmp, pane, output, log=False)
        subprocess.run([*tmux, "kill-session", "-t", "w"], env=env, check=True)
        assert_all_gone(started, tmp)
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)
        for pid in running(started):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
