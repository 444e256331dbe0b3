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
