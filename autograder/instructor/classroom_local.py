"""`make classroom-local SUBMISSION=PATH`: the student release's GitHub Classroom workflow run here on one
submission, step by step as the runner runs it, then added up as classroom-resources/autograding-grading-reporter
adds it up (each stage step's tests' scores over the steps' max_score). What a student's Actions run would total.

The release is `dist/student` (built by `make release` when missing); the submission's stage files replace its
`exercises/`, in a copy under `dist/classroom-local/` that shares the kit's `.venv` (the workflow's `make setup` step
then has nothing to do).
"""
import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..submission import NotASubmission, discard, survey
from .build import DIST, release

STEP = re.compile(r"^    - name: (?P<name>.+?)\n(?:      id: (?P<id>\S+)\n)?      run: (?P<run>.+)$", re.M)
RUNNERS = re.compile(r"^        runners: (.+)$", re.M)


def steps(workflow: str) -> list[dict]:
    """The workflow's `run` steps in order: {name, id (None for the install and grade steps), run}."""
    return [m.groupdict() for m in STEP.finditer(workflow)]


def reporter_sum(results: dict[str, str], runners: list[str]) -> tuple[float, float, dict[str, tuple[float, float]]]:
    """(points, max points, {runner: (points, max)}), from each runner's base64 `result` output."""
    per = {}
    for r in runners:
        result = json.loads(base64.b64decode(results[r]))
        per[r] = (sum(t.get("score", 0) for t in result["tests"]), result["max_score"])
    return sum(p for p, _ in per.values()), sum(m for _, m in per.values()), per


def classroom_local(submission: Path, student: Path = DIST / "student", root: Path = DIST / "classroom-local",
                    kit_venv: Path | None = None, out=sys.stdout) -> tuple[float, float]:
    """Run the release's workflow on `submission` in a copy of `student` at `root`; print and return the total."""
    if not (student / ".github" / "workflows" / "classroom.yml").exists():
        print(f"building the student release in {student} (make release) ...", file=out, flush=True)
        release(student)
    found = survey(submission, as_uploaded=True)
    try:
        shutil.rmtree(root, ignore_errors=True)
        repo = root / "repo"
        shutil.copytree(student, repo, symlinks=True, ignore=shutil.ignore_patterns(".venv", "__pycache__"))
        shutil.rmtree(repo / "exercises")
        shutil.copytree(found.folder, repo / "exercises", ignore=shutil.ignore_patterns("__pycache__"))
        (repo / ".venv").symlink_to((kit_venv or Path(sys.prefix)).resolve())
    finally:
        discard(found)
    workflow = (repo / ".github" / "workflows" / "classroom.yml").read_text()
    outputs: dict[str, str] = {}
    for i, s in enumerate(steps(workflow)):
        step_out = root / f"step-{i}.output"
        step_out.write_text("")
        p = subprocess.run(s["run"], shell=True, cwd=repo, capture_output=True, text=True,
                           env={**os.environ, "GITHUB_OUTPUT": str(step_out)})
        (root / f"step-{i}.log").write_text(p.stdout + p.stderr)
        if p.returncode != 0:  # a failed step fails the student's run: the reporter never adds anything up
            print(f"step {s['name']!r} failed (exit status {p.returncode}); its log: {root / f'step-{i}.log'}",
                  file=out)
            raise SystemExit(1)
        if s["id"]:
            outputs[s["id"]] = dict(line.split("=", 1) for line in step_out.read_text().splitlines() if "=" in line)["result"]
    runners = RUNNERS.search(workflow)[1].split(",")
    points, maximum, per = reporter_sum(outputs, runners)
    for r, (p, m) in per.items():
        print(f"  {r:<14} {p:g}/{m:g}", file=out)
    print(f"Classroom total: {points:g}/{maximum:g} (the grading reporter's sum; each step's log is in {root})",
          file=out)
    return points, maximum


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make classroom-local", description=__doc__.split("\n\n")[0])
    p.add_argument("--submission", type=Path, required=True, help="a folder or a zip, as a student would push it")
    args = p.parse_args(argv)
    try:
        classroom_local(args.submission)
    except NotASubmission as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
