"""The stage declarations hold together (checked when the stages are imported), and a fault in a check's
own code is the kit's: reported as such, never blamed on the student, never costing a point."""
import dataclasses

import numpy as np
import pytest
from conftest import SOLUTIONS, grade, variant

from autograder import grade as grading
from autograder.declarations import Edit, Mistake, Stage
from autograder.outcomes import DeclarationError, GraderBug
from autograder.report.terminal import terminal
from autograder.results import Failure
from autograder.stages import BY_NAME, STAGES
from autograder.stages.validate import check_declarations

FIRST = STAGES[0]


def _toy(**changes) -> Stage:
    """A one-check bonus stage built like a stage module builds its own; `changes` replace its fields."""
    fields = dict(name="toy", number=max(s.number for s in STAGES) + 1, points=1, files=("toy.py",), bonus=True,
                  mistakes=(Mistake(id="toy-wrong", explanation="wrong", reread="the docstring",
                                    evidence="check:one", mutant=(Edit("toy.py", "a", "b"),)),))
    fields.update(changes)
    stage = Stage(**fields)

    @stage.check(points=1, kind="reference", visibility="public")
    def one(api, ctx):
        """one check"""

    return stage


def _error(stage: Stage) -> str:
    with pytest.raises(DeclarationError) as e:
        check_declarations([*STAGES, stage], solutions=None, mutants=True)
    return str(e.value)


def test_the_shipped_declarations_hold_together():
    check_declarations(STAGES)  # solutions/ and attn_ref/ beside the package: the full checks
    _toy_ok = _toy()
    check_declarations([*STAGES, _toy_ok], solutions=None)


def test_points_that_disagree_with_the_checks_name_the_stage_and_the_field():
    msg = _error(_toy(points=3))
    assert "stage 'toy'" in msg and "`points`" in msg and "declared 3" in msg and "add up to 1" in msg


@pytest.mark.parametrize("change, field", [
    (dict(mistakes=(Mistake(id="toy-wrong", explanation="x", reread="y", mutant=(Edit("toy.py", "a", "b"),)),)),
     "mistakes[0] (toy-wrong).evidence"),
    (dict(mistakes=(Mistake(id="toy-wrong", explanation="x", reread="y", evidence="check:one"),)),
     "mistakes[0] (toy-wrong).mutant"),
    (dict(mistakes=(Mistake(id="toy-wrong", explanation="x", reread="y", evidence="check:no_such_check",
                            mutant=(Edit("toy.py", "a", "b"),)),)), "mistakes[0] (toy-wrong).evidence"),
    (dict(calls=("no_such_stage",)), "calls"),
    (dict(number=FIRST.number), "number"),
    (dict(bonus=False), "worked_points"),
])
def test_each_inconsistency_names_its_field(change, field):
    assert f"`{field}`" in _error(_toy(**change))


def test_a_mistake_id_declared_twice_is_refused():
    taken = FIRST.mistakes[0]
    stage = _toy(mistakes=(dataclasses.replace(taken, stage=""),))
    msg = _error(stage)
    assert "mistakes[0]" in msg and f"also declared by stage {FIRST.name!r}" in msg


def test_a_mutant_whose_text_is_not_in_the_solution_is_refused():
    m = FIRST.mistakes[0]
    wrong = dataclasses.replace(m, mutant=(Edit(m.mutant[0].file, "text that is in no solution", "x"),))
    stage = dataclasses.replace(FIRST, mistakes=(wrong,), checks=list(FIRST.checks))
    with pytest.raises(DeclarationError, match=r"occurs 0 times in solutions/"):
        check_declarations([stage, *STAGES[1:]])


# ----------------------------------------------------------------------------------- grader faults --

def _broken(api, ctx):
    """a check whose own code has a typo"""
    x = np.ones((2, 3))
    got = api.softmax(x)
    return str(got.shape) + undefined_name  # noqa: F821 - the typo under test


def _reads_shape(api, ctx):
    """a check that reads .shape off the answer"""
    return str(api.softmax(np.ones((2, 3))).shape)


def _with_check(monkeypatch, fn) -> None:
    """Make the first stage's last check run `fn` (its points and rule unchanged)."""
    check = BY_NAME[FIRST.name].checks[-1]
    monkeypatch.setattr(check, "fn", fn)


def test_a_check_that_raises_is_the_kits_fault_and_costs_nothing(monkeypatch):
    monkeypatch.delenv(grading.STRICT)
    _with_check(monkeypatch, _broken)
    res = grade(SOLUTIONS, stages=[FIRST.name])
    sr = res.stages[FIRST.name]
    bad = [r for r in sr.checks if r.failure == Failure.GRADER]
    assert len(bad) == 1 and bad[0].forgiven
    assert sr.score == sr.max_score and sr.status == "passed"
    text = terminal(res)
    assert "bug in the kit, not in your code" in text and "NameError" in text and "report it" in text


def test_under_the_tests_a_check_that_raises_fails_loudly(monkeypatch):
    _with_check(monkeypatch, _broken)
    with pytest.raises(GraderBug, match="NameError"):
        grade(SOLUTIONS, stages=[FIRST.name])


def test_an_answer_the_check_cannot_read_is_still_the_students(monkeypatch, tmp_path):
    """The same kind of error, caused by what the student returned (a list has no .shape): the reference's
    answer standing in reads fine, so the check is the student's loss, as before."""
    _with_check(monkeypatch, _reads_shape)
    sub = variant(tmp_path, {"softmax.py": [("    return e / np.sum(e, axis=axis, keepdims=True)\n",
                                             "    return (e / np.sum(e, axis=axis, keepdims=True)).tolist()\n")]})
    res = grade(sub, stages=[FIRST.name])
    last = res.stages[FIRST.name].checks[-1]
    assert last.failure == Failure.UNREADABLE and last.score == 0


@pytest.mark.parametrize("where, ok", [("toy.py:Toy.go", True), ("toy.py:go", True), ("toy.py:helper", True),
                                       ("toy.py:Toy.stop", False), ("toy.py:Toy.go.inner", False),
                                       ("toy.py:missing", False), ("other.py:helper", False)])
def test_a_mistakes_where_must_name_a_function_or_method_of_its_file(tmp_path, where, ok):
    """`where` is what the next step opens: one that resolves to nothing used to match nothing, silently."""
    (tmp_path / "toy.py").write_text("def helper():\n    pass\n\n\nclass Toy:\n    def go(self):\n        pass\n")
    stage = _toy(mistakes=(Mistake(id="toy-wrong", explanation="wrong", reread="the docstring", where=where,
                                   evidence="check:one", mutant=(Edit("toy.py", "def helper", "def helper2"),)),))
    if ok:
        check_declarations([*STAGES, stage], solutions=tmp_path, mutants=False)
    else:
        with pytest.raises(DeclarationError, match=r"mistakes\[0\] \(toy-wrong\)\.where"):
            check_declarations([*STAGES, stage], solutions=tmp_path, mutants=False)


@pytest.mark.parametrize("function, ok", [("Toy.go", True), ("go", True), ("helper", True), ("Toy.stop", False),
                                          ("missing", False)])
def test_a_probes_function_must_be_one_the_solutions_define(tmp_path, function, ok):
    """Found by a stranger maintainer: a probe naming `Class.method` matched nothing in localisation, silently (the
    next step fell back to the def line). It is now refused at import when the solutions define no such function,
    and `Class.method` is followed like the bare name."""
    from autograder.declarations import Probe
    from autograder.feedback.localise import _body_lines
    from autograder.sandbox.safe_files import take

    (tmp_path / "toy.py").write_text("def helper():\n    pass\n\n\nclass Toy:\n    def go(self):\n        x = 1\n"
                                     "        return x\n")
    probe = Probe(name="toy_probe", file="toy.py", function=function, args=(), expected=lambda ref: None,
                  judge=lambda got, want, ref: None)
    stage = _toy(mistakes=(), probes=(probe,))
    if ok:
        check_declarations([*STAGES, stage], solutions=tmp_path, mutants=False)
    else:
        with pytest.raises(DeclarationError, match=r"field `probes`: probe toy_probe: solutions/toy.py defines no"):
            check_declarations([*STAGES, stage], solutions=tmp_path, mutants=False)
    if function.startswith("Toy.go") or function == "go":
        assert [n for n, _ in _body_lines(take(tmp_path), "toy.py", function)] == [7, 8]


def test_a_class_method_where_opens_at_the_methods_def_line(tmp_path):
    from autograder.feedback.sources import def_line_number
    from autograder.sandbox.safe_files import take

    (tmp_path / "kv_cache.py").write_text("class KVCache:\n    def __init__(self):\n        pass\n\n"
                                          "    def append(self, k, v):\n        return k, v\n")
    assert def_line_number(take(tmp_path), "kv_cache.py", "KVCache.append") == 5
    assert def_line_number(take(tmp_path), "kv_cache.py", "append") == 5
    assert def_line_number(take(tmp_path), "kv_cache.py", "KVCache") == 1


def test_a_checks_title_is_its_docstrings_first_paragraph_whole():
    """A title wrapped over two lines of its docstring used to be cut at the first line's end."""
    stage = _toy()

    @stage.check(points=0, kind="reference", visibility="public")
    def two(api, ctx):
        """a title long enough that it wraps onto
        a second line of the docstring

        and a paragraph that is not the title"""

    assert stage.checks[-1].doc == "a title long enough that it wraps onto a second line of the docstring"
