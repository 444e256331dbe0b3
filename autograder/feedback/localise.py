"""Fault localisation: which of the student's functions is wrong on its own, and where in it.

When a stage fails, its functions (and those of the stages it calls) are called one by one, in stage
order, on small fixed inputs whose right answers the reference gives (recorded in the fixtures for the
student repo, see `prime`); each gets correct inputs, never another student function's output, so the
first one whose own output is wrong holds the mistake. Its structure is read by autograder.evidence.inference
for a diagnosis, and the pointer is a line inside that function (see `line_in`).
"""
import ast
import re

import numpy as np

from .. import messages as say
from ..declarations import DEFAULTS_RULE, Probe
from ..evidence.probes import EXTRA
from ..outcomes import Fail, StudentAborted, StudentError
from ..results import Located, StageStatus
from ..sandbox.safe_files import Snapshot
from ..stages import BY_NAME, STAGES, USES, mistakes_of
from . import relations, steps
from .sources import argument_line, deciding_line, function_node


def probes_of(stage: str) -> tuple[Probe, ...]:
    """A stage's declared probes, and those the feedback adds where it declares none (evidence/probes.py EXTRA)."""
    return BY_NAME[stage].probes + EXTRA.get(stage, ())


def probes() -> list[Probe]:
    """Every stage's probes, in stage order."""
    return [p for s in STAGES for p in probes_of(s.name)]


def prime(ref) -> None:
    """Ask the reference every probe's right answer (a fixtures Recorder keeps them for the student repo)."""
    for p in probes():
        p.expected(ref)
        if p.prime:
            p.prime(ref)
        steps.steps_for(ref, p.name, p.args)  # the intermediates that following values compares with


def locate(api, ref, stage: str, snap: Snapshot) -> Located | None:
    """The first function, over `stage` and the stages it calls, whose own output on a probe is wrong; its lines
    are read from `snap`, the grade's snapshot (the bytes the child ran)."""
    right: set[str] = set()  # the probes whose answer was right: evidence a later claim may need
    passed: set[tuple[str, str]] = set()  # (file, function) of those probes: their insides need no following
    for p in (p for s in USES[stage] for p in probes_of(s)):
        try:
            got = getattr(api, p.name)(*p.args)
            found = p.judge(got, p.expected(ref), ref)
        except StudentError as e:
            info = e.info
            if info.get("type") == "NotImplementedError":
                return None
            where = _error_place(info, p, snap)
            if where is None:
                return None
            file, func, line = where
            return Located(p.stage, file, func, line, *_error_diagnosis(p, info, right))
        except StudentAborted:
            return None
        except Fail:  # the caller's arrays changed: the line that wrote into one
            found = _mutation(api, p, passed - {(p.file, _bare(p.function))})
            if found is not None:
                return found
            continue
        except Exception:  # noqa: BLE001 - a probe whose answer is missing (fixtures) or unreadable: no claim
            continue
        if found is not None:
            diagnosis, evidence, *pattern = found
            if p.name == "fused_probe":  # one SDPA call: its arguments against what the reference's call does
                at = follow_sdpa(api, p, snap)
                if at is not None:
                    return Located(p.stage, at["file"], at["function"], at["line"], diagnosis, evidence, steps=[at])
            followed = follow_values(api, ref, p, passed - {(p.file, _bare(p.function))})
            if followed is not None and followed[0] is not None:
                file, func, line, steps = followed
                return Located(p.stage, file, func, line, diagnosis, evidence, steps=steps)
            if followed is not None:  # nothing could be traced: the function's first line, and the pointer says so
                body = _body_lines(snap, p.file, p.function)
                return Located(p.stage, p.file, p.function, body[0][0], diagnosis, evidence,
                               how=say.PART_NO_TRACE) \
                    if body else None
            func = _follow_return(snap, p.file, p.function) if diagnosis == "inferred-no-output-projection" \
                else p.function
            line = (pattern and first_match(snap, p.file, func, pattern[0])) or \
                line_in(snap, p.file, func, diagnosis)
            return Located(p.stage, p.file, func, line or 0, diagnosis, evidence) if line else None
        right.add(p.name)
        passed.add((p.file, _bare(p.function)))
    return None


# -- following values (the tracer's records against the reference's steps) ----------------------------

def follow_values(api, ref, p: Probe, passed: set[tuple[str, str]]):
    """(file, function, line, steps) of the line where the student's values part from the reference's, for
    the probe `p` whose answer was wrong; (None, ...) when nothing could be traced; None when the trace
    settles nothing (no steps for this probe, or no value of an intermediate's shape came out wrong)."""
    try:
        want = steps.steps_for(ref, p.name, p.args)
    except Exception:  # noqa: BLE001 - a step the fixtures did not record: no following
        return None
    if not want or not hasattr(api, "traced"):
        return None
    try:
        _, trace = api.traced(p.name, *p.args)
    except Exception:  # noqa: BLE001 - the traced call failed where the plain one answered: nothing traced
        trace = None
    if not trace:
        return None, None, None, []
    # a function whose own probe passed is followed no further than the value it hands back (its file too,
    # when that is not the probed function's: a passing cache's constructor is not the module's mistake)
    files = {file for file, _ in passed} - {p.file}
    trace = [{**r, "value": np.asarray(r["value"], dtype=np.float64)} if isinstance(r, dict)
             and type(r.get("value")) in (float, np.float64) else r for r in trace]  # a returned float, as sent
    arrays = [{**r, "seq": i} for i, r in enumerate(trace) if isinstance(r, dict) and isinstance(r.get("file"), str)
              and isinstance(r.get("value"), np.ndarray)]
    records = [r for r in arrays if (r["file"], r.get("function")) not in passed and r["file"] not in files
               and not r.get("argument")]
    # what calls were handed, and what a passing function handed back: evidence of a result dropped, never judged
    around = [r for r in arrays if r.get("argument") or r.get("caller")]
    try:
        answer = p.expected(ref)  # a tuple's slots judge the returned values one by one
    except Exception:  # noqa: BLE001 - an answer the fixtures did not record: the steps alone
        answer = None
    return first_parting(records, want, p, around, answer) if records else (None, None, None, [])


def _mutation(api, p: Probe, passed: set[tuple[str, str]]) -> Located | None:
    """Where the probe's call wrote into an array its caller passed in: the first line the tracer saw do so."""
    try:
        _, trace = api.traced(p.name, *p.args)
    except Exception:  # noqa: BLE001 - the traced call failed where the plain one answered: no claim
        return None
    r = next((r for r in trace or [] if isinstance(r, dict) and isinstance(r.get("mutated"), str)
              and isinstance(r.get("file"), str) and (r["file"], r.get("function")) not in passed), None)
    if r is None:
        return None
    step = {"label": "", "line": int(r["line"]), "function": r.get("function"), "name": r["name"], "verdict": "wrong",
            "got": _small(r.get("value")), "want": None, "relation": relations.mutated_words(int(r["line"]), r["mutated"])}
    return Located(p.stage, r["file"], str(r.get("function")), int(r["line"]), None,
                   say.PART_MUTATED_EVIDENCE.format(param=r["mutated"]), steps=[step])


def follow_sdpa(api, p: Probe, snap: Snapshot) -> dict | None:
    """The step (as first_parting's) of the first scaled_dot_product_attention call whose arguments make it
    attend other than the reference's call would: which keys, dropout, scale; None when every call agrees."""
    try:
        _, trace = api.traced(p.name, *p.args)
    except Exception:  # noqa: BLE001 - the traced call failed where the plain one answered: no claim
        return None
    q, k, _, causal, dropout_p, training = p.args
    for r in trace or []:
        if not isinstance(r, dict) or not isinstance(r.get("sdpa"), dict) or not isinstance(r.get("file"), str):
            continue
        found = relations.sdpa_difference(r["sdpa"], causal=causal, dropout=dropout_p if training else 0.0,
                                          training=training)
        if found:
            words, argument = found
            call = int(r["line"])
            made = argument_line(snap, r["file"], call, argument)  # `p = ...` above the call
            said = say.SDPA_LINE_MADE.format(made=made, argument=argument, call=call, words=words) if made \
                else say.SDPA_LINE.format(call=call, words=words)
            return {"label": say.HTML_SDPA_STEP, "line": made or call, "file": r["file"],
                    "function": r.get("function"), "name": r["name"], "verdict": "wrong", "got": None, "want": None,
                    "relation": said}
    return None


def _squeezed(a: np.ndarray) -> np.ndarray:
    return a.reshape([d for d in a.shape if d != 1])


def _equal(got: np.ndarray, want: np.ndarray) -> bool:
    g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        return False
    with np.errstate(invalid="ignore"):
        g = np.where(np.isneginf(w) & (g <= -1e9), -np.inf, g)  # a large negative number stands for -inf
        ok = np.where(np.isinf(w), g == w, np.abs(g - w) <= 1e-4 + 1e-3 * np.abs(w))  # inf: only the same inf
    return bool(np.all(ok))


MASK_LABELS = ("the mask", "the mask's", "the additive mask")


def _judge(r: dict, want: list[tuple[str, np.ndarray]]) -> tuple[str, str | None]:
    """('right', the step it equals) / ('wrong', the step of its shape) / ('other', None) for one record."""
    value = r["value"]
    if r.get("corner"):  # a large buffer's corner: compared with the masks it would be sliced to
        g = _squeezed(value)
        same_shape = [(label, w) for label, w in want if label.startswith(MASK_LABELS) and g.ndim == 2
                      and _squeezed(w).ndim == 2 and all(a <= b for a, b in zip(_squeezed(w).shape, g.shape))]
        for label, w in same_shape:
            sw = _squeezed(w)
            if _equal(g[:sw.shape[0], :sw.shape[1]], sw):
                return "right", label
        return ("wrong", same_shape[0][0]) if same_shape else ("other", None)
    g = _squeezed(value)
    same_shape = [(label, w) for label, w in want if _squeezed(w).shape == g.shape]
    # a variable named after a step (q, k, v) must hold that step: a `q` holding the keys is not right
    name = r.get("name")
    own = [(label, w) for label, w in same_shape if label == name or label.startswith(f"{name}'s ")]
    for label, w in own or same_shape:
        if _equal(g, _squeezed(w)):
            if not own and _holds_another(name, label, want):
                return "wrong", next(lb for lb, _ in want if lb == name)
            return "right", label
    return ("wrong", (own or same_shape)[0][0]) if same_shape else ("other", None)


def _holds_another(name: str | None, label: str, want: list[tuple[str, np.ndarray]]) -> bool:
    """A variable named after a step (v) holding another such step (k) of another shape than its own."""
    names = relations.BARE & {lb for lb, _ in want}
    return name in names and label.split("'")[0] in names - {name}


def dropped_result(r: dict, records: list[dict], around: list[dict], want) -> dict | None:
    """The step (as first_parting's) of a right value a call handed back to a line that kept nothing, when the
    parting record `r` lies in a later call that was handed something else of its kind: `cache.append(k, v)`
    whose result, the cached keys so far, never reaches `attend(q, k, v)`."""
    entry = max((a["seq"] for a in around if a.get("argument") and a["seq"] < r["seq"]
                 and a.get("qualname") == r.get("qualname")), default=None)
    if entry is None:
        return None
    args, handed, i = {a["seq"]: a for a in around if a.get("argument")}, [], entry
    while i in args and args[i].get("qualname") == r.get("qualname"):  # the arguments of the call holding r
        handed.append(args[i])
        i -= 1
    bound = {(x["file"], x.get("function"), x["line"]) for x in records}  # every line that bound a value
    later = records + list(args.values())  # what a line bound, or a call was handed, after h: h was kept
    for h in reversed([a for a in around if a.get("caller") and a["seq"] < entry]):
        file, function, line = h["caller"]
        verdict, label = _judge(h, want)
        if verdict != "right" or (file, function, line) in bound or (file, function) == (r["file"], r.get("function")):
            continue
        kin = [a for a in handed if np.ndim(a["value"]) == np.ndim(h["value"])]  # arrays of its rank
        if kin and not any(_equal(a["value"], h["value"]) for a in handed) \
                and not any(h["seq"] < x["seq"] < r["seq"] and _equal(x["value"], h["value"]) for x in later):
            callee = str(h.get("function"))
            return {"label": label, "line": int(line), "file": file, "function": function, "name": say.HTML_NOT_KEPT,
                    "verdict": "wrong", "got": None, "want": _small(h["value"]),
                    "relation": say.PART_NOT_KEPT.format(line=int(line), callee=callee, step=label.removeprefix("the "),
                                                         function=r.get("function"))}
    return None


def first_parting(records: list[dict], want: list[tuple[str, np.ndarray]], p: Probe, around: list[dict] = (),
                  answer=None):
    """The line of the first record whose value has an intermediate's shape but not its contents, or, where
    records of no intermediate's shape come between it and the last right one, the first line after that.
    `answer`: the probe's right answer; where it is a tuple, the probed function's returned values are judged
    slot by slot against it."""
    at_answer = _answer_index(want, answer)  # the step the function should hand back
    final, earlier = want[at_answer][0], {lb for lb, _ in want[:at_answer]}
    judged = []
    for n, r in enumerate(records):
        verdict, label = _judge(r, want)
        if verdict == "wrong" and _filled_later(records, n):  # a buffer still being written: judged when it is
            verdict = "other"
        slot = _returned_slot(r, p, answer)
        if slot is not None:
            verdict, label, r = _judge_slot(r, slot, answer, verdict, label, _returned(records, r))
            if verdict == "wrong" and not r.get("relation"):  # a slot of another step's value: the line that made it
                made = next((x for x in reversed(records[:n]) if x.get("qualname") == r.get("qualname")
                             and not x["name"].startswith("return") and _same(x["value"], r["value"])), None)
                if made is not None:  # judged as the step the slot should hold (the relations say what it holds)
                    r, label = made, _answer_label(want, answer[slot])
            judged.append((r, verdict, label))
            if verdict == "wrong":
                break
            continue
        # the probed function's own answer is known wrong: equal to an earlier step, a step was left out; equal to
        # a later one (the mask's complement where the mask belongs), the answer it should be, changed
        if r["name"] in ("return", "return[0]") and r["file"] == p.file and r.get("function") == _bare(p.function) \
                and verdict == "right" and label != final:
            verdict, label = ("skipped", label) if label in earlier else ("wrong", final)
        if verdict == "other" and not r.get("corner"):  # of no step's shape: a reduction over another axis?
            found = next(((lb, w) for lb in relations.REDUCTIONS
                          if (w := relations.reduction_relation(np.asarray(r["value"], float), lb, want))), None)
            if found:
                verdict, label = "wrong", found[0]
                r = {**r, "relation": found[1]}
        judged.append((r, verdict, label))
        if verdict in ("wrong", "skipped"):
            break
    wrong = next((i for i, (_, v, _) in enumerate(judged) if v in ("wrong", "skipped")), None)
    if wrong is None:
        return None
    last_right = next((i for i in range(wrong - 1, -1, -1) if judged[i][1] == "right"), None)
    at = wrong if last_right is None else last_right + 1
    if judged[at][1] == "skipped":  # passed along unchanged from a call: the line that returned it
        value = judged[at][0]["value"]
        for i in range(at - 1, -1, -1):
            r = judged[i][0]
            if r["name"].startswith("return") and r["qualname"] != judged[at][0]["qualname"] \
                    and r["value"].shape == value.shape and np.array_equal(r["value"], value):
                at = i
                break
    r, verdict, label = judged[at]
    if (label or "").endswith(steps.DRAWN):  # random draws made another (correct) way: nothing to compare with
        return None
    dropped = dropped_result(r, records, list(around), want) if verdict == "wrong" and "seq" in r else None
    if dropped is not None:
        return dropped["file"], dropped["function"], dropped["line"], [dropped]
    named = _named(r, verdict, label, want) if verdict in ("wrong", "skipped") else None
    if named:
        label = named[0]
        judged[at] = (r, verdict, label)
    shown = [{"label": lb or "", "line": int(rec["line"]), "function": rec["function"], "name": rec["name"],
              "verdict": v, "got": _small(rec["value"]),
              "want": _small(next((w for x, w in want if x == lb), None))}
             for rec, v, lb in judged[:at + 1] if v != "other" or rec is r][-12:]
    if named:
        shown[-1]["relation"] = relations.in_words(int(r["line"]), r["name"], *named)
    return r["file"], r["function"], int(r["line"]), shown


def _answer_index(want: list[tuple[str, np.ndarray]], answer) -> int:
    """The index of the last step equal to the probe's right answer (a single array), else the last step's."""
    if isinstance(answer, np.ndarray):
        found = [i for i, (_, w) in enumerate(want) if _same(w, answer)]
        if found:
            return found[-1]
    return len(want) - 1


def _answer_label(want: list[tuple[str, np.ndarray]], answer) -> str:
    return want[_answer_index(want, answer)][0]


def _filled_later(records: list[dict], n: int) -> bool:
    """Whether the array of record n is written in place later (the next record of its name in its function is a
    `filled` one): `out = np.empty(...)` before its rows are written, or its rows before the last are."""
    r = records[n]
    later = next((x for x in records[n + 1:] if x.get("name") == r.get("name")
                  and x.get("qualname") == r.get("qualname")), None)
    return bool(later and later.get("filled"))


def _returned_slot(r: dict, p: Probe, answer) -> int | None:
    """i for the probed function's own `return[i]` record, where its right answer is a tuple of that many arrays."""
    name = r.get("name") or ""
    if not (isinstance(answer, tuple) and name.startswith("return[") and r.get("file") == p.file
            and r.get("function") == _bare(p.function)):
        return None
    try:
        i = int(name[len("return["):-1])
    except ValueError:
        return None
    return i if i < len(answer) and all(isinstance(a, np.ndarray) for a in answer) else None


def _same(a, b) -> bool:
    a, b = _squeezed(np.asarray(a, dtype=np.float64)), _squeezed(np.asarray(b, dtype=np.float64))
    return a.shape == b.shape and _equal(a, b)


def _returned(records: list[dict], r: dict) -> list:
    """The values of the other `return[i]` records of the same return as r (same function, same line)."""
    return [x["value"] for x in records if x.get("qualname") == r.get("qualname") and x["line"] == r["line"]
            and x["name"].startswith("return[")]


def _judge_slot(r: dict, i: int, answer: tuple, verdict: str, label: str | None,
                returned: list) -> tuple[str, str | None, dict]:
    """A returned tuple's slot i against the right answer's: right; or, where the slots returned are the right
    answer's values in another order, that; else wrong as the steps judged it (what it is, by the relations)."""
    if _same(r["value"], answer[i]):
        return "right", label, r
    j = next((j for j, a in enumerate(answer) if j != i and _same(r["value"], a)), None)
    # another order only where every slot holds a different one of the right values (a permutation)
    matched = [next((k for k, a in enumerate(answer) if _same(v, a)), None) for v in returned]
    permuted = len(matched) == len(answer) and None not in matched and len(set(matched)) == len(answer)
    if j is not None and permuted:
        words = say.PART_RETURN_ORDER.format(j=j, i=i)
        return "wrong", label or say.PART_RETURN_SLOT.format(i=i), {**r, "relation": words}
    return ("wrong" if verdict != "other" else verdict), label, r


def _named(r: dict, verdict: str, label: str | None, want: list[tuple[str, np.ndarray]]) -> tuple[str, str] | None:
    """(the step, what changed) at the parting record: a relation of feedback/relations.py, or a step skipped."""
    if r.get("relation"):
        return label, r["relation"]
    labels = [lb for lb, _ in want]
    if verdict == "skipped" and r["name"] == "return" and label in labels and labels.index(label) + 1 < len(labels):
        after = labels[labels.index(label) + 1:]
        shown = ", ".join(a.removeprefix("the ") for a in after[:2]) + (", ..." if len(after) > 2 else "")
        return label, say.PART_STOPS.format(steps=shown)
    if r.get("corner"):
        return None
    g = _squeezed(np.asarray(r["value"], dtype=np.float64))
    same = [lb for lb, w in want if _squeezed(np.asarray(w)).shape == g.shape]
    own = [lb for lb in same if lb == r["name"] or lb.startswith(f"{r['name']}'s ")]
    first = own[:1] or ([label] if label else [])
    return relations.relation(r["value"], first + [lb for lb in same if lb not in first], want)


def _small(a) -> list | None:
    """A value as nested lists for the report, its last two axes capped at 8 and leading ones at the first."""
    if a is None:
        return None
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 0:  # a returned float
        return [round(float(a), 4)]
    while a.ndim > 2:
        a = a[0]
    a = a[:8, :8] if a.ndim == 2 else a[:8]
    return np.round(a, 4).tolist()


def _error_place(info: dict, p: Probe, snap: Snapshot) -> tuple[str, str, int] | None:
    """Where an error in a probe belongs: the probed file's frame, or (an error raised by a function that its
    own probe found right, such as a full cache's append) the call into it from the probed function."""
    entry = info.get("entry") or {}
    if p.name == "module_decode" and info.get("file") == "kv_cache.py" and entry.get("file") == "module.py":
        line = _last_match(snap, "module.py", "forward", r"\.append\(") or entry.get("line")
        return "module.py", "forward", int(line)
    if info.get("file") == p.file and info.get("line"):
        return p.file, info.get("function") or p.function, int(deciding_line(snap, p.file, int(info["line"])))
    return None


def _error_diagnosis(p: Probe, info: dict, right: set[str]) -> tuple[str | None, str]:
    # claimed only where the kv_cache probe saw append alone fill a cache of the same max_len exactly: then
    # the cache is full only because forward appended more than it was given (not a capacity test off by one)
    if p.name == "module_decode" and info.get("type") == "ValueError" and info.get("file") == "kv_cache.py" \
            and "kv_cache_probe" in right:
        return "inferred-cache-contents", say.PART_CACHE_OVERFILLED.format(message=info.get("message", ""))
    return None, say.PART_RAISED.format(type=info.get("type"), message=info.get("message", ""))


# -- lines ------------------------------------------------------------------------------------------



def _bare(function: str) -> str:
    """A probe's function as the tracer records it: `Class.method` is `method`."""
    return function.rpartition(".")[2]


def _body_lines(snap: Snapshot, file: str, func: str) -> list[tuple[int, str]]:
    """(number, text) of the function's body lines, its docstring left out."""
    text = snap.read_text(file) or ""
    try:
        node = function_node(ast.parse(text), func)
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


def first_match(snap: Snapshot, file: str, func: str, pattern: str) -> int | None:
    hits = [i for i, text in _body_lines(snap, file, func) if re.search(pattern, text.split("#")[0])]
    return hits[0] if hits else None


def _last_match(snap: Snapshot, file: str, func: str, pattern: str) -> int | None:
    hits = [i for i, text in _body_lines(snap, file, func) if re.search(pattern, text.split("#")[0])]
    return hits[-1] if hits else None


def line_in(snap: Snapshot, file: str, func: str, diagnosis: str | None) -> int | None:
    """A line inside `func`: the first that makes the kind of value the diagnosis is about (its Mistake.line
    pattern), else the function's first body line; None when the function is not found."""
    body = _body_lines(snap, file, func)
    if not body:
        return None
    pattern = next((m.line for m in mistakes_of(diagnosis) if m.line), None)
    if pattern:
        hits = [i for i, text in body if re.search(pattern, text.split("#")[0])]
        if hits:  # what fills a cache, or the value returned, is made last; any other value first
            return hits[-1] if diagnosis in ("inferred-cache-contents", "inferred-no-output-projection") else hits[0]
    return body[0][0]


def _follow_return(snap: Snapshot, file: str, func: str) -> str:
    """The method that makes `func`'s returned value: `return self.merge(y)` -> merge (once)."""
    for _, text in reversed(_body_lines(snap, file, func)):
        m = re.match(r"\s*return\s+self\.(\w+)\(", text)
        if m and _body_lines(snap, file, m.group(1)):
            return m.group(1)
        if re.match(r"\s*return\b", text):
            break
    return func


# -- hooks (grade/) ----------------------------------------------------------------------------------

def located_for(api, ctx, stage: str) -> dict:
    """{stage: Located} for a failing stage, or {} (never lets the grader's own trouble through); the source is
    the grade's snapshot, `ctx.snapshot`."""
    try:
        found = locate(api, ctx.ref, stage, ctx.snapshot)
    except Exception:  # noqa: BLE001 - localisation is advice; grading stands without it
        found = None
    return {stage: found} if found else {}


def attach(sr, loc: Located | None, done: dict) -> None:
    """Put an inferred diagnosis on the stage's first failing check when the wrong function is the stage's
    own, no catalogued mistake was named, and no stage it calls is known to fail: the id as data, the place
    as the check's `where`, and what was seen added to the check's evidence (never a diagnosis line)."""
    if loc is None or not loc.diagnosis or loc.stage != sr.stage or sr.diagnoses:
        return
    if any(not r.passed and r.check.rule == DEFAULTS_RULE for r in sr.checks):
        return  # a default that is not the contract's leads (advice.next_step): what the probes, called with the
        # defaults, saw go wrong follows from it
    if any(d in done and done[d].status != StageStatus.PASSED for d in USES[sr.stage] if d != sr.stage):
        return
    for r in sr.checks:
        if not r.passed and not r.not_run:
            r.diagnosis = loc.diagnosis
            r.where = loc.where
            r.message = (r.message + "\n" if r.message else "") + say.PART_EVIDENCE.format(evidence=loc.evidence)
            return
