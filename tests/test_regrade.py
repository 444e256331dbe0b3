"""Batch regrade: every submission gets a row and a JSON file; a broken one never stops the batch."""
import csv
import json
import os
import shutil

import pytest
from conftest import EXERCISES, SOLUTIONS, variant

from autograder.instructor.regrade import regrade
from autograder.sandbox import namespaces
from autograder.sandbox.launchers import separate_user_possible
from autograder.stages import BONUS_POINTS, CORE_POINTS

TRUST = not separate_user_possible()  # root with a shared interpreter: the default; else the tests vouch for the code


@pytest.mark.slow
def test_regrade_folder(tmp_path):
    batch = tmp_path / "batch"
    batch.mkdir()
    shutil.copytree(SOLUTIONS, batch / "alice")
    shutil.copytree(EXERCISES, batch / "bob")
    shutil.copytree(variant(tmp_path / "v", {"masking.py": [("return j <= i + (n_k - n_q)", "return j <= i")]}),
                    batch / "carol")
    (batch / "dave.zip").write_text("not a zip at all")
    # found by a stranger TA: a .tar.gz or a loose .py got no row at all, and an empty folder's next step named
    # the batch's path on the instructor's machine
    (batch / "erin.tar.gz").write_bytes(b"\x1f\x8b")
    shutil.copy(SOLUTIONS / "softmax.py", batch / "frank.py")
    (batch / "gina").mkdir()
    (batch / "submission_metadata.yml").write_text("a file Gradescope's export holds: not a submission\n")
    out = regrade(batch, jobs=2, quiet=True, trust=TRUST)
    rows = {r["submission"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert set(rows) == {"alice", "bob", "carol", "dave.zip", "erin.tar.gz", "frank.py", "gina"}
    assert float(rows["alice"]["total"]) == CORE_POINTS and float(rows["bob"]["total"]) == 0
    assert float(rows["carol"]["masking"]) < 16 and float(rows["carol"]["softmax"]) == 12
    assert rows["dave.zip"]["error"]
    assert "archive is not read" in rows["erin.tar.gz"]["error"] and "single .py file" in rows["frank.py"]["error"]
    students = {r["student"] for r in csv.DictReader(open(out / "grades.csv"))}
    assert students == {"alice", "bob", "carol", "dave", "erin", "frank", "gina"}
    assert "no stage modules found" in rows["gina"]["error"]  # an empty folder is told from the stubs
    alice = json.loads((out / "alice.json").read_text())
    assert "every stage passes" in alice["output"] and "make submit" not in alice["output"]  # handed in already
    for page in out.iterdir():
        assert str(batch) not in page.read_text(), page.name
    carol = json.loads((out / "carol.json").read_text())
    assert any(t["extra_data"]["diagnosis"] == "mask-top-left" for t in carol["tests"])


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_zygote_children_are_sandboxed_like_spawned_ones(tmp_path):
    """Forked from the fork server, a torch child still crashes alone, times out alone, and is swept."""
    from conftest import grade

    from autograder.sandbox.launchers import ForkServer as Zygote

    z = Zygote()
    try:
        segfault = "np.lib.stride_tricks.as_strided(np.zeros(1), shape=(1 << 40,), strides=(1 << 20,)).sum()"
        sub = variant(tmp_path, {"kv_cache.py": [("        t = k_new.shape[-2]\n", f"        import numpy as np; {segfault}\n")]})
        res = grade(sub, stages=["kv_cache", "fused"], zygote=z)
        assert any("segmentation fault" in r.message for r in res.stages["kv_cache"].checks)
        fused = res.stages["fused"]  # it uses the cache for one check: blocked by it, its other checks pass
        assert fused.status == "blocked" and fused.blocked_by == "kv_cache"
        assert sum(not r.passed for r in fused.checks) == 1
        full = grade(SOLUTIONS, zygote=z)
        assert full.score == CORE_POINTS and full.bonus_score == BONUS_POINTS
    finally:
        z.close()


@pytest.mark.slow
@pytest.mark.parametrize("same_user,guard", [(True, "off"), (False, "off"), (True, "on")])
def test_a_submission_that_kills_the_fork_server_costs_only_its_own_points(tmp_path, monkeypatch, same_user, guard):
    """The run-time guard refuses the kill (the killer loses its stage, nothing else changes). Without it, run as
    the grader's user, a child can kill the shared fork server; the batch starts another and grades again whatever
    was being graded then. (Under its own uid the kill is refused.)"""
    import autograder.sandbox.launchers as sb

    # the fork server is what regrade uses without namespaces; the killer's `import os` is let past the static
    # check (and, with the guard off, past the run-time guard), to see the batch survive what the sandbox alone
    # lets through
    monkeypatch.setattr(sb.namespaces, "available", lambda: False)
    monkeypatch.setenv("ATTN_STATIC_CHECK", "off")
    if guard == "off":
        monkeypatch.setenv("ATTN_GUARD", "off")
    if same_user:  # as on a laptop or a course server without root
        monkeypatch.setattr(sb, "separate_user_possible", lambda: False)
    starts = tmp_path / "starts"  # one line per fork server started, by any grading process
    real_init = sb.ForkServer.__init__

    def counted_init(self, *a, **k):
        with open(starts, "a") as f:
            f.write("start\n")
        real_init(self, *a, **k)

    monkeypatch.setattr(sb.ForkServer, "__init__", counted_init)
    batch = tmp_path / "batch"
    batch.mkdir()
    killer = {"softmax.py": [("import numpy as np\n", "import numpy as np\nimport os, signal\n"
                                                    "os.kill(os.getppid(), signal.SIGKILL)\n")]}
    shutil.move(str(variant(tmp_path / "k", killer)), batch / "aaron")
    for name in ("alice", "bob", "carol", "dave"):
        shutil.copytree(SOLUTIONS, batch / name)
    out = regrade(batch, jobs=2, quiet=True, trust=TRUST)
    rows = {r["submission"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert set(rows) == {"aaron", "alice", "bob", "carol", "dave"}
    for name in ("alice", "bob", "carol", "dave"):
        assert float(rows[name]["total"]) == CORE_POINTS, (name, rows[name]["error"])
    servers = len(starts.read_text().split())
    if guard == "on" or (not same_user and sb.separate_user_possible()):  # refused: aaron's import fails
        assert float(rows["aaron"]["softmax"]) < 12 and servers == 2  # the batch's numpy and torch servers
    else:
        assert servers >= 3, "aaron killed a shared server: a process started its own to grade again"


@pytest.mark.slow
def test_grade_one_replaces_a_dead_server(monkeypatch):
    import autograder.instructor.regrade as rg
    from autograder.sandbox.launchers import ForkServer as Zygote

    monkeypatch.setattr(rg.namespaces, "available", lambda: False)  # with them, each child is a new interpreter
    dead = Zygote()
    dead.close()
    assert not dead.alive()
    monkeypatch.setattr(rg, "_zygotes", {"numpy": dead, "torch": dead})
    r = rg.grade_one(SOLUTIONS, None, 0, 10.0)
    assert r["error"] is None and r["results"]["score"] == CORE_POINTS
    for kind, server in rg._zygotes.items():
        assert server is not dead and server.alive() and server.torch == (kind == "torch")
        server.close()


@pytest.mark.slow
@pytest.mark.skipif(not separate_user_possible(), reason="the fork-server option needs root and a shared interpreter")
def test_the_fork_server_option_grades_the_same_and_puts_the_modes_back(tmp_path):
    """FORK_SERVER=1 (as root): every child forked from one server under its own uid, the reference and the
    batch root-only meanwhile; the same totals as each child in namespaces, and the modes put back after."""
    from conftest import ROOT

    batch = tmp_path / "batch"
    batch.mkdir()
    shutil.copytree(SOLUTIONS, batch / "alice")
    shutil.copytree(variant(tmp_path / "v", {"masking.py": [("return j <= i + (n_k - n_q)", "return j <= i")]}),
                    batch / "carol")
    modes = {p: p.stat().st_mode for p in (ROOT / "attn_ref", ROOT / "solutions", batch)}
    fast = regrade(batch, tmp_path / "fast", jobs=2, quiet=True, fork_server=True)
    safe = regrade(batch, tmp_path / "safe", jobs=2, quiet=True)
    rows = [{r["submission"]: r["total"] for r in csv.DictReader(open(out / "summary.csv"))} for out in (fast, safe)]
    assert rows[0] == rows[1] and float(rows[0]["alice"]) > float(rows[0]["carol"])
    assert {p: p.stat().st_mode for p in modes} == modes


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
@pytest.mark.skipif(not separate_user_possible() or not namespaces.available(),
                    reason="the fork server's namespaces are tested as root, where they exist")
def test_a_fork_server_child_can_neither_read_dist_nor_reach_the_network(tmp_path, monkeypatch):
    """FORK_SERVER=1, with the static check and the run-time guard off (the operating system's boundary
    alone): a submission tries to read a course secret in dist/ and to connect to a listener on the
    loopback. The fork server and its children share one set of namespaces: neither is there."""
    import socket

    from conftest import ROOT

    monkeypatch.setenv("ATTN_STATIC_CHECK", "off")
    monkeypatch.setenv("ATTN_GUARD", "off")
    dist = ROOT / "dist"
    made = not dist.exists()
    dist.mkdir(exist_ok=True)
    secret = dist / f"attn-test-{os.getpid()}.secret"
    secret.write_text("s3cret")
    secret.chmod(0o644)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.5)
    attack = ("import os, socket\nSEEN = []\n"
              f"try:\n    SEEN.append(open({str(secret)!r}).read())\nexcept OSError:\n    pass\n"
              f"try:\n    socket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), timeout=2).sendall(b'x')\n"
              "    SEEN.append('net')\nexcept OSError:\n    pass\n"
              "if SEEN:\n    raise RuntimeError('reached ' + repr(SEEN))\n")
    batch = tmp_path / "batch"
    batch.mkdir()
    shutil.move(str(variant(tmp_path / "m", {"softmax.py": [("import numpy as np\n", "import numpy as np\n" + attack)]})),
                batch / "mallory")
    try:
        out = regrade(batch, jobs=1, quiet=True, fork_server=True)
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()
        shutil.rmtree(dist) if made else secret.unlink()
    row = next(csv.DictReader(open(out / "summary.csv")))
    assert float(row["softmax"]) == 12, json.loads((out / "mallory.json").read_text())["tests"][0]["output"]


@pytest.mark.slow  # runs a regrade, a whole channel (CONTRIBUTING.md, the tiers): make test only
def test_a_zip_leaves_none_of_its_code_in_the_temp_folder(tmp_path, monkeypatch):
    """Found by a stranger TA: every zip of a batch was unpacked into the temp folder (attn-sub-*) and left there,
    the student's code readable after the regrade ended."""
    import tempfile
    import zipfile

    import autograder.instructor.regrade as rg

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    z = tmp_path / "alice.zip"
    with zipfile.ZipFile(z, "w") as f:
        for p in SOLUTIONS.glob("*.py"):
            f.write(p, f"alice/{p.name}")
    try:
        r = rg.grade_one(z, None, 0, 10.0)
    finally:
        for server in rg._zygotes.values():
            server.close()
        rg._zygotes.clear()
    assert r["error"] is None and r["results"]["score"] == CORE_POINTS
    assert not list(tmp.glob("attn-sub-*")), list(tmp.iterdir())


FORMULAS = ("=1+1", "+1+1", "-1+1", "@SUM(1)")  # what a spreadsheet would run, as the first cell of a row
OSC_NAME = "\x1b]0;owned\x07\x1b[2Jeve"  # sets the terminal's title, then clears the screen
COLOURED = "\x1b[31mred\x1b[0m.txt"


def _cells(folder) -> dict[str, list[list[str]]]:
    return {p.name: list(csv.reader(open(p, newline=""))) for p in folder.glob("*.csv")}


def test_staff_files_and_terminal_lines_are_inert(tmp_path, capsys):
    """Issue 41: submissions named like formulas land in every CSV with a leading quote (OWASP), read back as
    given; an entry named with an OSC title and a clear-screen sequence and a stray file in colour codes reach
    the terminal with no ESC byte, through the progress line and the left-out line."""
    from autograder.instructor.staff_text import read_csv

    batch = tmp_path / "batch"
    batch.mkdir()
    for name in (*FORMULAS, OSC_NAME):
        (batch / name).mkdir()  # no stage module: a row with its error, graded in no time
    (batch / COLOURED).write_text("a stray file\n")
    out = regrade(batch, jobs=1, quiet=False, trust=TRUST)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err, repr(err)
    assert "eve" in err and "red.txt" in err and "left out" in err  # shown, as plain text, the sequences dropped
    files = _cells(out)
    assert {"summary.csv", "grades.csv", "grades-canvas.csv", "grades-brightspace.csv", "diagnoses.csv"} <= set(files)
    for name, rows in files.items():
        for row in rows:
            assert not any(c.startswith(("=", "+", "-", "@", "\t", "\r")) for c in row), (name, row)
    firsts = {row[0] for row in files["grades.csv"][1:]}
    assert {"'" + f for f in FORMULAS} <= firsts, firsts
    assert {r["submission"] for r in read_csv(out / "summary.csv")} == {*FORMULAS, OSC_NAME}


def test_diagnoses_csv_cells_are_inert(tmp_path):
    """diagnoses.csv, from a results folder whose student is named like a formula."""
    from autograder.instructor import class_report

    results = tmp_path / "results"
    results.mkdir()
    failing = {"name": "t", "score": 0, "max_score": 1, "status": "failed", "output": "",
               "extra_data": {"stage": "masking", "check": "offset_mask", "diagnosis": "mask-top-left"}}
    for name in FORMULAS:
        (results / f"{name}.json").write_text(json.dumps({"score": 80, "tests": [failing], "extra_data": {
            "stages": {"masking": {"score": 0, "max_score": 1, "status": "failed", "blocked_by": None}}}}))
    class_report.write(results)
    rows = _cells(results)["diagnoses.csv"]
    assert sorted(r[0] for r in rows[1:]) == sorted("'" + f for f in FORMULAS)
    assert rows[1][1:5] == ["masking", "offset_mask", "failed", "mask-top-left"]


def test_regrade_stops_before_grading_where_the_separate_uid_is_off(tmp_path, monkeypatch):
    """Issue 44: without a uid of its own per submission, regrade says why and how to fix it in one sentence,
    before grading anything (no results folder); SAME_UID=1 goes on."""
    import sys

    import autograder.instructor.regrade as rg

    batch = tmp_path / "batch"
    batch.mkdir()
    monkeypatch.setenv("ATTN_SANDBOX_SAME_USER", "1")
    if not namespaces.available():
        pytest.skip("without namespaces the refusal is the TRUST=1 one (test_platforms)")
    with pytest.raises(rg.Untrusted) as e:
        regrade(batch, quiet=True)
    assert "ATTN_SANDBOX_SAME_USER is set" in str(e.value) and "SAME_UID=1" in str(e.value)
    assert "\n" not in str(e.value) and not (tmp_path / "batch-results").exists()
    out = regrade(batch, quiet=True, same_uid=True)
    assert (out / "grades.csv").is_file()

    # a root whose interpreter lies in a folder other users cannot enter (a pyenv under /root)
    monkeypatch.delenv("ATTN_SANDBOX_SAME_USER")
    private = tmp_path / "private"
    (private / "bin").mkdir(parents=True)
    (private / "bin" / "python").write_text("")
    private.chmod(0o700)
    monkeypatch.setattr(rg, "separate_user_possible", lambda: False)
    monkeypatch.setattr(rg.os, "geteuid", lambda: 0)
    monkeypatch.setattr(sys, "executable", str(private / "bin" / "python"))
    why, fix = rg.why_no_separate_uid()
    closed = why.split(": ")[-1].split(" is closed")[0]
    assert str(private / "bin" / "python").startswith(closed + os.sep), why
    assert "PYTHON=" in fix


@pytest.mark.slow
def test_regrade_counts_the_bonus_as_the_policy_says(tmp_path):
    """Issue 44: BONUS=apart keeps the bonus beside the total (grades.csv's total is the core; the LMS files carry
    the bonus as an item of its own), BONUS=folded counts it in the total (one LMS item)."""
    batch = tmp_path / "batch"
    batch.mkdir()
    shutil.copytree(SOLUTIONS, batch / "alice")
    shutil.copytree(variant(tmp_path / "v", {"masking.py": [("return j <= i + (n_k - n_q)", "return j <= i")]}),
                    batch / "bob")
    graded = {policy: regrade(batch, tmp_path / policy, jobs=2, quiet=True, trust=TRUST, bonus=policy)
              for policy in ("apart", "folded")}
    apart, folded = ({r["student"]: r for r in csv.DictReader(open(graded[p] / "grades.csv"))} for p in graded)
    assert (float(apart["alice"]["total"]), float(apart["alice"]["bonus"])) == (CORE_POINTS, BONUS_POINTS)
    assert float(folded["alice"]["total"]) == CORE_POINTS + BONUS_POINTS
    for name in ("alice", "bob"):
        core, bonus = float(apart[name]["core"]), float(apart[name]["bonus"])
        assert float(apart[name]["total"]) == core and float(folded[name]["total"]) == core + bonus
        assert (float(folded[name]["core"]), float(folded[name]["bonus"])) == (core, bonus)
        assert json.loads((graded["folded"] / f"{name}.json").read_text())["score"] == core + bonus
    assert float(apart["bob"]["bonus"]) < BONUS_POINTS  # gqa and rope reach bob's mask
    assert next(csv.reader(open(graded["folded"] / "grades-canvas.csv")))[5:] == ["Attention kit"]
    assert next(csv.reader(open(graded["apart"] / "grades-canvas.csv")))[5:] == ["Attention kit", "Attention kit bonus"]
    summary = {r["submission"]: r for r in csv.DictReader(open(graded["folded"] / "summary.csv"))}
    assert float(summary["bob"]["total"]) == float(folded["bob"]["total"])


def test_make_regrade_passes_bonus_item_and_same_uid_to_the_command(monkeypatch, tmp_path):
    """`make regrade BONUS=folded ITEM=... SAME_UID=1` reaches regrade() as those arguments."""
    import subprocess

    from conftest import ROOT

    import autograder.instructor.regrade as rg
    from autograder.cli import main

    made = subprocess.run(["make", "-n", "regrade", "DIR=x", "BONUS=folded", "SAME_UID=1", "ITEM=HW 3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60).stdout
    assert '--bonus folded --same-uid --item "HW 3"' in made, made
    seen = {}
    monkeypatch.setattr(rg, "regrade", lambda folder, *a, **kw: seen.update(kw) or tmp_path)
    assert main(["regrade", str(tmp_path), "--bonus", "folded", "--same-uid", "--item", "HW 3"]) == 0
    assert (seen["bonus"], seen["same_uid"], seen["item"]) == ("folded", True, "HW 3")


def test_regrade_without_a_folder_says_which_dir_to_give_and_creates_nothing(tmp_path, capsys):
    """Found by a stranger TA: DIR naming no folder, or a zip, gave a traceback and left an empty results folder;
    no DIR at all gave argparse's "folder required". Each is one sentence naming the fix, exit 2, nothing made."""
    import subprocess

    from conftest import ROOT

    from autograder.cli import main

    gone = tmp_path / "no-such-folder"
    batch_zip = tmp_path / "batch.zip"
    shutil.make_archive(str(tmp_path / "batch"), "zip", SOLUTIONS)
    stray = tmp_path / "roster.txt"
    stray.write_text("alice\n")
    for argv, said in ((["regrade", str(gone)], f"there is no folder {gone}: set DIR="),
                       (["regrade", str(batch_zip)], f"unzip {batch_zip} -d {tmp_path / 'batch'}) and run make regrade "
                                                     f"DIR={tmp_path / 'batch'}, or grade that one submission with make "
                                                     f"grade SUBMISSION={batch_zip}"),
                       (["regrade", str(stray)], "is a file, not a folder: set DIR="),
                       (["regrade"], "name it with DIR="),
                       (["regrade", str(tmp_path), "--secret-file", str(gone)], "cannot read SECRET_FILE")):
        before = set(tmp_path.iterdir())
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1, (argv, err)
        assert set(tmp_path.iterdir()) == before, argv  # no <name>-results folder
    made = subprocess.run(["make", "-s", "regrade"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert made.returncode == 2 and "DIR=" in made.stderr and "Traceback" not in made.stderr, made.stderr
    assert "required" not in made.stderr


def _one_row_batch(tmp_path):
    batch = tmp_path / "batch"
    (batch / "alice").mkdir(parents=True)  # no stage module: a row with its error, graded in no time
    return batch


def test_regrade_without_the_secret_says_the_inputs_are_public_and_records_it(tmp_path, capsys):
    """Found by a stranger TA: without SECRET_FILE the hidden checks silently used seed 0, the inputs whose
    answers the student release records. A line before grading says so and how to pass the secret; summary.csv
    and the class report record where the inputs came from."""
    from autograder.instructor.staff_text import read_csv

    batch = _one_row_batch(tmp_path)
    out = regrade(batch, jobs=1, trust=TRUST)
    err = capsys.readouterr().err
    warning = next(line for line in err.splitlines() if "no course secret" in line)
    assert "public inputs (seed 0)" in warning and "SECRET_FILE=dist/autograder.secret" in warning
    assert err.index("no course secret") < err.index("1/1")  # before any submission is graded
    assert read_csv(out / "summary.csv")[0]["hidden_inputs"] == "the release's public inputs (seed 0)"
    page = (out / "class-report.html").read_text()
    assert "the release&#x27;s public inputs (seed 0)" in page and "SECRET_FILE=dist/autograder.secret" in page

    out = regrade(batch, tmp_path / "secret", jobs=1, trust=TRUST, secret="s3cret")
    assert "no course secret" not in capsys.readouterr().err
    assert read_csv(out / "summary.csv")[0]["hidden_inputs"].startswith("course secret")
    assert "SECRET_FILE" not in (out / "class-report.html").read_text()


def test_a_regrade_that_went_on_with_same_uid_says_so_in_its_outputs(tmp_path, monkeypatch):
    """Found by a stranger TA: after SAME_UID=1 nothing in the outputs said the submissions shared the grader's
    uid. summary.csv's sandbox column and one line of the class report say it; with a uid each, they say that."""
    import autograder.instructor.regrade as rg
    from autograder.instructor.staff_text import read_csv

    if not namespaces.available():
        pytest.skip("without namespaces the refusal is the TRUST=1 one (test_platforms)")
    batch = _one_row_batch(tmp_path)
    own_uid = separate_user_possible()
    monkeypatch.setattr(rg, "separate_user_possible", lambda: False)
    out = regrade(batch, quiet=True, same_uid=True)
    mode = read_csv(out / "summary.csv")[0]["sandbox"]
    assert "grader's own uid" in mode and "SAME_UID=1" in mode, mode
    run = (out / "class-report.html").read_text().split("<p id='run'>")[1].split("</p>")[0]
    assert "SAME_UID=1" in run and "namespaces" in run, run
    if not own_uid:
        return  # the other half needs root with an interpreter other users can run
    monkeypatch.setattr(rg, "separate_user_possible", lambda: True)
    out = regrade(batch, tmp_path / "own", quiet=True, trust=True)
    assert read_csv(out / "summary.csv")[0]["sandbox"] == "a uid of their own each"
