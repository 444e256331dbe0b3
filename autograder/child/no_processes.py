"""A seccomp filter, installed in the child before any of the submission loads: from then on the kernel
refuses it new processes, other programs and sockets, however the code asks (the run-time guard sees
only what Python reports: a function such as `_posixsubprocess.fork_exec` starts a program unseen).

Refused with EPERM: execve, execveat, fork, vfork, clone without CLONE_THREAD (a new process), socket,
memfd_create (a file in memory, which no address-space limit counts), and the calls that make System V shared
memory, semaphores and message queues and POSIX message queues (shmget, semget, msgget, mq_open): such objects
outlive the child, hold memory no limit of its counts, and are shared by every process of the same IPC namespace
(another submission's child, forked from the same server, could read them).
clone3 answers ENOSYS, so the C library falls back to clone, whose flags the filter can read: threads
(clone with CLONE_THREAD) stay allowed, since numpy, torch and faulthandler's watchdog use them. The
filter applies to every thread of the child (TSYNC) and to whatever it would start; it cannot be
removed. Linux on x86_64 and aarch64 only; elsewhere `supported()` is False and the report says so.
"""
import ctypes
import errno
import os
import platform
import struct
import sys

# per architecture: the audit arch, and the syscall numbers (fork and vfork do not exist on aarch64)
TABLES = {
    "x86_64": {"arch": 0xC000003E, "seccomp": 317, "execve": 59, "execveat": 322, "fork": 57, "vfork": 58,
               "clone": 56, "clone3": 435, "socket": 41, "memfd_create": 319, "shmget": 29, "semget": 64,
               "msgget": 68, "mq_open": 240},
    "aarch64": {"arch": 0xC00000B7, "seccomp": 277, "execve": 221, "execveat": 281, "clone": 220, "clone3": 435,
                "socket": 198, "memfd_create": 279, "shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180},
}
IPC = ("shmget", "semget", "msgget", "mq_open")  # System V and POSIX IPC objects: they outlive the child
CLONE_THREAD = 0x00010000
X32_BIT = 0x40000000  # x86_64's x32 calling convention: other numbers for the same calls, refused whole
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data (the low 32 bits of args[0] on little-endian)
PR_SET_NO_NEW_PRIVS, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 38, 1, 1


def supported() -> bool:
    return sys.platform.startswith("linux") and platform.machine() in TABLES and sys.byteorder == "little"


def program(table: dict) -> bytes:
    """The filter, as BPF instructions (struct sock_filter: u16 code, u8 jt, u8 jf, u32 k)."""
    denied = [table[n] for n in ("execve", "execveat", "fork", "vfork", "socket", "memfd_create", *IPC) if n in table]
    code: list[tuple] = [(LD_W_ABS, 0, 0, ARCH), (JEQ_K, 1, 0, table["arch"]), ("allow",), (LD_W_ABS, 0, 0, NR)]
    if "fork" in table:  # x86_64
        code.append((JGE_K, "deny", 0, X32_BIT))
    code += [(JEQ_K, "deny", 0, nr) for nr in denied]
    code += [(JEQ_K, "nosys", 0, table["clone3"]), (JEQ_K, 0, "allow", table["clone"]),
             (LD_W_ABS, 0, 0, ARG0), (JSET_K, "allow", "deny", CLONE_THREAD)]
    labels = {"deny": len(code), "nosys": len(code) + 1, "allow": len(code) + 2}
    code += [(RET_K, 0, 0, RET_ERRNO | errno.EPERM), (RET_K, 0, 0, RET_ERRNO | errno.ENOSYS), (RET_K, 0, 0, RET_ALLOW)]
    out = b""
    for i, ins in enumerate(code):
        if ins == ("allow",):  # an unconditional jump, written as "return allow" for another architecture
            ins = (RET_K, 0, 0, RET_ALLOW)
        op, jt, jf, k = ins
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        out += struct.pack("=HBBI", op, jt, jf, k)
    return out


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> str | None:
    """Install the filter in this process (every thread). None when it holds, else why it could not."""
    if not supported():
        return f"no seccomp on {sys.platform}/{platform.machine()}"
    table = TABLES[platform.machine()]
    code = program(table)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _Prog(len(code) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(no_new_privs): {os.strerror(ctypes.get_errno())}"
    if libc.syscall(table["seccomp"], SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(prog)) != 0:
        return f"seccomp: {os.strerror(ctypes.get_errno())}"
    return None
