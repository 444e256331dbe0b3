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
- File-system metadata: listing a folder (os.listdir, os.scandir, glob, pathlib's glob) and the calls
  CPython raises no event for (os.stat, lstat, access, readlink, statvfs, pathconf; os.path.exists,
  isdir, getsize, realpath and pathlib's exists, is_dir, stat are built on them) are treated like
  opening a file for reading: a library (the import machinery, linecache, os.path) may on the interpreter's,
  the grader's and the submission's folders (list them: the import machinery alone, or the submission's
  folder); anything else is refused while student code is on the stack (`typing.sys.modules['os'].listdir`,
  `pathlib.Path(sys.path[0]).iterdir()`, `os.stat` from the student's own frame, anywhere). For the
  calls with no event, `install` puts a stand-in in their place in posix (nt), os and os's supports_*
  sets: it makes a path-like argument a str (its __fspath__ runs there, under the hook's eye) and raises
  the event METADATA; the hook, which alone holds the real functions, checks the call and runs it.
A refusal raises RuleViolation with the rule in its message.

The hook must hold against code that can rewrite any module attribute it reaches (`sys._getframe`,
`os.path.realpath`, `builtins.isinstance`, or this module's own tables): every function it calls is
bound here, when the module loads, before any submission code exists (paths are resolved with the C
functions themselves, not os.path.realpath, which looks os.lstat up as it runs); no method of an object
the submission made runs inside the hook, where its own events would go unchecked (a path is read only
as an exact str or bytes); and once installed, the module leaves sys.modules (`install`), so nothing the
submission can reach leads to the hook or its tables.
"""
import os
import sys
from builtins import (  # bound now, not looked up later
    any,
    bytes,
    dict,
    frozenset,
    getattr,
    int,
    isinstance,
    issubclass,
    len,
    list,
    repr,
    reversed,
    set,
    sorted,
    str,
    tuple,
    type,
)
from stat import S_ISLNK

_getframe = sys._getframe
_realpath, _isabs, _isdir, _SEP = os.path.realpath, os.path.isabs, os.path.isdir, os.sep
_addaudithook = sys.addaudithook
# the real ones (`install` puts stand-ins in their place, `stand_in`), and what the hook resolves a path with: C
# functions only, bound here (os.path.realpath looks os.lstat and os.fspath up as it runs: the submission can rewrite them)
_stat, _lstat, _readlink, _getcwd = os.stat, os.lstat, os.readlink, os.getcwd
_POSIX = os.name == "posix"
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
# exact copies of a str, bytes or int subclass's value, through the base type's own method: no method of the subclass
# (nor any other code of the submission's) runs inside the hook, where its own events would go unchecked
_COPY = ((str, str.__str__), (bytes, bytes.__bytes__), (int, int.__index__))

RULE = ("Your modules may import numpy, torch (not its file, process or extension parts), math, typing, "
        "dataclasses, functools, itertools, collections, abc, enum, numbers, __future__ and each other, and "
        "nothing else; they may not open, list or inspect files and folders (os.listdir, os.stat, os.path.exists), "
        "run strings as code (eval, exec, compile, __import__), change "
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
_READ_EVENTS = ("os.listdir", "os.scandir", "glob.glob", "pathlib.Path.glob", "pathlib.Path.rglob",
                "pathlib.Path.walk")
# file-system metadata CPython raises no event for (3.11 to 3.13): each gets a stand-in that raises METADATA
METADATA = "attn.metadata"
METADATA_FUNCTIONS = ("stat", "lstat", "access", "readlink", "statvfs", "pathconf",
                      # Windows, 3.12 and later: os.path.exists, isdir, isfile, islink, ... in C
                      "_path_exists", "_path_lexists", "_path_isdir", "_path_isfile", "_path_islink",
                      "_path_isjunction", "_path_isdevdrive")
WATCHED = (METADATA, "pathlib.", "os.", "subprocess.", "pty.", "webbrowser.", "socket.", "open", "import", "exec",
           "compile", "code.", "function.", "object.__", "sys.", "shutil.", "ctypes.", "mmap.", "gc.", "resource.",
           "builtins.breakpoint", "glob.", "cpython.", "winreg.", "syslog.")
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
        self.read_cache: dict[str, str] = {}  # a path's real path (`_placed`)
        self.resolved: dict[str, bool] = {}  # real paths known to be no link (`_resolve`)
        self.real: dict[str, object] = {}  # the functions behind the stand-ins (`stand_in`), by name
        self.stand_in_scope: dict | None = None  # the stand-ins' globals: a frame with them is a stand-in's

    # -- whose code is this -------------------------------------------------
    def _readable(self, path) -> bool:
        """Whether `path` (a str or bytes) lies in the interpreter's, the grader's or the submission's folders."""
        return self._placed(path).startswith(self.readable)

    def _placed(self, path) -> str:
        """The real path of `path` (an exact str or bytes, or a subclass's) with a separator after it; "" where it
        cannot be placed."""
        key = path if type(path) is str else _plain(path)
        if type(key) is bytes:
            try:
                key = bytes.decode(key, _FS_ENCODING, _FS_ERRORS)
            except ValueError:
                return ""
        if type(key) is not str:
            return ""  # a descriptor, None, or a path-like object (its __fspath__ is the submission's to write)
        known = self.read_cache.get(key)
        if known is None:
            known = self.read_cache[key] = self._resolve(key) + _SEP
        return known

    def _resolve(self, key: str) -> str:
        """realpath(key), with the C functions bound when this module loaded (a part looked at once: its real
        path cached where it is no link; the import machinery asks for thousands of files in a few hundred folders)."""
        if not _POSIX:
            return _realpath(key)
        if not key.startswith(_SEP):
            try:
                key = _getcwd() + _SEP + key
            except OSError:
                return "\0no working folder"  # placed nowhere
        real, pending, links = "", list(reversed(key.split(_SEP))), 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                real = real.rpartition(_SEP)[0]
                continue
            full = real + _SEP + part
            if self.resolved.get(full):
                real = full
                continue
            try:
                link = S_ISLNK(_lstat(full).st_mode)
            except (OSError, ValueError):
                link = False  # nothing there: realpath leaves the part as it is
            if not link:
                self.resolved[full] = True
                real = full
                continue
            links += 1
            if links > 40:
                return "\0a loop of links"  # placed nowhere
            target = _readlink(full)
            if target.startswith(_SEP):
                real = ""
            pending += reversed(target.split(_SEP))
        return real or _SEP

    def is_trusted(self, filename: str) -> bool:
        known = self.trusted.get(filename)
        if known is None:
            if filename.startswith("<frozen "):
                known = True
            elif filename.startswith("<") or not (filename.startswith(_SEP) if _POSIX else _isabs(filename)):
                known = False  # code made from a string, or a path that cannot be placed
            else:
                real = self._resolve(filename)
                known = real.startswith(self.roots) and not real.startswith((self.sub_dir, self.scratch))
                if real.startswith(self.copy) and real.startswith(self.roots):
                    try:
                        known = _stat(real).st_uid == self.code_owner
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
            if event == METADATA:  # the hook's own work reaching a stand-in: run, unchecked
                self._run_metadata(self._metadata_call(args))
            return
        self.busy.add(me)
        try:
            if event == METADATA:  # first: the import machinery makes thousands
                self._metadata(self._metadata_call(args))
            else:
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
                self.refuse(f"{event} {_shown(args[1])}" if event == "object.__getattr__" and len(args) > 1 else event)
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
            what = f"open({_shown(path)})"
        elif event.startswith(_READ_EVENTS):
            placed = self._placed(args[0] if args else None)
            if not caller_is_student and (placed.startswith(self.sub_dir) or (
                    placed.startswith(self.readable) and self.is_machinery(frame.f_code.co_filename))):
                return  # a library listing the submission's folder; the import machinery, a folder of the import path
            what = f"{event}({_shown(args[0]) if args else ''})"
        elif event.startswith(IN_STUDENT_CONTEXT):
            what = event
        else:
            return
        if _get_ident() != self.main or self.student_on_stack(frame):
            # (any thread but the main one is the student's: the grader starts none in the child)
            self.refuse(what)

    def _metadata(self, call: tuple) -> None:
        """A stand-in's call (`stand_in`): checked as reading a file is, against the frame that called the
        stand-in, then run with the real function. Raised by the student's own frame (`sys.audit(METADATA,
        ...)`), or from a thread with no frame (a builtin as its target), the call is the student's."""
        try:
            frame = _getframe(2)  # the frame that made the event (0: _metadata, 1: __call__)
        except ValueError:
            frame = None
        if frame is not None and frame.f_globals is self.stand_in_scope:
            frame = frame.f_back
        name, call_args, call_kwargs, _ = call
        path = call_args[0] if call_args else call_kwargs.get("path")
        placed = call_kwargs.get("dir_fd") is None and self._readable(path)
        if placed and frame is not None and self.is_trusted(frame.f_code.co_filename):
            self._run_metadata(call)  # the import machinery, linecache, a library's own files
            return
        if _get_ident() != self.main or self.student_on_stack(frame):
            self.refuse(f"os.{name}({_shown(path)})")
        self._run_metadata(call)  # the grader's or a library's own work, no student code running

    def _metadata_call(self, args: tuple) -> tuple:
        """(name, args, kwargs, box) of a METADATA event, its arguments exact str, bytes, int, bool or None (a
        stand-in has made the path a str or bytes, outside the hook); or a refusal where it is not one a stand-in
        makes."""
        if len(args) == 4 and type(args[0]) is str and args[0] in self.real and type(args[1]) is tuple \
                and type(args[2]) is dict and type(args[3]) is list:
            call_args, call_kwargs = args[1], args[2]
            if not _all_plain(call_args, call_kwargs):  # a subclass's value copied out; anything else refused
                call_args = tuple([_plain(a) for a in call_args])
                call_kwargs = {_plain(k): _plain(v) for k, v in dict.items(call_kwargs)}
            if _all_plain(call_args, call_kwargs):
                return args[0], call_args, call_kwargs, args[3]
        self.refuse(f"{METADATA} with arguments of its own")

    def _run_metadata(self, call: tuple) -> None:
        """The real function's answer, put in the box the stand-in returns from."""
        name, call_args, call_kwargs, box = call
        list.append(box, self.real[name](*call_args, **call_kwargs))

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


_NONE = type(None)


def _is_plain(kind: type) -> bool:
    """Whether `kind` is exactly str, bytes, int, bool or None's type (by identity: a metaclass's __hash__ or
    __eq__ never runs here)."""
    return kind is str or kind is bytes or kind is int or kind is bool or kind is _NONE


def _all_plain(args: tuple, kwargs: dict) -> bool:
    for value in args:
        if not _is_plain(type(value)):
            return False
    for key, value in dict.items(kwargs):
        if type(key) is not str or not _is_plain(type(value)):
            return False
    return True


def _plain(value):
    """`value` as an exact str, bytes, int, bool or None where it is one of those or a subclass's; else itself."""
    kind = type(value)
    if _is_plain(kind):
        return value
    for base, copy in _COPY:
        if issubclass(kind, base):
            return copy(value)
    return value


def _shown(value) -> str:
    """`value` for a refusal's message, without running any of its own methods."""
    value = _plain(value)
    return repr(value) if _is_plain(type(value)) else "a path-like object"


_get_ident = __import__("_thread").get_ident
_installed: Guard | None = None
# a stand-in holds nothing but sys.audit (its globals, which a submission can read, lead nowhere else): the hook
# runs the real function; its file name is one the hook counts as the interpreter's own ("<frozen ")
# a path-like argument becomes its str or bytes here, in the stand-in, where its __fspath__ runs under the hook's eye
_STAND_IN = ("def {name}(*args, **kwargs):\n"
             "    if args and not isinstance(args[0], (int, str, bytes)):\n"
             "        args = (_fspath(args[0]),) + args[1:]\n"
             "    if kwargs and 'path' in kwargs and not isinstance(kwargs['path'], (int, str, bytes)):\n"
             "        kwargs['path'] = _fspath(kwargs['path'])\n"
             "    box = []\n    _audit({event!r}, {name!r}, args, kwargs, box)\n    return box[0]\n")


def stand_in(guard: Guard) -> None:
    """Put a stand-in in place of each metadata function CPython raises no event for, in the native module
    (posix, nt), in os, and in os's `supports_*` sets (shutil and tempfile test membership): the real
    functions are then held by the hook alone."""
    native = sys.modules.get("posix") or sys.modules.get("nt")
    names = [n for n in METADATA_FUNCTIONS if native is not None and getattr(native, n, None) is not None]
    scope = {"__builtins__": {"isinstance": isinstance, "int": int, "str": str, "bytes": bytes}, "_audit": sys.audit,
             "_fspath": os.fspath}
    source = "".join(_STAND_IN.format(name=n, event=METADATA) for n in names)
    exec(compile(source, "<frozen attn.guard>", "exec"), scope)
    sets = [getattr(os, s) for s in ("supports_dir_fd", "supports_fd", "supports_follow_symlinks",
                                     "supports_effective_ids") if isinstance(getattr(os, s, None), set)]
    for name in names:
        real, new = getattr(native, name), scope[name]
        new.__module__, new.__doc__ = native.__name__, real.__doc__
        guard.real[name] = real
        for module in (native, os):
            if getattr(module, name, None) is real:
                setattr(module, name, new)
        for members in sets:
            if real in members:
                members.discard(real)
                members.add(new)
    guard.stand_in_scope = scope


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
        stand_in(_installed)  # after the hook: no moment where a stand-in has no hook to answer it
    # out of reach from here on: sys.modules (reachable through typing.sys) no longer leads to this module,
    # its tables or the hook; the hook is held by the interpreter and by the functions bound above
    sys.modules.pop(__name__, None)
    package = sys.modules.get(__name__.rpartition(".")[0])
    if package is not None and getattr(package, "guard", None) is not None:
        del package.guard
    return _installed
