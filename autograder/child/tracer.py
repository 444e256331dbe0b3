"""Following values: which arrays each line of the submission made, for fault localisation's one probe call.

`run(fn, sub_dir)` calls `fn()` under `sys.settrace` and records, for every line executed in a file of
the submission, each array or tensor that the line created or changed: a local variable bound to a new
object or whose contents changed, an attribute of `self` (a buffer made in `__init__`, a cache's rows
written in place), and a function's return value (each part of a returned tuple; a returned float too). The parent compares
them with the reference's intermediate values (autograder/feedback/steps.py) to find the line where the
values part ways. Only the small probe inputs are traced, and everything kept is capped, so the cost
stays small; nothing recorded here decides a point.

The arrays a call from the submission's own code was handed are recorded too (`argument`: compared, never
judged), and a returned value says which of the submission's lines it went back to (`caller`: file, function,
line), so that a result a line drops (`cache.append(k, v)` not assigned) shows.

A record of an array the function's own line changed in place (not a new object bound to the name) says so
(`filled`): a buffer such as `out = np.empty(...)` is judged once it is written, not as it was allocated.

A record of a line that wrote into an array the caller passed in (the outermost call's arguments) says so
(`mutated`), and each `F.scaled_dot_product_attention` call made while tracing is recorded at the student's line
that made it (name `scaled_dot_product_attention`, no value, `sdpa`: what the call lets each query see, its
dropout_p and scale), so that a mistake inside that one call is compared by its arguments.

The guard (child/guard.py) lets this module call `sys.settrace`: its frame lies in the grader's child
folder. A record holds only plain data (file, function, line, name, an array), never a frame.
"""
import os
import sys

MAX_SIZE = 4096  # elements: a larger array is kept as its leading corner
CORNER = 32  # the corner kept of a larger array: its first CORNER entries along each of the last two axes
MAX_RECORDS = 400  # per traced call
MAX_PER_PLACE = 4  # records of one (line, name): a loop's later rounds add nothing new
MAX_SELF_ATTRS = 16  # attributes of `self` looked at per line


def _plain(value):
    """(a numpy copy, whether it is only a corner) of an array or tensor with numbers in it, else None."""
    a = None
    if hasattr(value, "detach") and hasattr(value, "numpy") and hasattr(value, "dtype"):  # a tensor
        try:
            t = value.detach()
            if t.device.type != "cpu" or t.is_sparse:
                return None
            if str(t.dtype) in ("torch.float16", "torch.bfloat16"):
                t = t.float()
            a = t.numpy()
        except (RuntimeError, TypeError, ValueError, AttributeError):
            return None
    elif type(value).__module__ == "numpy" and hasattr(value, "dtype") and hasattr(value, "shape") \
            and type(value).__name__ == "ndarray":
        a = value
    if a is None or a.dtype.kind not in "fiub" or a.ndim == 0 or a.size < 2:
        return None
    corner = a.size > MAX_SIZE
    if corner:
        if a.ndim < 2:
            return None
        a = a[(0,) * (a.ndim - 2) + (slice(0, CORNER), slice(0, CORNER))]
    return a.copy(), corner


def _scalar(value):
    """(a 0-d float64 array, False) of a number a function returns (score_variance's estimate, a count of the
    costs stage), else None."""
    np = sys.modules.get("numpy")  # loaded by now wherever a submission computes a number worth comparing
    if np is not None and (type(value) in (float, int) or (type(value).__module__ == "numpy"
                                                           and type(value).__name__.startswith(("float", "int")))):
        return np.array(float(value), dtype=np.float64), False
    return None


def _key(a) -> tuple:
    """What tells one recorded value from the next: shape, dtype and contents (a change in place shows)."""
    return a.shape, a.dtype.str, a.tobytes()


class Recorder:
    def __init__(self, sub_dir: str) -> None:
        self.sub_dir = os.path.realpath(sub_dir) + os.sep
        self.records: list[dict] = []
        self.placed: dict[tuple, int] = {}
        self.files: dict[str, str | None] = {}  # a code object's file -> its name in the submission, or None
        self.seen: dict[int, dict] = {}  # id(frame) -> {name: key of the value last recorded}
        self.held: dict[int, dict] = {}  # id(frame) -> {name: the object last recorded} (held: its id stays its own)
        self.last_line: dict[int, int] = {}
        self.full = False
        self.outer: dict[int, str] = {}  # id of an object the outermost call was handed -> its parameter name
        self.depth = 0

    def _file(self, filename: str) -> str | None:
        known = self.files.get(filename, 0)
        if known == 0:
            real = os.path.realpath(filename) if os.path.isabs(filename) else ""
            known = self.files[filename] = os.path.relpath(real, self.sub_dir) if real.startswith(self.sub_dir) \
                else None
        return known

    # -- sys.settrace's two callbacks --------------------------------------------------------------
    def on_call(self, frame, event, arg):
        if event != "call" or self.full or self._file(frame.f_code.co_filename) is None:
            return None
        self.seen[id(frame)] = {}
        self.last_line[id(frame)] = frame.f_lineno
        if not self.outer and self.depth == 0:  # the arrays the caller owns: a write into one is a mutation
            code = frame.f_code
            params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            self.outer = {id(v): n for n, v in frame.f_locals.items() if n in params and n != "self"
                          and _plain(v) is not None}
        self.depth += 1
        self._note(frame, frame.f_lineno, initial=True)  # the arguments: known, never a line's doing
        if self.depth > 1:  # what a call from the submission was handed: kept apart (`argument`), never judged
            code = frame.f_code
            for n in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]:
                if n != "self" and n in frame.f_locals:
                    self._add(frame, frame.f_lineno, n, frame.f_locals[n], argument=True)
        return self.on_line

    def on_line(self, frame, event, arg):
        fid = id(frame)
        if event == "line":
            self._note(frame, self.last_line.get(fid, frame.f_lineno))
            self.last_line[fid] = frame.f_lineno
        elif event == "return":
            line = frame.f_lineno
            self._note(frame, line)
            if arg is not None:
                parts = arg if isinstance(arg, tuple) else (arg,)
                back = frame.f_back  # the submission's line the value is handed back to, if any
                caller = None if back is None or self._file(back.f_code.co_filename) is None else \
                    [self._file(back.f_code.co_filename), back.f_code.co_name, int(back.f_lineno)]
                for i, part in enumerate(parts[:8]):
                    self._add(frame, line, "return" if len(parts) == 1 and not isinstance(arg, tuple)
                              else f"return[{i}]", part, caller=caller)
            self.seen.pop(fid, None)
            self.held.pop(fid, None)
            self.last_line.pop(fid, None)
            self.depth -= 1
        return self.on_line

    # -- what a line changed -----------------------------------------------------------------------
    def _note(self, frame, line: int, initial: bool = False) -> None:
        if self.full:
            return
        seen = self.seen.setdefault(id(frame), {})
        values = list(frame.f_locals.items())
        owner = frame.f_locals.get("self")
        if owner is not None:
            try:
                attrs = dict(getattr(owner, "__dict__", {}))
                attrs.update(attrs.get("_buffers") or {})  # an nn.Module keeps its buffers apart
            except (TypeError, AttributeError, ValueError):
                attrs = {}
            values += [(f"self.{k}", v) for k, v in list(attrs.items())[:MAX_SELF_ATTRS * 4]
                       if isinstance(k, str) and not k.startswith("_")][:MAX_SELF_ATTRS]
        for name, value in values:
            if name == "self":
                continue
            found = _plain(value)
            if found is None:
                continue
            key = _key(found[0])
            if seen.get(name) == key:
                continue
            written = name in seen and seen[name][:2] == key[:2] and id(value) in self.outer
            held = self.held.setdefault(id(frame), {})
            filled = name in seen and held.get(name) is value  # the same array, its contents changed: being filled
            seen[name], held[name] = key, value
            if not initial:
                self._add(frame, line, name, value, found, mutated=written, filled=filled)

    def _add(self, frame, line: int, name: str, value, found=None, mutated: bool = False, argument: bool = False,
             caller: list | None = None, filled: bool = False) -> None:
        found = found or _plain(value) or (_scalar(value) if name.startswith("return") else None)
        if found is None or self.full:
            return
        place = (id(frame.f_code), line, name)
        self.placed[place] = self.placed.get(place, 0) + 1
        if self.placed[place] > MAX_PER_PLACE:
            return
        code = frame.f_code
        self.records.append({"file": self._file(code.co_filename), "function": code.co_name,
                             "qualname": getattr(code, "co_qualname", code.co_name), "line": int(line),
                             "name": name, "value": found[0], "corner": found[1],
                             **({"mutated": self.outer[id(value)]} if mutated else {}),
                             **({"argument": True} if argument else {}), **({"caller": caller} if caller else {}),
                             **({"filled": True} if filled else {})})
        self.full = len(self.records) >= MAX_RECORDS

    def sdpa(self, args: tuple, kwargs: dict) -> None:
        """An F.scaled_dot_product_attention call: what it lets each query see, at the submission's line."""
        frame = sys._getframe(2)
        while frame is not None and self._file(frame.f_code.co_filename) is None:
            frame = frame.f_back
        if frame is None or self.full:
            return
        try:
            found = sdpa_effect(*args, **kwargs)
        except (TypeError, RuntimeError, ValueError, AttributeError):
            return
        code = frame.f_code
        self.records.append({"file": self._file(code.co_filename), "function": code.co_name,
                             "qualname": getattr(code, "co_qualname", code.co_name), "line": int(frame.f_lineno),
                             "name": "scaled_dot_product_attention", "value": None, "corner": False, "sdpa": found})
        self.full = len(self.records) >= MAX_RECORDS


def sdpa_effect(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **_) -> dict:
    """What one SDPA call does, bound the way the call bound it: the [T_q, T_k] keys each query may see (a
    float mask: its finite entries), whether is_causal was set, its dropout_p and scale (None: 1/sqrt(D))."""
    T_q, T_k = query.shape[-2], key.shape[-2]
    allowed = None
    if attn_mask is not None and hasattr(attn_mask, "dtype") and T_q * T_k <= MAX_SIZE:
        m = attn_mask.detach()
        m = m if str(m.dtype) == "torch.bool" else (m > -1e8)  # additive: a large negative entry hides
        while m.dim() > 2:
            m = m[0]
        allowed = m.expand(T_q, T_k).cpu().numpy().astype(bool).copy()
    return {"allowed": allowed, "masked": attn_mask is not None, "is_causal": bool(is_causal),
            "dropout_p": float(dropout_p), "scale": None if scale is None else float(scale),
            "d": int(query.shape[-1]), "t_q": int(T_q), "t_k": int(T_k)}


def _sdpa_mode(rec: "Recorder"):
    """A TorchFunctionMode that tells `rec` of each SDPA call and hands it on unchanged; None without torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        from torch.overrides import TorchFunctionMode

        target = torch.nn.functional.scaled_dot_product_attention
    except (ImportError, AttributeError):
        return None

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is target:
                rec.sdpa(args, kwargs)
            return func(*args, **kwargs)

    return Spy()


def run(fn, sub_dir: str):
    """(fn()'s value, the records) with the tracer on during the call only; an exception passes through."""
    rec = Recorder(sub_dir)
    spy = _sdpa_mode(rec)
    previous = sys.gettrace()
    if spy is not None:
        spy.__enter__()
    sys.settrace(rec.on_call)
    try:
        value = fn()
    finally:
        sys.settrace(previous)
        if spy is not None:
            spy.__exit__(None, None, None)
    return value, rec.records
