"""A measured check's pass kept between grades of the same files (grade/kept.py): taken back instead of measuring
again once measured twice in a row, for a bounded number of grades and time, said in the report, measured again after
any edit, dropped when a measurement fails, and only where no child can write the cache. The softmax stage's measured
check (one numpy child) stands for all of them."""
import dataclasses
import json
import subprocess
import sys

import pytest
from conftest import ROOT, grade, variant

from autograder.grade import kept
from autograder.outcomes import GraderBug
from autograder.report.terminal import terminal
from autograder.sandbox.safe_files import take
from autograder.stages import BY_NAME

MEASURED = "softmax/no_library_softmax"
BALLAST = {"softmax.py": [("    scores = np.asarray(scores)\n",
                           "    scores = np.asarray(scores)\n    np.ones(12_000_000).sum()\n")]}  # 96 MiB per call


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "attention-kit"


def _measured(res):
    return next(r for r in res.stages["softmax"].checks if r.check.id == MEASURED)


def _softmax(sub, **kw):
    return _measured(grade(sub, ["softmax"], **kw))


def _spy_measurements(monkeypatch) -> list:
    """The stages whose measuring children the grade starts."""
    import autograder.grade as g

    started, real = [], g.start_measurements
    monkeypatch.setattr(g, "start_measurements", lambda api, stage, seed=0: (started.append(stage.name),
                                                                             real(api, stage, seed)))
    return started


def _kept_file(cache):
    (only,) = cache.glob("pass-*")
    return only


def test_every_cost_rule_is_a_measured_check():
    """The checks that take the stages' measurements are the ones declared measured (what kept.py may keep)."""
    measured = sorted(c.id for s in BY_NAME.values() for c in s.checks if c.measured)
    assert measured == ["fused/module_fused_path", "fused/no_quadratic_memory", "kv_cache/decode_step_cost_linear",
                        MEASURED, "tiled/tiled_memory_linear"]


def test_two_passes_in_a_row_are_taken_back_without_measuring(tmp_path, cache, monkeypatch):
    sub = variant(tmp_path, {})
    first = grade(sub, ["softmax"], keep=True)
    assert _measured(first).passed and not _measured(first).kept_at
    started = _spy_measurements(monkeypatch)
    assert not _softmax(sub, keep=True).kept_at and started == ["softmax"]  # one pass is not enough: measured again
    again = grade(sub, ["softmax"], keep=True)
    assert _measured(again).passed and _measured(again).kept_at
    assert started == ["softmax"]  # no measuring child: the kept pass stands for it
    assert again.stages["softmax"].score == first.stages["softmax"].score
    said = "Not measured again: softmax (no_library_softmax)."
    assert said in terminal(again) and "FRESH=1" in terminal(again) and "Not measured again" not in terminal(first)
    from autograder.report.gradescope_json import summary
    from autograder.report.html import render

    assert all("Not measured again: softmax (no" in out for out in (summary(again), render(again)))  # JSON=, report
    assert _measured(again).as_json()["kept_at"] == _measured(again).kept_at


def test_a_kept_pass_is_measured_again_after_so_many_grades_or_so_long(tmp_path, cache, monkeypatch):
    """Code whose cost changes with the clock (a stranger's) stays stale for a bounded while only, and each while
    takes two measured passes in a row (a second stranger: one lucky pass bought the next while)."""
    sub = variant(tmp_path, {})
    monkeypatch.setattr(kept, "REUSES", 2)
    assert [bool(_softmax(sub, keep=True).kept_at) for _ in range(7)] == [False, False, True, True, False, False, True]
    monkeypatch.setattr(kept, "MAX_AGE_S", 0.0)
    assert not _softmax(sub, keep=True).kept_at


def test_any_edit_measures_again(tmp_path, cache, monkeypatch):
    """Every file counts, not only those softmax.py imports: a second stranger loaded another stage's file through
    numpy's add_newdoc, which no import statement names."""
    sub = variant(tmp_path, {})
    for _ in range(2):
        grade(sub, ["softmax"], keep=True)
    started = _spy_measurements(monkeypatch)
    assert _softmax(sub, keep=True).kept_at and started == []
    (sub / "masking.py").write_text((sub / "masking.py").read_text() + "\n# an edit in another stage's file\n")
    r = _softmax(sub, keep=True)
    assert started == ["softmax"] and not r.kept_at and r.passed


def test_watch_s_passes_are_its_own(tmp_path, cache):
    """make watch forks both sides from one torch server, where a softmax that loads torch is not seen doing it: its
    passes are not make grade's (a second stranger's watch pass was taken back by make grade)."""
    from conftest import _kept_servers

    sub = variant(tmp_path, {})
    for _ in range(2):
        grade(sub, ["softmax"], keep=True)
    assert _softmax(sub, keep=True).kept_at
    one = _kept_servers()["torch"]  # what watch forks every child from
    assert not _softmax(sub, keep=True, zygote=one).kept_at


def test_another_seed_or_grader_measures_again(tmp_path, cache, monkeypatch):
    sub = variant(tmp_path, {})
    for _ in range(2):
        grade(sub, ["softmax"], keep=True)
    assert not _softmax(sub, seed=3, keep=True).kept_at
    monkeypatch.setattr(kept, "grader_digest", lambda: "another grader")
    assert not _softmax(sub, keep=True).kept_at


def test_a_failure_is_never_kept(tmp_path, cache):
    """A softmax that makes 96 MiB when called fails the memory check in every grade, none of them kept."""
    sub = variant(tmp_path, BALLAST)
    for _ in range(3):
        r = _softmax(sub, keep=True)
        assert not r.passed and not r.kept_at, r.message
    assert json.loads(_kept_file(cache).read_text())["passes"] == 0  # only the failures, counted


def test_a_measurement_that_fails_drops_what_was_kept(tmp_path, cache):
    """Found by a stranger: FRESH=1 failed, and the next grade took the older pass back. Here the pass is what two
    earlier grades would have kept of these files (code that changed with the clock); FRESH=1 fails and drops it."""
    sub = variant(tmp_path, BALLAST)
    from conftest import _kept_servers

    keeper = kept.Keeper(take(sub), False, 10.0, started=kept.sides(None, _kept_servers()))  # the grades' own
    check = next(c for c in BY_NAME["softmax"].checks if c.id == MEASURED)
    for _ in range(2):
        keeper.keep(check, 0, "", (MEASURED,))
    assert _softmax(sub, keep=True).kept_at  # taken back (what the clock's code would have shown)
    r = _softmax(sub, keep=True, fresh=True)
    assert not r.passed and json.loads(_kept_file(cache).read_text())["passes"] == 0
    assert not _softmax(sub, keep=True).passed


def test_each_failure_asks_for_more_passes_in_a_row(tmp_path, cache):
    """Found by a third stranger: a chunked fused call with one row in 512 wrong passed 8 of 30 fresh grades, and
    with two passes in a row enough showed a pass in 23 of 30. Each failure of the same files' check asks two more."""
    keeper = kept.Keeper(take(variant(tmp_path, {})), False, 10.0)
    check = next(c for c in BY_NAME["softmax"].checks if c.id == MEASURED)
    shown = []
    for event in "PP?F PP?PP? F PPPP?PPP?":
        if event == "P":
            keeper.keep(check, 0, "", ())
        elif event == "F":
            keeper.drop(check, 0)
        elif event == "?":
            shown.append(keeper.taken(check, 0) is not None)
    assert shown == [True, False, True, False, True]


def test_fresh_measures_again_and_keeps_what_it_measured(tmp_path, cache, monkeypatch):
    """Found by a stranger student: after FRESH=1 the next grade took back the older pass, its older figures."""
    sub = variant(tmp_path, {})
    grade(sub, ["tiled"], keep=True)
    first = _kept_file(cache).stat().st_mtime_ns
    started = _spy_measurements(monkeypatch)
    fresh = next(r for r in grade(sub, ["tiled"], keep=True, fresh=True).stages["tiled"].checks if r.check.measured)
    assert started == ["tiled"] and fresh.passed and not fresh.kept_at
    assert _kept_file(cache).stat().st_mtime_ns > first  # what FRESH=1 measured replaced it, a second pass in a row
    again = next(r for r in grade(sub, ["tiled"], keep=True).stages["tiled"].checks if r.check.measured)
    assert again.kept_at and again.note == fresh.note and started == ["tiled"]


GOOD = {"note": "", "called": [], "at": "2026-12-07 12:00:00", "passes": 2, "uses": 0, "fails": 0}


@pytest.mark.parametrize("written", [
    json.dumps({**GOOD, "called": None}), json.dumps({**GOOD, "called": 5}), "[1]", "not json", "",
    json.dumps({**GOOD, "uses": -1_000_000}), json.dumps({**GOOD, "at": "\x1b]0;pwned\x07"}), "fifo", "folder", "link"])
def test_a_kept_file_not_written_by_the_grader_costs_nothing(tmp_path, cache, written):
    """Found by strangers: a kept file whose `called` was null broke every numpy stage ("the grading run broke"), a
    pipe in its place hung the grade, a count out of range lasted the hour, an escape sequence reached the terminal."""
    import os
    import time

    sub = variant(tmp_path, {})
    for _ in range(2):
        grade(sub, ["softmax"], keep=True)
    path = _kept_file(cache)
    path.unlink()
    if written == "fifo":
        os.mkfifo(path)
    elif written == "folder":
        path.mkdir()
    elif written == "link":
        path.symlink_to("/dev/zero")
    else:
        path.write_text(written.replace('"passes"', f'"t": {time.time()}, "passes"'))
    res = grade(sub, ["softmax", "masking"], keep=True)
    assert res.stages["softmax"].score == res.stages["softmax"].max_score and not _measured(res).kept_at
    assert res.stages["masking"].score == res.stages["masking"].max_score
    assert json.loads(_kept_file(cache).read_text())["passes"] == 1  # measured, and kept afresh


def test_nothing_kept_unless_asked_or_where_a_child_could_write_it(tmp_path, cache, monkeypatch):
    sub = variant(tmp_path, {})
    grade(sub, ["softmax"])  # Gradescope's, regrade's, the notebooks' grades: keep=False
    assert list(cache.glob("pass-*")) == []
    from autograder.sandbox import launchers

    monkeypatch.setattr(launchers, "contained", lambda: False)  # children in plain view (no namespaces, no own user)
    grade(sub, ["softmax"], keep=True)
    assert list(cache.glob("pass-*")) == []


def test_make_grade_keeps_fresh_measures_and_classroom_never_keeps(tmp_path, cache):
    """The student's command: the third grade of unchanged files says its cost check was kept, FRESH=1's does not; a
    Classroom run (its points) is always measured and keeps nothing."""
    sub = variant(tmp_path, {})

    def run(*extra):
        return subprocess.run([sys.executable, "-m", "autograder", "grade", "--submission", str(sub), "--stage",
                               "softmax", *extra], cwd=ROOT, capture_output=True, text=True, timeout=300).stdout

    run("--classroom", str(tmp_path / "classroom.txt"))
    assert list(cache.glob("pass-*")) == []
    assert "Not measured again" not in run() + run()
    assert "Not measured again: softmax (no_library_softmax)." in run()
    assert "Not measured again" not in run("--fresh")
    assert "$(if $(FRESH),--fresh)" in (ROOT / "student.mk").read_text()  # make grade FRESH=1 passes it


def test_a_check_that_measures_undeclared_is_the_grader_s_bug(tmp_path):
    """Only a check declared measured may be kept; one that takes a measurement without the declaration fails the
    tests' strict mode, naming it (so a new cost rule cannot be left measured in every grade by mistake)."""
    stage = BY_NAME["softmax"]
    i = next(i for i, c in enumerate(stage.checks) if c.id == MEASURED)
    declared = stage.checks[i]
    stage.checks[i] = dataclasses.replace(declared, measured=False)
    try:
        with pytest.raises(GraderBug, match="no_library_softmax took a measurement"):
            grade(variant(tmp_path, {}), ["softmax"])
    finally:
        stage.checks[i] = declared
