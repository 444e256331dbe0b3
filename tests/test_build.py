"""exercises/ is generated from solutions/; `make submit` packs a gradable zip; a rebuild of a channel gives the
tree one build gives."""
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import zipfile
from contextlib import closing
from pathlib import Path

import pytest
from conftest import EXERCISES, ROOT, SOLUTIONS, copy_repo, grade, share_venv, variant

from autograder.instructor.make_exercises import generate, stub_source
from autograder.submission import locate, make_zip

pytestmark = pytest.mark.slow  # builds or runs a whole channel: `make test` only (CONTRIBUTING.md)


def test_exercises_match_generated_byte_for_byte():
    files = generate()
    assert sorted(files) == sorted(p.name for p in EXERCISES.glob("*.py"))
    for name, body in files.items():
        assert (EXERCISES / name).read_bytes() == body.encode(), f"exercises/{name} is stale: run make exercises"


def test_exercises_hold_no_solution_code():
    for path in SOLUTIONS.glob("*.py"):
        sol = path.read_text()
        ex = (EXERCISES / path.name).read_text()
        assert "BEGIN SOLUTION" not in ex
        inside = False
        for line in sol.splitlines():
            if "# BEGIN SOLUTION" in line:
                inside = True
            elif "# END SOLUTION" in line:
                inside = False
            elif inside and line.strip() and not line.strip().startswith("#"):
                assert line not in ex.splitlines(), f"{path.name}: solution line leaked: {line!r}"


def test_stub_names_its_stage_and_function():
    src = "def f(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
    assert stub_source(src, "masking.py") == 'def f(x):\n    raise NotImplementedError("masking: write this part of f")\n'
    src = "class C:\n    def g(self):\n        # BEGIN SOLUTION stage=fused\n        pass\n        # END SOLUTION\n"
    assert 'NotImplementedError("fused: write this part of C.g")' in stub_source(src, "module.py")


def test_submit_zip_round_trip(tmp_path):
    zpath = tmp_path / "submission.zip"
    assert make_zip(SOLUTIONS, zpath) == []
    with zipfile.ZipFile(zpath) as z:
        manifest = json.loads(z.read("manifest.json"))
        assert "softmax.py" in z.namelist() and len(manifest["files"]["softmax.py"]) == 64
    res = grade(locate(zpath), stages=["softmax", "scaling"])
    assert res.score == res.max_score


def test_submit_reports_missing_and_unparsable(tmp_path):
    sub = variant(tmp_path, {"masking.py": [("def causal_mask(", "def causal_mask(((")]})
    (sub / "heads.py").unlink()
    problems = make_zip(sub, tmp_path / "s.zip")
    assert any(p.startswith("heads.py: missing") for p in problems)
    assert any(p.startswith("masking.py:") and "does not parse" in p for p in problems)


def test_locate_finds_nested_exercises(tmp_path):
    (tmp_path / "repo" / "exercises").mkdir(parents=True)
    (tmp_path / "repo" / "exercises" / "softmax.py").write_text("")
    assert locate(tmp_path / "repo") == tmp_path / "repo" / "exercises"
    assert locate(ROOT) == ROOT / "exercises"


def test_gpu_check_without_cuda_claims_nothing():
    import subprocess
    import sys

    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: run `make gpu-check` itself")
    p = subprocess.run([sys.executable, "bench/gpu_check.py"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "no CUDA device" in p.stdout and "nothing was checked" in p.stdout


def test_gpu_check_script_runs_its_checks_on_cpu():
    """The same code the GPU run uses, on the CPU in float32: catches a broken script without a GPU."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "bench/gpu_check.py", "--cpu-smoke"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("ok ") == 5
    assert "fused kernel torch.float32: True ['aten::_scaled_dot_product_flash_attention_for_cpu']" in p.stdout
    assert p.stdout.count("naive softmax(QK^T)V") == 2 and p.stdout.count("fused (solutions)") == 2


def test_gpu_check_proof_fails_for_a_hand_written_fused_call(tmp_path):
    """Code that never reaches sdpa runs fine with the math backend excluded: the profile must say so."""
    import subprocess
    import sys

    from conftest import MUTANTS, variant

    sub = variant(tmp_path, MUTANTS["fused-not-fused"][0])
    p = subprocess.run([sys.executable, "bench/gpu_check.py", "--cpu-smoke", "--submission", str(sub)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "fused kernel torch.float32: False no fused attention op ran" in p.stdout


def test_survey_grades_the_shallowest_level_and_names_the_rest(tmp_path):
    from autograder.submission import survey

    up = tmp_path / "up"
    shutil.copytree(SOLUTIONS, up / "exercises")
    shutil.copytree(SOLUTIONS, up / "backup")  # the same level: found twice, exercises/ wins
    (up / "exercises" / "old").mkdir()
    (up / "exercises" / "old" / "softmax.py").write_text("stale")  # deeper: ignored
    found = survey(up)
    assert found.folder == up / "exercises"
    note = next(n for n in found.notes if n.startswith("softmax.py"))
    assert note == ("softmax.py is in the upload more than once: graded exercises/softmax.py, ignored "
                    "backup/softmax.py, exercises/old/softmax.py")


def test_a_level_spread_over_folders_is_merged(tmp_path):
    from autograder.submission import survey

    up = tmp_path / "up"
    for name in ("softmax.py", "scaling.py"):
        (up / name.removesuffix(".py")).mkdir(parents=True)
        shutil.copy2(SOLUTIONS / name, up / name.removesuffix(".py") / name)
    found = survey(up)
    assert sorted(p.name for p in found.folder.iterdir()) == ["scaling.py", "softmax.py"]
    assert found.shown == {"scaling.py": "scaling/scaling.py", "softmax.py": "softmax/softmax.py"}
    res = grade(found.folder, stages=["softmax", "scaling"])
    assert res.score == res.max_score


def test_cli_prints_which_copy_it_graded(tmp_path):
    import subprocess
    import sys

    z = tmp_path / "up.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.write(SOLUTIONS / "softmax.py", "softmax.py")
        f.write(ROOT / "exercises" / "softmax.py", "old/softmax.py")
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", "--submission", str(z), "--stage", "softmax",
                        "--require-pass", "softmax"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "note: softmax.py is in the upload more than once: graded softmax.py, ignored old/softmax.py" in p.stdout
    assert "12/12" in p.stdout and "attn-sub-" not in p.stdout


# ------------------------------------------------------------------ rebuilds are clean (issue 44.4) --

UUID = re.compile(rb"[0-9a-f]{32}")  # nbgrader's row ids: new ones each time a row is made


DATED = re.compile(r"_\d{4}_\d\d_\d\dT[\d_]+(?=\.zip$)")  # otter's zip is named after the time it was made


def contents(data: bytes, name: str) -> dict[str, str]:
    """name -> sha256 of its bytes; a zip or wheel opened into its members' contents (name!member), so the
    dates inside a zip are not compared, only what it holds; a notebook without its cells' ids (otter assign
    draws those at random)."""
    name = DATED.sub("_<date>", name)
    if name.endswith(".ipynb"):
        notebook = json.loads(data)
        for cell in notebook["cells"]:
            cell.pop("id", None)
        data = json.dumps(notebook, sort_keys=True).encode()
    if not name.endswith((".zip", ".whl")):
        return {name: hashlib.sha256(data).hexdigest()}
    out = {}
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for info in z.infolist():
            out |= contents(z.read(info), f"{name}!{info.filename}")
    return out


def tree(root: Path) -> dict[str, str]:
    """Every file under root, by relative path, with its contents (see contents); an SQLite database as its
    SQL dump with row ids masked (nbgrader's gradebook.db: its ids are random, its rows are what counts)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix == ".db":
            with closing(sqlite3.connect(p)) as db:
                dump = "\n".join(db.iterdump()).encode()
            out[str(p.relative_to(root))] = hashlib.sha256(UUID.sub(b"<id>", dump)).hexdigest()
        elif p.is_file():
            out |= contents(p.read_bytes(), str(p.relative_to(root)))
    return out


def assert_same_tree(first: dict[str, str], again: dict[str, str]) -> None:
    assert sorted(set(first) ^ set(again)) == [], "files in one build and not the other"
    assert [k for k in first if first[k] != again[k]] == [], "files whose contents differ between the builds"


@pytest.fixture(scope="module")
def instructor_repo(tmp_path_factory):
    return share_venv(copy_repo(tmp_path_factory.mktemp("rebuild") / "repo"), ".instructor")


def make_target(repo: Path, target: str) -> None:
    # -o: the venv is set up already; its markers' ages must not start an install
    p = subprocess.run(["make", "-s", "-o", ".venv/.instructor", "-o", ".venv/.student", target], cwd=repo,
                       capture_output=True, text=True, timeout=900, env={**os.environ, "NO_COLOR": "1"})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


def rebuilt(repo: Path, target: str, built: str, leftovers) -> tuple[dict, dict]:
    """(tree after one `make target`, tree after a second one), with leftovers(folder) run on the first
    build's output between them: what a rebuild must not keep."""
    make_target(repo, target)
    first = tree(repo / built)
    leftovers(repo / built)
    make_target(repo, target)
    return first, tree(repo / built)


def stray(folder: Path) -> None:
    (folder / "stray.txt").write_text("left by the last build")


def test_make_release_twice_gives_the_first_build(instructor_repo):
    first, again = rebuilt(instructor_repo, "release", "dist/student", stray)
    assert "Makefile" in first and "autograder/fixtures.json" in first
    assert_same_tree(first, again)


def test_make_autograder_twice_gives_the_same_zip_byte_for_byte(instructor_repo):
    zip_path = instructor_repo / "dist" / "autograder.zip"
    make_target(instructor_repo, "autograder")
    data = zip_path.read_bytes()
    os.utime(instructor_repo / "autograder" / "cli.py")  # a newer file date changes nothing inside the zip
    make_target(instructor_repo, "autograder")
    first = contents(data, "autograder.zip")
    assert "autograder.zip!course_secret" in first and first == contents(zip_path.read_bytes(), "autograder.zip")
    assert zip_path.read_bytes() == data  # fixed member dates: the same bytes, so a checksum shows no change


def course_state(course: Path) -> None:
    """What a used course holds beyond the build: a generated release, the log, a stray file (no students' work)."""
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "nbgrader"), "generate_assignment", "attention", "--force"],
                       cwd=course, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"})
    assert p.returncode == 0 and (course / "release" / "attention").is_dir(), p.stderr[-2000:]
    stray(course)


def test_make_nbgrader_twice_gives_the_course_of_one_build(instructor_repo):
    first, again = rebuilt(instructor_repo, "nbgrader", "dist/nbgrader", course_state)
    assert "gradebook.db" in first and "source/attention/attention.ipynb" in first
    assert_same_tree(first, again)


def test_make_otter_twice_gives_the_assignment_of_one_build(instructor_repo):
    first, again = rebuilt(instructor_repo, "otter", "dist/otter", stray)
    assert any(k.startswith("result/autograder/") and "!" in k for k in first), sorted(first)[:20]
    assert_same_tree(first, again)


def test_a_rebuild_keeps_students_work_and_the_checkout(tmp_path):
    """A rebuild empties its folder; where that folder holds nbgrader's submitted/ work, or the checkout
    itself, it stops with one sentence and removes nothing."""
    from autograder.instructor.build import NotABuild, fresh
    from autograder.instructor.notebooks import main, nbgrader_course

    course = tmp_path / "course"
    (course / "submitted" / "alice" / "attention").mkdir(parents=True)
    (course / "submitted" / "alice" / "attention" / "attention.ipynb").write_text("{}")
    with pytest.raises(NotABuild, match="students' work"):
        nbgrader_course(course)
    assert main(["nbgrader", "--out", str(course)]) == 2
    assert (course / "submitted" / "alice" / "attention" / "attention.ipynb").exists()
    for folder in (ROOT, ROOT.parent, Path.home()):
        with pytest.raises(NotABuild, match="holds this checkout or your home folder"):
            fresh(folder)
    assert (ROOT / "Makefile").exists()
