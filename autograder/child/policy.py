"""The sandbox policy, in one place: what a child may use, and the uid it drops to.

Applied in the child before it loads any student code, whether it was started by subprocess
(by child/spawn.py, before exec) or forked by the fork server. Standard library only, and importable
everywhere: where a limit does not exist (Windows has no `resource`) or the system refuses it
(macOS refuses an address-space limit), the child goes on without it; `plan` says which, so the
parent can tell the student once. A hard limit lower than the kit's (a shared server's
`ulimit -v`) is kept: the child gets the lower one, never a raised one.
"""
import os
from dataclasses import asdict, dataclass

try:
    import resource
except ImportError:  # Windows: no resource limits at all
    resource = None


@dataclass
class Limits:
    """What one child may use. Memory is address space (RLIMIT_AS): numpy raises MemoryError past it."""

    timeout_s: float = 10.0  # wall clock, per call (enforced by the parent)
    cpu_s: int = 300  # for the child's whole life
    memory_bytes: int = 4 * 2**30
    output_bytes: int = 16 * 2**20  # largest file the child may write, its stdout included
    processes: int = 256  # when sandboxed under its own uid

    def as_dict(self) -> dict:
        return asdict(self)


def container_memory() -> int | None:
    """The memory limit of the cgroup this process runs in (a container's, e.g. Gradescope's 768 MB), or None.

    cgroup v2 (memory.max) or v1 (memory.limit_in_bytes), at this process's own cgroup path and at the
    mount's root (which is the container's inside one); 'max' or a huge v1 value means no limit."""
    from pathlib import Path

    paths = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                paths.append(Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.max")
            elif "memory" in controllers.split(","):
                paths.append(Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.limit_in_bytes")
    except (OSError, ValueError):
        pass
    paths += [Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")]
    for path in paths:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**50:
            return int(text)
    return None


def child_memory(torch: bool, kit: int = 4 * 2**30) -> int:
    """A child's address-space limit: the kit's 4 GiB, or, inside a smaller container, the interpreter's own
    address space (torch maps ~0.7 GiB before any work) plus a share of the container's memory (a sixth for
    a torch child, which runs beside another torch child; a third for the numpy child, whose checks copy their
    arguments to see them unchanged, and which runs beside the torch children, their fork server and the grader:
    at a half, a tiled call that builds the n x n scores at n = 4,096 filled the 768 MiB container and the kernel
    killed it, where a third ends it with MemoryError at 552 MiB in all): a call that needs more gets MemoryError in
    its own stage before the container's memory runs out for everyone."""
    limit = container_memory()
    if limit is None:
        return kit
    return min(kit, 704 * 2**20 + limit // 6 if torch else 192 * 2**20 + limit // 3)


# (name in reports, Limits field, resource constant's name): the limits enter() applies, in order
RLIMITS = (("CPU time", "cpu_s", "RLIMIT_CPU"), ("memory (address space)", "memory_bytes", "RLIMIT_AS"),
           ("output size", "output_bytes", "RLIMIT_FSIZE"), ("core dumps", None, "RLIMIT_CORE"),
           ("process count", "processes", "RLIMIT_NPROC"))


def _wanted(limits: Limits, field: str | None, name: str) -> int:
    if field is None:
        return 0
    value = getattr(limits, field)
    return value + 5 if name == "RLIMIT_CPU" else value  # the hard CPU limit: a few seconds past SIGXCPU


def _amount(field: str, value: int) -> str:
    if field.endswith("bytes"):
        return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.0f} MiB"
    return f"{value} s" if field == "cpu_s" else str(value)


def _capped(wanted: int, hard: int) -> int:
    """The kit's value, or the account's hard limit where that is lower (never raised above it)."""
    infinity = resource.RLIM_INFINITY
    return wanted if hard == infinity or hard < 0 else min(wanted, hard)


def plan(limits: Limits, uid: int | None) -> list[str]:
    """What differs on this machine from the kit's limits, one sentence each (empty on Linux as usual).

    Run in the parent, changing nothing that lasts: each limit is tried on this process's soft value
    (at or below its hard value, so it can be put back) and restored at once; what the system refuses
    here, it refuses in the child too."""
    if resource is None:
        return ["no resource limits on this system (CPU time, memory, output size): a runaway call is "
                "stopped by the per-call time limit only"]
    notes = []
    for name, field, const in RLIMITS:
        if const == "RLIMIT_NPROC" and uid is None:
            continue  # counted per user: only a child under its own uid gets it
        res = getattr(resource, const, None)
        if res is None:
            notes.append(f"no {name} limit on this system")
            continue
        try:
            soft, hard = resource.getrlimit(res)
            value = _capped(_wanted(limits, field, const), hard)
            resource.setrlimit(res, (value, hard))
            resource.setrlimit(res, (soft, hard))
        except (ValueError, OSError) as e:
            notes.append(f"{name} limit off: the system refuses it ({e})")
            continue
        if field and value < _wanted(limits, field, const):
            notes.append(f"{name} limit lowered to this account's hard limit: {_amount(field, value)} (the kit "
                         f"asks {_amount(field, _wanted(limits, field, const))}); a call needing more fails "
                         "with MemoryError or is stopped" if field == "memory_bytes" else
                         f"{name} limit lowered to this account's hard limit: {_amount(field, value)} (the kit "
                         f"asks {_amount(field, _wanted(limits, field, const))})")
    return notes


def enter(limits: Limits, uid: int | None, drop: bool = True) -> None:
    """Apply the limits the system allows and, when a uid is given (the grader runs as root), become
    that user (unless `drop` is False: a namespace wrapper drops to it later, after its mounts).
    Never raises for a refused limit: `plan` has already said which ones are off."""
    if resource is not None:
        for _, field, const in RLIMITS:
            res = getattr(resource, const, None)
            if res is None or (const == "RLIMIT_NPROC" and uid is None):
                continue
            try:
                _, hard = resource.getrlimit(res)
                value = _capped(_wanted(limits, field, const), hard)
                if const == "RLIMIT_CPU":  # SIGXCPU at the soft limit, the kill a few seconds later
                    resource.setrlimit(res, (max(value - 5, 1), value))
                else:
                    resource.setrlimit(res, (value, value))
            except (ValueError, OSError):
                pass
    if uid is not None and drop:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
