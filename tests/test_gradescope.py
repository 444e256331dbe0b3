"""The Gradescope zip, run locally in a root laid out like Gradescope's, against hostile submissions.

Each test builds a submission from the solutions with one hostile change, runs the zip's
run_autograder, and checks the score, that untouched stages keep their points, that
results.json is the grader's, and that no process of the submission outlives the grading.
"""
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, grade, variant

from autograder.article_numbers import X
from autograder.instructor.build import autograder_zip, gradescope_local
from autograder.launchers import separate_user_possible

SECRET = "test-course-secret"
SOFTMAX_HEAD = '"""Stage 1: a numerically stable softmax.'
SM_BODY = "    scores = np.asarray(scores)\n"
WRONG_SOFTMAX = ("    e = np.exp(scores - top)  # same shape as scores; the largest entry becomes exp(0) = 1\n",
                 "    e = np.exp(scores - top) ** 0.5\n")
needs_separate_user = pytest.mark.skipif(not separate_user_possible(),
                                         reason="needs root and an interpreter other users can run")


@pytest.fixture(scope="module")
def zip_path(tmp_path_factory):
    return autograder_zip(tmp_path_factory.mktemp("zip") / "autograder.zip", SECRET)


def run_zip(zip_path, submission, tmp_path):
    out = gradescope_local(submission, zip_path, tmp_path / "gs", python=sys.executable)
    data = json.loads(out.read_text())
    return data, {n: s["score"] for n, s in data["extra_data"]["stages"].items()}


def survivors(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                pass
    return found


FULL = {"softmax": 12, "dot_products": 8, "projections": 8, "scaling": 10, "masking": 16, "heads": 16,
        "kv_cache": 16, "fused": 14, "tiled": 10, "backward": 10, "dropout": 5, "costs": 5}


def test_solutions_full_marks_and_format(zip_path, tmp_path):
    data, scores = run_zip(zip_path, ROOT / "solutions", tmp_path)
    assert data["score"] == 100 and scores == FULL
    vis = {t["extra_data"]["visibility"]: t["visibility"] for t in data["tests"]}
    assert vis == {"public": "visible", "hidden": "after_published"}


def test_submit_zip_and_exercises_folder_are_found(zip_path, tmp_path):
    from autograder.submission import make_zip

    z = tmp_path / "up" / "submission.zip"
    z.parent.mkdir()
    make_zip(ROOT / "solutions", z)
    data, _ = run_zip(zip_path, z, tmp_path)
    assert data["score"] == 100
    data, _ = run_zip(zip_path, ROOT / "exercises", tmp_path)
    assert data["score"] == 0


def test_hidden_seed_depends_on_secret_and_submission(zip_path, tmp_path):
    from autograder.instructor.gradescope import derive_seed

    a = derive_seed(SECRET, ROOT / "solutions")
    assert a == derive_seed(SECRET, ROOT / "solutions")
    assert a != derive_seed("other", ROOT / "solutions") and a != derive_seed(SECRET, ROOT / "exercises")


def test_patching_allclose_gains_nothing(zip_path, tmp_path):
    wrong = run_zip(zip_path, variant(tmp_path / "a", {"softmax.py": [WRONG_SOFTMAX]}), tmp_path / "a")[1]
    patch = ("import numpy as np\nimport numpy.testing\nnp.allclose = lambda *a, **k: True\n"
             "np.testing.assert_allclose = lambda *a, **k: None\nnp.array_equal = lambda *a, **k: True\n")
    hostile = variant(tmp_path / "b", {"softmax.py": [WRONG_SOFTMAX, ("import numpy as np\n", patch)]})
    got = run_zip(zip_path, hostile, tmp_path / "b")[1]
    assert got == wrong and got["softmax"] < 12


def test_exit_at_import_costs_only_stages_that_import_it(zip_path, tmp_path):
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import numpy as np\nimport os\nos._exit(0)\n")]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    for s in ("softmax", "dot_products", "masking", "heads"):  # each imports softmax.py
        assert scores[s] < FULL[s], s
    for s in ("projections", "scaling", "kv_cache", "fused", "tiled", "backward", "dropout", "costs"):
        assert scores[s] == FULL[s], s
    assert any("exit code 0" in t["output"] for t in data["tests"])


def test_endless_loop_in_one_stage(zip_path, tmp_path):
    sub = variant(tmp_path, {"scores.py": [("    weights = softmax(dot_scores(x), axis=-1)",
                                            "    while True:\n        pass\n    weights = softmax(dot_scores(x), axis=-1)")]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    assert scores["dot_products"] < 8
    assert {s: v for s, v in scores.items() if s != "dot_products"} == {s: v for s, v in FULL.items() if s != "dot_products"}


def projections_lost_alone(data: dict, scores: dict, message: str) -> None:
    """projections scored 0 with `message` in its output; the stages that do not use it kept theirs."""
    assert scores["projections"] == 0
    assert any(message in t["output"] for t in data["tests"])
    for s in ("softmax", "scaling", "masking", "kv_cache", "fused"):
        assert scores[s] == FULL[s], s


def test_huge_allocation_is_refused(zip_path, tmp_path):
    sub = variant(tmp_path, {"projections.py": [("    q = x @ w_q", "    _ = np.ones(40 * 2**30 // 8)\n    q = x @ w_q")]})
    projections_lost_alone(*run_zip(zip_path, sub, tmp_path), "MemoryError")


@needs_separate_user
def test_cannot_read_reference_hidden_checks_or_results(zip_path, tmp_path):
    gs = tmp_path / "gs"
    snoop = f'''
def _snoop():
    import os
    try:
        import attn_ref  # noqa
        raise RuntimeError("LEAK: imported attn_ref")
    except ImportError:
        pass
    for base in ({str(gs / "source")!r}, {str(gs / "results")!r}):
        for dirpath, _, files in os.walk(base):
            for f in files:
                try:
                    text = open(os.path.join(dirpath, f)).read()
                except OSError:
                    continue
                raise RuntimeError("LEAK: " + f + " " + text[:80])
        try:
            os.listdir(base)
            raise RuntimeError("LEAK: listed " + base)
        except PermissionError:
            pass


'''
    sub = variant(tmp_path, {"scaling.py": [("def scaled_scores(", snoop + "def scaled_scores("),
                                            ("    d_k = q.shape[-1]\n", "    _snoop()\n    d_k = q.shape[-1]\n")]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    assert "LEAK" not in json.dumps(data)
    assert scores == FULL


def test_forged_results_and_lingering_writer(zip_path, tmp_path):
    results = tmp_path / "gs" / "results" / "results.json"
    marker = "forger-7f3a9c"
    forger = (f"    import subprocess, sys, os\n"
              f"    if os.environ.get('FORGER_STARTED'):\n        return np.full(np.shape(scores), 0.5)\n"
              f"    os.environ['FORGER_STARTED'] = '1'\n"
              f"    code = 'import time\\nfor _ in range(3000):\\n    try:\\n        open({str(results)!r}, \"w\").write(\"{{\\\\\"score\\\\\": 1000}}\")\\n    except OSError:\\n        pass\\n    time.sleep(0.02)'\n"  # noqa: E501
              f"    subprocess.Popen([sys.executable, '-c', code, '{marker}'], start_new_session=True)\n")
    sub = variant(tmp_path / "a", {"softmax.py": [(SM_BODY, forger + SM_BODY)]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    time.sleep(0.3)
    assert json.loads(results.read_text()) == data  # the forger's writes are gone or never happened
    assert data["score"] < 100 and scores["projections"] == 8  # a wrong softmax after the first call
    assert survivors(marker) == []


def test_printed_fake_score_changes_nothing(zip_path, tmp_path):
    wrong = run_zip(zip_path, variant(tmp_path / "a", {"softmax.py": [WRONG_SOFTMAX]}), tmp_path / "a")[1]
    fake = '    print(\'{"score": 100, "tests": []}\')\n    print("Score: 100/100")\n'
    got = run_zip(zip_path, variant(tmp_path / "b", {"softmax.py": [WRONG_SOFTMAX, (SM_BODY, fake + SM_BODY)]}),
                  tmp_path / "b")[1]
    assert got == wrong


def test_pickle_bomb_return_is_refused(zip_path, tmp_path):
    bomb = ("class _Bomb:\n    def __reduce__(self):\n        import os\n        return (os.system, ('touch /tmp/pwned',))\n\n\n"
            "def project_qkv(")
    sub = variant(tmp_path, {"projections.py": [("def project_qkv(", bomb), ("    return q, k, v", "    return _Bomb()")]})
    projections_lost_alone(*run_zip(zip_path, sub, tmp_path), "not an array or number")


@needs_separate_user
def test_cannot_kill_the_grader(zip_path, tmp_path):
    killer = "    import os, signal\n    for sig in (signal.SIGKILL,):\n        try:\n            os.kill(os.getppid(), sig)\n        except OSError:\n            pass\n"  # noqa: E501
    sub = variant(tmp_path, {"softmax.py": [(SM_BODY, killer + SM_BODY)]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    assert scores == FULL


def test_orphan_processes_are_ended(zip_path, tmp_path):
    marker = "31.4159"
    spawn = (f"    import subprocess\n"
             f"    subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n")
    if separate_user_possible():  # under its own uid even a process with a clean environment is found
        spawn += f"    subprocess.Popen(['sleep', '{marker}1'], start_new_session=True, env={{}})\n"
    sub = variant(tmp_path, {"scaling.py": [("    d_k = q.shape[-1]\n", spawn + "    d_k = q.shape[-1]\n")]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    assert scores == FULL
    assert survivors(marker) == []


def test_hard_coded_worked_outputs_earn_only_worked_points(zip_path, tmp_path):
    table = np.round(np.asarray(__import__("attn_ref").core.simple_self_attention(X)), 6).tolist()
    hard = f"    if x.shape == (4, 4):\n        return np.array({table})\n    return np.zeros_like(x)\n"
    sub = variant(tmp_path, {"scores.py": [("    weights = softmax(dot_scores(x), axis=-1)  # [n, n], each row sums to 1\n",
                                            hard)]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    failing = {t["extra_data"]["check"] for t in data["tests"] if t["status"] == "failed"}
    assert failing == {"simple_attention_reference", "simple_single_token", "simple_weights_sum_to_one",
                       "permutation_equivariance"}
    assert scores["dot_products"] == 4.5


def test_zip_scores_agree_with_make_grade(zip_path, tmp_path):
    """Stage by stage, the zip gives what `grade` gives with the same (secret-derived) seed."""
    from autograder.instructor.gradescope import derive_seed

    for name, edits in {"mask": {"masking.py": [("return j <= i + (n_k - n_q)", "return j <= i")]},
                        "scale": {"scaling.py": [(") / np.sqrt(d_k)  #", ")  #")]}}.items():
        sub = variant(tmp_path / name, edits)
        _, scores = run_zip(zip_path, sub, tmp_path / name)
        direct = grade(sub, seed=derive_seed(SECRET, sub))
        assert scores == {n: s.score for n, s in direct.stages.items()} and scores != FULL, name
