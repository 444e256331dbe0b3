"""What one call adds to a child's memory and CPU time, read from outside the child (Linux's /proc).

Between two calls a child waits on its request pipe, so the grader can bracket one call: just before it, write
"5" to /proc/PID/clear_refs (the kernel's high-water mark of the resident size, VmHWM, drops to the size now)
and read the CPU time so far; just after it, read both again. What the call adds is the rise of the high-water
mark above the size it started from, and the CPU time it took: memory the child took before the call (the module
it built, buffers of any size, a cache allocated once) is not the call's. The same reset clears every page's
referenced bit ("1"), so the Referenced lines of /proc/PID/smaps (its anonymous mappings: data, not code) then
count the resident memory the call read or wrote: pages it made and pages the child held before (a buffer filled
at import and reused by the call, which the high-water mark cannot see: found by a stranger attacker). Memory the
child held before the call and let go of during it (its resident size at the end below the start) counts too: what
the call made could have filled that room unseen under the reset mark (a stranger's ballast, made by ordinary calls
and freed by the measured one). Nothing
here runs in the child; the child can raise these counts, never lower them (its own clear_refs is refused by the
run-time guard).

    meter = Meter(pid)          # pid: the launched child (or the process in front of it, e.g. unshare)
    meter.start()               # the child is idle: reset and read
    ... one call ...
    cost = meter.stop()         # Cost(peak_bytes=..., cpu_s=..., touched_bytes=...), None where not told

Where /proc is missing (macOS) or cannot be written, the Cost's fields are None and the caller falls back to
the child's whole-life counts (wait4's rusage when it is reaped).
"""
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    """What one call added: the rise of the child's peak resident memory over its size when the call began
    (bytes), and its CPU time (seconds, every thread of the child); the resident memory the call read or wrote
    (bytes: pages it touched, new ones and ones the child already held, each once); and how far the child's resident
    size fell below its start by the call's end (bytes: memory held before that the call let go of). None where it
    could not be read."""

    peak_bytes: int | None
    cpu_s: float | None
    touched_bytes: int | None = None
    released_bytes: int | None = None
    kept_bytes: int | None = None  # how far its resident size rose over its start by the call's end

    @property
    def memory_bytes(self) -> int | None:
        """The call's memory as the cost rules judge it: what it added to the peak (its temporaries, freed or not),
        plus its peak over its size at the end where it let go of memory held before it (that room may have held
        what it made, unseen by the reset mark), plus the memory held before it that it touched (the pages it
        touched and still holds, less what it made and kept: a buffer filled at import or when a cache was built is
        no hiding place). The larger of the peak's rise and the pages touched, as it was, hid a step's [B, H, L, L]
        scores under the weights every step reads (B = 1, H = 48: 8 MiB of scores beside 12 MiB touched on both
        sides). None where the system says neither."""
        peak, touched = self.peak_bytes, self.touched_bytes
        if peak is not None and self.released_bytes:
            peak += self.released_bytes
        if touched is not None:
            touched = max(touched - (self.kept_bytes or 0), 0)
        told = [b for b in (peak, touched) if b is not None]
        return sum(told) if told else None


def _status_kib(pid: int, field: str) -> int | None:
    """A `field:` line of /proc/PID/status in KiB (VmHWM, VmRSS), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cpu_s(pid: int) -> float | None:
    """CPU time of the child so far: the larger of /proc/PID/stat's user + system ticks (every thread, ended
    ones too, at the clock tick's resolution) and the sum of its live threads' schedstat run times (nanoseconds).
    A thread that ended can only leave the first higher, so neither can be lowered by the child."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15
    except (OSError, ValueError, IndexError):
        return None
    run_ns = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return ticks
    return max(ticks, run_ns / 1e9)


def queue_wait_s(pid: int) -> float | None:
    """How long the process's main thread has so far waited for a CPU while ready to run (the second field of
    /proc/PID/schedstat, nanoseconds): time the machine gave to others, never time the code spent sleeping or
    computing. None without /proc."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _referenced_kib(pid: int) -> int | None:
    """The child's anonymous memory (heap, stack, anonymous mappings: its data, not the code of the interpreter and
    libraries it runs) referenced since its referenced bits were last cleared (clear_refs "1"): the Referenced lines
    of /proc/PID/smaps over those mappings, in KiB. None where the system does not say."""
    total, anon, seen = 0, False, False
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split(" ", 1)[0]
                if "-" in head and all(c in "0123456789abcdef-" for c in head):  # a mapping's first line
                    parts = line.split(None, 5)
                    path = parts[5].strip() if len(parts) > 5 else ""
                    anon = path in ("", "[heap]", "[stack]") or path.startswith("[anon")
                elif anon and line.startswith("Referenced:"):
                    total += int(line.split()[1])
                    seen = True
    except (OSError, ValueError, IndexError):
        return None
    return total if seen else None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []
    return found


def worker_pid(pid: int) -> int | None:
    """The process that runs the child's code: `pid` itself, or where a launcher put processes in front of it
    (unshare, new_root.py), the one at the end of its chain of only children. None without /proc."""
    if not os.path.exists(f"/proc/{pid}/status"):
        return None
    for _ in range(4):
        below = _children(pid)
        if len(below) != 1:
            return pid
        pid = below[0]
    return pid


class Meter:
    """Brackets one call of an idle child (see the module docstring)."""

    def __init__(self, pid: int) -> None:
        self.pid = worker_pid(pid)
        self._base_kib: int | None = None
        self._cpu0: float | None = None
        self._touching = False

    def start(self) -> None:
        """Reset the child's high-water mark to its size now, and note that size and its CPU time so far."""
        self._base_kib = self._cpu0 = None
        self._touching = False
        if self.pid is None:
            return
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")
        except OSError:  # not ours to write (another user, an old kernel): the peak since it began is all there is
            return
        finally:
            self._cpu0 = _cpu_s(self.pid)
        self._base_kib = _status_kib(self.pid, "VmHWM")
        try:  # and every page's referenced bit: what the call reads or writes, memory held before it included
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("1")
            self._touching = True
        except OSError:
            pass

    def stop(self) -> Cost:
        """What the call since start() added."""
        if self.pid is None:
            return Cost(None, None)
        cpu = _cpu_s(self.pid)
        hwm = _status_kib(self.pid, "VmHWM")
        rss = _status_kib(self.pid, "VmRSS")
        peak = None if hwm is None or self._base_kib is None else max(hwm - self._base_kib, 0) * 1024
        touched = _referenced_kib(self.pid) if self._touching else None
        change = None if rss is None or self._base_kib is None else (rss - self._base_kib) * 1024  # end over start
        released, kept = (None, None) if change is None else (max(-change, 0), max(change, 0))
        return Cost(peak, None if cpu is None or self._cpu0 is None else max(cpu - self._cpu0, 0.0),
                    None if touched is None else touched * 1024, released, kept)
