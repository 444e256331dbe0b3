"""Fork server for batch grading: it imports numpy and torch once (or numpy alone, for the numpy children), then
forks a fresh worker child per request, so a regrade does not pay the torch import for every submission. It never runs
student code itself: each forked child drops to its limits and uid before it loads a submission.

Protocol (JSON lines on stdin/stdout): {"fork": {...}} -> {"pid": N};
{"wait": pid, "timeout": s} -> {"status": code, "peak_bytes": n, "cpu_s": t} (status null: not yet, with "gone": not
this server's child); {"ping": 1} -> {"pong": true}.

When its input ends without its parent having ended it (the parent was killed, or died), it ends the
children it forked that still run and removes their scratch folders and its own home (argv[1]): a
killed `make watch` leaves nothing running and nothing in the temporary directory.
"""
import gc
import json
import os
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy  # noqa: F401

from autograder.child import np_drivers, policy, wire, worker  # noqa: F401

# A server for numpy's children only (ATTN_SERVER_TORCH=0) never loads torch: forking and ending a process that
# holds torch's 150 MB of private pages costs the kernel about 20 ms a child, one that holds numpy's about 3 ms
TORCH = os.environ.get("ATTN_SERVER_TORCH") != "0"
if TORCH:
    import torch

    from autograder.child import drivers  # noqa: F401


def become_worker(req: dict) -> None:
    """In the forked child: limits, output, environment, uid; then serve requests."""
    os.setsid()
    log = os.open(req["log"], os.O_WRONLY | os.O_APPEND)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, 4096)  # nothing of the zygote's (its control pipe) stays open in the child
    os.chdir(req["scratch"])
    os.environ.clear()
    os.environ.update(req["env"])
    tempfile.tempdir = None  # the server's temp folder (/tmp, kept when torch loaded) is not the child's: its TMPDIR
    policy.enter(policy.Limits(**req["limits"]), req["uid"])
    if TORCH:  # torch was imported before the fork
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    requests = open(req["req_fifo"], "rb")
    results = open(req["res_fifo"], "wb", buffering=0)
    worker.serve(req["pkg_dir"], req["pkg"], requests, results)


def orphaned(children: dict[int, str], home: str | None) -> None:
    """The parent is gone: end each child still running (each leads its own session, so its process group
    is its pid), reap it, and remove its scratch folder and this server's home."""
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for pid, scratch in children.items():
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        if os.path.basename(scratch).startswith("attn-grade-"):  # only a folder the grader made for it
            shutil.rmtree(scratch, ignore_errors=True)
    if home and os.path.basename(home).startswith("attn-zygote-"):
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    home = sys.argv[1] if len(sys.argv) > 1 else None
    # Everything imported so far is kept out of the collector's reach: a forked child that collected it would
    # touch (and so copy) every page of numpy's and torch's objects it shares with this process
    gc.freeze()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stray prints cannot reach the control pipe
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    children: dict[int, str] = {}  # forked and not yet reaped: pid -> its scratch folder
    for line in sys.stdin:
        req = json.loads(line)
        if "fork" in req:
            pid = os.fork()
            if pid == 0:
                try:
                    become_worker(req["fork"])
                finally:
                    os._exit(0)
            children[pid] = req["fork"]["scratch"]
            reply = {"pid": pid}
        elif "ping" in req:
            reply = {"pong": True}
        else:
            pid, reply = req["wait"], {"status": None}
            deadline = time.monotonic() + req.get("timeout", 2)  # 0: look once (the caller waits, not this loop)
            while True:
                try:
                    done, code, usage = os.wait4(pid, os.WNOHANG)
                except ChildProcessError:
                    children.pop(pid, None)
                    reply["gone"] = True
                    break
                if done:  # with the kernel's count of its peak memory (KiB on Linux, bytes on macOS)
                    children.pop(pid, None)
                    reply = {"status": os.waitstatus_to_exitcode(code),
                             "peak_bytes": usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024),
                             "cpu_s": usage.ru_utime + usage.ru_stime}
                    break
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.005)
        try:
            out.write(json.dumps(reply) + "\n")
            out.flush()
        except OSError:  # the parent closed its end while this reply was on its way
            break
    orphaned(children, home)


if __name__ == "__main__":
    main()
