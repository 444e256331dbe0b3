"""The Gradescope zip's setup.sh, run for real: the same script text builds its venv from local wheels (a
find-links folder holding the kit's pinned wheels, no index) with a fake apt-get on PATH, and run_autograder
grades the solutions with that venv at full marks, as gradescope-local does. A wheel missing from the folder
ends setup.sh with its FAILED line and pip's cause.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import SOLUTIONS, ram_folder

from autograder.instructor.build import autograder_zip, gradescope_local, requirement_pins, setup_environment

pytestmark = pytest.mark.slow  # builds or runs a whole channel: `make test` only (CONTRIBUTING.md)

PINNED = ("numpy", "psutil", "torch")  # what setup.sh installs


def open_dir(prefix: str) -> Path:
    """A folder other users can enter (the sandbox's uid runs the venv's interpreter; pytest's tmp_path is private),
    in memory where there is room (conftest.ram_folder: setup.sh's pip writes a gigabyte)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=ram_folder()))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def wheelhouse():
    """The kit's pinned wheels for this interpreter and what they need, fetched once by pip as it is configured here."""
    pins = requirement_pins()
    house = open_dir("setup-wheels-")
    p = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "-d", str(house),
                        *(pins[name] for name in PINNED)], capture_output=True, text=True, timeout=1800)
    if p.returncode:
        shutil.rmtree(house)
        pytest.skip(f"the pinned wheels could not be fetched here: {p.stderr[-500:]}")
    yield house
    shutil.rmtree(house, ignore_errors=True)


def setup_env(tmp: Path, house: Path) -> dict:
    """Gradescope's image, locally: a PATH with a fake apt-get first, pip reading only `house`."""
    fake = tmp / "fake-bin"
    fake.mkdir()
    (fake / "apt-get").write_text(f'#!/bin/sh\necho "apt-get $*" >> {tmp}/apt.log\necho "fake apt: $*"\n')
    (fake / "apt-get").chmod(0o755)
    return {"PATH": f"{fake}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp), "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(house), "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture(scope="session")
def gradescope(wheelhouse):
    """A zip, and a gradescope-local root whose venv the zip's setup.sh built (shared by the tests)."""
    home = open_dir("setup-built-")
    zip_path = autograder_zip(home / "autograder.zip", secret="setup-test")
    root = home / "gs"
    results = gradescope_local(SOLUTIONS, zip_path, root, setup_env=setup_env(home, wheelhouse))
    yield home, zip_path, root, json.loads(results.read_text())
    shutil.rmtree(home, ignore_errors=True)


def test_setup_sh_builds_the_environment_that_grades_the_solutions_in_full(gradescope):
    home, _, root, results = gradescope
    venv = root / "venv"
    assert (venv / ".setup-stamp").is_file()
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import numpy, torch; print(torch.__file__)"],
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv)), where  # torch from the venv setup.sh made, nothing else
    scored = sum(t["score"] for t in results["tests"])
    assert results["tests"] and scored == sum(t["max_score"] for t in results["tests"]), \
        [t["name"] for t in results["tests"] if t["score"] != t["max_score"]]
    assert not (home / "apt.log").exists()  # a usable python3.11+ was on PATH: apt was not needed


def test_gradescope_local_keeps_the_built_environment(gradescope, wheelhouse):
    home, zip_path, root, _ = gradescope
    stamp = (root / "venv" / ".setup-stamp").stat().st_mtime_ns
    (home / "again").mkdir()
    results = gradescope_local(SOLUTIONS, zip_path, root, setup_env=setup_env(home / "again", wheelhouse))
    assert (root / "venv" / ".setup-stamp").stat().st_mtime_ns == stamp  # not rebuilt
    data = json.loads(results.read_text())
    assert sum(t["score"] for t in data["tests"]) == sum(t["max_score"] for t in data["tests"])


def test_a_missing_wheel_ends_setup_with_its_failed_line(gradescope, wheelhouse, tmp_path):
    _, zip_path, _, _ = gradescope
    house = open_dir("setup-no-torch-")
    try:
        for wheel in wheelhouse.iterdir():
            if not wheel.name.startswith("torch-"):
                (house / wheel.name).symlink_to(wheel)
        root = open_dir("setup-failing-") / "gs"
        (root / "source").mkdir(parents=True)
        import zipfile

        with zipfile.ZipFile(zip_path) as z:
            z.extract("setup.sh", root / "source")
            z.extract("requirements-student.txt", root / "source")
        with pytest.raises(RuntimeError) as e:
            setup_environment(root, setup_env(tmp_path, house))
        torch = requirement_pins()["torch"]
        failed = [line for line in str(e.value).splitlines() if line.startswith("setup.sh: FAILED")]
        assert failed == [f"setup.sh: FAILED: pip could not install {torch} (the CPU build): "
                          f"ERROR: No matching distribution found for {torch}"], str(e.value)
        shutil.rmtree(root.parent, ignore_errors=True)
    finally:
        shutil.rmtree(house, ignore_errors=True)
