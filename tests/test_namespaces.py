"""The operating system's boundary around a child (autograder/sandbox/namespaces.py), tested below the static
check: code running inside it, with every import it likes, cannot see the checkout, home, other
submissions or the network, cannot fill the machine's /tmp, and leaves no process behind."""
import ast
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ROOT

from autograder.sandbox import namespaces
from autograder.sandbox.launchers import sandbox_uid

pytestmark = pytest.mark.skipif(not namespaces.available(), reason="no namespaces here (unshare refused or missing)")


def run_inside(code: str, tmp_path: Path, hide=(), timeout=60) -> subprocess.CompletedProcess:
    scratch = Path(tempfile.mkdtemp(prefix="attn-grade-"))
    uid = sandbox_uid()
    if uid is not None:
        os.chown(scratch, uid, uid)
    cmd = namespaces.wrap([sys.executable, "-I", "-c", code], scratch, uid, list(hide))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=scratch, start_new_session=True)


def test_the_child_sees_only_its_scratch_and_the_interpreter(tmp_path):
    batch = tmp_path / "batch"
    (batch / "alice").mkdir(parents=True)
    (batch / "alice" / "softmax.py").write_text("ANSWER = 42\n")
    code = ("import os, socket, numpy\n"
            f"print('solutions', os.path.exists({str(ROOT / 'solutions')!r}))\n"
            f"print('attn_ref', os.path.exists({str(ROOT / 'attn_ref')!r}))\n"
            f"print('other', os.path.exists({str(batch / 'alice' / 'softmax.py')!r}))\n"
            "print('home', os.listdir(os.path.expanduser('~')) if os.path.isdir(os.path.expanduser('~')) else [])\n"
            "print('pid', os.getpid())\n"
            "s = socket.socket(); s.settimeout(2)\n"
            "print('net', s.connect_ex(('1.1.1.1', 80)) != 0)\n"
            "try:\n    open(numpy.__file__, 'a').close(); print('venv writable')\nexcept OSError:\n    print('venv read-only')\n")
    p = run_inside(code, tmp_path, hide=[batch])
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "solutions False" in out and "attn_ref False" in out and "other False" in out, out
    # in home, at most the folders that lead to the interpreter (a pyenv under ~/.pyenv is put back)
    home = Path(os.path.expanduser("~")).resolve()
    leading = {Path(p).resolve().relative_to(home).parts[0] for p in (sys.prefix, sys.base_prefix, sys.executable)
               if Path(p).resolve().is_relative_to(home)}
    shown = ast.literal_eval(out.split("home ", 1)[1].splitlines()[0])  # the list the child printed
    assert set(shown) <= leading, (shown, leading)
    assert "pid 1" in out and "net True" in out and "venv read-only" in out, out


@pytest.mark.parametrize("where", ["/srv", "/opt", "/mnt", str(ROOT / "dist")])
def test_what_the_child_sees_is_an_allowlist(where, tmp_path):
    """A folder nobody named to hide (a checkout under /srv, dist/ beside the zip) is not there for the child:
    its view holds the system's folders, the interpreter and its scratch, nothing else."""
    import shutil

    base = Path(where)
    made = not base.exists()
    try:
        base.mkdir(exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="attn-unlisted-", dir=base))
    except OSError:
        pytest.skip(f"{where} is not writable here")
    try:
        (folder / "autograder.secret").write_text("s3cret")
        code = (f"import os\nprint('exists', os.path.exists({str(folder)!r}))\n"
                f"print('beside', os.listdir({str(base)!r}) if os.path.isdir({str(base)!r}) else [])\n")
        p = run_inside(code, tmp_path)
        assert p.returncode == 0, p.stderr
        assert "exists False" in p.stdout and folder.name not in p.stdout, p.stdout
    finally:
        shutil.rmtree(base if made else folder, ignore_errors=True)


def test_temp_space_is_private_capped_and_gone(tmp_path):
    marker = f"attn-fill-{os.getpid()}"
    code = ("import os\n"
            f"path = '/tmp/{marker}'\n"
            "written = 0\n"
            "try:\n"
            "    with open(path, 'wb') as f:\n"
            "        for _ in range(1024):\n"
            "            f.write(b'x' * 2**20); f.flush(); written += 1\n"
            "except OSError as e:\n"
            "    print('stopped', e.errno)\n"
            "print('MiB', written)\n")
    p = run_inside(code, tmp_path)
    assert p.returncode == 0, p.stderr
    mib = int(p.stdout.split("MiB")[1])
    assert "stopped" in p.stdout and mib <= int(namespaces.TMP_SIZE.rstrip("m")), p.stdout
    assert not Path(f"/tmp/{marker}").exists()  # never on the machine's /tmp


def test_an_escaped_process_ends_with_the_child(tmp_path):
    """A process started with an empty environment in a session of its own (invisible to a sweep by
    marker or process group) still ends: it lives in the child's pid namespace."""
    code = ("import subprocess\n"
            "subprocess.Popen(['sh', '-c', 'while true; do sleep 0.2; done'], env={}, start_new_session=True)\n"
            "print('started')\n")
    p = run_inside(code, tmp_path)
    assert "started" in p.stdout, p.stderr
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "while true; do sleep 0.2; done" not in ps


def test_the_grade_runs_inside_them(tmp_path):
    """The children `make grade` starts are namespaced: the report shows no namespace note."""
    from conftest import SOLUTIONS, grade

    res = grade(SOLUTIONS, stages=["softmax"])
    assert res.score == res.max_score
    assert not any("namespaces" in n for n in res.protections_off)


@pytest.mark.slow
def test_regrade_children_cannot_touch_the_batch_home_or_checkout(tmp_path, monkeypatch):
    """With the static check switched off, a submission in a regrade tries to rewrite another student's
    file, plant a file in the home folder and read the solutions: inside its namespaces none of them is
    there, so everyone keeps their score and nothing outside its scratch changes."""
    import shutil

    from conftest import SOLUTIONS, variant

    from autograder.instructor.regrade import regrade

    monkeypatch.setenv("ATTN_STATIC_CHECK", "off")
    batch = tmp_path / "batch"
    batch.mkdir()
    shutil.copytree(SOLUTIONS, batch / "alice")
    home_marker = Path(os.path.expanduser("~")) / f".attn-planted-{os.getpid()}"
    attack = ("import os\n"
              f"for path, text in (({str(batch / 'alice' / 'softmax.py')!r}, 'raise SystemExit'),\n"
              f"                   ({str(home_marker)!r}, 'planted')):\n"
              "    try:\n        open(path, 'w').write(text)\n    except OSError:\n        pass\n"
              f"SEEN = os.path.exists({str(ROOT / 'solutions' / 'softmax.py')!r})\n")
    shutil.move(str(variant(tmp_path / "m", {"scaling.py": [("import numpy as np\n", "import numpy as np\n" + attack)]})),
                batch / "mallory")
    before = (batch / "alice" / "softmax.py").read_text()
    out = regrade(batch, jobs=2, quiet=True)
    import csv

    rows = {r["submission"]: float(r["total"]) for r in csv.DictReader(open(out / "summary.csv"))}
    assert rows["alice"] == rows["mallory"] == 100, rows
    assert (batch / "alice" / "softmax.py").read_text() == before
    assert not home_marker.exists()


def test_the_new_root_is_built_where_nothing_the_child_keeps_lies():
    """The private tmpfs the new root is made in is mounted over a folder first: never over one that holds the
    child's scratch (a TMPDIR in /dev/shm would have vanished under it before it was bound)."""
    from autograder.sandbox.namespaces import spec

    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    with tempfile.TemporaryDirectory(prefix="attn-grade-") as usual, \
            tempfile.TemporaryDirectory(prefix="attn-grade-", dir="/dev/shm") as moved:
        assert spec(Path(usual), None)["parent"] == "/dev/shm"
        made = spec(Path(moved), None)
        assert made["parent"] != "/dev/shm" and made["root"].startswith(made["parent"] + "/")


def test_an_interpreter_named_through_a_folder_the_child_cannot_see_still_runs_it(tmp_path):
    """Found by a stranger TA: `../../.venv/bin/python -m autograder grade` run from dist/student left every check
    "not run" and blamed the environment: the child was started by that same name, through a folder its new root
    does not hold. It is started by the name without `..`."""
    python = str(ROOT / "tests") + os.sep + os.path.relpath(sys.executable, ROOT / "tests")
    assert ".." in python
    p = subprocess.run([python, "-m", "autograder", "grade", "--submission", str(ROOT / "solutions"), "--stage",
                        "softmax"], cwd=ROOT / "tests", env={**os.environ, "PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "12/12  passed" in p.stdout, p.stdout[-1500:] + p.stderr[-1500:]
