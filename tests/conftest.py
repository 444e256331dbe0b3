"""Shared fixtures: graded copies of the solutions, and submissions that make one change to them."""
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# under the tests a fault in a check's own code fails loudly (grade.STRICT); children and builds inherit it
os.environ["ATTN_GRADER_STRICT"] = "1"

from autograder.grade import grade  # noqa: E402

SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
GRADER_ROOT = ROOT / "autograder"


# `make test-fast` (pytest -m "not slow"): what a contributor runs before each commit. Left to `make test`:
# the builds and runs of whole channels (Gradescope zips, the release's own tests, Classroom steps, notebook
# cycles, platforms, the toy stages' builds), README-command runs, the cgroup run, the fairness variants,
# other seeds, and each catalogued mistake beyond the first of its stage.
SLOW_FILES = {"test_readme_commands.py", "test_notebooks.py", "test_gradescope_limits.py", "test_platforms.py",
              "test_gradescope.py", "test_classroom.py", "test_release.py", "test_build.py", "test_fairness.py",
              "test_class_report.py", "test_capstone_training.py", "test_setup_builds.py"}
SLOW_TESTS = {"test_solutions_full_marks_other_seeds", "test_no_false_alarm", "test_no_diagnosis_is_claimed_but_the_mistakes_own",
              "test_a_new_stage_is_three_files_and_every_build_picks_it_up",
              "test_the_toy_stages_reach_totals_tables_and_the_next_step",
              "test_a_burst_of_saves_is_one_grade_and_a_new_save_cancels_the_running_one",
              "test_symlink_to_the_reference_earns_nothing_through_the_zip",
              # batches, fork servers and whole-kit runs: each module keeps a quicker test in the fast tier
              "test_a_hang_a_crash_or_a_killed_fork_server_costs_only_that_grade",
              "test_the_fork_server_option_grades_the_same_and_puts_the_modes_back",
              "test_a_submission_that_kills_the_fork_server_costs_only_its_own_points",
              "test_regrade_folder", "test_regrade_children_cannot_touch_the_batch_home_or_checkout",
              "test_torch_stage_crash_leaves_numpy_stages", "test_the_secret_never_travels_on_a_command_line",
              "test_a_decoy_sdpa_call_does_not_hide_the_scores_from_the_memory_check",
              "test_grade_one_replaces_a_dead_server", "test_every_target_of_the_student_makefile_runs",
              "test_the_release_makefile_is_student_mk", "test_regrade_reads_a_linked_file_as_missing_work",
              "test_endless_loop_costs_only_its_stage",
              # `make watch` ended five more ways; the fast tier keeps its closed terminal
              "test_watch_ends_however_its_terminal_ends"}


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "slow: left out of `make test-fast` (see SLOW_FILES in tests/conftest.py)")


def _first_mistake_of_its_stage(mistake: str) -> bool:
    from autograder.stages import CATALOGUE

    return mistake == next(i for i, m in CATALOGUE.items() if m.stage == CATALOGUE[mistake].stage)


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        name, _, param = item.name.partition("[")
        mutant = name == "test_mistake_is_caught_and_named" and not _first_mistake_of_its_stage(param.rstrip("]"))
        if item.path.name in SLOW_FILES or name in SLOW_TESTS or mutant:
            item.add_marker(pytest.mark.slow)


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
    p.wait(timeout=30)
    return out.decode()


@pytest.fixture(scope="session")
def solutions_result():
    return grade(SOLUTIONS, seed=0)


@pytest.fixture(scope="session")
def stubs_result():
    return grade(EXERCISES, seed=0)


class Watching:
    """`python -m autograder watch` on a folder, its output collected as it comes (`text`), stopped with Ctrl-C."""

    def __init__(self, folder: Path, *args: str, env: dict | None = None) -> None:
        import subprocess
        import threading

        self.proc = subprocess.Popen([sys.executable, "-m", "autograder", "watch", "--submission", str(folder), *args],
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


def fresh_venv(path: Path, requirements: list[str], cwd: Path) -> Path:
    """A venv of this interpreter without the system's packages, `requirements` pip-installed in it from `cwd`
    (one pip call, as a course's setup makes it). ATTN_TEST_VENVS=folder keeps such venvs there between
    runs, one per set of requirements other than wheels; a kept one gets only its wheels reinstalled."""
    import hashlib
    import os
    import subprocess

    wheels = [r for r in requirements if r.endswith(".whl")]
    if os.environ.get("ATTN_TEST_VENVS"):
        others = "\n".join(r for r in requirements if r not in wheels)
        path = Path(os.environ["ATTN_TEST_VENVS"]) / hashlib.sha256(others.encode()).hexdigest()[:12]
    pip = [str(path / "bin" / "pip"), "install", "--quiet"]
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

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
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
