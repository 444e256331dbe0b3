"""The child process that runs student code. Started by autograder.sandbox.launchers (or forked by
the fork server, autograder/child/fork_server.py), never by hand.

argv: SUBMISSION_DIR PACKAGE_NAME REQUEST_FD RESULT_FD
Reads one JSON request per line from REQUEST_FD, calls "module:function" in the
submission package (or "driver:name" in drivers.py, "npdriver:name" in np_drivers.py), writes one JSON
reply per line to RESULT_FD. Student prints go to stdout, which the parent
keeps out of the results; the parent reads what each call printed from there (runner.Worker.printed).
"""
import faulthandler
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from autograder.child import invariants, tracer, wire


def load_package(sub_dir: str, pkg: str) -> None:
    """Make `sub_dir` importable as package `pkg` without running its __init__.py."""
    spec = importlib.machinery.ModuleSpec(pkg, None, is_package=True)
    module = importlib.util.module_from_spec(spec)
    module.__path__ = [sub_dir]
    sys.modules[pkg] = module


def where(exc: BaseException, sub_dir: str) -> tuple[str | None, int | None]:
    """The innermost place inside the submission that the exception passed through."""
    return innermost(exc, sub_dir)[:2]


def innermost(exc: BaseException, sub_dir: str) -> tuple[str | None, int | None, str | None]:
    """(file, line, function) of the innermost place inside the submission that the exception passed through."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.filename.startswith(sub_dir):
        return os.path.basename(exc.filename), exc.lineno, None
    found = (None, None, None)
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith(sub_dir):
            found = (os.path.basename(frame.filename), frame.lineno, frame.name)
    return found


def entry(exc: BaseException, sub_dir: str) -> dict | None:
    """The outermost place inside the submission: the student's function the call went in through."""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith(sub_dir):
            return {"file": os.path.basename(frame.filename), "line": frame.lineno, "function": frame.name}
    return None


_HELD: dict = {}  # the grader's modules in this child, out of sys.modules once the child is ready (hide_the_grader)


def _hold_the_grader() -> None:
    """Move every module of the grader (autograder.*) from sys.modules into _HELD."""
    for name in [n for n in sys.modules if n == "autograder" or n.startswith("autograder.")]:
        _HELD[name] = sys.modules.pop(name)


def hide_the_grader() -> None:
    """Take the grader's own modules (autograder.*) out of sys.modules, holding them here, and leave an empty
    `__main__` (this file, or the fork server's, holds the drivers): a name in sys.modules, which the submission can
    reach through an allowed module (typing.sys.modules), no longer leads to the grader's code or its records."""
    import types

    _hold_the_grader()
    sys.modules["__main__"] = types.ModuleType("__main__")


# the grader's own code a call may name ("driver:<function>"), which gets the submission's package as `pkg`
DRIVERS = {"driver": "autograder.child.drivers",  # these import torch
           "npdriver": "autograder.child.np_drivers",
           "script": "autograder.child.scripts"}  # calls on an object, as a recorded script (child/scripts.py)


def resolve(target: str, pkg: str):
    module_name, func = target.split(":")
    if module_name in DRIVERS:
        name = DRIVERS[module_name]
        if name not in _HELD:  # loaded now, with the grader's modules back in place for that moment (no student
            sys.modules.update(_HELD)  # code runs meanwhile), then out of reach again
            try:
                importlib.import_module(name)
            finally:
                _hold_the_grader()
        return getattr(_HELD[name], func)
    return getattr(importlib.import_module(f"{pkg}.{module_name}"), func)


_PLAIN = (type(None), bool, int, float, str)


def to_plain(value):
    """Tensors become numpy arrays; lists, tuples and dicts are walked; plain numbers and strings stay. Nothing the
    submission defined runs here: types are matched exactly, containers are read through the built-in types' own
    methods (a list subclass whose `__iter__` is a chain of C functions is read as the list it holds, never
    iterated its way), and anything else is refused (the caller reports it as not an array or number)."""
    kind = type(value)
    if kind in _PLAIN or kind is np.ndarray or (isinstance(value, np.generic) and kind.__module__ == "numpy"):
        return value
    torch = sys.modules.get("torch")
    if torch is not None and kind in (torch.Tensor, torch.nn.Parameter):
        t = torch.Tensor.cpu(torch.Tensor.detach(value))
        if t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        return t.numpy()
    if isinstance(value, (list, tuple)):  # subclasses too (torch.Size), read as the built-in type they are
        base = tuple if isinstance(value, tuple) else list
        items = [to_plain(base.__getitem__(value, i)) for i in range(base.__len__(value))]
        return tuple(items) if base is tuple else items
    if isinstance(value, dict):
        out = {}
        for k, v in dict.items(value):
            if type(k) not in _PLAIN:
                raise TypeError(f"a dict key of type {type(k).__name__}")
            out[k] = to_plain(v)
        return out
    if isinstance(value, np.ndarray):  # a subclass: the array it holds, as a plain ndarray
        return np.ndarray.view(value, np.ndarray)
    raise TypeError(f"a {kind.__name__}")


def sendable(records: list[dict]) -> list[dict]:
    """The trace's records that the wire can carry (an array of an odd dtype is left out)."""
    kept = []
    for r in records:
        try:
            wire.encode(r)
        except (TypeError, ValueError):
            continue
        kept.append(r)
    return kept


def reuse_memory() -> None:
    """numpy child only: keep freed memory in the heap, in small pages, for the next arrays.

    The variance experiment draws ~250 MB twice; on a virtual machine, faulting in fresh memory
    (huge pages especially) can cost more than the draws. The torch child keeps the defaults: its
    memory check reads the process's peak resident size, which memory kept in the heap would hide."""
    import ctypes

    import numpy

    try:  # a speed-up only: where glibc or numpy lack these knobs, the defaults stay
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, ctypes.c_int(1 << 30))  # M_MMAP_THRESHOLD: blocks under 1 GiB come from the heap
        libc.mallopt(-1, ctypes.c_int(2**31 - 1))  # M_TRIM_THRESHOLD: and freed ones stay there
        numpy._core.multiarray._set_madvise_hugepage(False)
    except (AttributeError, OSError):
        pass


STACK_FILE = "stack.txt"  # beside the submission's folder: where a call about to time out leaves its stack


def open_stack_file(sub_dir: str):
    try:
        return open(os.path.join(os.path.dirname(sub_dir), STACK_FILE), "w")
    except OSError:
        return None


def watch_for_a_hang(stack, limit) -> None:
    """Shortly before the parent's limit for this call runs out, write every thread's stack to `stack`
    (faulthandler's own thread does it, even while the call holds the interpreter), so the parent can
    say which line of the submission a call that never answers was running."""
    if stack is None or not isinstance(limit, (int, float)) or limit <= 0:
        return
    stack.seek(0)
    stack.truncate()
    faulthandler.dump_traceback_later(max(limit - 1.0, 0.8 * limit), file=stack)


def cpu_so_far() -> float | None:
    """This process's CPU time (user + system) so far, where the system counts it."""
    try:
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    except (ImportError, OSError):
        return None


def serve(sub_dir: str, pkg: str, requests, results) -> None:
    """Answer requests until the parent closes the pipe. The first line says the child is ready."""
    sub_dir = os.path.realpath(sub_dir)
    if os.environ.get("ATTN_REUSE_MEMORY"):
        reuse_memory()
    stack = open_stack_file(sub_dir)  # before the file system is closed to writes (no_writes)
    tempfile.gettempdir()  # libraries ask for it as they load (dill, inside `import torch`): found while it can be
    if os.environ.get("ATTN_GUARD") != "off":  # the operator's switch (to measure its cost); children inherit none
        from autograder.child import guard

        guard.install(sub_dir, pkg)  # before any of the submission loads: from here on, the rule holds
        del guard  # (install took the module out of sys.modules; no name here keeps it either)
    sealed = False  # whether this process (and so the submission) can start no other process
    if os.environ.get("ATTN_SECCOMP") != "off":  # the kernel refuses new processes and sockets from here on
        from autograder.child import no_processes

        why = no_processes.install()
        sealed = why is None
        if why is not None and no_processes.supported():
            print(f"note: the seccomp filter could not be installed ({why})", file=sys.stderr)
    if os.environ.get("ATTN_LANDLOCK") != "off":  # the kernel refuses every write to a file from here on
        from autograder.child import no_writes

        why = no_writes.install(os.path.dirname(sub_dir))  # its scratch folder: its TMPDIR too
        if why is not None and no_writes.available():
            print(f"note: the Landlock ruleset could not be installed ({why})", file=sys.stderr)
    load_package(sub_dir, pkg)
    preload = os.environ.get("ATTN_PRELOAD")  # a measuring child: its drivers (and torch) load as part of its start
    if preload in ("driver", "npdriver"):
        importlib.import_module("autograder.child." + ("drivers" if preload == "driver" else "np_drivers"))
    # and in any child, the parts of numpy and torch the submission's files import (the parent named them from their
    # import statements, only modules the rule allows): loading torch._dynamo is not the first call's time, nor its memory
    for name in filter(None, os.environ.get("ATTN_PRELOAD_LIBRARIES", "").split(",")):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not a module (a function's name): the call imports what it needs
            pass
    # nothing in the environment says what kind of child this is (a measuring one, or the grade's): the settings
    # above are read, then removed, from os.environ and from the interpreter's own copy (posix.environ)
    for key in [k for k in os.environ if k.startswith("ATTN_")]:
        os.environ.pop(key, None)
    for native in (sys.modules.get("posix"), sys.modules.get("nt")):
        env = getattr(native, "environ", None)
        if isinstance(env, dict):
            for key in [k for k in env if (k.decode("latin-1") if isinstance(k, bytes) else str(k)).startswith("ATTN_")]:
                del env[key]
    hide_the_grader()
    # said before any of the submission has run, so the parent may believe it: a sealed child leaves no
    # processes behind, and ending its own process group is the whole clean-up; and the CPU time its start took
    # (the interpreter, numpy, torch), which the parent takes off the kernel's count when it measures a call
    results.write(wire.dumps({"id": 0, "ok": True, "value": "ready", "sealed": sealed, "cpu_s": cpu_so_far()}))
    for line in requests:
        req = wire.loads(line)
        invariants.CHANGED.clear()
        invariants.ALIASED.clear()
        watch_for_a_hang(stack, req.get("limit"))
        try:
            fn = resolve(req["target"], pkg)
            args, kwargs = req.get("args", []), req.get("kwargs", {})
            if req["target"].split(":")[0] in DRIVERS:  # a driver checks the calls it makes itself
                def run():
                    return fn(*args, **{**kwargs, "pkg": pkg})
            else:
                def run():
                    return invariants.call(fn, *args, **kwargs)
            traced = None
            if req.get("trace"):  # fault localisation's probe: the arrays each line of the submission made
                value, traced = tracer.run(run, sub_dir)
            else:
                value = run()
            try:
                value = to_plain(value)
                answer = {"id": req["id"], "ok": True, "value": value, "changed": list(invariants.CHANGED),
                          "aliased": list(invariants.ALIASED)}
                if traced is not None:
                    answer["trace"] = sendable(traced)
                reply = wire.dumps(answer)
            except TypeError as e:
                reply = wire.dumps({"id": req["id"], "ok": False, "error": {
                    "type": "BadReturn", "message": f"returned something that is not an array or number: {e}",
                    "file": None, "line": None}})
        except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are student errors too
            file, lineno, function = innermost(e, sub_dir)
            # raised by the grader's own driver while no line of the submission was running: say so
            in_grader = file is None and req["target"].split(":")[0] in DRIVERS
            reply = wire.dumps({"id": req["id"], "ok": False, "error": {
                "type": type(e).__name__, "message": str(e)[:2000], "file": file, "line": lineno,
                "function": function, "in_grader": in_grader, "entry": entry(e, sub_dir)}})
        faulthandler.cancel_dump_traceback_later()
        for stream in (sys.stdout, sys.stderr):  # what the call printed is in the log before its answer
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):  # closed or replaced by the student's code
                pass
        results.write(reply)


def main() -> None:
    sub_dir, pkg, req_fd, res_fd = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    serve(sub_dir, pkg, os.fdopen(req_fd, "rb"), os.fdopen(res_fd, "wb", buffering=0))
    sys.stdout.flush()
    os._exit(0)  # no exit handlers: whatever the submission registered there never runs outside the guard's view


if __name__ == "__main__":
    main()
