"""Fault localisation (issue 23): which of the student's functions is wrong on its own, and where in it.

When a stage fails, its functions (and those of the stages it calls) are called one by one, in stage
order, on small fixed inputs whose right answers the reference gives (recorded in the fixtures for the
student repo, see `prime`); each gets correct inputs, never another student function's output, so the
first one whose own output is wrong holds the mistake. Its structure is read by autograder.feedback.inference
for a diagnosis, and the pointer is a line inside that function (see `line_in`).
"""
import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..outcomes import StudentAborted, StudentError
from ..results import Located, StageStatus
from ..sandbox.safe_files import read_text
from ..stages import BY_NAME, STAGES
from . import inference


@dataclass(frozen=True)
class Probe:
    stage: str
    name: str  # the api name called
    file: str
    function: str
    args: tuple
    expected: Callable  # ref -> the right answer
    judge: Callable  # (got, want, ref) -> None when right, else (diagnosis id or None, evidence[, line pattern])


def _rng() -> np.random.Generator:
    return np.random.default_rng(23)


_R = _rng()
S34 = _R.normal(size=(3, 4)) * 2
X32 = _R.normal(size=(3, 2))
X54, W1, W2, W3 = _R.normal(size=(5, 4)), _R.normal(size=(4, 3)), _R.normal(size=(4, 3)), _R.normal(size=(4, 2))
Q34, K54 = _R.normal(size=(3, 4)), _R.normal(size=(5, 4))
K64, V62, S36 = _R.normal(size=(6, 4)), _R.normal(size=(6, 2)), _R.normal(size=(3, 6))
X56, X58 = _R.normal(size=(5, 6)), _R.normal(size=(5, 8))
WQ, WK, WV, WO = (_R.normal(size=(8, 8)) / 3 for _ in range(4))
XB = _R.normal(size=(1, 6, 8)).astype(np.float32)
WQKV, WOUT = (_R.normal(size=(24, 8)) / 3).astype(np.float32), (_R.normal(size=(8, 8)) / 3).astype(np.float32)
CAUSAL36 = np.tril(np.ones((3, 6), dtype=bool), 3)


def _differs(got, want, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    try:
        g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    except (TypeError, ValueError):
        return True
    if g.shape != w.shape:
        return True
    with np.errstate(invalid="ignore"):
        ok = (np.abs(g - w) <= atol + rtol * np.abs(w)) | ((g == w) & np.isinf(w))
    return not bool(np.all(ok))


def _shape_note(got, want) -> str:
    g, w = np.shape(got), np.shape(want)
    return f"shape {tuple(g)}, expected {tuple(w)}" if g != w else "values differ"


def _array(facts: dict | None = None) -> Callable:
    def judge(got, want, ref):
        if not _differs(got, want):
            return None
        found = inference.infer(got, want, facts)
        return found or (None, _shape_note(got, want))
    return judge


def _mask(got, want, ref):
    g = np.asarray(got)
    if g.shape == np.shape(want) and g.dtype == bool and np.array_equal(g, want):
        return None
    return inference.mask_pattern(g, np.asarray(want)) or (None, _shape_note(got, want))


def _masked(got, want, ref):
    g = np.asarray(got, dtype=np.float64)
    if g.shape == np.shape(want):
        g = np.where(np.isinf(want) & (g <= -1e9), -np.inf, g)
    return None if not _differs(g, want) else (None, _shape_note(got, want))


def _pair(facts: dict) -> Callable:
    def judge(got, want, ref):
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return None, f"returned {type(got).__name__}, expected (out, weights)"
        w_found = _array({**facts, "weights": True})(got[1], want[1], ref)
        if w_found and w_found[0]:
            return w_found
        return _array(facts)(got[0], want[0], ref) or w_found
    return judge


def _triple(got, want, ref):
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return None, f"returned {type(got).__name__}, expected (q, k, v)"
    for part, g, w in zip("qkv", got, want):
        if _differs(g, w):
            return None, f"{part} {_shape_note(g, w)}"
    return None


def _module(got, want, ref):
    if not _differs(got, want, 1e-3, 1e-4):
        return None
    merged = np.asarray(want, dtype=np.float64) @ np.linalg.inv(WOUT.T.astype(np.float64))
    if not _differs(got, merged, 1e-3, 1e-4):
        return ("inferred-no-output-projection", "your output equals the merged heads before `out`: multiplying it "
                "by out.weight^T gives the right output")
    return inference.infer(got, want, {"d_k": 4, "n_heads": 2, "n_q": 6, "n_k": 6}) or (None, _shape_note(got, want))


def _cache_probe(got, want, ref):
    """Chunks of 3, 1 and 2 positions appended to an empty cache of max_len 6, which they fill exactly."""
    lengths, ok = list(got.get("lengths", [])), list(got.get("prefix_ok", []))
    if lengths == [0, 3, 4, 6] and ok == [True] * 3 and not got.get("error"):
        return None
    if got.get("error"):  # the cache refused positions that fit: what it holds was never wrong, so no contents claim
        return (None, f"appending chunks of 3, 1 and 2 positions to an empty cache of max_len 6, which they fill "
                f"exactly, raised {got['error']} after lengths {lengths}: positions that fit were refused "
                "(t new positions fit while length + t <= max_len)", r"max_len")
    return ("inferred-cache-contents", f"appending chunks of 3, 1 and 2 positions to an empty cache, `length` read "
            f"{lengths} (expected [0, 3, 4, 6]) and the filled part returned equalled what was appended: {ok}")


def _decode(got, want, ref):
    if not _differs(got, want, 1e-3, 1e-4):
        return None
    w = WQKV.copy()
    for name, rows in (("queries", slice(0, 8)), ("values", slice(16, 24))):
        w[8:16] = WQKV[rows]
        if not _differs(got, ref.module_forward(XB, w, WOUT, 2), 1e-3, 1e-4):
            return ("inferred-cache-contents", f"fed in chunks of 3, 1 and 2 tokens, your outputs are those of a "
                    f"model whose cached keys are its {name}: the cache holds the wrong tensor")
    return None, "fed in chunks of 3, 1 and 2 tokens, the outputs differ from the full forward's"


def _p(stage, name, file, function, args, expected, judge) -> Probe:
    return Probe(stage, name, file, function, args, expected, judge)


PROBES: list[Probe] = [
    _p("softmax", "softmax", "softmax.py", "softmax", (S34,), lambda r: r.softmax(S34), _array({"weights": True})),
    _p("dot_products", "dot_scores", "scores.py", "dot_scores", (X32,), lambda r: r.dot_scores(X32), _array()),
    _p("dot_products", "simple_self_attention", "scores.py", "simple_self_attention", (X32,),
       lambda r: r.simple_self_attention(X32), _array()),
    _p("projections", "project_qkv", "projections.py", "project_qkv", (X54, W1, W2, W3),
       lambda r: r.project_qkv(X54, W1, W2, W3), _triple),
    _p("scaling", "scaled_scores", "scaling.py", "scaled_scores", (Q34, K54), lambda r: r.scaled_scores(Q34, K54),
       _array({"d_k": 4, "n_q": 3, "n_k": 5})),
    _p("masking", "causal_mask", "masking.py", "causal_mask", (4,), lambda r: r.causal_mask(4), _mask),
    _p("masking", "causal_mask", "masking.py", "causal_mask", (3, 6), lambda r: r.causal_mask(3, 6), _mask),
    _p("masking", "apply_mask", "masking.py", "apply_mask", (S36, CAUSAL36), lambda r: r.apply_mask(S36, CAUSAL36),
       _masked),
    _p("masking", "attention", "masking.py", "attention", (Q34, K64, V62, CAUSAL36),
       lambda r: r.attention(Q34, K64, V62, CAUSAL36), _pair({"d_k": 4, "n_q": 3, "n_k": 6})),
    _p("heads", "split_heads", "heads.py", "split_heads", (X56, 2), lambda r: r.split_heads(X56, 2), _array()),
    _p("heads", "merge_heads", "heads.py", "merge_heads", (np.swapaxes(X56.reshape(5, 2, 3), 0, 1),),
       lambda r: r.merge_heads(np.swapaxes(X56.reshape(5, 2, 3), 0, 1)), _array()),
    _p("heads", "multi_head_attention", "heads.py", "multi_head_attention", (X58, WQ, WK, WV, WO, 2),
       lambda r: r.multi_head_attention(X58, WQ, WK, WV, WO, 2), _array({"d_k": 4, "n_heads": 2, "n_q": 5, "n_k": 5})),
    _p("heads", "module_forward", "module.py", "forward", (XB, WQKV, WOUT, 2),
       lambda r: r.module_forward(XB, WQKV, WOUT, 2), _module),
    _p("kv_cache", "kv_cache_probe", "kv_cache.py", "append", (1, 2, 6, 4, [3, 1, 2]), lambda r: None, _cache_probe),
    _p("kv_cache", "module_decode", "module.py", "forward", (XB, WQKV, WOUT, 2, [3, 1, 2]),
       lambda r: r.module_forward(XB, WQKV, WOUT, 2), _decode),
]


def _closure(stage: str) -> list[str]:
    """The stage and every stage it calls, directly or not, in stage order."""
    out, todo = set(), [stage]
    while todo:
        s = todo.pop()
        if s not in out:
            out.add(s)
            todo.extend(BY_NAME[s].calls)
    return [s.name for s in STAGES if s.name in out]


def prime(ref) -> None:
    """Ask the reference every probe's right answer (a fixtures Recorder keeps them for the student repo)."""
    for p in PROBES:
        p.expected(ref)
    ref.module_forward(XB, np.concatenate([WQKV[:8], WQKV[:8], WQKV[16:]]), WOUT, 2)
    ref.module_forward(XB, np.concatenate([WQKV[:8], WQKV[16:], WQKV[16:]]), WOUT, 2)


def locate(api, ref, stage: str, submission: Path) -> Located | None:
    """The first function, over `stage` and the stages it calls, whose own output on a probe is wrong."""
    right: set[str] = set()  # the probes whose answer was right: evidence a later claim may need
    for p in (p for s in _closure(stage) for p in PROBES if p.stage == s):
        try:
            got = getattr(api, p.name)(*p.args)
            found = p.judge(got, p.expected(ref), ref)
        except StudentError as e:
            info = e.info
            if info.get("type") == "NotImplementedError":
                return None
            where = _error_place(info, p, submission)
            if where is None:
                return None
            file, func, line = where
            return Located(p.stage, file, func, line, *_error_diagnosis(p, info, right))
        except StudentAborted:
            return None
        except Exception:  # noqa: BLE001 - a probe whose answer is missing (fixtures) or unreadable: no claim
            continue
        if found is not None:
            diagnosis, evidence, *pattern = found
            func = _follow_return(submission, p.file, p.function) if diagnosis == "inferred-no-output-projection" \
                else p.function
            line = (pattern and _first_match(submission, p.file, func, pattern[0])) or \
                line_in(submission, p.file, func, diagnosis)
            return Located(p.stage, p.file, func, line or 0, diagnosis, evidence) if line else None
        right.add(p.name)
    return None


def _error_place(info: dict, p: Probe, submission: Path) -> tuple[str, str, int] | None:
    """Where an error in a probe belongs: the probed file's frame, or (an error raised by a function that its
    own probe found right, such as a full cache's append) the call into it from the probed function."""
    entry = info.get("entry") or {}
    if p.name == "module_decode" and info.get("file") == "kv_cache.py" and entry.get("file") == "module.py":
        line = _last_match(submission, "module.py", "forward", r"\.append\(") or entry.get("line")
        return "module.py", "forward", int(line)
    if info.get("file") == p.file and info.get("line"):
        return p.file, info.get("function") or p.function, int(info["line"])
    return None


def _error_diagnosis(p: Probe, info: dict, right: set[str]) -> tuple[str | None, str]:
    # claimed only where the kv_cache probe saw append alone fill a cache of the same max_len exactly: then
    # the cache is full only because forward appended more than it was given (not a capacity test off by one)
    if p.name == "module_decode" and info.get("type") == "ValueError" and info.get("file") == "kv_cache.py" \
            and "kv_cache_probe" in right:
        return ("inferred-cache-contents", "feeding 6 tokens in chunks of 3, 1 and 2 into a cache of max_len 6 "
                f"filled it before the end ({info.get('message', '')}): forward writes more positions than it is given")
    return None, f"raised {info.get('type')}: {info.get('message', '')}"


# -- lines ------------------------------------------------------------------------------------------

LINE_RULES: list[tuple[str, str]] = [  # (diagnosis id prefix, the line that makes the wrong value)
    ("inferred-mask-pattern", r"<=|>=|<|>|tril|triu"), ("mask-", r"<=|>=|<|>|tril|triu|where"),
    ("inferred-temperature", r"sqrt|\*\*|/"), ("scale-", r"sqrt|\*\*|/"),
    ("inferred-softmax-axis", r"sum\(|axis"), ("inferred-normalised-everything", r"sum\("),
    ("inferred-low-precision", r"float16|half|bfloat16|astype"),
    ("inferred-layout", r"reshape|swapaxes|transpose|view|permute"), ("heads-", r"reshape|swapaxes|transpose"),
    ("inferred-scaled-after-softmax", r"softmax\("), ("softmax-", r"exp|sum"),
    ("inferred-no-output-projection", r"^\s*return\b"), ("inferred-cache-contents", r"\.append\(|cache\.|\]\s*="),
]


def _function_node(tree: ast.AST, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _body_lines(submission: Path, file: str, func: str) -> list[tuple[int, str]]:
    """(number, text) of the function's body lines, its docstring left out."""
    text = read_text(submission / file) or ""
    try:
        node = _function_node(ast.parse(text), func)
    except (SyntaxError, ValueError):
        return []
    if node is None:
        return []
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and len(body) > 1:
        body = body[1:]
    lines = text.splitlines()
    first, last = body[0].lineno, node.end_lineno or body[-1].lineno
    return [(i, lines[i - 1]) for i in range(first, last + 1)
            if lines[i - 1].strip() and not lines[i - 1].strip().startswith("#")]


def _first_match(submission: Path, file: str, func: str, pattern: str) -> int | None:
    hits = [i for i, text in _body_lines(submission, file, func) if re.search(pattern, text.split("#")[0])]
    return hits[0] if hits else None


def _last_match(submission: Path, file: str, func: str, pattern: str) -> int | None:
    hits = [i for i, text in _body_lines(submission, file, func) if re.search(pattern, text.split("#")[0])]
    return hits[-1] if hits else None


def line_in(submission: Path, file: str, func: str, diagnosis: str | None) -> int | None:
    """A line inside `func`: the first that makes the kind of value the diagnosis is about (the rule for its
    id), else the function's first body line; None when the function is not found."""
    body = _body_lines(submission, file, func)
    if not body:
        return None
    for prefix, pattern in LINE_RULES:
        if diagnosis and diagnosis.startswith(prefix):
            hits = [i for i, text in body if re.search(pattern, text.split("#")[0])]
            if hits:
                return hits[-1] if prefix in ("inferred-cache-contents", "inferred-no-output-projection") else hits[0]
    return body[0][0]


def _follow_return(submission: Path, file: str, func: str) -> str:
    """The method that makes `func`'s returned value: `return self.merge(y)` -> merge (once)."""
    for _, text in reversed(_body_lines(submission, file, func)):
        m = re.match(r"\s*return\s+self\.(\w+)\(", text)
        if m and _body_lines(submission, file, m.group(1)):
            return m.group(1)
        if re.match(r"\s*return\b", text):
            break
    return func


# -- hooks (grade.py) -------------------------------------------------------------------------------

def located_for(api, ctx, stage: str, submission: Path) -> dict:
    """{stage: Located} for a failing stage, or {} (never lets the grader's own trouble through)."""
    try:
        found = locate(api, ctx.ref, stage, submission)
    except Exception:  # noqa: BLE001 - localisation is advice; grading stands without it
        found = None
    return {stage: found} if found else {}


def attach(sr, loc: Located | None, done: dict) -> None:
    """Put an inferred diagnosis on the stage's first failing check when the wrong function is the stage's
    own, no catalogued mistake was named, and no stage it calls is known to fail: the id as data, the place
    as the check's `where`, and what was seen added to the check's evidence (never a diagnosis line)."""
    if loc is None or not loc.diagnosis or loc.stage != sr.stage or sr.diagnoses:
        return
    if any(d in done and done[d].status != StageStatus.PASSED for d in _closure(sr.stage) if d != sr.stage):
        return
    for r in sr.checks:
        if not r.passed and not r.not_run:
            r.diagnosis = loc.diagnosis
            r.where = loc.where
            r.message = (r.message + "\n" if r.message else "") + f"(the evidence: {loc.evidence})"
            return
