"""The class report from a batch: counts of the mistakes planted, the crashed and unreadable
submissions, pseudonyms, and a page that renders with its plots."""
import csv
import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest
from conftest import ROOT, SOLUTIONS, variant
from test_diagnosis import MUTANTS
from test_html_report import CHROMIUM, FLAGS, _images

from autograder.instructor.class_report import pseudonym
from autograder.instructor.regrade import regrade
from autograder.sandbox.launchers import separate_user_possible

TRUST = not separate_user_possible()  # root with a shared interpreter: the default; else the tests vouch for the code

PLANTED = {  # submission -> the catalogued mistakes made in it
    "alice": [],
    "bob": ["mask-top-left"],
    "carol": ["scale-missing", "mask-zero-not-neginf"],
    "dave": ["mask-top-left", "softmax-unstable"],
    "erin": ["heads-no-output-projection"],
}


def merged(tmp_path, mistakes):
    edits: dict = {}
    for m in mistakes:
        for f, pairs in MUTANTS[m][0].items():
            edits.setdefault(f, []).extend(pairs)
    return variant(tmp_path, edits)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("class")
    folder = tmp / "batch"
    folder.mkdir()
    for name, mistakes in PLANTED.items():
        shutil.move(str(merged(tmp / name, mistakes)), folder / name)
    hang = merged(tmp / "frank", [])  # scores.py never finishes loading
    (hang / "scores.py").write_text("while True:\n    pass\n" + (SOLUTIONS / "scores.py").read_text())
    shutil.move(str(hang), folder / "frank")
    (folder / "gina.zip").write_bytes(b"this is not a zip file")  # unreadable
    out = regrade(folder, jobs=2, quiet=True, timeout=3, trust=TRUST)
    return out


def test_counts_match_what_was_planted(batch):
    rows = list(csv.DictReader(open(batch / "diagnoses.csv")))
    per_student = {}
    for r in rows:
        per_student.setdefault(r["submission"], set()).add(r["diagnosis"])
    for name, mistakes in PLANTED.items():
        assert per_student.get(name, set()) == set(mistakes), (name, per_student.get(name))
    counts = Counter(r["diagnosis"] for r in rows)
    page = (batch / "class-report.html").read_text()
    table = page.split("id='diagnoses'")[1].split("</table>")[0]
    for d, c in counts.items():
        assert re.search(rf"<tr><td>{c}</td><td class='name'>{re.escape(d)}</td>", table), (d, c)
    assert counts["mask-top-left"] == 2 and table.index("mask-top-left") < table.index("softmax-unstable")


def test_crashed_and_unreadable_submissions_are_listed(batch):
    troubles = (batch / "class-report.html").read_text().split("id='troubles'")[1]
    assert "gina" in troubles and "could not be graded" in troubles
    assert "frank" in troubles and "your code did not finish" in troubles


def test_blocking_and_stage_shares(batch):
    import json

    page = (batch / "class-report.html").read_text()
    blocking = page.split("id='blocking'")[1].split("</table>")[0]
    students: Counter = Counter()
    for path in batch.glob("*.json"):
        stages = json.loads(path.read_text())["extra_data"]["stages"].values()
        students.update({s["blocked_by"] for s in stages if s["status"] == "blocked"})
    assert students, "the batch has blocked stages"
    for stage, n in students.items():
        assert f"<tr><td class='name'>{stage}</td><td>{n}</td>" in blocking, (stage, n, blocking)
    stages = page.split("id='stages'")[1].split("</table>")[0]
    assert "<td class='name'>softmax</td>" in stages and "%" in stages


def test_anonymized_report_from_a_results_folder(batch, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(batch, results)
    for _ in range(2):
        p = subprocess.run([sys.executable, "-m", "autograder", "class-report", str(results), "--anonymize"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
    page, table = (results / "class-report.html").read_text(), (results / "diagnoses.csv").read_text()
    for name in (*PLANTED, "frank", "gina"):
        assert name not in page and f"\n{name}," not in table
    assert pseudonym("bob") in table and pseudonym("bob") == pseudonym("bob") and pseudonym("gina") in page
    assert "def " not in page and "import " not in page  # never any code


def test_page_is_self_contained_with_plots(batch):
    text = (batch / "class-report.html").read_text()
    assert not re.search(r"(src|href)=['\"]https?://", text)
    imgs = _images(text)
    assert len(imgs) == 2 and all(img.std() > 5 for img in imgs)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_page_renders_in_chromium(batch, tmp_path):
    page = batch / "class-report.html"
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p1'}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert "Class report" in dom and "mask-top-left" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p2'}", f"--screenshot={shot}",
                    "--window-size=1200,2400", page.as_uri()], capture_output=True, timeout=120)
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert img.shape[0] >= 1000 and img.std() > 10
