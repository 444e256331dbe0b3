"""A notebook edition handed in (make grade, make regrade, the Gradescope zip) is read as JSON and never run:
each `%%writefile submission/<file>` cell becomes that file, as the kernel would write it, and the files are
graded in the sandbox like any submission's. Nothing else in the notebook (a patched grader) reaches the grade."""
import ast
import csv
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import EXERCISES, ROOT, SOLUTIONS, grade, variant

from autograder.sandbox.launchers import separate_user_possible
from autograder.sandbox.safe_files import MAX_NOTEBOOK_BYTES
from autograder.stages import CORE_POINTS, STAGES, SUBMISSION_FILES
from autograder.submission import NotASubmission, discard, survey, writefile_cell

TRUST = not separate_user_possible()  # as tests/test_regrade.py: root with a shared interpreter is the default
MASK_TOP_LEFT = {"masking.py": [("return j <= i + (n_k - n_q)", "return j <= i")]}
NUMPY = ["softmax", "dot_products", "projections", "scaling", "masking"]


def code(text: str) -> dict:
    """A code cell as Jupyter saves it: a list of lines, the last without its newline."""
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": text.rstrip("\n").splitlines(keepends=True)}


def notebook(folder: Path, path: Path, extra: list[dict] = ()) -> Path:
    """`path`: a notebook like the editions', one `%%writefile submission/<file>` cell per stage module of
    `folder` after a setup cell and a markdown cell, then the cells `extra`."""
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# Attention, stage by stage"},
             code("import os\nos.makedirs('submission', exist_ok=True)")]
    cells += [code(f"%%writefile submission/{f}\n" + (folder / f).read_text()) for f in SUBMISSION_FILES]
    nb = {"cells": cells + list(extra), "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4,
          "nbformat_minor": 5}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1))
    return path


def cell_of(file: str) -> int:
    """The number (from 1, at the top) of the cell writing `file` in `notebook`'s layout."""
    return 3 + SUBMISSION_FILES.index(file)


def scores(res) -> dict[str, float]:
    return {name: s.score for name, s in res.stages.items()}


def graded(path: Path, stages: list[str] | None = None):
    """survey then grade, as `make grade` does; the temporary folder is removed after."""
    found = survey(path)
    try:
        return found, grade(found.folder, stages=stages, seed=0)
    finally:
        discard(found)


# ------------------------------------------------------------------------------ reading, no grade --

def test_cells_become_the_files_the_kernel_writes(tmp_path):
    """The last cell for a file wins, `-a` appends, `./submission/` and quotes are the same file, and a
    markdown cell, a line magic or a cell writing anywhere but submission/<stage module> writes nothing."""
    first, second = "def softmax(x):\n    return 1\n", "def softmax(x):\n    return 2\n"
    extra = [code(f"%%writefile submission/softmax.py\n{first}"),
             code(f"\n\n%%writefile './submission/softmax.py'\n{second}"),
             code("%%writefile -a submission/scaling.py\n# appended"),
             {"cell_type": "markdown", "metadata": {}, "source": "%%writefile submission/scores.py\nstolen = 1\n"},
             {"cell_type": "raw", "metadata": {}, "source": "%%writefile submission/scores.py\nstolen = 2\n"},
             code("%writefile submission/scores.py\nstolen = 3\n"),
             code("%%writefile ../autograder/notebook_cells.py\ngrade_stage = lambda *a, **k: 1.0\n"),
             code("%%writefile submission/helpers.py\nx = 1\n")]
    nb = notebook(SOLUTIONS, tmp_path / "attention.ipynb", extra)
    found = survey(nb)
    try:
        got = {p.name: p.read_bytes() for p in found.folder.iterdir()}
        n = len(SUBMISSION_FILES) + 2
        assert got["softmax.py"] == second.encode()
        assert got["scaling.py"] == (SOLUTIONS / "scaling.py").read_bytes() + b"# appended\n"
        assert got["scores.py"] == (SOLUTIONS / "scores.py").read_bytes()
        assert set(got) == set(SUBMISSION_FILES)
        assert found.shown["softmax.py"] == f"attention.ipynb, cell {n + 2} (softmax.py)"
        assert found.shown["masking.py"] == f"attention.ipynb, cell {cell_of('masking.py')} (masking.py)"
        assert found.label == "attention.ipynb"
        notes = " ".join(found.notes)
        assert f"softmax.py is written by cells {cell_of('softmax.py')}, {n + 1}, {n + 2}" in notes
        assert "../autograder/notebook_cells.py" in notes and "submission/helpers.py" in notes
    finally:
        discard(found)
    assert not found.folder.exists()


CELLS = ["%%writefile submission/a.py\nx = 1", "%%writefile submission/a.py\nx = 1\n\n",
         "\n  \n%%writefile -a submission/a.py\n  \ny = 2\n", "    %%writefile submission/a.py\n    x = 1\n      y\n",
         "%%writefile \"submission/a.py\"\nx = '''\n   \n'''", "%%writefile submission/a.py", "%%writefile\nx = 1"]


@pytest.mark.parametrize("text", CELLS)
def test_a_cell_is_read_as_ipython_hands_it_to_the_magic(text):
    """What the kit reads from a cell equals what IPython's own input transformer passes %%writefile."""
    transformer = pytest.importorskip("IPython.core.inputtransformer2").TransformerManager()
    call = ast.parse(transformer.transform_cell(text)).body[0].value
    name, line, body = (ast.literal_eval(a) for a in call.args)
    assert name == "writefile"
    got = writefile_cell(text)
    if got is None:  # the magic's own argument parser refuses this line: nothing is written
        assert not line.strip()
        return
    target, append, kit_body = got
    assert kit_body == body and append == ("-a" in line.split())
    assert target.strip("\"'") == line.replace("-a", "").strip().strip("\"'")


def test_what_is_not_a_notebook_is_refused_with_a_sentence(tmp_path):
    """Not JSON, JSON without cells, no %%writefile cell, a link, a file over the cap: one sentence, no grade."""
    cases = {"junk.ipynb": "not json {", "list.ipynb": "[1, 2]", "empty.ipynb": json.dumps({"cells": [code("1 + 1")]})}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "link.ipynb").symlink_to(notebook(SOLUTIONS, tmp_path / "real" / "attention.ipynb"))
    with open(tmp_path / "big.ipynb", "wb") as f:
        f.truncate(MAX_NOTEBOOK_BYTES + 1)
    expected = {"junk.ipynb": "not a notebook", "list.ipynb": "not a notebook", "empty.ipynb": "no cell writes",
                "link.ipynb": "symbolic link", "big.ipynb": "larger than 16 MiB", "gone.ipynb": "not found"}
    for name, words in expected.items():
        with pytest.raises(NotASubmission, match=words):
            survey(tmp_path / name)


# ---------------------------------------------------------------------------------------- grades --

def test_a_mutated_cell_scores_as_its_py_twin_and_is_named_by_its_cell(tmp_path):
    """`make grade SUBMISSION=attention.ipynb`: the same scores as the folder of .py files, and the
    message names the notebook's cell."""
    twin = variant(tmp_path / "twin", MASK_TOP_LEFT)
    nb = notebook(twin, tmp_path / "attention.ipynb")
    _, expected = graded(twin, NUMPY)
    _, got = graded(nb, NUMPY)
    assert scores(got) == scores(expected) and scores(got)["masking"] < 16 and scores(got)["softmax"] == 12
    assert [c.passed for c in got.stages["masking"].checks] == [c.passed for c in expected.stages["masking"].checks]
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", "--submission", str(nb), "--stage", "masking"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert f"attention.ipynb, cell {cell_of('masking.py')} (masking.py)" in p.stdout, p.stdout + p.stderr
    assert "/tmp/attn-sub-" not in p.stdout


def test_a_cell_that_does_not_parse_costs_only_its_stage(tmp_path):
    """scores.py's cell (nothing imports it) does not parse: dot_products loses, as the .py twin does; the
    other stages keep their points."""
    twin = variant(tmp_path / "twin", {"scores.py": [("def dot_scores", "def def dot_scores")]})
    _, expected = graded(twin, NUMPY)
    _, got = graded(notebook(twin, tmp_path / "attention.ipynb"), NUMPY)
    assert scores(got) == scores(expected)
    assert scores(got) == {s.name: (0 if s.name == "dot_products" else s.points) for s in STAGES if s.name in NUMPY}


def test_a_notebook_that_patches_the_grader_in_its_kernel_gains_nothing(tmp_path):
    """Stubs in the %%writefile cells, and code cells that would make the kernel's own test cells pass (a
    grade_stage that returns full marks, an np.allclose that always agrees, the solutions imported into the
    submission's modules at run time): none of those cells runs, so the stubs score 0."""
    patches = [code("import autograder.notebook_cells as cells\ncells.grade_stage = lambda *a, **k: 1.0\n"
                    "cells.check_passed = lambda *a, **k: True"),
               code("import numpy as np\nnp.allclose = lambda *a, **k: True\nnp.testing.assert_allclose = print"),
               code(f"import shutil\nshutil.copytree({str(SOLUTIONS)!r}, 'submission', dirs_exist_ok=True)"),
               code("%%bash\ncp -r solutions/* submission/")]
    _, got = graded(notebook(EXERCISES, tmp_path / "attention.ipynb", patches), NUMPY)
    assert scores(got) == dict.fromkeys(NUMPY, 0)


@pytest.mark.slow
def test_a_notebook_in_a_zip_or_a_folder_grades_through_regrade(tmp_path):
    """A batch: alice's zip holds the solutions' notebook (and Mac junk), bob's folder a mutant's notebook and
    a checkpoint copy of the solutions, which is not graded. Scores as the .py twins'; names as uploaded."""
    from autograder.instructor.regrade import regrade

    batch = tmp_path / "batch"
    batch.mkdir()
    nb = notebook(SOLUTIONS, tmp_path / "alice" / "attention.ipynb")
    with zipfile.ZipFile(batch / "alice.zip", "w") as z:
        z.write(nb, "attention.ipynb")
        z.writestr("__MACOSX/._attention.ipynb", b"\x00\x05\x16\x07junk")
    notebook(variant(tmp_path / "twin", MASK_TOP_LEFT), batch / "bob" / "attention.ipynb")
    checkpoints = batch / "bob" / ".ipynb_checkpoints"  # Jupyter's autosave, beside the notebook
    checkpoints.mkdir()
    shutil.copy(nb, checkpoints / "attention-checkpoint.ipynb")
    shutil.copy(nb, batch / "carol.ipynb")  # a notebook handed in on its own, loose in the batch
    out = regrade(batch, jobs=2, quiet=True, trust=TRUST)
    rows = {r["submission"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert float(rows["alice.zip"]["total"]) == CORE_POINTS, rows["alice.zip"]
    assert float(rows["carol.ipynb"]["total"]) == CORE_POINTS, rows["carol.ipynb"]
    assert float(rows["bob"]["masking"]) < 16 and float(rows["bob"]["softmax"]) == 12, rows["bob"]
    bob = (out / "bob.json").read_text()
    assert f"attention.ipynb, cell {cell_of('masking.py')} (masking.py)" in bob and str(tmp_path) not in bob


@pytest.mark.slow
def test_the_nbgrader_editions_notebook_scores_full_marks_through_the_gradescope_zip(tmp_path):
    """The edition's own notebook, built by notebooks.py with the solutions in it, uploaded to the zip: the
    solutions' score, every stage full."""
    from autograder.instructor.build import autograder_zip, gradescope_local
    from autograder.instructor.notebooks import build_notebook

    nb = tmp_path / "up" / "attention.ipynb"
    nb.parent.mkdir()
    nb.write_text(json.dumps(build_notebook("apart")))
    zip_path = autograder_zip(tmp_path / "autograder.zip", "secret")
    data = json.loads(gradescope_local(nb, zip_path, tmp_path / "gs", python=sys.executable).read_text())
    assert data["score"] == CORE_POINTS, data["output"]
    assert {n: s["score"] for n, s in data["extra_data"]["stages"].items()} == {s.name: s.points for s in STAGES}


def test_which_copy_an_upload_grades(tmp_path):
    """Stage modules beside a notebook are graded, and the notebook named as ignored; a zip's notebook is read
    past Mac junk; a zip's notebook over the cap is refused, whatever size its member declares."""
    both = variant(tmp_path / "both", {})
    notebook(EXERCISES, both / "attention.ipynb")
    found = survey(both)
    assert found.folder == both and any("ignored attention.ipynb" in n for n in found.notes)
    up = tmp_path / "up.zip"
    with zipfile.ZipFile(up, "w") as z:
        z.writestr("__MACOSX/hw/._attention.ipynb", b"\x00\x05\x16\x07junk")
        z.write(notebook(SOLUTIONS, tmp_path / "nb" / "attention.ipynb"), "hw/attention.ipynb")
    found = survey(up)
    try:
        assert found.label == "up.zip" and (found.folder / "softmax.py").read_bytes() == (SOLUTIONS / "softmax.py").read_bytes()
        assert found.shown["softmax.py"] == f"hw/attention.ipynb, cell {cell_of('softmax.py')} (softmax.py)"
    finally:
        discard(found)
    with zipfile.ZipFile(up, "w") as z:
        z.writestr("attention.ipynb", b" " * (MAX_NOTEBOOK_BYTES + 1))
    with pytest.raises(NotASubmission, match="attention.ipynb: is larger than 16 MiB"):
        survey(up)


def test_a_kernels_test_cells_share_its_fork_servers_and_each_reads_the_files_anew(tmp_path):
    """A notebook grades a stage per test cell: the kernel keeps one pair of fork servers for all its cells (a
    server started per cell loaded torch again every time), and each cell's grade still reads the files the
    cells above it just wrote, and starts new servers where one has died."""
    from autograder import notebook_cells

    sub = tmp_path / "submission"
    shutil.copytree(SOLUTIONS, sub)
    try:
        full = {s.name: s.points for s in STAGES}
        assert [notebook_cells.grade_stage(s, str(sub)) for s in ("softmax", "heads")] == [full["softmax"], full["heads"]]
        servers = dict(notebook_cells._servers)
        assert servers["torch"].alive()
        unnormalised = (SOLUTIONS / "softmax.py").read_text().replace("e / np.sum(e, axis=axis, keepdims=True)", "e")
        (sub / "softmax.py").write_text(unnormalised)
        assert notebook_cells.grade_stage("softmax", str(sub)) < full["softmax"]  # the file as the cell above left it
        assert all(notebook_cells._servers[k] is s for k, s in servers.items())  # the same servers
        servers["torch"].close()
        shutil.copy2(SOLUTIONS / "softmax.py", sub / "softmax.py")  # heads calls the student's softmax
        assert notebook_cells.grade_stage("heads", str(sub)) == full["heads"]
        assert notebook_cells._servers["torch"] is not servers["torch"] and notebook_cells._servers["torch"].alive()
    finally:
        notebook_cells._end_servers()
