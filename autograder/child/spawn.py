"""Starts one child from a small process, and reports the kernel's count of its peak memory.

A forked process's peak starts at its parent's resident size (the pages it copied) and the count
survives exec, so a child started straight from a grader that has grown to 1 GiB reports at least
1 GiB, whatever it ran: a step that needs 64 MiB more than a correct one reads as no more. Started
from this process instead (a few MiB: no site, no numpy), the count is the child's own.

    python -I -S -B spawn.py STATUS_FD SPEC_JSON -- CMD...

SPEC_JSON holds the policy's limits, the uid and whether to drop to it here. The child leads a
process group of its own, so the grader can end it (and all it started) while this process lives on
to reap it. Written to STATUS_FD, one JSON line each: {"pid"} once the child is in its group, then
{"status", "peak_bytes", "cpu_s"} once it is reaped (status negative for a signal). Exits 0 after that.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import policy


def main() -> None:
    fd, spec, cmd = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[4:]
    os.set_inheritable(fd, False)  # the child never holds the channel its own result travels on
    limits = policy.Limits(**spec["limits"])
    if not hasattr(os, "fork"):  # nowhere to fork from: become the child (its peak then counts this start)
        policy.enter(limits, spec["uid"], drop=spec["drop"])
        os.write(fd, (json.dumps({"pid": os.getpid()}) + "\n").encode())
        os.execvp(cmd[0], cmd)
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            policy.enter(limits, spec["uid"], drop=spec["drop"])
            os.execvp(cmd[0], cmd)
        except BaseException as e:  # noqa: BLE001  (the log says why; the grader sees an early exit)
            os.write(2, f"the child could not start: {cmd[0]}: {e}\n".encode(errors="replace"))
        os._exit(127)
    try:
        os.setpgid(pid, pid)  # also here: the group exists before the grader is told the pid
    except OSError:
        pass
    os.write(fd, (json.dumps({"pid": pid}) + "\n").encode())
    while True:
        try:
            _, status, usage = os.wait4(pid, 0)
            break
        except InterruptedError:
            continue
    peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # KiB on Linux, bytes on macOS
    os.write(fd, (json.dumps({"status": os.waitstatus_to_exitcode(status), "peak_bytes": peak,
                              "cpu_s": usage.ru_utime + usage.ru_stime}) + "\n").encode())


if __name__ == "__main__":
    main()
