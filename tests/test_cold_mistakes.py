"""Issue 42's regression sets: mistakes cold students wrote (each given only the student README and the stubs,
having read none of the catalogue, the tracer or the tests), each one change to that student's own correct stage
files (`tests/cold/<set>/correct/`, full marks): `fix.json` holds the change as (old, new) edits of that file, the
lines of the changed file that the fix changes, and the student's sentence of what the bug is. Set A (86
attempts) was written before the tracer's general relations; set D (80) in the stop that built the fallbacks'
mechanisms (the raise not made, the parameter never read, the loop bound), on which it was measured.

Every attempt fails its stage; no name is given that was not reviewed for that attempt (`names` in its fix.json:
the diagnoses and parting-line kinds the feedback gave when the set was taken in, each read against the student's
own sentence of what the bug is); and each set's figures (named, next step on a line the fix changes, a def line
given instead) do not fall below those measured (`figures.json`). Grading a set takes about a minute."""
import ast
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import grade, variant

pytestmark = pytest.mark.slow  # 86 grades: make test only (CONTRIBUTING.md)

COLD = Path(__file__).parent / "cold"
SETS = sorted(p.name for p in COLD.iterdir() if (p / "figures.json").exists())
NAMED = re.compile(r"Diagnosis |Confirmed|: your `|equals the reference|holds |are not the contract's|never reads its parameter")


KINDS = {"order": "in another order", "mask": "with the mask", "axis": "over axis", "written in place": "writes into",
         "scale": "with no scale", "left out": "left out", "operand": "an operand swapped", "factor": "factor",
         "call": "scaled_dot_product_attention call", "transpose": "transpos", "dtype": "float16"}


def kinds(res) -> set[str]:
    """What the feedback names: catalogue ids, a default called not the contract's, and the kind of each parting
    line's words (the relation found there: another order, a mask changed, another axis, ...)."""
    from autograder.feedback.advice import parting_words

    ids = {d for sr in res.stages.values() for d in sr.diagnoses}
    ids |= {r.diagnosis for sr in res.stages.values() for r in sr.checks if r.diagnosis}
    if "are not the contract's" in res.next_step:
        ids.add("default")
    if "never reads its parameter" in res.next_step:
        ids.add("unread")
    words = " ".join(filter(None, (parting_words(loc) for loc in res.located.values() if loc)))
    return ids | {kind for kind, said in KINDS.items() if said in words}


@pytest.fixture(scope="module", params=SETS)
def graded(request, tmp_path_factory) -> dict:
    """id -> (fix.json, results, terminal text), each attempt of one set graded on its own stage."""
    from autograder.report.terminal import terminal

    here, out = COLD / request.param, {}
    for attempt in sorted(p for p in (here / "mistakes").iterdir() if (p / "fix.json").exists()):
        fix = json.loads((attempt / "fix.json").read_text())
        sub = variant(tmp_path_factory.mktemp(attempt.name), {fix["file"]: fix["edits"]}, base=here / "correct")
        res = grade(sub, stages=[fix["stage"]])
        out[attempt.name] = (fix, res, terminal(res), sub)
    return {"set": here, "attempts": out}


@pytest.mark.parametrize("name", SETS)
def test_the_correct_files_get_full_marks(tmp_path, name):
    sub = tmp_path / "submission"
    shutil.copytree(COLD / name / "correct", sub)
    res = grade(sub)
    assert res.score + res.bonus_score == res.max_score + res.bonus_max_score


def test_every_attempt_fails_its_stage(graded):
    passed = [n for n, (fix, res, _, _) in graded["attempts"].items() if res.stages[fix["stage"]].status == "passed"]
    assert passed == []


def test_no_name_that_was_not_reviewed_for_the_attempt(graded):
    new = {n: sorted(kinds(res) - set(fix.get("names", []))) for n, (fix, res, _, _) in graded["attempts"].items()}
    assert {n: k for n, k in new.items() if k} == {}


def figures(graded) -> dict:
    named = on_line = def_line = 0
    for fix, res, text, sub in graded["attempts"].values():
        named += bool(NAMED.search(text))
        m = re.search(re.escape(fix["file"]) + r":(\d+)", res.next_step)
        line = int(m.group(1)) if m else None
        defs = {n.lineno for n in ast.walk(ast.parse((sub / fix["file"]).read_text()))
                if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        on_line += line in fix["fix_lines"]
        def_line += (line is None or line in defs) and line not in fix["fix_lines"]
    return {"attempts": len(graded["attempts"]), "named": named, "on_line": on_line, "def_line_or_none": def_line}


def test_the_sets_figures_do_not_fall(graded):
    kept = json.loads((graded["set"] / "figures.json").read_text())
    now = figures(graded)
    assert now["attempts"] == kept["attempts"]
    assert now["named"] >= kept["named"] and now["on_line"] >= kept["on_line"], (now, kept)
    assert now["def_line_or_none"] <= kept["def_line_or_none"], (now, kept)
