"""The class report from a batch: the students with their totals (one row per student, however many
submissions), the LMS's grades.csv, links to each submission's results and report, counts of the
mistakes planted, the crashed and unreadable submissions, pseudonyms, integer axes, empty sections
left out, no instructor path in what goes back to students, and a page that renders, and sorts, in
Chromium."""
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest
from conftest import CHROMIUM, EXERCISES, FLAGS, MUTANTS, ROOT, SOLUTIONS, png_images, variant

from autograder.instructor import class_report
from autograder.instructor.class_report import pseudonym
from autograder.instructor.regrade import regrade
from autograder.sandbox.launchers import separate_user_possible
from autograder.stages import BY_NAME, CORE_POINTS, SHOWN_ORDER
from autograder.submission import make_zip

pytestmark = pytest.mark.slow  # builds or runs a whole channel: `make test` only (CONTRIBUTING.md)

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
    (folder / "erin" / "scratch_test.py").write_text("print('my own checks')\n")  # handed in beside the stages
    (folder / "erin" / "notes.txt").write_text("to do: the output projection\n")
    (folder / "gina.zip").write_bytes(b"this is not a zip file")  # unreadable
    # alice also hands in an older zip, the stubs as given: one student, and her better folder counts
    make_zip(EXERCISES, folder / "alice.zip")
    os.utime(folder / "alice.zip", (1_000_000_000, 1_000_000_000))
    out = regrade(folder, jobs=2, quiet=True, timeout=3, trust=TRUST)
    return out


STUDENTS = [*PLANTED, "frank", "gina"]


def _rows(page: str, table: str) -> list[str]:
    body = page.split(f"id='{table}'")[1].split("</table>")[0]
    return re.findall(r"<tr>(.*?)</tr>", body.split("<tbody>")[1] if "<tbody>" in body else body, re.S)


def test_counts_match_what_was_planted(batch):
    rows = list(csv.DictReader(open(batch / "diagnoses.csv")))  # one per student and failing check
    per_student = {}
    for r in rows:
        per_student.setdefault(r["student"], set()).update(d for d in r["diagnosis"].split("+") if d)
    for name, mistakes in PLANTED.items():
        assert per_student.get(name, set()) == set(mistakes), (name, per_student.get(name))
    counts = Counter(d for ds in per_student.values() for d in ds)
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


def _own_and_blocked(batch) -> dict[str, tuple[set, set]]:
    """Per graded student, read from their counted results JSON: ({(stage, check, diagnosis)} failing in a stage
    that failed on its own, {(stage, blocked_by)} of their blocked stages)."""
    out = {}
    for name in [*PLANTED, "frank"]:
        r = json.loads((batch / f"{name}.json").read_text())
        stages = r["extra_data"]["stages"]
        own = {(t["extra_data"]["stage"], t["extra_data"]["check"], t["extra_data"]["diagnosis"] or "")
               for t in r["tests"] if t["status"] == "failed" and stages[t["extra_data"]["stage"]]["status"] == "failed"}
        out[name] = own, {(n, st["blocked_by"]) for n, st in stages.items() if st["status"] == "blocked"}
    return out


def test_every_failing_check_per_student_and_the_checks_failed_most(batch):
    """Issue 44: the page lists, per student, every failing check with its diagnosis (a blocked stage once, by
    the stage that blocks it: a bonus stage blocked by a core one too), and for the class the checks failed
    most often with how many students failed each; diagnoses.csv holds the same, one row per failing check."""
    page = (batch / "class-report.html").read_text()
    left = {re.search(r"<td class='name'>([^<]*)</td>", r).group(1): r for r in _rows(page, "failing") if "<td" in r}
    expected = _own_and_blocked(batch)
    assert "alice" not in left and set(left) == {n for n, (own, blocked) in expected.items() if own or blocked}
    for name, (own, blocked) in expected.items():
        for stage, check, diagnosis in own:
            assert f"{stage}: {check}" + (f" ({diagnosis.replace('+', ', ')})" if diagnosis else "") in left[name]
        for stage, by in blocked:
            assert f"{stage}: blocked by {by}" in left[name], (name, stage)
    # bob's only mistake is masking's (core): gqa and rope (bonus) reach it, and are blocked by it, not failed
    assert {("gqa", "masking"), ("rope", "masking")} <= expected["bob"][1]
    assert all(stage == "masking" for stage, _, _ in expected["bob"][0])
    most = [re.findall(r"<td(?: class='name')?>([^<]*)</td>", r) for r in _rows(page, "most_failed") if "<td" in r]
    counts = Counter((stage, check) for own, _ in expected.values() for stage, check, _ in own)
    assert {(stage, check): int(n) for n, stage, check, *_ in most} == dict(counts)
    assert [int(row[0]) for row in most] == sorted((int(row[0]) for row in most), reverse=True)
    assert max(counts.values()) >= 2  # bob's and dave's shared mask-top-left
    rows = list(csv.DictReader(open(batch / "diagnoses.csv")))
    for name, (own, blocked) in expected.items():
        mine = [r for r in rows if r["student"] == name]
        assert {(r["stage"], r["check"], r["diagnosis"]) for r in mine if r["status"] == "failed"} == own
        assert {(r["stage"], r["blocked_by"]) for r in mine if r["status"] == "blocked"} == blocked


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
    # found by a stranger TA: the pseudonyms came in the order of the real names (alice's row first)
    shown = re.findall(r"<tr><td class='name'>(student-[0-9a-f]{8})</td>", page.split("id='students'")[1].split("</table>")[0])
    assert len(shown) == len(STUDENTS) and shown == sorted(shown), shown
    rows = [line.split(",")[0] for line in table.splitlines()[1:]]
    assert rows == sorted(rows)


def test_an_inferred_diagnosis_is_listed_with_the_stage_of_its_file():
    """Found by a stranger TA: diagnoses.csv and the mistakes table left an inferred diagnosis's stage blank."""
    from autograder.stages import CATALOGUE

    assert class_report.stage_of_mistake("inferred-cache-contents") == "kv_cache"
    assert all(class_report.stage_of_mistake(d) for d in CATALOGUE)


def test_an_inferred_diagnosis_is_filed_under_the_stage_whose_check_found_it(tmp_path):
    """Found by a stranger TA: a softmax over the wrong axis inside masking's attention (softmax itself right, 12/12)
    was listed under stage softmax, the file its explanation points at, in diagnoses.csv and the mistakes table."""
    def result(diagnosis: str, stage: str) -> dict:
        return {"score": 80, "tests": [{"name": "t", "score": 0, "max_score": 1, "output": "", "status": "failed",
                                        "extra_data": {"stage": stage, "check": "c", "diagnosis": diagnosis}}],
                "extra_data": {"stages": {stage: {"score": 0, "max_score": 1, "status": "failed"}}}}

    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "quinn.json").write_text(json.dumps(result("inferred-softmax-axis", "masking")))
    (folder / "rita.json").write_text(json.dumps(result("softmax-unstable", "softmax")))
    page, rows, _ = class_report.build(class_report.load(folder), False)
    assert sorted(rows) == [["quinn", "masking", "c", "failed", "inferred-softmax-axis", ""],
                            ["rita", "softmax", "c", "failed", "softmax-unstable", ""]]
    assert "<td class='name'>inferred-softmax-axis</td><td class='name'>masking</td>" in page


def test_what_stopped_a_submission_is_one_line_per_cause_syntax_errors_included():
    """Found by a stranger TA: a loop at import filled six rows, one per stage, with the same hang; a file with a
    syntax error was not listed at all; a stage's shares added up to 99%."""
    def test(stage: str, failure: str, message: str) -> dict:
        return {"extra_data": {"stage": stage, "failure": failure, "message": message}}

    hang = "your code did not finish: no answer within {} s (an endless loop, or far too slow): it was running softmax.py:6"
    ken = {"tests": [test("softmax", "timeout", hang.format(30)), test("heads", "timeout", hang.format(10)),
                     test("masking", "after_abort", "not run: softmax.py never finished loading")]}
    judy = {"tests": [test("masking", "raised", "raised SyntaxError: expected ':' (masking.py, line 19) at masking.py:19"),
                      test("heads", "raised", "raised SyntaxError: expected ':' (masking.py, line 19) at masking.py:19, "
                                              "in stage 5 (masking)'s code, called from your <module> at heads.py:7"),
                      test("scaling", "raised", "raised ValueError: a wrong shape at scaling.py:3")]}
    assert class_report.troubles(ken) == ["softmax, heads: " + hang.replace("within {} s", "within the time limit")]
    assert class_report.troubles(judy) == ["masking, heads: raised SyntaxError: expected ':' (masking.py, line 19) at "
                                           "masking.py:19"]
    shares = class_report.shares_of([{"status": "passed"}, {"status": "failed"}, {"status": "blocked"}])
    assert [shares[st] for st in ("passed", "failed", "blocked")] == ["1 (33%)"] * 3  # the page says rows may add to 99%


def test_the_same_share_reads_the_same_in_every_cell():
    """Found by a stranger TA: 1 student of 8 read "13%" in one column and "12%" in another (the largest
    remainder took the rounding); each cell is now rounded on its own, half up."""
    eight = [{"status": st} for st in ["passed", "failed"] + ["blocked"] * 3 + ["not_started"] * 3]
    assert class_report.shares_of(eight) == {"passed": "1 (13%)", "failed": "1 (13%)", "blocked": "3 (38%)",
                                             "not_started": "3 (38%)"}
    other = [{"status": st} for st in ["failed"] + ["passed"] * 7]  # the same 1 of 8 in another row
    assert class_report.shares_of(other)["failed"] == "1 (13%)"
    assert class_report.percent(1, 200) == 1 and class_report.percent(0, 0) == 0


def test_the_page_says_how_the_regrade_ran():
    """Issue 44: summary.csv's hidden_inputs and sandbox reach one paragraph of the page, with the fix where the
    hidden inputs were the release's public ones; a results folder without them (Gradescope's) shows none."""
    batch = class_report.Batch(run={"hidden_inputs": "the release's public inputs (seed 0)",
                                    "sandbox": "the grader's own uid, namespaces between submissions (SAME_UID=1)"})
    line = class_report.run_line(batch)
    assert line.startswith("<p id='run'>") and line.count("</p>") == 1
    assert "seed 0" in line and "SECRET_FILE=dist/autograder.secret" in line and "SAME_UID=1" in line
    secret = class_report.Batch(run={"hidden_inputs": "course secret (a seed per submission, as on Gradescope)",
                                     "sandbox": "a uid of their own each"})
    assert "SECRET_FILE" not in class_report.run_line(secret) and "uid of their own" in class_report.run_line(secret)
    assert class_report.run_line(class_report.Batch()) == ""


def test_page_is_self_contained_with_plots(batch):
    text = (batch / "class-report.html").read_text()
    assert not re.search(r"(src|href)=['\"]https?://", text) and "<script src" not in text
    imgs = png_images(text)  # the totals, the stages, the mistakes
    assert len(imgs) == 3 and all(img.std() > 5 for img in imgs)
    assert "id='totals'" in text


def test_one_row_per_student_with_their_totals_and_links(batch):
    """alice.zip and alice/ are one student; the folder, with the higher total, counts; each row's total and
    points are its counted submission's results; every link names a file that is there."""
    page = (batch / "class-report.html").read_text()
    rows = _rows(page, "students")
    names = [re.search(r"<td class='name'>([^<]*)</td>", r).group(1) for r in rows]
    assert sorted(names) == sorted(STUDENTS), names
    summary = {r["submission"]: r for r in csv.DictReader(open(batch / "summary.csv"))}
    best = float(summary["alice"]["total"])
    assert float(summary["alice.zip"]["total"]) == 0 < best
    alice = rows[names.index("alice")]
    assert f"<td data-v='{best:g}'>{best:g}</td>" in alice
    assert "alice (counted)" in alice and alice.index("alice (counted)") < alice.index("alice.zip")
    links = re.findall(r"href='([^']+)'", page)
    assert {"alice.json", "alice.html", "alice.zip.json", "alice.zip.html", "bob.json", "bob.html"} <= set(links)
    assert all((batch / link).is_file() for link in links), links
    gina = rows[names.index("gina")]
    assert "none graded" in gina and "gina.zip: could not be graded" in gina and "href" not in gina
    for name in ("bob", "carol"):
        r = json.loads((batch / f"{name}.json").read_text())
        cells = re.findall(r"<td data-v='([^']*)'>", rows[names.index(name)])
        # total, core and bonus (the bonus apart: the total is the core), then each stage's points
        assert float(cells[0]) == float(cells[1]) == r["score"] < CORE_POINTS
        assert float(cells[2]) == r["extra_data"]["bonus"]["score"]
        stages = [s for s in SHOWN_ORDER if s.name in r["extra_data"]["stages"]]
        assert [float(c) for c in cells[3:]] == [r["extra_data"]["stages"][s.name]["score"] for s in stages]
    assert f"{len(STUDENTS)} students, {len(STUDENTS) + 1} submissions" in page


def test_grades_csv_has_one_row_per_student_for_an_lms(batch):
    rows = list(csv.DictReader(open(batch / "grades.csv")))
    assert [r["student"] for r in rows] == sorted(STUDENTS)
    # found by a stranger TA: the bonus columns looked like core ones beside a total that leaves them out
    assert list(rows[0])[:4] == ["student", "total", "core", "bonus"]
    assert [s.column for s in SHOWN_ORDER] == list(rows[0])[4:-2]
    assert all(("(bonus)" in s.column) == s.bonus for s in SHOWN_ORDER) and any(s.bonus for s in SHOWN_ORDER)
    by = {r["student"]: r for r in rows}
    assert float(by["alice"]["total"]) > 0 and by["alice"]["submission"] == "alice"
    assert by["gina"]["total"] == "0" and by["gina"]["error"] and by["gina"]["submission"] == ""
    for name in ("bob", "dave", "erin"):
        r = json.loads((batch / f"{name}.json").read_text())
        assert float(by[name]["total"]) == float(by[name]["core"]) == r["score"]  # the bonus apart (the default)
        assert float(by[name]["bonus"]) == r["extra_data"]["bonus"]["score"] > 0
        assert {s: float(by[name][BY_NAME[s].column]) for s in r["extra_data"]["stages"]} == \
            {s: v["score"] for s, v in r["extra_data"]["stages"].items()}


def test_the_lms_files_have_canvas_and_brightspace_columns(batch):
    """Canvas's gradebook import (Student, ID, SIS User ID, SIS Login ID, Section, one column per assignment) and
    Brightspace's (Username, "<item> Points Grade", End-of-Line Indicator "#"): the identifier as given, the
    total as the policy counts it and, the bonus apart, the bonus as an item of its own."""
    grades = {r["student"]: r for r in csv.DictReader(open(batch / "grades.csv"))}
    canvas = list(csv.reader(open(batch / "grades-canvas.csv")))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Attention kit",
                         "Attention kit bonus"]
    assert [(r[0], r[3], r[5], r[6]) for r in canvas[1:]] == [(n, n, g["total"], g["bonus"]) for n, g in grades.items()]
    d2l = list(csv.reader(open(batch / "grades-brightspace.csv")))
    assert d2l[0] == ["Username", "Attention kit Points Grade", "Attention kit bonus Points Grade",
                      "End-of-Line Indicator"]
    assert [tuple(r) for r in d2l[1:]] == [(n, g["total"], g["bonus"], "#") for n, g in grades.items()]


def test_what_goes_back_to_students_names_no_instructor_path(batch):
    """The results JSON and report of a folder submission name its files as handed in (`masking.py`), never the
    batch's folder on the instructor's machine."""
    folder = batch.with_name("batch")
    assert str(folder.parent) not in (batch / "summary.csv").read_text()
    for path in [*batch.glob("*.json"), *batch.glob("*.html")]:
        if path.name != "class-report.html":
            assert str(folder.parent) not in path.read_text(), path
    bob = json.loads((batch / "bob.json").read_text())["output"]
    assert "masking.py" in bob, bob
    page = (batch / "bob.html").read_text()
    assert "<code>bob</code>" in page and "masking.py" in page


def test_empty_sections_are_left_out(batch, tmp_path):
    """A class with no mistake, no blocked stage and nothing crashed: no heading for any of them."""
    (tmp_path / "alice.json").write_text((batch / "alice.json").read_text())
    page = (tmp_path / class_report.write(tmp_path).name).read_text()
    assert "id='students'" in page and "id='totals'" in page
    for gone in ("crashed", "id='troubles'", "Mistakes", "id='diagnoses'", "block others", "id='blocking'"):
        assert gone not in page, gone
    full = (batch / "class-report.html").read_text()
    assert all(x in full for x in ("id='troubles'", "id='diagnoses'", "id='blocking'"))


def test_count_axes_have_whole_numbers_only(monkeypatch):
    """Two students: a default axis would tick 0.25, 0.5, ...; every count (and points) axis ticks integers."""
    from collections import Counter

    figures = []
    monkeypatch.setattr(class_report, "_png", lambda fig: figures.append(fig) or "data:")
    results = [{"extra_data": {"stages": {s.name: {"score": s.points * k} for s in SHOWN_ORDER}}} for k in (0.5, 1)]
    class_report.totals_figure([37.0, 100.0], 100)
    class_report.stage_figure(results)
    class_report.diagnosis_figure(Counter({"mask-top-left": 2, "scale-missing": 1}))
    totals, stages, mistakes = figures
    axes = [totals.axes[0].yaxis, totals.axes[0].xaxis, mistakes.axes[0].xaxis]
    axes += [ax.yaxis for ax in stages.axes if ax.axison]
    for axis in axes:
        ticks = axis.get_majorticklocs()
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks


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


def _totals_in_order(dom: str) -> list[float]:
    body = dom.split('id="students"')[1].split("</tbody>")[0]
    return [float(v) for v in re.findall(r'<tr><td class="name">[^<]*</td><td data-v="([^"]*)"', body)]


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_students_sort_by_a_clicked_header_in_chromium(batch, tmp_path):
    """A click on the total's header sorts the students by it, highest first; a second click, lowest first; the
    name's header sorts by name. The clicks are real events on the page's own script."""
    page = (batch / "class-report.html").read_text()

    def after(clicks: list[str]) -> str:
        script = "".join(f"document.querySelector('#students th:nth-child({c})').click();" for c in clicks)
        copy = tmp_path / f"clicked-{len(clicks)}-{clicks[0]}.html"
        copy.write_text(page.replace("</body>", f"<script>{script}</script></body>"))
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / copy.stem}", "--dump-dom",
                               copy.as_uri()], capture_output=True, text=True, timeout=120).stdout

    unsorted = _totals_in_order(after(["99"]))  # a header that is not there: nothing moves
    assert len(unsorted) == len(STUDENTS) and unsorted != sorted(unsorted, reverse=True)
    once = _totals_in_order(after(["2"]))
    assert once == sorted(unsorted, reverse=True)
    assert _totals_in_order(after(["2", "2"])) == sorted(unsorted)
    names = re.findall(r'<tr><td class="name">([^<]*)</td>', after(["1"]).split('id="students"')[1].split("</tbody>")[0])
    assert names == sorted(STUDENTS)


def test_a_file_handed_in_beside_the_stages_is_named_in_every_report_of_the_regrade(batch):
    """Found by a stranger TA: `make grade` named a stray scratch_test.py, the regrade's JSON, page and class report
    did not. Each now does; a file that is not Python (notes.txt) is never read and named nowhere."""
    result = json.loads((batch / "erin.json").read_text())
    assert result["extra_data"]["ignored_files"] == ["scratch_test.py"]
    assert re.search(r"Ignored \(not stage modules, never run\): scratch\\?_test\.py", result["output"])  # Markdown
    row = next(r for r in _rows((batch / "class-report.html").read_text(), "students") if ">erin<" in r)
    assert "ignored, never run: scratch_test.py" in row and "notes.txt" not in row
    assert "ignored" not in next(r for r in _rows((batch / "class-report.html").read_text(), "students")
                                 if ">bob<" in r)
