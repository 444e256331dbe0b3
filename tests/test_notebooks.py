"""The nbgrader edition: the whole cycle, headless, on copies; scores agree with `make grade`."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, grade, variant

from autograder.notebooks import nbgrader_course

NBGRADER = Path(sys.executable).with_name("nbgrader")
pytestmark = pytest.mark.skipif(not NBGRADER.exists(), reason="nbgrader is not installed (requirements-instructor.txt)")
MASK_TOP_LEFT = ("return j <= i + (n_k - n_q)", "return j <= i")


def cycle(course: Path, fill: str | None, edit: tuple[str, str] | None = None) -> tuple[float, str]:
    """generate_assignment, a submitted notebook, autograde, generate_feedback, export: (score, feedback html)."""
    env = {**os.environ, "PATH": f"{NBGRADER.parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}

    def run(*args):
        p = subprocess.run([str(NBGRADER), *args], cwd=course, env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]

    run("generate_assignment", "attention", "--force")
    release = json.loads((course / "release/attention/attention.ipynb").read_text())
    source = json.loads((course / "source/attention/attention.ipynb").read_text())
    by_id = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in source["cells"]}
    text = json.dumps(release)
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN" not in text and "grade_stage('softmax')" not in text
    if fill == "solutions":
        for c in release["cells"]:
            meta = c["metadata"].get("nbgrader", {})
            if meta.get("solution"):
                c["source"] = re.sub(r"\s*### (BEGIN|END) SOLUTION\n", "\n", by_id[meta["grade_id"]])
                if edit and edit[0] in c["source"]:
                    c["source"] = c["source"].replace(*edit)
    sub = course / "submitted/alice/attention"
    sub.mkdir(parents=True, exist_ok=True)
    (sub / "attention.ipynb").write_text(json.dumps(release))
    run("autograde", "attention", "--force", "--create")
    run("generate_feedback", "attention", "--force")
    run("export")
    row = (course / "grades.csv").read_text().splitlines()[1].split(",")
    return float(row[7]), (course / "feedback/alice/attention/attention.html").read_text()


def test_nbgrader_solutions_full_marks(tmp_path):
    score, _ = cycle(nbgrader_course(tmp_path / "course"), "solutions")
    assert score == 100


def test_nbgrader_untouched_release_scores_zero(tmp_path):
    score, _ = cycle(nbgrader_course(tmp_path / "course"), None)
    assert score == 0


def test_nbgrader_mistake_loses_its_stage_as_make_grade_does(tmp_path):
    score, feedback = cycle(nbgrader_course(tmp_path / "course"), "solutions", MASK_TOP_LEFT)
    direct = grade(variant(tmp_path / "v", {"masking.py": [MASK_TOP_LEFT]}), seed=0)
    assert score == direct.score < 100
    # the feedback shows the public report but nothing of the hidden checks
    hidden = {r.check.name for s in direct.stages.values() for r in s.checks if r.check.visibility == "hidden"}
    assert "causal_mask_reference" in feedback  # a public check, reported
    assert not [h for h in hidden if "_" in h and h in feedback]  # (skip one-word names like "reference")
