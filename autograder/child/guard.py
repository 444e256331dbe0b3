"""The run-time guard: a PEP 578 audit hook, installed in the child before any student module loads.

The static check (sandbox/static_check.py) explains the rule early, on the source; this hook enforces
it on what the code does, however it got there (a module reached through `typing.sys.modules`, a
builtin taken from `builtins`, a string run as code). An audit hook cannot be removed once added.

Whose code asks is read from the stack: a frame is the grader's or a library's when its file lies
under the interpreter's own folders (the standard library, site-packages) or the grader's child
folder; any other frame (the submission's files, code made from a string) is the student's.
- Imports: a module the student's own code asks for must be allowed by the rule (numpy, torch,
  math, typing, ... and the stage modules); the imports numpy and torch make for themselves (the
  frame running the import statement is theirs) are allowed.
- Processes, signals to other processes and sockets are refused whoever asks: nothing the grader
  does in the child needs them after the guard is in.
- While student code is on the stack (and not inside an import a library made): opening a file
  (other than reading the interpreter's, the grader's or the submission's own files), changing the
  file system or the environment, ctypes, memory maps, threads, the garbage collector's object lists,
  tracing and frames; and, asked by the student's own frame, running strings as code (exec, eval,
  compile, new code objects) and the interpreter's audited attributes (a function's __code__, ...).
A refusal raises RuleViolation with the rule in its message.

The hook must hold against code that can rewrite any module attribute it reaches (`sys._getframe`,
`os.path.realpath`, `builtins.isinstance`, or this module's own tables): every function it calls is
bound here, when the module loads, before any submission code exists; and once installed, the
module leaves sys.modules (`install`), so nothing the submission can reach leads to the hook or its
tables.
"""
import os
import sys
from builtins import any, frozenset, getattr, isinstance, len, set, sorted, tuple  # bound now, not looked up later

_getframe = sys._getframe
_realpath, _isabs, _isdir, _fsdecode, _SEP = os.path.realpath, os.path.isabs, os.path.isdir, os.fsdecode, os.sep
_addaudithook = sys.addaudithook

RULE = ("Your modules may import numpy, torch (not its file, process or extension parts), math, typing, "
        "dataclasses, functools, itertools, collections, abc, enum, numbers, __future__ and each other, and "
        "nothing else; they may not open files, run strings as code (eval, exec, compile, __import__), change "
        "numpy or torch themselves (np.allclose = ...), or reach into frames, globals or dunder attributes "
        "such as __globals__ and __subclasses__")
ALLOWED_MODULES = frozenset({"numpy", "torch", "math", "typing", "__future__", "dataclasses", "functools",
                             "itertools", "collections", "abc", "enum", "numbers"})
# submodules of the allowed packages that reach files, processes, native code or the grader's measuring tools
REFUSED_PARTS = frozenset({"ctypes", "ctypeslib", "f2py", "hub", "multiprocessing", "cpp_extension", "_C",
                           "library", "package", "distributed", "serialization", "overrides", "_python_dispatch",
                           "flop_counter", "npyio"})

ALWAYS = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
          "subprocess.Popen", "pty.spawn", "os.startfile", "webbrowser.open")
IN_STUDENT_CONTEXT = ("os.", "shutil.", "ctypes.", "mmap.", "resource.", "winreg.", "syslog.", "glob.",
                      "sys.setrecursionlimit")
FROM_STUDENT_FRAME = ("exec", "compile", "code.__new__", "function.__new__", "object.__getattr__", "sys._getframe",
                      "builtins.breakpoint", "cpython.", "sys.settrace", "sys.setprofile",
                      "sys._current_frames", "sys.addaudithook", "gc.get_")
_READ_EVENTS = ("os.listdir", "os.scandir", "glob.glob")
WATCHED = ("os.", "subprocess.", "pty.", "webbrowser.", "socket.", "open", "import", "exec", "compile", "code.",
           "function.", "object.__", "sys.", "shutil.", "ctypes.", "mmap.", "gc.", "resource.", "builtins.breakpoint",
           "glob.", "cpython.", "winreg.", "syslog.")
_TYPING = _SEP + "typing.py"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class RuleViolation(PermissionError):
    """What the guard raises: the code did something the rule of the stage modules refuses."""


def _module_allowed(name: str, own: frozenset) -> bool:
    parts = name.split(".")
    if parts[0] in own:
        return True
    return parts[0] in ALLOWED_MODULES and not set(parts[1:]) & REFUSED_PARTS


class Guard:
    def __init__(self, sub_dir: str, pkg: str, roots: list[str]) -> None:
        self.sub_dir = _realpath(sub_dir) + _SEP
        # the child's whole folder (the submission's, its HOME and TMPDIR): what it can write is never the grader's
        # code, even where that folder lies under a folder of the import path (a fork server's home)
        scratch = _realpath(sub_dir.rstrip(_SEP).rpartition(_SEP)[0] or _SEP).rstrip(_SEP) + _SEP
        self.scratch = self.sub_dir if scratch == _SEP else scratch
        # a new interpreter's copy of the grader's child code lies in that folder (launchers.copy_child_files): its
        # files count while they are the grader's own, owned by whoever owns this one (a child of a user of its own
        # can rename the copy away and write another, but not as the grader's user)
        self.copy = self.scratch + "_grader" + _SEP
        try:
            self.code_owner = os.stat(__file__).st_uid
        except OSError:
            self.code_owner = -1
        self.own = frozenset({pkg})
        self.roots = tuple(sorted({_realpath(r).rstrip(_SEP) + _SEP for r in roots if r}))
        self.readable = (*self.roots, self.sub_dir)
        self.trusted: dict[str, bool] = {}
        self.busy: set[int] = set()
        self.main = _get_ident()
        self.read_cache: dict[str, bool] = {}

    # -- whose code is this -------------------------------------------------
    def _readable(self, path) -> bool:
        if isinstance(path, int) or path is None:
            return False
        try:
            key = _fsdecode(path)
        except (TypeError, ValueError):
            return False
        known = self.read_cache.get(key)
        if known is None:
            known = self.read_cache[key] = (_realpath(key) + _SEP).startswith(self.readable)
        return known

    def is_trusted(self, filename: str) -> bool:
        known = self.trusted.get(filename)
        if known is None:
            if filename.startswith("<frozen "):
                known = True
            elif filename.startswith("<") or not _isabs(filename):
                known = False  # code made from a string, or a path that cannot be placed
            else:
                real = _realpath(filename)
                known = real.startswith(self.roots) and not real.startswith((self.sub_dir, self.scratch))
                if real.startswith(self.copy) and real.startswith(self.roots):
                    try:
                        known = os.stat(real).st_uid == self.code_owner
                    except OSError:
                        known = False
            self.trusted[filename] = known
        return known

    @staticmethod
    def is_machinery(filename: str) -> bool:
        return filename.startswith("<frozen importlib") or filename.endswith(
            (_SEP + "importlib" + _SEP + "__init__.py", _SEP + "importlib" + _SEP + "_bootstrap.py",
             _SEP + "importlib" + _SEP + "_bootstrap_external.py"))

    def importer_trusted(self, frame) -> bool:
        """Whether the frame running the import statement (past the import machinery) is trusted code's."""
        while frame is not None and self.is_machinery(frame.f_code.co_filename):
            frame = frame.f_back
        return frame is not None and self.is_trusted(frame.f_code.co_filename)

    def student_on_stack(self, frame) -> bool:
        """Whether the student's code is on the stack, outside any import made on top of it: a library
        importing a part of itself during a student's call, or an allowed library the student imported
        loading itself (its module body still initialising: `import torch` in a numpy stage), does its own
        work. The stack is read from the innermost frame out, so a student frame called back from inside
        such an import is still found first."""
        pending = loading = False
        while frame is not None:
            name = frame.f_code.co_filename
            if self.is_machinery(name):
                pending = True
            elif not self.is_trusted(name):
                return not (pending and loading)
            elif pending:  # an import that trusted code asked for, above any student frame
                return False
            elif frame.f_code.co_name == "<module>" and getattr(frame.f_globals.get("__spec__"), "_initializing", False):
                loading = True  # a module body being imported right now (not a library function called later)
            frame = frame.f_back
        return False

    # -- the hook -----------------------------------------------------------
    def refuse(self, what: str) -> None:
        raise RuleViolation(f"refused at run time: {what}. The rule: {RULE} (README, 'What your code may use')")

    def __call__(self, event: str, args: tuple) -> None:
        if not event.startswith(WATCHED):
            return
        me = _get_ident()
        if me in self.busy:  # an event raised by the hook's own work (sys._getframe, realpath)
            return
        self.busy.add(me)
        try:
            self.check(event, args)
        finally:
            self.busy.discard(me)

    def check(self, event: str, args: tuple) -> None:
        """Cheapest questions first: most events (a library's exec, compile, open of its own files) are
        settled by the frame that made them, without walking the stack."""
        if event.startswith(ALWAYS) or event.startswith("socket."):
            self.refuse(f"{event} (no processes, signals or network)")
        if event == "object.__setattr__" or event == "object.__delattr__":
            self._library_change(event, args)
            return
        try:
            frame = _getframe(2)  # the frame that made the event (0: check, 1: __call__)
        except ValueError:  # none: a builtin called from C (a thread's or a callback's target)
            frame = None
        if event == "import":
            if not self.importer_trusted(frame) and not _module_allowed(args[0], self.own):
                self.refuse(f"import {args[0]}")
            return
        caller_is_student = frame is None or not self.is_trusted(frame.f_code.co_filename)
        if event.startswith(FROM_STUDENT_FRAME):
            if caller_is_student:
                self.refuse(f"{event} {args[1]!r}" if event == "object.__getattr__" and len(args) > 1 else event)
            if event in ("exec", "compile") and frame.f_code.co_filename.endswith(_TYPING) and self.student_on_stack(frame):
                # typing evaluates a string annotation as an expression: a string of the submission's run as code
                # (found by a stranger attacker: `def h(x: "__import__('torch')")` and typing.get_type_hints)
                self.refuse(f"{event} of a string annotation (typing evaluates it as code)")
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            if not caller_is_student and not writing and self._readable(path):
                return  # reading the interpreter's, the grader's or the submission's own files
            what = f"open({path!r})"
        elif event.startswith(_READ_EVENTS):
            if self._readable(args[0] if args else None):
                return
            what = f"{event}({args[0] if args else ''!r})"
        elif event.startswith(IN_STUDENT_CONTEXT):
            what = event
        else:
            return
        if _get_ident() != self.main or self.student_on_stack(frame):
            # (any thread but the main one is the student's: the grader starts none in the child)
            self.refuse(what)

    def _library_change(self, event: str, args: tuple) -> None:
        """Setting or deleting an attribute of a numpy or torch class from the student's own frame."""
        target = args[0] if args else None
        module = getattr(target, "__module__", "") or ""
        if module.split(".")[0] not in ("numpy", "torch", "builtins"):
            return
        try:
            frame = _getframe(3)
        except ValueError:
            frame = None
        if frame is None or not self.is_trusted(frame.f_code.co_filename):
            self.refuse(f"changing {getattr(target, '__qualname__', target)}.{args[1] if len(args) > 1 else '?'} "
                        "(numpy's or torch's own)")


_get_ident = __import__("_thread").get_ident
_installed: Guard | None = None


def install(sub_dir: str, pkg: str) -> Guard:
    """Add the hook (once per process; it cannot be taken away). The folders whose files count as the
    grader's or a library's: the interpreter's import path as it stands now (the standard library,
    site-packages, the grader's own child folder), never the submission's folder."""
    global _installed
    if _installed is None:
        import sysconfig

        roots = [p for p in sys.path if p and _isdir(p)]
        roots += [sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")]
        _installed = Guard(sub_dir, pkg, roots)
        _addaudithook(_installed)
    # out of reach from here on: sys.modules (reachable through typing.sys) no longer leads to this module,
    # its tables or the hook; the hook is held by the interpreter and by the functions bound above
    sys.modules.pop(__name__, None)
    package = sys.modules.get(__name__.rpartition(".")[0])
    if package is not None and getattr(package, "guard", None) is not None:
        del package.guard
    return _installed
