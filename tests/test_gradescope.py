"""The Gradescope zip, run locally in a root laid out like Gradescope's, against hostile submissions.

Each test builds a submission from the solutions with one hostile change, runs the zip's
run_autograder, and checks the score, that untouched stages keep their points, that
results.json is the grader's, and that no process of the submission outlives the grading.
"""
import json
import sys
import time

import numpy as np
import pytest
from conftest import ROOT, grade, survivors, variant

from autograder.instructor.build import autograder_zip, gradescope_local
from autograder.sandbox.launchers import separate_user_possible
from autograder.stages import CORE_POINTS, DEPENDANTS, STAGES
from autograder.stages.article_numbers import X

pytestmark = pytest.mark.slow  # builds or runs a whole channel: `make test` only (CONTRIBUTING.md)

SECRET = "test-course-secret"
SOFTMAX_HEAD = '"""Stage 1: a numerically stable softmax.'
SM_BODY = "    scores = np.asarray(scores)\n"
WRONG_SOFTMAX = ("    e = np.exp(scores - top)  # same shape as scores; the largest entry becomes exp(0) = 1\n",
                 "    e = np.exp(scores - top) ** 0.5\n")
needs_separate_user = pytest.mark.skipif(not separate_user_possible(),
                                         reason="needs root and an interpreter other users can run")


REFUSED = "was refused before any of it ran"


@pytest.fixture(params=["static check", "sandbox alone"])
def layer(request, monkeypatch):
    """The hostile submissions below meet the static check first (their file is refused, nothing of it runs);
    with the check switched off they meet the child sandbox alone, which must hold by itself."""
    if request.param == "sandbox alone":
        monkeypatch.setenv("ATTN_STATIC_CHECK", "off")
    return request.param


def refused_alone(data: dict, scores: dict, file: str, untouched: tuple[str, ...]) -> None:
    """`file` was refused by the static check: its stages lost, the stages that do not use it kept theirs."""
    assert any(f"{file} {REFUSED}" in t["output"] for t in data["tests"]), file
    for s in untouched:
        assert scores[s] == FULL[s], s


@pytest.fixture(scope="module")
def zip_path(tmp_path_factory):
    return autograder_zip(tmp_path_factory.mktemp("zip") / "autograder.zip", SECRET)


def guarded_alone(data: dict, scores: dict, stage: str) -> None:
    """With the static check off, the run-time guard refuses the attack: `stage` and the stages that use it
    lose, every other stage keeps its points."""
    assert any("refused at run time" in t["output"] for t in data["tests"] if t["extra_data"]["stage"] == stage)
    using = set(DEPENDANTS[stage])
    assert {n: s for n, s in scores.items() if n not in using} == {n: FULL[n] for n in scores if n not in using}


def run_zip(zip_path, submission, tmp_path):
    out = gradescope_local(submission, zip_path, tmp_path / "gs", python=sys.executable)
    data = json.loads(out.read_text())
    return data, {n: s["score"] for n, s in data["extra_data"]["stages"].items()}


FULL = {s.name: s.points for s in STAGES}


def test_solutions_full_marks_and_format(zip_path, tmp_path):
    data, scores = run_zip(zip_path, ROOT / "solutions", tmp_path)
    assert data["score"] == CORE_POINTS and scores == FULL
    vis = {t["extra_data"]["visibility"]: t["visibility"] for t in data["tests"]}
    assert vis == {"public": "visible", "hidden": "visible"}  # the default: students see their total at once
    assert "seed" not in data["output"] and str(data["extra_data"]["seed"]) not in data["output"]


def test_submit_zip_and_exercises_folder_are_found(zip_path, tmp_path):
    from autograder.submission import make_zip

    z = tmp_path / "up" / "submission.zip"
    z.parent.mkdir()
    make_zip(ROOT / "solutions", z)
    data, _ = run_zip(zip_path, z, tmp_path)
    assert data["score"] == CORE_POINTS
    data, _ = run_zip(zip_path, ROOT / "exercises", tmp_path)
    assert data["score"] == 0


def test_hidden_seed_depends_on_secret_and_submission(zip_path, tmp_path):
    from autograder.instructor.gradescope import derive_seed

    a = derive_seed(SECRET, ROOT / "solutions")
    assert a == derive_seed(SECRET, ROOT / "solutions")
    assert a != derive_seed("other", ROOT / "solutions") and a != derive_seed(SECRET, ROOT / "exercises")


def test_patching_allclose_gains_nothing(zip_path, tmp_path, layer):
    wrong = run_zip(zip_path, variant(tmp_path / "a", {"softmax.py": [WRONG_SOFTMAX]}), tmp_path / "a")[1]
    patch = ("import numpy as np\nimport numpy.testing\nnp.allclose = lambda *a, **k: True\n"
             "np.testing.assert_allclose = lambda *a, **k: None\nnp.array_equal = lambda *a, **k: True\n")
    hostile = variant(tmp_path / "b", {"softmax.py": [WRONG_SOFTMAX, ("import numpy as np\n", patch)]})
    data, got = run_zip(zip_path, hostile, tmp_path / "b")
    if layer == "static check":  # refused: numpy itself may not be changed, nor numpy.testing imported
        refused_alone(data, got, "softmax.py", ("projections", "scaling", "kv_cache", "fused", "tiled"))
        assert got["softmax"] == 0
    else:  # the patch runs in the child, and the comparisons are the parent's
        assert got == wrong and got["softmax"] < 12


def test_exit_at_import_costs_only_stages_that_import_it(zip_path, tmp_path, layer):
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import numpy as np\nimport os\nos._exit(0)\n")]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    for s in ("softmax", "dot_products", "masking", "heads"):  # each imports softmax.py
        assert scores[s] < FULL[s], s
    for s in ("projections", "scaling", "kv_cache", "fused", "tiled", "backward", "dropout", "costs"):
        assert scores[s] == FULL[s], s
    said = REFUSED if layer == "static check" else "exit code 0"
    assert any(said in t["output"] for t in data["tests"])


def test_endless_loop_in_one_stage(zip_path, tmp_path):
    sub = variant(tmp_path, {"scores.py": [("    weights = softmax(dot_scores(x), axis=-1)",
                                            "    while True:\n        pass\n    weights = softmax(dot_scores(x), axis=-1)")]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    assert scores["dot_products"] < FULL["dot_products"]
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
def test_cannot_read_reference_hidden_checks_or_results(zip_path, tmp_path, layer):
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
        except (PermissionError, FileNotFoundError):  # root-only, or not there at all (namespaces)
            pass


'''
    sub = variant(tmp_path, {"scaling.py": [("def scaled_scores(", snoop + "def scaled_scores("),
                                            ("    d_k = q.shape[-1]\n", "    _snoop()\n    d_k = q.shape[-1]\n")]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    assert "LEAK" not in json.dumps(data)
    if layer == "static check":
        refused_alone(data, scores, "scaling.py", ("softmax", "projections", "kv_cache", "fused", "tiled"))
    else:  # the run-time guard refuses the walk before the operating system has to
        guarded_alone(data, scores, "scaling")


def test_forged_results_and_lingering_writer(zip_path, tmp_path, layer):
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
    assert data["score"] < CORE_POINTS and scores["projections"] == FULL["projections"]  # a wrong softmax after the first call
    assert survivors(marker) == []


def test_printed_fake_score_changes_nothing(zip_path, tmp_path):
    wrong = run_zip(zip_path, variant(tmp_path / "a", {"softmax.py": [WRONG_SOFTMAX]}), tmp_path / "a")[1]
    fake = '    print(\'{"score": 100, "tests": []}\')\n    print("Score: 100/100")\n'
    got = run_zip(zip_path, variant(tmp_path / "b", {"softmax.py": [WRONG_SOFTMAX, (SM_BODY, fake + SM_BODY)]}),
                  tmp_path / "b")[1]
    assert got == wrong


def test_pickle_bomb_return_is_refused(zip_path, tmp_path, layer):
    bomb = ("class _Bomb:\n    def __reduce__(self):\n        import os\n        return (os.system, ('touch /tmp/pwned',))\n\n\n"
            "def project_qkv(")
    sub = variant(tmp_path, {"projections.py": [("def project_qkv(", bomb), ("    return q, k, v", "    return _Bomb()")]})
    said = REFUSED if layer == "static check" else "not an array or number"
    projections_lost_alone(*run_zip(zip_path, sub, tmp_path), said)


@needs_separate_user
def test_cannot_kill_the_grader(zip_path, tmp_path, layer):
    killer = "    import os, signal\n    for sig in (signal.SIGKILL,):\n        try:\n            os.kill(os.getppid(), sig)\n        except OSError:\n            pass\n"  # noqa: E501
    sub = variant(tmp_path, {"softmax.py": [(SM_BODY, killer + SM_BODY)]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    if layer == "static check":
        refused_alone(data, scores, "softmax.py", ("projections", "scaling", "kv_cache", "fused", "tiled"))
    elif scores == FULL:  # a child forked from a server that had loaded `signal`: its import raised no audit event,
        # the kill did (refused whoever asks), and the code swallowed the refusal: the grader lived, nothing was gained
        assert data["score"] == CORE_POINTS
    else:
        guarded_alone(data, scores, "softmax")


def test_orphan_processes_are_ended(zip_path, tmp_path, layer):
    marker = "31.4159"
    spawn = (f"    import subprocess\n"
             f"    subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n")
    if separate_user_possible():  # under its own uid even a process with a clean environment is found
        spawn += f"    subprocess.Popen(['sleep', '{marker}1'], start_new_session=True, env={{}})\n"
    sub = variant(tmp_path, {"scaling.py": [("    d_k = q.shape[-1]\n", spawn + "    d_k = q.shape[-1]\n")]})
    data, scores = run_zip(zip_path, sub, tmp_path)
    if layer == "static check":
        refused_alone(data, scores, "scaling.py", ("softmax", "projections", "kv_cache", "fused", "tiled"))
    else:
        guarded_alone(data, scores, "scaling")
    assert survivors(marker) == []


def test_hard_coded_worked_outputs_earn_only_worked_points(zip_path, tmp_path):
    table = np.round(np.asarray(__import__("attn_ref.core").core.simple_self_attention(X)), 6).tolist()
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


def test_results_are_markdown_numbered_and_tagged(zip_path, tmp_path):
    data, _ = run_zip(zip_path, variant(tmp_path, {"masking.py": [("return j <= i + (n_k - n_q)", "return j <= i")]}),
                      tmp_path)
    assert (data["output_format"], data["test_output_format"]) == ("md", "md")
    assert (data["visibility"], data["stdout_visibility"]) == ("visible", "hidden")
    from autograder.stages import STAGES

    numbers = [f"{s.number}.{i}" for s in STAGES for i in range(1, len(s.checks) + 1)]
    assert [t["number"] for t in data["tests"]] == numbers
    assert all(t["tags"] == [t["extra_data"]["stage"], t["extra_data"]["kind"]] for t in data["tests"])
    failing = next(t for t in data["tests"] if t["extra_data"]["diagnosis"] == "mask-top-left")
    assert "**Diagnosis** mask-top-left: with fewer queries" in failing["output"]
    block = failing["output"].split("```text\n")[1].split("\n```")[0]  # the evidence verbatim in a code block
    assert "expected:\n[[1 1 1 1 0]\n [1 1 1 1 1]]\ngot:\n[[1 0 0 0 0]\n" in block
    assert "| 5 | masking |" in data["output"] and "**Next step:**" in data["output"]


def test_markdown_keeps_student_text_inert():
    from autograder.report.gradescope_json import md_block, md_text

    assert md_text("a *b* [c](d) `make hint`") == "a \\*b\\* \\[c\\](d) `make hint`"
    assert md_text("- x\n2. y <b>") == "\\- x  \n2\\. y \\<b\\>"
    block = md_block("raised ValueError: ```\n# not a heading")
    assert block.startswith("````text\n") and block.endswith("\n````")


@pytest.mark.parametrize("visibility", ["hidden", "after_due_date"])
def test_hidden_visibility_is_chosen_at_build(tmp_path, visibility):
    from autograder.instructor.build import main

    z = tmp_path / "autograder.zip"
    assert main(["autograder", "--out", str(z), "--secret", SECRET, "--hidden-visibility", visibility]) == 0
    data, _ = run_zip(z, ROOT / "solutions", tmp_path)
    assert {t["visibility"] for t in data["tests"] if t["extra_data"]["visibility"] == "hidden"} == {visibility}
    assert {t["visibility"] for t in data["tests"] if t["extra_data"]["visibility"] == "public"} == {"visible"}
    with pytest.raises(ValueError):
        autograder_zip(tmp_path / "bad.zip", SECRET, "soon")


def broken_zip(zip_path, dest, member: str, prefix: str):
    """A copy of the zip whose `member` starts with `prefix` (a grader broken as an install could break it)."""
    import zipfile

    with zipfile.ZipFile(zip_path) as src, zipfile.ZipFile(dest, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            out.writestr(info, (prefix.encode() + data) if info.filename == member else data)
    return dest


def test_grader_that_raises_at_import_still_writes_results(zip_path, tmp_path):
    z = broken_zip(zip_path, tmp_path / "broken.zip", "autograder/grade/__init__.py", "raise ImportError('numpy is broken')\n")
    data, = [json.loads(gradescope_local(ROOT / "solutions", z, tmp_path / "gs", python=sys.executable).read_text())]
    assert data["score"] == 0 and data["tests"] == []
    assert "autograder itself failed" in data["output"] and "not a problem with your code" in data["output"]
    assert "ImportError: numpy is broken" in data["output"] and "course staff" in data["output"]


def test_grader_whose_python_cannot_start_still_writes_results(zip_path, tmp_path):
    out = gradescope_local(ROOT / "solutions", zip_path, tmp_path / "gs", python=str(tmp_path / "no-python"))
    data = json.loads(out.read_text())
    assert data["score"] == 0 and "autograder itself failed" in data["output"]


def test_stale_copy_in_a_subfolder_is_ignored_and_named(zip_path, tmp_path):
    import zipfile

    z = tmp_path / "up" / "submission.zip"
    z.parent.mkdir()
    stale = (ROOT / "exercises" / "softmax.py").read_text()
    with zipfile.ZipFile(z, "w") as f:
        for p in sorted((ROOT / "solutions").glob("*.py")):
            f.write(p, p.name)
        f.writestr("old/softmax.py", stale)  # last in the zip: it used to be the one graded
    data, scores = run_zip(zip_path, z, tmp_path)
    assert scores["softmax"] == FULL["softmax"] and data["score"] == CORE_POINTS
    assert "softmax.py is in the upload more than once: graded softmax.py, ignored old/softmax.py" in data["output"]
    assert "/tmp" not in json.dumps(data) and "attn-sub-" not in json.dumps(data)


def test_messages_name_files_as_uploaded(zip_path, tmp_path):
    import zipfile

    z = tmp_path / "up" / "submission.zip"
    z.parent.mkdir()
    with zipfile.ZipFile(z, "w") as f:
        for p in sorted((ROOT / "exercises").glob("*.py")):
            f.write(p, f"work/{p.name}")
    data, _ = run_zip(zip_path, z, tmp_path)
    text = json.dumps(data)
    assert "work/softmax.py:" in text and "attn-sub-" not in text and "/tmp/" not in text
