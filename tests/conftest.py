"""Shared fixtures: graded copies of the solutions, and submissions that make one change to them."""
import atexit
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# under the tests a fault in a check's own code fails loudly (grade.STRICT); children and builds inherit it
os.environ["ATTN_GRADER_STRICT"] = "1"
# a test worker beside others (make test runs four on two cores) computes on one thread, and so does what it
# starts (make capstone's training, a notebook's kernel): BLAS and torch spinning on two threads per worker made
# the training test take 5 minutes beside the others, not 20 s. The grading children are one-thread already.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

from autograder.grade import grade as _grade  # noqa: E402
from autograder.sandbox import launchers, namespaces, runner  # noqa: E402


def _launch_parts() -> tuple:
    """What decides how a grade starts its children: a test that replaces one of these gets grade()'s own servers."""
    return (launchers.fork_is_safe, launchers.interpreter, launchers.separate_user_possible, namespaces.available,
            runner.prestart)


_LAUNCH_PARTS = _launch_parts()
_SERVERS: dict = {}


def _kept_servers() -> dict | None:
    """This test process's fork servers for the environment as it is now (one pair per set of ATTN_* variables, which
    the servers' children read), started on first use and ended at exit; None where a test replaced how children start."""
    if any(a is not b for a, b in zip(_launch_parts(), _LAUNCH_PARTS)):
        return None
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("ATTN_") or k == "TMPDIR"))
    kept = _SERVERS.get(key)
    if kept is None or not all(server.alive() for server in kept.values()):
        kept = _SERVERS[key] = {k: s for k in ("numpy", "torch") if (s := runner.start_server(k)) is not None}
    return kept or None


@atexit.register
def _end_servers() -> None:
    for kept in _SERVERS.values():
        for server in kept.values():
            server.close()


def grade(submission, *args, **kw):
    """autograder.grade.grade, its children forked from fork servers this test process keeps between tests (what
    make grade starts for each grade: the same children, without loading torch again for every test)."""
    if kw.get("zygote") is None and not kw.get("workers") and len(args) < 7:
        kw["zygote"] = _kept_servers()
    return _grade(submission, *args, **kw)


SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
GRADER_ROOT = ROOT / "autograder"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")  # headless, for the HTML reports' tests
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def edits_of(mistake) -> dict[str, list[tuple[str, str]]]:
    """A declared mutant (Mistake.mutant) as variant's edits: {file: [(old, new), ...]}."""
    out: dict[str, list[tuple[str, str]]] = {}
    for e in mistake.mutant:
        out.setdefault(e.file, []).append((e.old, e.new))
    return out


def _mutants() -> dict:
    from autograder.stages import CATALOGUE

    return {m.id: (edits_of(m), [m.stage]) for m in CATALOGUE.values() if m.mutant}


# every catalogued mistake's one-edit mutant, from the stage declarations: {id: (edits, [its stage])}
MUTANTS = _mutants()


def tiered(cases, stage_of, name_of=str) -> list:
    """A family of mistakes as parameters: each stage's first case runs in `make test-fast`, the others are marked
    slow (`make test` runs them all; CONTRIBUTING.md, the tiers). `stage_of` and `name_of` read a case."""
    import pytest

    first: dict = {}
    out = []
    for case in cases:
        first.setdefault(stage_of(case), name_of(case))
        fast = first[stage_of(case)] == name_of(case)
        out.append(pytest.param(case, id=name_of(case), marks=() if fast else pytest.mark.slow))
    return out


def png_images(text: str) -> list:
    """The PNG pictures embedded in an HTML page (data: URIs), as greyscale arrays."""
    import base64
    import io
    import re

    import numpy as np
    from PIL import Image

    return [np.asarray(Image.open(io.BytesIO(base64.b64decode(b))).convert("L"), dtype=float)
            for b in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", text)]


def pytest_configure(config) -> None:
    # a test's tier is a marker at the test (CONTRIBUTING.md, "The test tiers"), never a list of names here
    config.addinivalue_line("markers", "slow: builds or runs a whole channel, repeats a faster test's case, or "
                                       "takes more than about 8 s alone; left out of `make test-fast`")
    config.addinivalue_line("markers", "serial: needs the machine to itself (a CPU-limited cgroup, a latency "
                                       "figure); `make test` runs these after the others, one at a time")
    config.addinivalue_line("markers", "sweep: a cost rule over 20 seeds (gates lose, correct code keeps): "
                                       "`make sweep` only, about 6 minutes on 2 cores")


_TIMELINE = os.environ.get("ATTN_TEST_TIMELINE")  # a file: each test's worker, start and end appended (where the
# suite's time goes, in CONTRIBUTING.md's "The test tiers"); unset, nothing is written


def pytest_runtest_protocol(item, nextitem):
    if _TIMELINE:
        import json
        import time

        start = time.time()
        item.config.hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        from _pytest.runner import runtestprotocol

        runtestprotocol(item, nextitem=nextitem)
        item.config.hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        with open(_TIMELINE, "a") as f:
            f.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": item.nodeid,
                                "start": start, "end": time.time()}) + "\n")
        return True
    return None


def variant(tmp_path: Path, edits: dict[str, list[tuple[str, str]]], base: Path = SOLUTIONS) -> Path:
    """A copy of `base` with each (old, new) text replaced once in the named file; old must be there."""
    dest = tmp_path / "submission"
    shutil.copytree(base, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for name, pairs in edits.items():
        path = dest / name
        text = path.read_text()
        for old, new in pairs:
            assert text.count(old) == 1, f"{name}: {old!r} occurs {text.count(old)} times"
            text = text.replace(old, new)
        path.write_text(text)
    return dest


def survivors(marker: str) -> list[int]:
    """The processes whose command line holds `marker` (found through /proc)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                pass
    return found


def copy_repo(dest: Path) -> Path:
    """A copy of this checkout as a clone would have it: tracked files and new ones git does not ignore."""
    import subprocess

    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def share_venv(dest: Path, marker: str = ".student") -> Path:
    """`dest` using this checkout's .venv (a link), or a skip when `make test` has not set it up."""
    if not (ROOT / ".venv" / marker).exists():
        pytest.skip("needs the .venv that `make test` sets up")
    (dest / ".venv").symlink_to(ROOT / ".venv")
    return dest


def output_until(cmd: list[str] | str, cwd: Path, text: bytes, env: dict | None = None, timeout: float = 120) -> str:
    """Run a command that runs until stopped (`make watch`) until `text` shows, then Ctrl-C it; its output."""
    import os
    import signal
    import subprocess
    import time

    p = subprocess.Popen(cmd, shell=isinstance(cmd, str), cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    out, deadline = b"", time.monotonic() + timeout
    os.set_blocking(p.stdout.fileno(), False)
    while text not in out and time.monotonic() < deadline and p.poll() is None:
        out += p.stdout.read() or b""
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGINT)
    try:  # watch bounds its own leaving (10 s for a grade in flight, then the cleanup): a busy machine gets 60 s
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out += p.stdout.read() or b""
        raise AssertionError(f"{cmd} did not end within 60 s of Ctrl-C; it printed:\n{out.decode()[-3000:]}") from None
    return out.decode()


@pytest.fixture(scope="session")
def solutions_result():
    return grade(SOLUTIONS, seed=0)


@pytest.fixture(scope="session")
def stubs_result():
    return grade(EXERCISES, seed=0)


class Watching:
    """`python -m autograder watch` on a folder, its output collected as it comes (`text`), stopped with Ctrl-C."""

    def __init__(self, folder: Path, *args: str, env: dict | None = None, before: str = "") -> None:
        """`before`: Python run in the watcher's process before it starts (to take one of its parts away)."""
        import subprocess
        import threading

        argv = ["autograder", "watch", "--submission", str(folder), *args]
        run = ["-c", f"{before}\nimport runpy, sys\nsys.argv = {argv!r}\nrunpy.run_module('autograder', run_name='__main__')"] \
            if before else ["-m", *argv]
        self.proc = subprocess.Popen([sys.executable, *run],
                                     cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.seen: list[str] = []
        threading.Thread(target=lambda: self.seen.extend(iter(lambda: self.proc.stdout.read(1), "")),
                         daemon=True).start()

    @property
    def text(self) -> str:
        return "".join(self.seen)

    def clear(self) -> None:
        self.seen.clear()

    def wait_for(self, text: str, timeout: float = 90) -> bool:
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and text not in self.text:
            time.sleep(0.02)
        return text in self.text

    def stop(self) -> int:
        import signal

        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=90)  # a grade in flight ends first (its measuring children, on a busy machine)


RAM = Path("/dev/shm")
_RAM_DIRS: list[Path] = []


def ram_folder() -> Path | None:
    """Where a test's venv goes when memory has room for it (a tmpfs with 8 GiB free): pip's writes of torch took
    29 s there on disk and 17 s in memory, and the suite builds several such venvs beside each other."""
    try:
        st = os.statvfs(RAM)
    except OSError:
        return None
    return RAM if os.access(RAM, os.W_OK) and st.f_bavail * st.f_frsize >= 8 * 2**30 else None


def scratch(fallback: Path) -> Path:
    """A folder for a test that writes a gigabyte (a venv, a repo copy whose builds make one): a new one in memory
    where ram_folder has room, removed after the test; else `fallback` (made)."""
    import tempfile

    ram = ram_folder()
    if ram is None:
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback
    _RAM_DIRS.append(Path(tempfile.mkdtemp(prefix="attn-test-", dir=ram)))
    return _RAM_DIRS[-1]


@pytest.fixture(autouse=True)
def _remove_scratch():
    yield
    while _RAM_DIRS:
        shutil.rmtree(_RAM_DIRS.pop(), ignore_errors=True)


def fresh_venv(path: Path, requirements: list[str], cwd: Path) -> Path:
    """A venv of this interpreter without the system's packages, `requirements` pip-installed in it from `cwd`
    (one pip call, as a course's setup makes it); returns where it is: `path`, or a folder of that name in memory
    (scratch, removed after the test). ATTN_TEST_VENVS=folder keeps such venvs there between
    runs, one per set of requirements other than wheels; a kept one gets only its wheels reinstalled."""
    import hashlib
    import os
    import subprocess

    wheels = [r for r in requirements if r.endswith(".whl")]
    if os.environ.get("ATTN_TEST_VENVS"):
        others = "\n".join(r for r in requirements if r not in wheels)
        path = Path(os.environ["ATTN_TEST_VENVS"]) / hashlib.sha256(others.encode()).hexdigest()[:12]
    else:  # pip writes a gigabyte or more: in memory where there is room, removed after the test
        path = scratch(path.parent) / path.name
    # --no-compile: pip's bytecode of every file it installs (torch's, jupyter's) was most of its CPU time; the
    # modules a run imports are compiled then, and written once there (clean_env lets them be written)
    pip = [str(path / "bin" / "pip"), "install", "--quiet", "--no-compile"]
    if (path / "bin" / "python").exists():
        cmd = [*pip, "--no-deps", "--force-reinstall", *wheels]
    else:
        subprocess.run([sys._base_executable, "-m", "venv", str(path)], check=True)
        (path / "requirements.txt").write_text("\n".join(requirements) + "\n")
        cmd = [*pip, "-r", str(path / "requirements.txt")]
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    return path


def clean_env(venv: Path) -> dict:
    """The environment of a machine where the kit is only installed: no PYTHONPATH, the venv first on PATH."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")}
    env["PATH"] = f"{venv / 'bin'}:/usr/bin:/bin"
    return env


def tiny_gpt2_checkpoint(folder, layers=2, d=32, heads=4, vocab=256, n_ctx=64, seed=0):
    """A GPT-2-shaped checkpoint with random weights, laid out as the released one: Conv1D weights [in, out],
    c_attn packing q, k, v, the causal-mask buffers beside the weights, no lm_head (tied to wte)."""
    import json

    import torch

    from autograder.capstone.gpt2 import save_safetensors

    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=gen) * 0.3

    w = {"wte.weight": r(vocab, d), "wpe.weight": r(n_ctx, d), "ln_f.weight": 1 + r(d), "ln_f.bias": r(d)}
    for i in range(layers):
        p = f"h.{i}."
        w |= {p + "ln_1.weight": 1 + r(d), p + "ln_1.bias": r(d),
              p + "attn.c_attn.weight": r(d, 3 * d), p + "attn.c_attn.bias": r(3 * d),
              p + "attn.c_proj.weight": r(d, d), p + "attn.c_proj.bias": r(d),
              p + "ln_2.weight": 1 + r(d), p + "ln_2.bias": r(d),
              p + "mlp.c_fc.weight": r(d, 4 * d), p + "mlp.c_fc.bias": r(4 * d),
              p + "mlp.c_proj.weight": r(4 * d, d), p + "mlp.c_proj.bias": r(d),
              p + "attn.bias": torch.ones(1, 1, n_ctx, n_ctx).tril()}
    folder.mkdir(parents=True, exist_ok=True)
    save_safetensors(w, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"n_head": heads}))
    return folder


# Attention written out by hand, the whole T x T score matrix at once: correct, and what the cost rules of the fused
# and tiled stages exist to catch (their bodies, to put in place of the solutions')
HAND_FUSED = ("    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
              "    if causal:\n"
              "        allowed = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)\n"
              "        scores = scores.masked_fill(~allowed, float('-inf'))\n"
              "    return scores.softmax(-1) @ v\n")
HAND_TILED = ("    n_k = k.shape[0]\n"
              "    s = (q @ k.T) / np.sqrt(d_k)\n"
              "    if causal:\n"
              "        s = np.where(np.arange(n_k)[None, :] <= (n_k - n_q + np.arange(n_q))[:, None], s, -np.inf)\n"
              "    w = np.exp(s - s.max(axis=1, keepdims=True))\n"
              "    return (w / w.sum(axis=1, keepdims=True)) @ v\n")
