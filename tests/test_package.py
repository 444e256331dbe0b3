"""The kit as a Python package: pyproject.toml's pins are requirements-student.txt's, the wheel holds the
grader and the reference (and nothing of the course's solutions), and a fresh environment with only the
wheel installed grades from any folder, with no PYTHONPATH."""
import re
import subprocess
import tomllib
import zipfile

import pytest
from conftest import ROOT, SOLUTIONS, clean_env, fresh_venv

from autograder.instructor.build import kit_wheel, requirement_pins
from autograder.stages import BONUS_POINTS, CORE_POINTS

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_pyproject_pins_are_the_requirements_pins():
    student, instructor = requirement_pins(), requirement_pins(ROOT / "requirements-instructor.txt")
    assert sorted(PROJECT["dependencies"]) == sorted(student[n] for n in ("numpy", "torch", "psutil"))
    extras = PROJECT["optional-dependencies"]
    assert sorted(extras["student"]) == sorted(student[n] for n in ("matplotlib", "watchfiles"))
    assert sorted(extras["instructor"]) == sorted(instructor[n] for n in ("nbgrader", "otter-grader", "ipykernel"))


def test_the_wheel_holds_the_grader_and_the_reference_only(tmp_path):
    wheel = kit_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"autograder", "attn_ref", wheel.name.split("-")[0] + "-" + PROJECT["version"] + ".dist-info"}
    assert "autograder/child/worker.py" in names and "attn_ref/__init__.py" in names
    assert not (ROOT / "build").exists() and not list(ROOT.glob("*.egg-info"))  # built from a scratch copy


@pytest.mark.slow
def test_a_venv_with_only_the_wheel_grades_the_solutions_from_elsewhere(tmp_path):
    pins = requirement_pins()
    venv = fresh_venv(tmp_path / "venv", [pins["numpy"], pins["torch"], pins["psutil"], str(kit_wheel(tmp_path))],
                      tmp_path)
    env, work = clean_env(venv), tmp_path / "work"
    work.mkdir()
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import autograder; print(autograder.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv)), where
    p = subprocess.run([str(venv / "bin" / "python"), "-m", "autograder", "grade", "--submission", str(SOLUTIONS),
                        "--json", str(work / "r.json")], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert re.search(rf"total\s+{CORE_POINTS}/{CORE_POINTS}", p.stdout), p.stdout
    assert re.search(rf"bonus\s+{BONUS_POINTS}/{BONUS_POINTS}", p.stdout), p.stdout
