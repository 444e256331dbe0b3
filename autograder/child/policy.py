"""The sandbox policy, in one place: what a child may use, and the uid it drops to.

Applied in the child before it loads any student code, whether it was started by subprocess
(as its preexec step) or forked by the fork server. Standard library only.
"""
import os
import resource
from dataclasses import asdict, dataclass


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


def enter(limits: Limits, uid: int | None) -> None:
    """Apply the limits and, when a uid is given (the grader runs as root), become that user."""
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_bytes, limits.output_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if uid is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
