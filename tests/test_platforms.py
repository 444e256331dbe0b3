"""The kit on machines it was not built on, simulated here by taking away what they lack: a hard
address-space limit below the kit's (a shared server, macOS refusing one), no /proc (macOS), no fork
(macOS), no resource/fcntl/fork at all (Windows), other Pythons (3.10 refused; 3.12 and 3.13 graded).

Under each gap the solutions keep full marks, and a submission with an endless loop, a crash and a
memory bomb loses what it loses on Linux as usual, and nothing more."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXERCISES, ROOT, SOLUTIONS, Watching, copy_repo, grade, variant

from autograder.stages import BONUS_POINTS, CORE_POINTS

pytestmark = pytest.mark.slow  # builds or runs a whole channel: `make test` only (CONTRIBUTING.md)

NUMPY_STAGES = "softmax,dot_products,projections,scaling,masking"
HOSTILE = {  # one stage each: a crash (a segmentation fault, no import needed), an endless loop, a memory bomb
    "softmax.py": [("    scores = np.asarray(scores)\n", "    np.lib.stride_tricks.as_strided(np.zeros(1), shape=(1 << 40,), "
                    "strides=(1 << 20,)).sum()\n")],
    "scaling.py": [("    d_k = q.shape[-1]\n", "    while True:\n        pass\n")],
    "projections.py": [("    q = x @ w_q", "    bomb = np.ones(2**31)\n    q = x @ w_q")],
}
HOSTILE_STAGES = "softmax,projections,scaling,fused"
ULIMIT_V_KIB = 3891200  # 3.7 GiB: below the kit's 4 GiB address-space limit
SITE = """\
import os, sys
for name in {names!r}:
    if hasattr(os, name):
        delattr(os, name)
{extra}"""


def sitecustomize(tmp_path: Path, names=("fork", "forkpty", "register_at_fork"), extra: str = "") -> dict:
    """An environment whose interpreter starts without the given os functions (and runs `extra`)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITE.format(names=list(names), extra=extra))
    return {**os.environ, "PYTHONPATH": str(site)}


def grade_cli(sub: Path, stages: str | None, tmp_path: Path, prefix=(), env=None, timeout="3") -> tuple[dict, str]:
    """`python -m autograder grade` (under `prefix`): each stage's score, and what it printed."""
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.json')))}.json"
    cmd = [*prefix, sys.executable, "-m", "autograder", "grade", "--submission", str(sub), "--json", str(out),
           "--timeout", timeout, *(["--stage", stages] if stages else [])]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    stages_ = json.loads(out.read_text())["extra_data"]["stages"]
    return {n: s["score"] for n, s in stages_.items()}, p.stdout


def _unshare_works() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


ULIMIT = ("bash", "-c", f'ulimit -v {ULIMIT_V_KIB} && exec "$@"', "_")
NO_PROC = ("unshare", "-m", "sh", "-c", 'mount -t tmpfs none /proc && exec "$@"', "_")
SIMULATIONS = {
    "hard ulimit -v below 4 GiB": (ULIMIT, None, "lowered to this account's hard limit: 3.71 GiB"),
    "no /proc": (NO_PROC, None, None),
    # macOS as near as Linux gets: no /proc, not root, no namespaces
    "no /proc, no separate user, no namespaces": (NO_PROC, {"ATTN_SANDBOX_SAME_USER": "1", "ATTN_NO_NAMESPACES": "1"},
                                                  "covers the child's process group only"),
}


@pytest.fixture(scope="module")
def linux_scores(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("linux")
    hostile = variant(tmp, HOSTILE)
    return grade_cli(SOLUTIONS, None, tmp, timeout="10")[0], grade_cli(hostile, HOSTILE_STAGES, tmp)[0]


@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_platform_gap_costs_nothing(name, tmp_path, linux_scores):
    prefix, extra_env, note = SIMULATIONS[name]
    if prefix[0] == "unshare" and not _unshare_works():
        pytest.skip("needs root and a private mount namespace (unshare -m) to hide /proc")
    env = {**os.environ, **(extra_env or {})}
    solutions, printed = grade_cli(SOLUTIONS, None, tmp_path, prefix, env, timeout="10")
    assert solutions == linux_scores[0] and sum(solutions.values()) == CORE_POINTS + BONUS_POINTS, solutions
    if note:
        assert note in printed, printed  # the report says once what is off
        assert printed.count(note) == 1
    hostile, _ = grade_cli(variant(tmp_path, HOSTILE), HOSTILE_STAGES, tmp_path, prefix, env)
    assert hostile == linux_scores[1], (hostile, linux_scores[1])
    assert hostile["softmax"] == hostile["projections"] == hostile["scaling"] == 0
    assert hostile["fused"] == 14  # the other stages keep theirs


def test_linux_as_usual_reports_nothing_off(linux_scores, tmp_path):
    _, printed = grade_cli(SOLUTIONS, "softmax", tmp_path)
    assert "Sandbox protections" not in printed


def test_fused_memory_is_measured_without_proc(tmp_path):
    """The fused stage's memory check reads each fresh child's peak from the kernel when it is reaped
    (wait4), not from /proc: it still catches a call that builds the T x T scores."""
    if not _unshare_works():
        pytest.skip("needs root and a private mount namespace (unshare -m) to hide /proc")
    from conftest import MUTANTS

    sub = variant(tmp_path, MUTANTS["fused-not-fused"][0])
    p = subprocess.run([*NO_PROC, sys.executable, "-m", "autograder", "grade", "--submission", str(sub), "--stage",
                        "fused", "-v"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "no_quadratic_memory [fused-not-fused]" in p.stdout, p.stdout
    assert "raised peak memory by" in p.stdout


@pytest.mark.serial  # a new interpreter (torch loaded anew) per child, a few dozen a grade: alone, not beside others
def test_no_fork_regrade_and_watch(tmp_path):
    """Where fork is missing (or unsafe, as on macOS) regrade and watch start new interpreters instead."""
    env = sitecustomize(tmp_path)
    batch = tmp_path / "batch"
    batch.mkdir()
    shutil.copytree(SOLUTIONS, batch / "alice")
    # a crash and a memory bomb; the endless loop is the watch's below (its 10 s limit, waited out once per check
    # in each of two grades, had made this the suite's longest test)
    shutil.copytree(variant(tmp_path / "v", {f: e for f, e in HOSTILE.items() if f != "scaling.py"}), batch / "mallory")
    # without fork, and without namespaces (where they exist, regrade starts new interpreters anyway)
    # a limit of 10 s: two jobs on a busy machine restart torch children past 3 s, and correct calls then time out
    p = subprocess.run([sys.executable, "-m", "autograder", "regrade", str(batch), "--jobs", "2", "--timeout", "10",
                        "--trust"], cwd=ROOT, capture_output=True, text=True,
                       env={**env, "ATTN_NO_NAMESPACES": "1"}, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = (tmp_path / "batch-results" / "summary.csv").read_text().splitlines()
    totals = {r.split(",")[0]: float(r.split(",")[1]) for r in rows[1:]}
    forked = {n: grade(batch / n, timeout=10) for n in ("alice", "mallory")}
    assert totals == {n: r.score for n, r in forked.items()}  # as with a fork server
    assert totals["alice"] == forked["alice"].max_score > totals["mallory"]
    # watch from the stubs (the regrade above gave correct code its marks without fork): a save of the solutions'
    # scaling with an endless loop in it is cut off at the limit, in a new interpreter too
    sub = tmp_path / "watched"
    shutil.copytree(EXERCISES, sub, ignore=shutil.ignore_patterns("__pycache__"))
    w = Watching(sub, "--timeout", "3", env=env)
    try:
        assert w.wait_for("Next step: start stage 1", timeout=600), w.text
        assert "start a new interpreter per child" in w.text
        w.clear()
        (sub / "scaling.py").write_text((SOLUTIONS / "scaling.py").read_text().replace(
            "    d_k = q.shape[-1]\n", "    while True:\n        pass\n"))
        assert w.wait_for("stage 4 scaling: failed", timeout=120), w.text
        assert "limit" in w.text or "time" in w.text, w.text
    finally:
        assert w.stop() == 0


WINDOWS = """
import builtins
sys.platform = "win32"
for mod in ("resource", "fcntl"):
    sys.modules[mod] = None  # import resource -> ImportError
"""


@pytest.mark.parametrize("command", [["grade"], ["submit"], ["watch"], ["regrade", "somewhere"], ["hint"]])
def test_windows_gets_the_wsl_message(command, tmp_path):
    env = sitecustomize(tmp_path, extra=WINDOWS)
    p = subprocess.run([sys.executable, "-m", "autograder", *command], cwd=tmp_path, capture_output=True, text=True,
                       env={**env, "PYTHONPATH": env["PYTHONPATH"] + os.pathsep + str(ROOT)}, timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "WSL2" in p.stderr and "wsl --install" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout


def _pyenv(version: str) -> Path | None:
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(root.glob(f"{version}.*/bin/python{version}"))
    return found[-1] if found else None


def test_make_refuses_python_310_at_once(tmp_path):
    py310 = _pyenv("3.10") or shutil.which("python3.10")
    if not py310:
        pytest.skip("no Python 3.10 on this machine")
    repo = copy_repo(tmp_path / "clone")
    p = subprocess.run(["make", "grade", f"PYTHON={py310}"], cwd=repo, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "needs Python 3.11" in p.stdout + p.stderr and "3.10" in p.stdout + p.stderr
    assert not (repo / ".venv").exists()


@pytest.mark.parametrize("version", ["3.12", "3.13"])
def test_numpy_stages_on_newer_pythons_under_w_error(version, tmp_path):
    py = _pyenv(version)
    if not py:
        pytest.skip(f"no Python {version} from pyenv on this machine")
    venv = tmp_path / "venv"
    subprocess.run([str(py), "-m", "venv", str(venv)], check=True)
    pin = next(line.split()[0] for line in (ROOT / "requirements-student.txt").read_text().splitlines()
               if line.startswith("numpy=="))
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", pin], check=True, timeout=600)
    out = tmp_path / "r.json"
    p = subprocess.run([str(venv / "bin/python"), "-W", "error", "-m", "autograder", "grade", "--submission",
                        str(SOLUTIONS), "--stage", NUMPY_STAGES, "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(out.read_text())
    assert data["score"] == 54, p.stdout
    assert "Warning" not in p.stdout + p.stderr


def test_regrade_refuses_others_code_without_a_boundary(tmp_path):
    """An ordinary user without namespaces: nothing separates the submissions from the account, so regrade
    refuses before running any of them, says what that risks and what to use, unless told TRUST=1."""
    batch = tmp_path / "batch"
    shutil.copytree(SOLUTIONS, batch / "alice")
    env = {**os.environ, "ATTN_SANDBOX_SAME_USER": "1", "ATTN_NO_NAMESPACES": "1"}
    p = subprocess.run([sys.executable, "-m", "autograder", "regrade", str(batch)], cwd=ROOT, capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 2 and "TRUST=1" in p.stderr and "Gradescope" in p.stderr, p.stderr
    assert not (tmp_path / "batch-results").exists()
