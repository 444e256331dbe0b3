"""A submission's files are read as regular files only, wherever the kit reads one: the sandbox copy,
the zip reader, `make submit`, regrade and the Gradescope run. A link, a device or a FIFO costs only
the stage that needed the file, with a message naming it."""
import csv
import json
import os
import shutil
import stat
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, SOLUTIONS, grade, variant

from autograder.instructor.build import autograder_zip, gradescope_local
from autograder.instructor.regrade import regrade
from autograder.sandbox.launchers import separate_user_possible
from autograder.stages import CORE_POINTS
from autograder.submission import make_zip, unzip

TRUST = not separate_user_possible()  # root with a shared interpreter: the default; else the tests vouch for the code

NUMPY = ["softmax", "dot_products", "projections", "scaling", "masking"]


def messages(res, stage: str) -> str:
    return "\n".join(r.message for r in res.stages[stage].checks if not r.passed)


@pytest.fixture(scope="module")
def zip_path(tmp_path_factory):
    return autograder_zip(tmp_path_factory.mktemp("zip") / "autograder.zip", "secret")


@pytest.mark.slow
def test_symlink_to_the_reference_earns_nothing_through_the_zip(zip_path, tmp_path):
    """Gradescope keeps the links of a GitHub upload: softmax.py pointing at the grader's reference must
    not be copied in as the student's softmax (the reference defines `softmax`, and would pass)."""
    sub = variant(tmp_path / "a", {})
    (sub / "softmax.py").unlink()
    (sub / "softmax.py").symlink_to("../source/attn_ref/core.py")
    out = gradescope_local(sub, zip_path, tmp_path / "gs", python=sys.executable)
    data = json.loads(out.read_text())
    stages = data["extra_data"]["stages"]
    assert stages["softmax"]["score"] == 0
    assert stages["projections"]["score"] == 8 and stages["kv_cache"]["score"] == 16  # they never call softmax
    outputs = [t["output"] for t in data["tests"] if t["extra_data"]["stage"] == "softmax"]
    assert all("softmax.py is a symbolic link" in o for o in outputs), outputs[:2]


def test_dangling_symlink_costs_only_its_stage(tmp_path):
    sub = variant(tmp_path, {})
    (sub / "scores.py").unlink()
    (sub / "scores.py").symlink_to("/nonexistent/scores.py")
    res = grade(sub, stages=NUMPY)
    assert res.stages["dot_products"].score == 0
    assert "scores.py is a symbolic link (to /nonexistent/scores.py)" in messages(res, "dot_products")
    assert all(res.stages[s].status == "passed" for s in NUMPY if s != "dot_products"), \
        {s: messages(res, s)[:200] for s in NUMPY}


def test_fifo_does_not_hang_the_grader(tmp_path):
    sub = variant(tmp_path, {})
    (sub / "projections.py").unlink()
    os.mkfifo(sub / "projections.py")
    res = grade(sub, stages=NUMPY)
    assert res.stages["projections"].score == 0
    assert "projections.py is not a regular file" in messages(res, "projections")
    assert res.stages["softmax"].status == "passed" and res.stages["masking"].status == "passed"


def test_zip_members_that_are_links_are_left_out(tmp_path):
    z = tmp_path / "sub.zip"
    with zipfile.ZipFile(z, "w") as f:
        link = zipfile.ZipInfo("softmax.py")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        f.writestr(link, "/autograder/source/attn_ref/core.py")
        f.writestr("scores.py", (SOLUTIONS / "scores.py").read_text())
    out = unzip(z)
    assert sorted(p.name for p in out.iterdir()) == ["scores.py"]


def test_make_submit_does_not_pack_a_link(tmp_path):
    src = tmp_path / "exercises"
    shutil.copytree(SOLUTIONS, src)
    (src / "softmax.py").unlink()
    (src / "softmax.py").symlink_to(ROOT / "attn_ref" / "core.py")
    problems = make_zip(src, tmp_path / "submission.zip")
    assert any(p.startswith("softmax.py: is a symbolic link") and p.endswith("not packed") for p in problems)
    assert "softmax.py" not in zipfile.ZipFile(tmp_path / "submission.zip").namelist()


@pytest.mark.slow
def test_regrade_reads_a_linked_file_as_missing_work(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    shutil.copytree(SOLUTIONS, batch / "alice")
    shutil.copytree(SOLUTIONS, batch / "mallory")
    (batch / "mallory" / "softmax.py").unlink()
    (batch / "mallory" / "softmax.py").symlink_to(ROOT / "attn_ref" / "core.py")
    out = regrade(batch, jobs=2, quiet=True, trust=TRUST)
    rows = {r["submission"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert float(rows["alice"]["total"]) == CORE_POINTS
    assert float(rows["mallory"]["softmax"]) == 0 and float(rows["mallory"]["kv_cache"]) == 16


# ------------------------------------------------------------------------------------ read once --

def test_a_grade_reads_each_stage_file_once(tmp_path, monkeypatch):
    """The static check, the child's copy, localisation, the pointers and the reach analysis all read the
    snapshot: each file of the folder is opened once in the whole grade, failing stages included."""
    from collections import Counter

    from autograder.sandbox import safe_files

    sub = variant(tmp_path, {"masking.py": [("return j <= i + (n_k - n_q)", "return j <= i")]})
    reads: Counter = Counter()
    real = safe_files._read

    def counting(path, limit=safe_files.MAX_FILE_BYTES):
        reads[Path(path).name] += 1
        return real(path, limit)

    monkeypatch.setattr(safe_files, "_read", counting)
    res = grade(sub, stages=["softmax", "scaling", "masking"])
    assert res.stages["masking"].status == "failed" and res.located.get("masking")  # localisation ran
    assert reads and max(reads.values()) == 1, reads


def test_what_is_graded_is_the_snapshot_not_a_later_edit(tmp_path):
    """A file rewritten (here into a symbolic link to the solutions) after the snapshot is taken (prestart, as `make
    grade` takes it) changes nothing in that grade; the record names the SHA-256 of the bytes it graded."""
    import hashlib

    from autograder.sandbox.runner import close_launchers, prestart

    sub = variant(tmp_path, {})
    good = (sub / "softmax.py").read_bytes()
    workers = prestart(sub.resolve(), ["numpy"], 10.0)
    try:
        (sub / "softmax.py").unlink()
        (sub / "softmax.py").symlink_to(SOLUTIONS / "softmax.py")
        res = grade(sub, stages=["softmax"], workers=workers)
    finally:
        close_launchers(workers)
    assert res.stages["softmax"].status == "passed"
    assert res.files["softmax.py"] == hashlib.sha256(good).hexdigest()
    again = grade(sub, stages=["softmax"])  # a new grade reads the folder as it is now: the link is refused
    assert again.stages["softmax"].status != "passed"


def test_a_snapshot_is_a_value_that_never_reads_the_folder_again(tmp_path):
    """Snapshot answers by name from the bytes it took: a file deleted or replaced afterwards, a link, a file that
    was never there; an edited copy (repair's) leaves the original as it was."""
    from autograder.sandbox import safe_files
    from autograder.sandbox.safe_files import UnusableFile, take

    sub = variant(tmp_path, {})
    (sub / "notes.py").symlink_to(SOLUTIONS / "scores.py")
    good = (sub / "softmax.py").read_bytes()
    snap = take(sub)
    shutil.rmtree(sub)
    assert snap.read_bytes("softmax.py") == good and snap.read_text("softmax.py") == good.decode()
    assert snap.problem("softmax.py") is None and snap.folder == sub.resolve()
    assert snap.problem("notes.py").startswith("is a symbolic link") and snap.read_text("notes.py") is None
    assert snap.problem("absent.py") == "missing"
    with pytest.raises(UnusableFile, match="absent.py missing"):
        snap.read_bytes("absent.py")
    edited = snap.with_file("softmax.py", b"x = 1\n")
    assert edited.read_bytes("softmax.py") == b"x = 1\n" and snap.read_bytes("softmax.py") == good
    assert edited.sha256["softmax.py"] != snap.sha256["softmax.py"] and edited.folder == snap.folder
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    for i in range(safe_files.MAX_FILES + 1):
        (crowded / f"helper{i:03}.py").write_text("")
    many = take(crowded)  # past the cap a name is not read, and is not called missing either
    assert len(many.data) == safe_files.MAX_FILES and many.problem("helper000.py") is None
    assert many.problem(f"helper{safe_files.MAX_FILES:03}.py").startswith("was not read")


def test_safe_files_keeps_no_registry_and_a_grade_reads_no_path():
    """The snapshot is handed down, never looked up: safe_files holds no module-level state to look one up in, and
    what runs in a grade imports from it only the Snapshot type, its error and `take` (the one read, made by the
    grade, prestart and a Worker handed a folder alone; `make hint` outside a grade). The disk reads by path
    (read_bytes, read_text, problem) are for the code outside a grade: the zip reader, `make submit`, regrade, the
    instructor tools."""
    import ast

    from autograder.sandbox import safe_files

    package = ROOT / "autograder"
    tree = ast.parse((package / "sandbox" / "safe_files.py").read_text())
    state = [t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
             for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)]
    assert set(state) <= {"MAX_FILE_BYTES", "MAX_NOTEBOOK_BYTES", "MAX_FILES"}, state
    assert not {"current", "release", "_held", "_CURRENT"} & set(vars(safe_files)), "a registry of snapshots"
    outside = {"submission.py", "instructor"}  # they read files by path, outside a grade
    allowed = {"Snapshot", "UnusableFile", "take", "MAX_FILE_BYTES", "MAX_NOTEBOOK_BYTES"}
    takers = set()
    for path in sorted(package.rglob("*.py")):
        part = path.relative_to(package).parts[0]
        if part in outside or path.name == "safe_files.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("safe_files"):
                assert {a.name for a in node.names} <= allowed, (path, [a.name for a in node.names])
            if isinstance(node, ast.Import):
                assert not any(a.name.endswith("safe_files") for a in node.names), path
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "take":
                takers.add(str(path.relative_to(package)))
    assert takers == {"grade/__init__.py", "sandbox/runner.py", "feedback/hints.py"}, takers


def test_a_grade_reads_its_snapshot_after_the_folder_is_changed_retaken_and_removed(tmp_path, monkeypatch):
    """After the grade's snapshot is taken (prestart), the folder is edited (the mistake fixed, its lines moved),
    read again by someone else (`take`, as another grade of the same folder would), then removed, and any read of
    a file by path fails loudly: the grade still grades the bytes it took, localises and points at their lines, and
    names their SHA-256."""
    import hashlib

    from autograder.sandbox import safe_files
    from autograder.sandbox.runner import close_launchers, prestart

    sub = variant(tmp_path, {"masking.py": [("return j <= i + (n_k - n_q)", "return j <= i")]})
    taken = (sub / "masking.py").read_text()
    wrong = next(i for i, line in enumerate(taken.splitlines(), 1) if line.strip().startswith("return j <= i  #"))
    workers = prestart(sub.resolve(), ["numpy"], 10.0)
    try:
        (sub / "masking.py").write_text("# moved\n# down\n# three\n" + (SOLUTIONS / "masking.py").read_text())
        safe_files.take(sub)  # another reader of the same folder: nothing of it reaches this grade
        shutil.rmtree(sub)

        def no_disk(path, limit=safe_files.MAX_FILE_BYTES):
            raise AssertionError(f"{path} read from disk during the grade")

        monkeypatch.setattr(safe_files, "_read", no_disk)
        monkeypatch.setattr(safe_files, "_problem", no_disk)
        res = grade(sub, stages=["softmax", "scaling", "masking"], workers=workers)
    finally:
        close_launchers(workers)
    assert res.files["masking.py"] == hashlib.sha256(taken.encode()).hexdigest()
    assert res.stages["masking"].status == "failed" and res.stages["softmax"].status == "passed"
    loc = res.located.get("masking")
    assert loc is not None and loc.file == "masking.py" and loc.line == wrong, loc
    assert f"masking.py:{wrong}" in res.next_step, res.next_step
