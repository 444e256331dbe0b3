"""A measured check's pass kept between grades of the very same files (grade/kept.py): taken back instead of measuring
again, said in the report, measured again after any edit, never kept when it fails, and only where no child can write
the cache. The softmax stage's measured check (one numpy child) stands for all of them."""
import subprocess
import sys

import pytest
from conftest import ROOT, grade, variant

from autograder.grade import kept
from autograder.report.terminal import terminal
from autograder.stages import BY_NAME

MEASURED = "softmax/no_library_softmax"


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "attention-kit"


def _measured(res):
    return next(r for r in res.stages["softmax"].checks if r.check.id == MEASURED)


def _spy_measurements(monkeypatch) -> list:
    """The stages whose measuring children the grade starts."""
    import autograder.grade as g

    started, real = [], g.start_measurements
    monkeypatch.setattr(g, "start_measurements", lambda api, stage, seed=0: (started.append(stage.name),
                                                                             real(api, stage, seed)))
    return started


def test_every_cost_rule_is_a_measured_check():
    """The checks that take the stages' measurements are the ones declared measured (what kept.py may keep)."""
    measured = sorted(c.id for s in BY_NAME.values() for c in s.checks if c.measured)
    assert measured == ["fused/module_fused_path", "fused/no_quadratic_memory", "kv_cache/decode_step_cost_linear",
                        MEASURED, "tiled/tiled_memory_linear"]


def test_a_pass_is_kept_and_taken_back_without_measuring(tmp_path, cache, monkeypatch):
    sub = variant(tmp_path, {})
    first = grade(sub, ["softmax"], keep=True)
    assert _measured(first).passed and not _measured(first).kept_at
    assert len(list(cache.glob("pass-*"))) == 1
    started = _spy_measurements(monkeypatch)
    again = grade(sub, ["softmax"], keep=True)
    assert _measured(again).passed and _measured(again).kept_at
    assert started == []  # no measuring child: the kept pass stands for it
    assert again.stages["softmax"].score == first.stages["softmax"].score
    assert "were not measured again" in terminal(again) and "FRESH=1" in terminal(again)
    assert "not measured again" not in terminal(first)
    assert _measured(again).as_json()["kept_at"] == _measured(again).kept_at


def test_an_edit_of_a_file_it_loads_measures_again_and_only_that(tmp_path, cache, monkeypatch):
    sub = variant(tmp_path, {})
    grade(sub, ["softmax"], keep=True)
    started = _spy_measurements(monkeypatch)
    (sub / "masking.py").write_text((sub / "masking.py").read_text() + "\n# softmax.py does not load masking.py\n")
    assert _measured(grade(sub, ["softmax"], keep=True)).kept_at and started == []
    (sub / "softmax.py").write_text((sub / "softmax.py").read_text() + "\n# an edit, however small\n")
    res = grade(sub, ["softmax"], keep=True)
    assert started == ["softmax"] and not _measured(res).kept_at and _measured(res).passed


def test_the_files_a_measured_check_loads_follow_the_imports(tmp_path):
    """kv_cache's decode runs module.py, which imports fused.py and kv_cache.py; a file that can load another without
    an import statement makes every file count."""
    from autograder.sandbox.safe_files import take

    sub = variant(tmp_path, {})
    assert kept.read_by("kv_cache", take(sub)) == ["fused.py", "kv_cache.py", "module.py"]
    assert kept.read_by("tiled", take(sub)) == ["tiled.py"]
    (sub / "fused.py").write_text((sub / "fused.py").read_text() + "\nimport importlib\n")
    assert kept.read_by("kv_cache", take(sub)) == sorted(p.name for p in sub.glob("*.py") if p.name != "__init__.py")
    assert kept.read_by("tiled", take(sub)) == ["tiled.py"]


def test_another_seed_or_grader_measures_again(tmp_path, cache, monkeypatch):
    sub = variant(tmp_path, {})
    grade(sub, ["softmax"], keep=True)
    assert not _measured(grade(sub, ["softmax"], seed=3, keep=True)).kept_at
    monkeypatch.setattr(kept, "grader_digest", lambda: "another grader")
    assert not _measured(grade(sub, ["softmax"], keep=True)).kept_at


def test_a_failure_is_never_kept(tmp_path, cache):
    """A softmax that makes 96 MiB when called fails the memory check in every grade, none of them kept."""
    sub = variant(tmp_path, {"softmax.py": [("    scores = np.asarray(scores)\n",
                                             "    scores = np.asarray(scores)\n    np.ones(12_000_000).sum()\n")]})
    for _ in range(2):
        r = _measured(grade(sub, ["softmax"], keep=True))
        assert not r.passed and not r.kept_at, r.message
    assert list(cache.glob("pass-*")) == []


def test_nothing_kept_unless_asked_or_where_a_child_could_write_it(tmp_path, cache, monkeypatch):
    sub = variant(tmp_path, {})
    grade(sub, ["softmax"])  # Gradescope's, regrade's, the notebooks' grades: keep=False
    assert list(cache.glob("pass-*")) == []
    from autograder.sandbox import launchers

    monkeypatch.setattr(launchers, "contained", lambda: False)  # children in plain view (no namespaces, no own user)
    grade(sub, ["softmax"], keep=True)
    assert list(cache.glob("pass-*")) == []


def test_make_grade_keeps_and_fresh_measures_again(tmp_path, cache):
    """The student's command: the second grade of unchanged files says its cost check was kept, FRESH=1's does not."""
    sub = variant(tmp_path, {})

    def run(*extra):
        return subprocess.run([sys.executable, "-m", "autograder", "grade", "--submission", str(sub), "--stage",
                               "softmax", *extra], cwd=ROOT, capture_output=True, text=True, timeout=300).stdout

    assert "not measured again" not in run()
    assert "measured checks of softmax (memory or CPU time, read from outside your code) passed" in run()
    assert "not measured again" not in run("--fresh")
    assert "$(if $(FRESH),--fresh)" in (ROOT / "student.mk").read_text()  # make grade FRESH=1 passes it


def test_a_check_that_measures_undeclared_is_the_grader_s_bug(tmp_path):
    """Only a check declared measured may be kept; one that takes a measurement without the declaration fails the
    tests' strict mode, naming it (so a new cost rule cannot be left measured in every grade by mistake)."""
    import dataclasses

    from autograder.outcomes import GraderBug

    stage = BY_NAME["softmax"]
    i = next(i for i, c in enumerate(stage.checks) if c.id == MEASURED)
    declared = stage.checks[i]
    stage.checks[i] = dataclasses.replace(declared, measured=False)
    try:
        with pytest.raises(GraderBug, match="no_library_softmax took a measurement"):
            grade(variant(tmp_path, {}), ["softmax"])
    finally:
        stage.checks[i] = declared


def test_fresh_measures_again_and_keeps_what_it_measured(tmp_path, cache, monkeypatch):
    """Found by a stranger student: after FRESH=1 the next grade took back the older pass, its older figures."""
    sub = variant(tmp_path, {})
    grade(sub, ["tiled"], keep=True)
    first = kept_file(cache).stat().st_mtime_ns
    started = _spy_measurements(monkeypatch)
    fresh = next(r for r in grade(sub, ["tiled"], keep=True, fresh=True).stages["tiled"].checks if r.check.measured)
    assert started == ["tiled"] and fresh.passed and not fresh.kept_at
    assert kept_file(cache).stat().st_mtime_ns > first  # what FRESH=1 measured replaced it
    again = next(r for r in grade(sub, ["tiled"], keep=True).stages["tiled"].checks if r.check.measured)
    assert again.kept_at and again.note == fresh.note and started == ["tiled"]


def kept_file(cache):
    (only,) = cache.glob("pass-*")
    return only
