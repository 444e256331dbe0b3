"""The Gradescope zip's setup.sh, run as Gradescope runs it, on fake machines: a PATH holding only fake
interpreters, a fake apt-get and the few tools the script uses. Each test is one image: which Python
the venv is made from, what apt-get was asked for, or the one line the build log shows when no
Python 3.11+ can be had.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from autograder.instructor.build import SETUP_SH

TOOLS = ("grep", "cut", "cat", "tee", "mktemp", "tail", "rm")


def fake_python(path: Path, version: str, venv: bool = True, shared: bool = True) -> Path:
    """An interpreter that answers setup.sh's probe as `version` would, and makes a venv that logs its calls."""
    log = path.parent.parent / "calls.log"
    fake_bin = (f'#!/bin/bash\necho "${{0##*/}} $*" >> {log}\n')
    path.write_text(f'''#!/bin/bash
if [ "$1" = -c ]; then echo "{version} {int(venv)} {int(shared)}"; exit 0; fi
echo "{path.name} $*" >> {log}
if [ "$1 $2" = "-m venv" ]; then
    /bin/mkdir -p "$3/bin"
    printf '%s' '{fake_bin}' > "$3/bin/pip"
    printf '%s' '{fake_bin}' > "$3/bin/python"
    /bin/chmod +x "$3/bin/pip" "$3/bin/python"
fi
''')
    path.chmod(0o755)
    return path


def fake_apt(bin_dir: Path, available: dict[str, str]) -> None:
    """apt-get that installs pythonX.Y (with venv) for the versions in `available` and fails for others,
    saying so on its output as apt does."""
    log = bin_dir.parent / "calls.log"
    cases = "\n".join(f'    *python{v}-venv*) /bin/cp {src} {bin_dir}/python{v}; echo "apt-get $*" >> {log}; '
                      f'echo "Setting up python{v}-venv (fake apt)"; exit 0 ;;'
                      for v, src in available.items())
    (bin_dir / "apt-get").write_text(f'''#!/bin/bash
case "$*" in
    update*) exit 0 ;;
{cases}
esac
echo "apt-get $* (unable to locate)" >> {log}
echo "E: Unable to locate package (fake apt)"
exit 100
''')
    (bin_dir / "apt-get").chmod(0o755)


@pytest.fixture
def machine(tmp_path):
    """An /autograder root with the zip's files, a bin folder that is the whole PATH, and a stash of
    interpreters apt-get can 'install'."""
    root, bin_dir, stash = tmp_path / "autograder", tmp_path / "bin", tmp_path / "stash"
    for d in (root / "source", bin_dir, stash):
        d.mkdir(parents=True)
    (root / "source" / "requirements-student.txt").write_text("numpy==2.4.6\ntorch==2.13.0\npsutil==7.2.2  # x\n")
    (root / "setup.sh").write_text(SETUP_SH)
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return root, bin_dir, stash


def run_setup(root: Path, path: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": path or str(root.parent / "bin"), "AUTOGRADER_ROOT": str(root), "HOME": str(root)}
    return subprocess.run(["/bin/bash", str(root / "setup.sh")], env=env, capture_output=True, text=True, timeout=60)


def calls(root: Path) -> list[str]:
    log = root.parent / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_ubuntu_24_04_python3_12_with_venv_is_used_as_is(machine):
    root, bin_dir, _ = machine
    fake_python(bin_dir / "python3.12", "3.12")
    fake_apt(bin_dir, {})
    p = run_setup(root)
    assert p.returncode == 0, p.stderr
    assert f"python3.12 -m venv {root}/venv" in calls(root)
    assert not [c for c in calls(root) if c.startswith("apt-get")]
    assert "pip install --no-cache-dir numpy==2.4.6 psutil==7.2.2" in calls(root)
    assert any(c.startswith("pip install --no-cache-dir torch==2.13.0 --index-url") for c in calls(root))


def test_ubuntu_24_04_without_its_venv_package_installs_python3_12_venv(machine):
    root, bin_dir, stash = machine
    fake_python(bin_dir / "python3.12", "3.12", venv=False)
    fake_apt(bin_dir, {"3.12": fake_python(stash / "python3.12", "3.12")})
    p = run_setup(root)
    assert p.returncode == 0, p.stderr
    assert "apt-get install -y python3.12 python3.12-venv" in calls(root)
    assert f"python3.12 -m venv {root}/venv" in calls(root)


def test_ubuntu_22_04_python3_10_gets_python3_11_from_apt(machine):
    root, bin_dir, stash = machine
    fake_python(bin_dir / "python3", "3.10")
    fake_apt(bin_dir, {"3.11": fake_python(stash / "python3.11", "3.11")})
    p = run_setup(root)
    assert p.returncode == 0, p.stderr
    apt = [c for c in calls(root) if c.startswith("apt-get")]
    assert apt == ["apt-get install -y python3.12 python3.12-venv (unable to locate)",
                   "apt-get install -y python3.11 python3.11-venv"]
    assert f"python3.11 -m venv {root}/venv" in calls(root)
    assert not [c for c in calls(root) if c.startswith("python3 ")]


def test_apt_output_reaches_the_build_log(machine):
    root, bin_dir, stash = machine
    fake_python(bin_dir / "python3", "3.10")
    fake_apt(bin_dir, {"3.11": fake_python(stash / "python3.11", "3.11")})
    p = run_setup(root)
    assert p.returncode == 0, p.stderr
    assert "E: Unable to locate package (fake apt)" in p.stderr  # the 3.12 that was not there, said by apt
    assert "Setting up python3.11-venv (fake apt)" in p.stderr
    assert f"python3.11 -m venv {root}/venv" in calls(root)


def test_every_folder_on_path_is_looked_in(machine):
    """An unusable python3.12 early on PATH does not hide a usable one later, nor a python3.11 elsewhere."""
    root, bin_dir, _ = machine
    early, late = root.parent / "early", root.parent / "late"
    early.mkdir()
    late.mkdir()
    fake_python(early / "python3.12", "3.12", shared=False)
    fake_python(early / "python3", "3.10")
    fake_python(late / "python3.12", "3.12")
    fake_apt(bin_dir, {})
    p = run_setup(root, f"{early}:{bin_dir}:{late}")
    assert p.returncode == 0, p.stderr
    assert f"python3.12 -m venv {root}/venv" in calls(root) and f"making {root}/venv with {late}/python3.12" in p.stdout
    assert not [c for c in calls(root) if c.startswith("apt-get")]

    (late / "python3.12").unlink()  # then a python3.11 in the last folder, rather than apt
    fake_python(late / "python3.11", "3.11")
    p = run_setup(root, f"{early}:{bin_dir}:{late}")
    assert p.returncode == 0 and f"making {root}/venv with {late}/python3.11" in p.stdout, p.stdout + p.stderr


def test_an_interpreter_other_users_cannot_run_is_passed_over(machine):
    root, bin_dir, stash = machine
    fake_python(bin_dir / "python3.13", "3.13", shared=False)  # e.g. pyenv's, under /root
    fake_python(bin_dir / "python3", "3.10")
    fake_apt(bin_dir, {"3.12": fake_python(stash / "python3.12", "3.12")})
    p = run_setup(root)
    assert p.returncode == 0, p.stderr
    assert f"python3.12 -m venv {root}/venv" in calls(root)
    assert not [c for c in calls(root) if c.startswith("python3.13 ")]


def test_no_python_to_be_had_fails_with_one_clear_line(machine):
    root, bin_dir, _ = machine
    fake_python(bin_dir / "python3", "3.10")
    fake_apt(bin_dir, {})
    p = run_setup(root)
    assert p.returncode == 1
    last = p.stderr.splitlines()[-1]  # apt's own lines come first; the verdict is one line, last
    assert last.startswith("setup.sh: FAILED: no Python 3.11+") and p.stderr.count("setup.sh: FAILED") == 1, p.stderr
    assert "Ubuntu 24.04" in last
    assert not (root / "venv").exists()


def test_probe_reads_real_interpreters(tmp_path):
    """The probe the fakes answer, asked of this machine's interpreter, and of the same one behind a private folder."""
    setup = tmp_path / "setup.sh"
    setup.write_text(SETUP_SH)
    ask = lambda py: subprocess.run(["/bin/bash", "-c", 'source "$1"; probe "$2"', "probe", str(setup), py],  # noqa: E731
                                    capture_output=True, text=True, check=True).stdout.split()
    major, minor = sys.version_info[:2]
    version, venv, _ = ask(sys.executable)
    assert version == f"{major}.{minor}" and venv == "1"
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "python").symlink_to(os.path.realpath(sys.executable))
    assert ask(str(private / "python"))[2] == "0"
    assert ask(str(tmp_path / "missing")) == ["0.0", "0", "0"]


def _make_picks(tmp_path: Path, pythons: dict[str, tuple[bool, bool] | None]) -> str:
    """The PYTHON setup.mk picks on a PATH of fake interpreters: name -> (3.11+, others can run it with venv), or
    None for a name that is not there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, answers in pythons.items():
        if answers is None:
            (bin_dir / name).write_text("#!/bin/bash\nexit 127\n")
        else:
            new_enough, shared = answers
            (bin_dir / name).write_text(f'#!/bin/bash\ncase "$2" in *find_spec*) echo {shared} ;; *) echo {new_enough} ;; esac\n')
        (bin_dir / name).chmod(0o755)
    (tmp_path / "t.mk").write_text(f"include {ROOT / 'setup.mk'}\nshow:\n\t@echo PYTHON=$(PYTHON)\n")
    # without what the make running these tests exports (.ci/run exports PYTHON; MAKEFLAGS carries its variables)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    p = subprocess.run(["make", "-s", "-f", str(tmp_path / "t.mk"), "show", "SHARED_PYTHONS="], capture_output=True,
                       text=True, env={**env, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    return p.stdout.strip()


def test_make_prefers_a_python_other_users_can_run(tmp_path):
    """Found by a stranger TA: `make setup` made the venv from pyenv's Python under /root, and `make regrade` then
    refused (the sandbox's separate uid cannot run it). An interpreter other users can run comes first."""
    picked = _make_picks(tmp_path, {"python3.13": None, "python3.12": (True, False), "python3.11": None,
                                    "python3": (True, True)})
    assert picked == "PYTHON=python3"


def test_make_falls_back_to_any_new_enough_python(tmp_path):
    """A student's own machine (no other user needed): the first 3.11+ interpreter, as before."""
    picked = _make_picks(tmp_path, {"python3.13": None, "python3.12": (True, False), "python3.11": None,
                                    "python3": (False, False)})
    assert picked == "PYTHON=python3.12"
