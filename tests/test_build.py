"""exercises/ is generated from solutions/; `make submit` packs a gradable zip."""
import json
import shutil
import zipfile

import pytest
from conftest import EXERCISES, ROOT, SOLUTIONS, grade, variant

from autograder.instructor.make_exercises import generate, stub_source
from autograder.sandbox.submission import locate, make_zip

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
    from autograder.sandbox.submission import survey

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
    from autograder.sandbox.submission import survey

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
