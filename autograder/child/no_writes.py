"""A Landlock ruleset, in force in the child before any of the submission loads: from then on the kernel refuses
it every file it would create, write, truncate, rename or remove outside its own scratch folder, however the code
opens it. The run-time guard sees only what Python reports, and a library's own C code reports nothing: torch's
`from_file`, reached under a name the static check cannot read, opens and creates files. The scratch folder is
the child's temp folder (TMPDIR) and goes with it: libraries write there as they load (torch._dynamo makes its
cache folder). /dev/null stays writable (dill opens it inside `import torch`), and so do the descriptors opened
before the ruleset (the child's output, its answers, the file for its stack). Reading is not restricted here:
what a child can read is its view's business (namespaces) and its uid's.

The ruleset holds for the thread that installs it and every thread and process it starts later (a child forked by
the fork server has one thread when it installs it). Linux 5.13 or later with Landlock on; elsewhere `install`
says why and the report says the protection is off (`available`).
"""
import ctypes
import os
import struct
import sys

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446  # the same numbers on x86_64 and aarch64
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
# access rights to the file system (include/uapi/linux/landlock.h); the reading ones are left alone
WRITE_FILE, REMOVE_DIR, REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
MAKE = {"char": 1 << 6, "dir": 1 << 7, "reg": 1 << 8, "sock": 1 << 9, "fifo": 1 << 10, "block": 1 << 11, "sym": 1 << 12}
REFER, TRUNCATE = 1 << 13, 1 << 14  # from ABI 2 (linking or renaming across folders) and ABI 3


def _syscall():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi() -> int:
    """The Landlock ABI this kernel offers (0: none, or not Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _syscall().syscall(CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def available() -> bool:
    return abi() >= 1


def install(scratch: str) -> str | None:
    """Refuse every write to the file system from now on, but beneath `scratch` and to /dev/null. None when it
    holds, else why not."""
    version = abi()
    if version < 1:
        return "no Landlock here (Linux 5.13 or later, with Landlock on)"
    handled = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | sum(MAKE.values())
    handled |= (REFER if version >= 2 else 0) | (TRUNCATE if version >= 3 else 0)
    libc = _syscall()
    attr = ctypes.create_string_buffer(struct.pack("=Q", handled))  # struct landlock_ruleset_attr's first field
    ruleset = libc.syscall(CREATE_RULESET, attr, ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}"
    try:
        # beneath the scratch folder: files and folders, never a link, a pipe, a socket or a device (a link there
        # could point the grader, which reads the child's output by name, at a file of its own choosing)
        ordinary = handled & ~(MAKE["sym"] | MAKE["fifo"] | MAKE["sock"] | MAKE["char"] | MAKE["block"])
        for path, allowed in (("/dev/null", WRITE_FILE | (TRUNCATE if version >= 3 else 0)), (scratch, ordinary)):
            where = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:  # struct landlock_path_beneath_attr, packed: u64 allowed_access, s32 parent_fd
                rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, where))
                if libc.syscall(ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), rule,
                                ctypes.c_uint32(0)):
                    return f"landlock_add_rule({path}): {os.strerror(ctypes.get_errno())}"
            finally:
                os.close(where)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"prctl(no_new_privs): {os.strerror(ctypes.get_errno())}"
        if libc.syscall(RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)):
            return f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(ruleset)
    return None
