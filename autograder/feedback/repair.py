"""Confirm by repair (issue 42, part 3): the change named at the parting line, tried as an edit of the student's own line.

Where feedback/relations.py named what changed at the parting line, the same change is derived, when it can be, as a
small textual edit of that line (an axis argument back to -1, a mask's `~` or comparison reversed, tril for triu, the
operand swapped back, `/ d_k ** 0.5` for `/ d_k`, a copy before an in-place write, is_causal=True added). The edit is
made on a copy of the grade's snapshot (Snapshot.with_file: in memory, the folder is not read again), and the
stage's failing checks are run again on it through the grader's own machinery (a fresh Worker given that copy,
StudentAPI, the checks' own functions, compared in this process). Only when every one of
them passes is the edit reported ("with ... on line 14, the 2 failing masking checks pass") and kept for the hint
ladder's last rung. Feedback only: nothing here touches a check's result or a point. At most MAX_RERUNS reruns, for
the first failing stage only, within REPAIR_BUDGET_S.
"""
import ast
import re
import time
from dataclasses import dataclass

import numpy as np

from .. import messages as say
from ..sandbox.safe_files import Snapshot

MAX_RERUNS = 2  # edits tried per grade
REPAIR_BUDGET_S = 20.0  # seconds the reruns may take together, child start included
FLIP = {"<=": ">", ">": "<=", ">=": "<", "<": ">="}  # a comparison reversed: True where it was False
MIRROR = {"<=": ">=", ">=": "<=", "<": ">", ">": "<"}  # a comparison read the other way (rows for columns)
COMPARISON = re.compile(r"(?<![<>=!])(<=|>=|<|>)(?![<>=])")


@dataclass(frozen=True)
class Edit:
    """One derived edit of one line: the line's text before and after, and the words for it."""
    line: int
    before: str
    after: str
    words: str  # 'the mask's comparison reversed'


def _sub_once(pattern: str, repl, text: str) -> str | None:
    new, n = re.subn(pattern, repl, text, count=1)
    return new if n and new != text else None


def _code(text: str) -> tuple[str, str]:
    """(the code, the comment with its '#') of one line."""
    i = text.find("#")
    return (text, "") if i < 0 else (text[:i], text[i:])


def _comparisons(code: str, table: dict) -> str | None:
    return COMPARISON.sub(lambda m: table[m.group(1)], code) if COMPARISON.search(code) else None


def _mask_edits(code: str, words: str) -> list[tuple[str, str]]:
    """(new code, words) for a mask inverted, transposed or shifted one diagonal."""
    out = []
    if "inverted" in words:
        if (new := _sub_once(r"~\s*(?=[A-Za-z_(])", "", code)) is not None:
            out.append((new, say.EDIT_NOT_REMOVED))
        elif (new := _sub_once(r"((?:masked_fill|where)\(\s*|attn_mask\s*=\s*)(?=[A-Za-z_])", r"\1~", code)):
            out.append((new, say.EDIT_INVERTED))
        if (new := _comparisons(code, FLIP)) is not None:
            out.append((new, say.EDIT_REVERSED))
    elif "transposed" in words:
        swap = {"tril": "triu", "triu": "tril"}
        new = _sub_once(r"\b(tril|triu)\b", lambda m: swap[m.group(1)], code)
        if new is not None:
            new = re.sub(r"\b(diagonal|k)\s*=\s*(\w+)\s*-\s*(\w+)", r"\1=\3 - \2", new)
            out.append((new, say.EDIT_TRIL if "tril(" in new else say.EDIT_TRIU))
        elif (new := _comparisons(code, MIRROR)) is not None:
            out.append((new, say.EDIT_PER_ROW))
    elif "shifted one diagonal" in words:
        shift = -1 if "next key" in words else 1
        new = _sub_once(r"\b(diagonal|k)\s*=\s*(-?\d+)\b", lambda m: f"{m.group(1)}={int(m.group(2)) + shift}", code)
        if new is not None:
            out.append((new, say.EDIT_DIAGONAL.format(shift=shift)))
        elif (new := _comparisons(code, {"<=": "<", "<": "<=", ">=": ">", ">": ">="})) is not None:
            out.append((new, say.EDIT_STRICT if shift < 0 else say.EDIT_EQUAL_IN))
    return out


def derive(text: str, words: str, line: int, torch: bool = False, params: tuple[str, ...] = ()) -> list[Edit]:
    """The edits of one line of the student's source that make the change the relation `words` names; [] when
    none can be derived from the line's text. `params`: the enclosing function's parameters."""
    code, comment = _code(text.rstrip("\n"))
    found: list[tuple[str, str]] = []
    if "instead of the last" in words:  # a reduction over another axis: the function's own axis, else -1
        m = re.search(r"\b(?:axis|dim)\s*=\s*(-?\d+)\b", code)
        if m and m.group(1) != "-1":
            own = [say.EDIT_OWN_AXIS.format(param=p) for p in params if p in ("axis", "dim")][:1]
            for target in [p for p in params if p in ("axis", "dim")][:1] + ["-1"]:
                what = own[0] if target != "-1" else "-1"
                found.append((code[:m.start(1)] + target + code[m.end(1):], say.EDIT_AXIS_BACK.format(what=what)))
    elif any(k in words for k in ("mask inverted", "mask transposed", "shifted one diagonal", "attn_mask inverted")):
        found += _mask_edits(code, words)
    elif "sets neither is_causal nor attn_mask" in words:
        new = _sub_once(r"\)(\s*)$", r", is_causal=True)\1", code)
        if new is not None and "scaled_dot_product_attention(" in new:
            found.append((new, say.EDIT_IS_CAUSAL))
    elif (m := re.search(r"holds the reference's (\w+) where its (\w+) belongs", words)):
        wrong, right = m.group(1), m.group(2)
        lhs, eq, rhs = code.partition("=")
        hit = re.search(rf"\b(w_)?{wrong}\b", rhs) if eq else None
        if hit:
            was = hit.group(0)
            now = (hit.group(1) or "") + right
            found.append((lhs + eq + rhs[:hit.start()] + now + rhs[hit.end():], say.EDIT_OPERAND.format(now=now, was=was)))
    elif "divided by d_k = " in words and "instead of sqrt(d_k)" in words:
        new = _sub_once(r"/\s*(\w+(?:\.shape\[-1\])?)(?!\s*\*\*)", r"/ \1 ** 0.5", code)
        if new is not None:
            found.append((new, say.EDIT_SQRT))
    elif (m := re.search(r"writes into `(\w+)`", words)):
        name = m.group(1)
        indent = code[:len(code) - len(code.lstrip())]
        copy = f"{name}.clone()" if torch else f"{name}.copy()"
        found.append((f"{indent}{name} = {copy}\n{code.rstrip()}", say.EDIT_COPY.format(name=name)))
    gap = code[len(code.rstrip()):]
    return [Edit(line, text.rstrip("\n"), (new.rstrip() + (gap + comment if comment else "")).rstrip(), what)
            for new, what in found]


def _params(text: str, line: int) -> tuple[str, ...]:
    """The parameters of the innermost function around `line` of a source text (none when it does not parse)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ()
    around = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
              and n.lineno <= line <= (n.end_lineno or n.lineno)]
    if not around:
        return ()
    a = max(around, key=lambda n: n.lineno).args
    return tuple(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs))


def _relation_step(loc) -> dict | None:
    step = (getattr(loc, "steps", None) or [None])[-1]
    return step if isinstance(step, dict) and step.get("relation") else None


def edits_for(loc, snap: Snapshot, torch: bool = False) -> list[Edit]:
    """The edits derived for the located parting line (at most MAX_RERUNS) of the file as `snap` holds it, or []."""
    step = _relation_step(loc)
    if step is None:
        return []
    data = snap.data.get(loc.file)
    try:
        text = data.decode() if data is not None else ""
    except UnicodeDecodeError:
        return []
    lines = text.splitlines()
    if not 1 <= loc.line <= len(lines):
        return []
    return derive(lines[loc.line - 1], step["relation"], loc.line, torch, _params(text, loc.line))[:MAX_RERUNS]


def _copy_with(snap: Snapshot, file: str, edit: Edit) -> Snapshot:
    """A copy of the snapshot (the files as this grade read them) with `edit` made in `file`."""
    lines = snap.data[file].decode().splitlines(keepends=True)
    lines[edit.line - 1] = edit.after + "\n"
    return snap.with_file(file, "".join(lines).encode())


def passes(copy: Snapshot, checks: list, ctx, worker_kw: dict, deadline: float) -> bool:
    """Whether every check passes on the repaired copy, run in a fresh child (the grader's Worker and StudentAPI)."""
    from ..api import Context, StudentAPI
    from ..sandbox.runner import Worker

    worker = Worker(copy, **worker_kw)
    worker.deadline, worker.budget_s = deadline, REPAIR_BUDGET_S
    try:
        api = StudentAPI(worker)
        here = Context(ctx.seed, ctx.ref, ctx.mistakes, copy, ctx.fixed_public)
        for c in checks:
            if time.monotonic() >= deadline:
                return False
            api.called, api.printed = [], ""
            with np.errstate(all="ignore"):
                c.fn(api, here.for_check(c.visibility))
        return True
    except Exception:  # noqa: BLE001 - a check that fails, raises or runs out of time: not confirmed
        return False
    finally:
        worker.close()


def confirm(loc, stage, failing: list, ctx, worker_kw: dict, torch: bool = False,
            budget_s: float = REPAIR_BUDGET_S) -> dict | None:
    """Try the derived edits of the parting line on copies of the grade's snapshot (`ctx.snapshot`); the first that
    makes every failing check pass is written on the located step as `repair` and returned; None (and nothing
    written) otherwise."""
    edits = edits_for(loc, ctx.snapshot, torch)
    if not edits or not failing:
        return None
    deadline = time.monotonic() + budget_s
    for edit in edits:
        if time.monotonic() >= deadline:
            return None
        copy = _copy_with(ctx.snapshot, loc.file, edit)
        if passes(copy, failing, ctx, worker_kw, deadline):
            n = len(failing)
            now = say.CONFIRMED_ONE.format(stage=stage) if n == 1 else say.CONFIRMED_ALL.format(count=n, stage=stage)
            said = say.CONFIRMED.format(words=edit.words, line=edit.line, passes=now)
            found = {"file": loc.file, "line": edit.line, "before": edit.before.strip(),
                     "after": edit.after.strip(), "words": edit.words, "said": said}
            _relation_step(loc)["repair"] = found
            return found
    return None


def repair_of(loc) -> dict | None:
    """The confirmed repair written on a located step, or None."""
    step = _relation_step(loc) if loc is not None else None
    return step.get("repair") if step else None


def confirm_first(done: dict, located: dict, ctx, public_only: bool, timeout: float,
                  zygote=None, left_s: float = REPAIR_BUDGET_S) -> None:
    """The hook (the grade loop, grade/__init__.py): for the first stage that failed on its own, when its parting
    line was named, try the derived edits within `left_s`, the grade's time left. Never raises; never changes a
    result."""
    from ..results import StageStatus
    from ..stages import BY_NAME, SUBMISSION_FILES, checks_to_run

    try:
        sr = next((s for s in done.values() if s.status == StageStatus.FAILED), None)
        loc = located.get(sr.stage) if sr else None
        if loc is None or loc.stage != sr.stage or _relation_step(loc) is None:
            return
        ids = {r.check.id for r in sr.checks if not r.passed}
        if any(r.not_run for r in sr.checks if not r.passed):
            return  # a check not run says nothing a rerun could confirm
        failing = [c for c in checks_to_run(sr.stage, public_only) if c.id in ids]
        torch = BY_NAME[sr.stage].torch
        kw = {"timeout": timeout, "reuse_memory": not torch, "files": SUBMISSION_FILES,
              "zygote": zygote.get("torch" if torch else "numpy") if isinstance(zygote, dict) else zygote}
        budget = min(REPAIR_BUDGET_S, left_s - 5.0)  # never into the grade's own last seconds
        if budget > 1.0:
            confirm(loc, sr.stage, failing, ctx, kw, torch, budget)
    except Exception:  # noqa: BLE001 - feedback only: the grade stands without it
        return
