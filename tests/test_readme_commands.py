"""Every command in the README's and docs/instructors.md's tables (and the student README's), run as written from a copy of the
repo: the copy has this checkout's tracked and new files and shares its .venv (set up by `make test`)."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, SOLUTIONS, copy_repo, output_until, scratch, share_venv

from autograder.sandbox.launchers import separate_user_possible

pytestmark = pytest.mark.slow  # builds or runs a whole channel: `make test` only (CONTRIBUTING.md)

# where no submission can get a uid of its own, regrade runs others' code only when told the code is trusted
TRUST = "" if separate_user_possible() else " TRUST=1"
TABLE_ROW = re.compile(r"^\| `([^`]+)` \|", re.M)
SH_BLOCK = re.compile(r"```sh\n(.*?)```", re.S)
# placeholders filled in; everything else runs exactly as the README writes it
AS_RUN = {
    "make hint [STAGE=...]": "make hint",
    "make autograder [SECRET=...]": "make autograder SECRET=readme-test",
    "make gradescope-local SUBMISSION=PATH": "make gradescope-local SUBMISSION=solutions",
    "make classroom-local SUBMISSION=PATH": "make classroom-local SUBMISSION=solutions",
    "make grade SUBMISSION=PATH": "make grade SUBMISSION=solutions",
    # the secret file the earlier `make autograder` wrote: the regrade draws the zip's hidden inputs
    "make regrade DIR=folder [OUT=results] [JOBS=n] [SECRET_FILE=path] [BONUS=folded] [ITEM=name] [SAME_UID=1] [TRUST=1]":
        "make regrade DIR=batch OUT=graded JOBS=2 SECRET_FILE=dist/autograder.secret" + TRUST,
    "make regrade DIR=folder ANONYMIZE=1": "make regrade DIR=batch ANONYMIZE=1" + TRUST,
    "python -m autograder class-report RESULTS_DIR": "python -m autograder class-report batch-results",
    "python -m autograder grade --submission PATH": "python -m autograder grade --submission solutions",
    "make bench [QUICK=1]": "make bench QUICK=1",
    "make mutants [LIMIT=N]": "make mutants LIMIT=3 FILES=costs.py",
}
NOT_HERE = {"make test": "it is what runs this test", "make test-fast": "a part of make test, run by it already",
            "make release": "test_every_student_readme_command_runs_in_the_release runs it, then the commands of its README"}
# commands that, run as written on the stubs, must refuse (exit nonzero) and say why
REFUSES = {"make capstone": "stage 6 (heads) has not passed: not started"}
EXPECT = {  # what a run must leave or print, beyond exiting 0
    "make grade": "Next step:",
    "make grade STAGE=masking": "masking",
    "make grade FRESH=1": "Next step:",
    "make worked": "A-softmax-weights",
    "make hint": "Hint 1/",
    "make release": Path("dist/student/.github/workflows/classroom.yml"),
    "make autograder SECRET=readme-test": Path("dist/autograder.secret"),
    "make autograder HIDDEN_VISIBILITY=after_due_date": Path("dist/autograder.zip"),
    "make gradescope-local SUBMISSION=solutions": Path("dist/gradescope-local/results/results.json"),
    "make classroom-local SUBMISSION=solutions": "Classroom total: 100/100",
    "make regrade DIR=batch OUT=graded JOBS=2 SECRET_FILE=dist/autograder.secret" + TRUST: Path("graded/grades.csv"),
    "make regrade DIR=batch ANONYMIZE=1" + TRUST: Path("batch-results/diagnoses.csv"),
    "make nbgrader": Path("dist/nbgrader/source/attention/attention.ipynb"),
    "make otter": Path("dist/otter/result/student/attention.ipynb"),
    "make bench QUICK=1": "regrade of 6 submissions",
    "make mutants LIMIT=3 FILES=costs.py": "3 mutants in",
    "make submit": Path("submission.zip"),
    "make report": Path("report.html"),
    "make grade JSON=results.json": Path("results.json"),
}


def commands(readme: str) -> list[str]:
    found = TABLE_ROW.findall(readme)
    for block in SH_BLOCK.findall(readme):
        found += [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    return list(dict.fromkeys(found))


def env() -> dict:
    return {**os.environ, "NO_COLOR": "1", "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"}


def run(cmd: str, cwd: Path) -> str:
    if cmd == "make watch":  # runs until stopped: its first screen is the proof
        out = output_until(cmd, cwd, b"core stages pass", env=env())
        assert "core stages pass" in out, out[-2000:]
        return out
    p = subprocess.run(cmd, shell=True, cwd=cwd, env=env(), capture_output=True, text=True, timeout=900)
    if cmd in REFUSES:
        assert p.returncode != 0 and REFUSES[cmd] in p.stdout, f"{cmd}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        return p.stdout + p.stderr
    assert p.returncode == 0, f"{cmd}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout + p.stderr


def check(cmd: str, out: str, cwd: Path) -> None:
    want = EXPECT.get(cmd)
    if isinstance(want, Path):
        assert (cwd / want).exists(), (cmd, want)
    elif want:
        assert want in out, (cmd, out[-2000:])


# The commands run in independent groups, each in a copy of its own, so the suite spreads them over its workers. A group
# is the commands whose names start with its prefixes, run in the README's order (the regrade reads the secret the
# earlier `make autograder` wrote; class-report the results of the anonymised regrade). Every other command is "local".
GROUPS = {
    "gradescope": ("make autograder", "make gradescope-local", "make regrade", "python -m autograder class-report"),
    "classroom": ("make classroom-local",),
    "nbgrader": ("make nbgrader",),
    "otter": ("make otter",),
    "bench": ("make bench",),
    "mutants": ("make mutants",),
    "capstone-and-gpu": ("make capstone", "make gpu-check"),
}
README_COMMANDS = commands((ROOT / "README.md").read_text() + (ROOT / "docs" / "instructors.md").read_text())


def group_of(written: str) -> str:
    return next((g for g, prefixes in GROUPS.items() if written.startswith(prefixes)), "local")


def repo_copy(tmp_path: Path) -> Path:
    if not (ROOT / ".venv" / ".instructor").exists():
        pytest.skip("needs the .venv that `make test` sets up")
    dest = share_venv(copy_repo(scratch(tmp_path) / "repo"), ".instructor")  # its builds: gradescope-local's venv
    for name in ("alice", "bob"):
        shutil.copytree(SOLUTIONS, dest / "batch" / name)
    return dest


def test_the_readme_names_every_channel_and_each_command_has_a_group():
    assert {"make grade", "make otter", "make grade SUBMISSION=PATH",
            "make regrade DIR=folder [OUT=results] [JOBS=n] [SECRET_FILE=path] [BONUS=folded] [ITEM=name] [SAME_UID=1] [TRUST=1]",
            "make gpu-check"} <= set(README_COMMANDS)
    ran = {group_of(c) for c in README_COMMANDS if c not in NOT_HERE}
    assert ran == {"local", *GROUPS}, "a group whose commands the README no longer has: remove it from GROUPS"


@pytest.mark.parametrize("group", ["local", *GROUPS])
def test_every_readme_command_runs_as_written(group, tmp_path):
    repo = repo_copy(tmp_path)
    for written in README_COMMANDS:
        if written in NOT_HERE or group_of(written) != group:
            continue
        cmd = AS_RUN.get(written, written)
        assert "[" not in cmd and "PATH" not in cmd.split("=")[-1], f"fill in the placeholder of {written!r}"
        check(cmd, run(cmd, repo), repo)


def test_every_student_readme_command_runs_in_the_release(tmp_path):
    repo = repo_copy(tmp_path)
    check("make release", run("make release", repo), repo)
    student = repo / "dist" / "student"
    (student / ".venv").symlink_to(ROOT / ".venv")
    cmds = commands((student / "README.md").read_text())
    assert {"make grade", "make hint", "make submit", "make watch", "make report"} <= set(cmds)
    for written in cmds:
        cmd = AS_RUN.get(written, written)
        check(cmd, run(cmd, student), student)
