"""The class at a glance: `class-report.html`, `grades.csv` and `diagnoses.csv` from a folder of results.

    python -m autograder class-report RESULTS_DIR [--anonymize]

RESULTS_DIR holds one results JSON per submission in the kit's format (what `make regrade` or the
Gradescope zip writes), named after the submission (`alice.json` for a folder `alice/`,
`alice.zip.json` for `alice.zip`), maybe a report page beside each (`alice.html`), and, when `make
regrade` wrote it, summary.csv (whose error column names the submissions that could not be graded at
all, and whose modified column says when each was last changed).

One student, one row: a student is a submission's name without `.zip`, so `alice.zip` and `alice/`
are the same student. Of a student's graded submissions the one with the higher total counts; of
equal totals, the one changed last (then the name, so the choice is the same every run). A student
none of whose submissions could be graded counts 0.

The page is self-contained (inline PNG plots and one inline script, nothing fetched) and never shows
code: the students with their totals and points per stage (click a header to sort), with links to
each submission's results and report; a histogram of the totals; per stage, the scores' histogram
and the share passed / failed / blocked / not started; the diagnoses ranked by how many students
made them, each with its stage, its explanation and the section to reread; which stages block how
many students; how the regrade ran (summary.csv's hidden_inputs and sandbox: the release's public inputs
without the course secret, the grader's own uid under SAME_UID=1); and the submissions that crashed, hung
or could not be read, with the reason. A section with nothing to show is left out. grades.csv is one row
per student for an LMS import (student, total, core, bonus, the points of each stage, the submission
counted, error); it keeps the real names, as summary.csv does, under --anonymize too."""
import argparse
import base64
import hashlib
import html
import io
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from ..results import Failure
from ..stages import BY_NAME, CATALOGUE, SHOWN_ORDER, STAGES, mistakes_of, stage_of_file
from .staff_text import read_csv, write_csv

STATUSES = ("passed", "failed", "blocked", "not_started")


def pseudonym(name: str) -> str:
    """A stable stand-in for a submission's name: the same name gives the same pseudonym every run."""
    return "student-" + hashlib.sha256(name.encode()).hexdigest()[:8]


def stage_of_mistake(diagnosis: str) -> str:
    """The stage a diagnosis is about: a catalogued mistake's own, an inferred one's (which belongs to no stage's
    catalogue) that of the file it points at (kv_cache.py:append: kv_cache)."""
    m = CATALOGUE[diagnosis]
    return m.stage or stage_of_file(m.where.split(":")[0]) or ""


def student_of(entry: str) -> str:
    """The student a submission belongs to: its name in the batch without `.zip` (or the suffixes of a file handed
    in that cannot be graded: `bob.tar.gz`, `carol.py`)."""
    for suffix in (".zip", ".py", ".tgz", ".tar.gz", ".tar.bz2", ".tar.xz", ".tar", ".7z", ".rar"):
        if entry.endswith(suffix) and len(entry) > len(suffix):
            return entry.removesuffix(suffix)
    return entry


@dataclass
class Batch:
    """What a results folder holds, per submission (an entry of the batch: `alice`, `alice.zip`)."""

    results: dict[str, dict] = field(default_factory=dict)  # entry -> its results JSON
    errors: dict[str, str] = field(default_factory=dict)  # entry -> why it could not be graded
    modified: dict[str, str] = field(default_factory=dict)  # entry -> when it was last changed (ISO 8601)
    pages: set[str] = field(default_factory=set)  # entries with a report page (ENTRY.html) beside their JSON
    run: dict[str, str] = field(default_factory=dict)  # RUN_COLUMNS of summary.csv: how the regrade ran


RUN_COLUMNS = {  # summary.csv's columns on how `make regrade` ran (the same in every row): the page's wording
    "hidden_inputs": "Hidden checks' inputs: {}.",
    "sandbox": "Submissions ran under {}.",
}


def run_line(batch: Batch) -> str:
    """One paragraph on how the regrade ran (where the hidden inputs came from, what separated the
    submissions), with the fix where the run was weaker than Gradescope's; empty without summary.csv."""
    said = [RUN_COLUMNS[c].format(v) for c, v in batch.run.items()]
    if not batch.run.get("hidden_inputs", "course secret").startswith("course secret"):
        said.append("Hard-coded answers could pass them: regrade with SECRET_FILE=dist/autograder.secret.")
    if "grader's own uid" in batch.run.get("sandbox", ""):
        said.append("Nothing but namespaces kept one submission from another." if "namespaces between" in
                    batch.run["sandbox"] else "Nothing kept one submission from another or from your account.")
    return f"<p id='run'>{html.escape(' '.join(said))}</p>" if said else ""


@dataclass
class Student:
    name: str
    entries: list[str]  # every submission of theirs, graded or not, by name
    counted: str | None  # the graded submission that counts (None: none could be graded)


def load(results_dir: Path) -> Batch:
    results_dir = Path(results_dir)
    batch = Batch()
    for p in sorted(results_dir.glob("*.json")):
        r = json.loads(p.read_text())
        if isinstance(r, dict) and "tests" in r and "extra_data" in r:
            entry = p.name.removesuffix(".json")
            batch.results[entry] = r
            if p.with_suffix(".html").is_file():
                batch.pages.add(entry)
    summary = results_dir / "summary.csv"
    if summary.is_file():
        for row in read_csv(summary):
            entry = row["submission"]
            if row.get("error"):
                batch.errors[entry] = row["error"]
            if row.get("modified"):
                batch.modified[entry] = row["modified"]
            batch.run.update({c: row[c] for c in RUN_COLUMNS if row.get(c) and c not in batch.run})
    return batch


def students(batch: Batch) -> dict[str, Student]:
    """Student name -> their submissions and the one counted (the rule in this module's docstring)."""
    by_name: dict[str, list[str]] = {}
    for entry in sorted({*batch.results, *batch.errors}):
        by_name.setdefault(student_of(entry), []).append(entry)
    out = {}
    for name, entries in sorted(by_name.items()):
        graded = [e for e in entries if e in batch.results]
        counted = max(graded, key=lambda e: (batch.results[e]["score"], batch.modified.get(e, ""), e), default=None)
        out[name] = Student(name, entries, counted)
    return out


def points(result: dict) -> tuple[float, float, float]:
    """(total, core, bonus) of one submission's results: the total as its bonus policy counts it (`folded`: core
    and bonus together; `apart`: the core alone, the bonus beside it), as every channel writes `score`."""
    bonus = result["extra_data"].get("bonus") or {}
    extra = float(bonus.get("score", 0.0))
    total = float(result["score"])
    return total, total - extra if bonus.get("policy") == "folded" else total, extra


def policy_of(results: list[dict]) -> str:
    """The bonus policy the class's results were graded under (the one most of them name; `apart` if none)."""
    named = Counter((r["extra_data"].get("bonus") or {}).get("policy", "apart") for r in results)
    return named.most_common(1)[0][0] if named else "apart"


@dataclass(frozen=True)
class Failing:
    """One thing a student has left to fix: a failing check (its stage failed on its own, or is blocked by an
    earlier one it calls), or a stage not started (check empty)."""

    stage: str
    check: str
    status: str  # failed | blocked | not_started
    diagnosis: str = ""  # catalogue ids, '+'-joined, as the check named them
    blocked_by: str = ""


def failing(result: dict) -> list[Failing]:
    """Every failing check of one submission's results, in the stages' order; a stage not started is one entry."""
    stages = result["extra_data"].get("stages", {})
    out, order = [], {s.name: i for i, s in enumerate(SHOWN_ORDER)}
    for t in sorted(result["tests"], key=lambda t: order.get(t.get("extra_data", {}).get("stage"), len(order))):
        data = t.get("extra_data", {})
        stage = stages.get(data.get("stage"), {})
        status = stage.get("status", "failed")
        if t.get("status") != "failed" or status == "passed":
            continue
        if status == "not_started":
            entry = Failing(data["stage"], "", status)
        else:
            entry = Failing(data["stage"], data.get("check", ""), status, data.get("diagnosis") or "",
                            stage.get("blocked_by") or "")
        if entry not in out:
            out.append(entry)
    return out


def diagnoses_of(result: dict) -> list[str]:
    """The catalogue ids named in one submission's results ('a+b' counts as both), first seen first."""
    return list(seen_in(result))


def seen_in(result: dict) -> dict[str, str]:
    """{catalogue id: the stage of the first check that named it} for one submission's results: an inferred
    mistake belongs to the stage whose check found it (a softmax taken over the wrong axis inside masking's
    attention is masking's), a catalogued one to its own stage."""
    found: dict[str, str] = {}
    for t in result["tests"]:
        extra = t.get("extra_data", {})
        for m in mistakes_of(extra.get("diagnosis")):
            if m.id in CATALOGUE:
                found.setdefault(m.id, m.stage or str(extra.get("stage") or "") or stage_of_mistake(m.id))
    return found


def percent(count: int, of: int) -> int:
    """`count` of `of` as a whole percent, half rounded up: the same count of the same class reads the same in
    every cell (a stranger TA saw 1 of 8 as 13% in one column and 12% in another)."""
    return (200 * count + of) // (2 * of) if of else 0


def shares_of(rows: list[dict]) -> dict[str, str]:
    """Each status's count of students and its share (percent: each cell rounded on its own, so a row may add up
    to 99% or 101%; the page says so)."""
    counts = {st: sum(x["status"] == st for x in rows) for st in STATUSES}
    return {st: f"{counts[st]} ({percent(counts[st], len(rows))}%)" for st in STATUSES}


UNLOADABLE = ("raised SyntaxError", "raised IndentationError", "raised TabError")  # a file that cannot even load


def troubles(result: dict) -> list[str]:
    """Why a graded submission's code stopped (hangs and crashes), could not load (a syntax error) or could not
    run at all (the grader's environment), one line each: the stages where the same thing happened on one line."""
    found: dict[str, list[str]] = {}
    for t in result["tests"]:
        data = t.get("extra_data", {})
        message = (data.get("message") or "").strip()
        failure = Failure(data["failure"]) if data.get("failure") else None
        if failure and (failure.aborted or failure.environment or message.startswith(UNLOADABLE)):
            line = (message.splitlines()[:1] or [""])[0].strip()
            # the same cause, met by several stages: one line (the time limit and the caller differ by stage)
            line = re.sub(r", in stage \d+ \(\w+\)'s code, called from your .*$", "", line)
            line = re.sub(r"no answer within [\d.]+ s(, besides [\d.]+ s it waited for a CPU)?",
                          "no answer within the time limit", line)
            stages = found.setdefault(line[:200], [])
            if data["stage"] not in stages:
                stages.append(data["stage"])
    return [f"{', '.join(stages)}: {line}" for line, stages in found.items()]


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)  # laid out by tight_layout already: one layout pass, not two
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def prepare() -> None:
    """Load the plotting library now (a regrade does it while its fork server starts, when a core is free)."""
    _pyplot()


def _integer_axis(axis) -> None:
    """Whole-number ticks only: there is no half of a student (nor of a point, on a points axis)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def totals_figure(totals: list[float], top: float) -> str:
    """The histogram of the students' totals, in bins of a tenth of the top score (whole points)."""
    plt = _pyplot()
    width = max(1, round(top / 10))
    edges = list(range(0, int(top) + 1, width))  # the last bin holds its right edge: a full score
    if edges[-1] < top:
        edges.append(edges[-1] + width)
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.hist(totals, bins=edges, color="#36c", edgecolor="white")
    ax.set_xticks(edges)  # a tick at each bin's edge
    ax.set_xlabel("total points")
    ax.set_ylabel("students")
    _integer_axis(ax.yaxis)
    fig.tight_layout()
    uri = _png(fig)
    plt.close(fig)
    return uri


def stage_figure(results: list[dict]) -> str:
    """Two rows of small histograms: each stage's scores over the class."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, (len(STAGES) + 1) // 2, figsize=(2.3 * ((len(STAGES) + 1) // 2), 4.4))
    for ax, s in zip(axes.flat, STAGES):
        scores = [r["extra_data"]["stages"][s.name]["score"] for r in results if s.name in r["extra_data"]["stages"]]
        ax.hist(scores, bins=10, range=(0, s.points), color="#36c")
        ax.set_title(f"{s.number} {s.name}", fontsize=8)
        ax.tick_params(labelsize=7)
        _integer_axis(ax.yaxis)
    for ax in list(axes.flat)[len(STAGES):]:
        ax.set_axis_off()
    # a fixed grid: tight_layout would measure every label of the 14 panels, a third of the report's time
    fig.subplots_adjust(left=0.03, right=0.99, bottom=0.07, top=0.92, wspace=0.3, hspace=0.45)
    uri = _png(fig)
    plt.close(fig)
    return uri


def diagnosis_figure(counts: Counter) -> str:
    plt = _pyplot()
    ranked = counts.most_common(15)[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(ranked) + 0.8))
    ax.barh([k for k, _ in ranked], [v for _, v in ranked], color="#a11")
    ax.set_xlabel("students")
    _integer_axis(ax.xaxis)
    ax.tick_params(labelsize=8)
    fig.tight_layout()
    uri = _png(fig)
    plt.close(fig)
    return uri


# Click a header of a table with class "sortable" to sort its rows by that column (again: the other way).
# A cell's data-v, where present, is what it sorts by; numbers sort as numbers.
SORT_SCRIPT = """
function sortTable(table, col, dir) {
  var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
  function key(row) { var c = row.cells[col]; return c.hasAttribute('data-v') ? c.getAttribute('data-v') : c.textContent; }
  rows.sort(function (a, b) {
    var x = key(a), y = key(b), nx = parseFloat(x), ny = parseFloat(y);
    var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
    return dir === 'ascending' ? c : -c;
  });
  rows.forEach(function (r) { body.appendChild(r); });
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
    if (i === col) { th.setAttribute('aria-sort', dir); } else { th.removeAttribute('aria-sort'); }
  });
}
document.querySelectorAll('table.sortable').forEach(function (table) {
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
    th.addEventListener('click', function () {
      var first = th.classList.contains('num') ? 'descending' : 'ascending';
      var other = first === 'ascending' ? 'descending' : 'ascending';
      sortTable(table, i, th.getAttribute('aria-sort') === first ? other : first);
    });
  });
});
"""

CSS = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}table{border-collapse:"
       "collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:"
       "#f3f3f3}td.name{text-align:left}img{max-width:100%}table.sortable th{cursor:pointer;user-select:none}"
       "th[aria-sort=ascending]::after{content:' \\25B2'}th[aria-sort=descending]::after{content:' \\25BC'}"
       "td.none{color:#a11}")


def _link(href: str, text: str) -> str:
    return f"<a href='{html.escape(quote(href))}'>{text}</a>"


def students_table(who: dict[str, Student], batch: Batch, show, links: bool) -> list[str]:
    """The students with their totals and points per stage, the counted submission first among their links."""
    e = html.escape
    stages = [s for s in SHOWN_ORDER if any(s.name in batch.results[st.counted]["extra_data"]["stages"]
                                            for st in who.values() if st.counted)]
    columns = (f" Columns {stages[0].number} to {stages[-1].number}: the points of each stage (numbered as in the "
               "stages' table; * bonus)." if stages else "")
    policy = policy_of([batch.results[st.counted] for st in who.values() if st.counted])
    counts = ("core and bonus together (the course folds the bonus in)" if policy == "folded"
              else "the core points (the course keeps the bonus apart, in its own column)")
    out = [f"<h2>Students</h2><p>The total is {counts}. Click a column's header to sort by it.{columns}</p>"
           "<table id='students' class='sortable'><thead><tr><th>student</th><th class='num'>total</th>"
           "<th class='num'>core</th><th class='num'>bonus</th>"
           + "".join(f"<th class='num' title='{e(s.name)}'>{s.number}{'*' if s.bonus else ''}</th>" for s in stages)
           + "<th>submissions</th></tr></thead><tbody>"]
    for st in sorted(who.values(), key=lambda st: show(st.name)):  # pseudonyms in their own order, not the names'
        shown = show(st.name)
        if st.counted is None:
            cells = "<td data-v='-1' class='none'>none graded</td>" + "<td data-v='-1'></td>" * (len(stages) + 2)
        else:
            r = batch.results[st.counted]
            graded = r["extra_data"]["stages"]
            cells = "".join(f"<td data-v='{v:g}'>{v:g}</td>" for v in points(r)) + "".join(
                f"<td data-v='{graded[s.name]['score']:g}'>{graded[s.name]['score']:g}</td>" if s.name in graded
                else "<td data-v='-1'></td>" for s in stages)
        subs = []
        for entry in sorted(st.entries, key=lambda x: x != st.counted):  # the counted one first
            label = e(show(st.name) + entry[len(st.name):])
            if entry not in batch.results:
                subs.append(f"{label}: could not be graded")
                continue
            parts = [_link(f"{entry}.json", "results")] if links else []
            if links and entry in batch.pages:
                parts.append(_link(f"{entry}.html", "report"))
            note = " (counted)" if entry == st.counted and len(st.entries) > 1 else ""
            ignored = batch.results[entry]["extra_data"].get("ignored_files") or []
            if ignored:  # files the student handed in that were never run (a helper module, a scratch test)
                parts.append(e("ignored, never run: " + ", ".join(ignored)))
            subs.append(f"{label}{note}" + (f" ({', '.join(parts)})" if parts else ""))
        out.append(f"<tr><td class='name'>{e(shown)}</td>{cells}<td class='name'>{'; '.join(subs)}</td></tr>")
    out.append("</tbody></table>")
    return out


def grades_rows(who: dict[str, Student], batch: Batch) -> list[list]:
    """grades.csv: a header, then one row per student (real names: it is for the LMS): the total as the bonus
    policy counts it, the core and bonus points, each stage's, the submission counted."""
    rows: list[list] = [["student", "total", "core", "bonus", *[s.column for s in SHOWN_ORDER], "submission", "error"]]
    for st in who.values():
        if st.counted is None:
            why = "; ".join(f"{x}: {batch.errors.get(x, '')}" for x in st.entries)
            rows.append([st.name, 0, 0, 0, *[0 for _ in SHOWN_ORDER], "", why])
            continue
        r = batch.results[st.counted]
        graded = r["extra_data"]["stages"]
        rows.append([st.name, *[f"{v:g}" for v in points(r)],
                     *[f"{graded[s.name]['score']:g}" if s.name in graded else 0 for s in SHOWN_ORDER], st.counted, ""])
    return rows


ITEM = "Attention kit"  # the grade item's name in the LMS files (`make regrade ITEM=...`)


@dataclass(frozen=True)
class Lms:
    """One LMS's grade import: its file, the columns before the grades (the student's identifier goes in each
    of `ids`), how a grade item's column is named, and the columns after the grades."""

    file: str
    before: tuple[str, ...]
    ids: tuple[str, ...]
    item_column: str  # with {item}
    after: tuple[tuple[str, str], ...] = ()  # (column, the value of every row)


LMS = (
    # Canvas's gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, then one column per assignment
    # (a name Canvas does not know becomes a new assignment, or is ignored, as the import page asks)
    Lms("grades-canvas.csv", ("Student", "ID", "SIS User ID", "SIS Login ID", "Section"), ("Student", "SIS Login ID"),
        "{item}"),
    # Brightspace (D2L): Username (or OrgDefinedId), one "<item> Points Grade" column per grade item, and the
    # End-of-Line Indicator column holding "#"
    Lms("grades-brightspace.csv", ("Username",), ("Username",), "{item} Points Grade", (("End-of-Line Indicator", "#"),)),
)


def lms_rows(lms: Lms, grades: list[list], policy: str, item: str = ITEM) -> list[list]:
    """`lms`'s import file from grades.csv's rows: the total as the policy counts it for the grade item, and
    with the bonus apart, the bonus as an item of its own (`<item> bonus`)."""
    head = grades[0]
    items = [("total", item)] + ([("bonus", f"{item} bonus")] if policy == "apart" else [])
    out = [[*lms.before, *[lms.item_column.format(item=name) for _, name in items], *[c for c, _ in lms.after]]]
    for row in grades[1:]:
        by = dict(zip(head, row))
        ids = [by["student"] if c in lms.ids else "" for c in lms.before]
        out.append([*ids, *[by[col] for col, _ in items], *[v for _, v in lms.after]])
    return out


def _check_doc(stage: str, check: str) -> str:
    """What a check checks: the first line of its docstring (empty for a name the declarations do not hold)."""
    found = [c.doc for c in BY_NAME[stage].checks if c.name == check] if stage in BY_NAME else []
    return found[0] if found else ""


def _what_is_left(items: list[Failing]) -> str:
    """One student's failing checks as the page lists them: each own failure with its diagnosis, a blocked or
    unstarted stage once."""
    shown: list[str] = []
    for f in items:
        if f.status == "failed":
            text = f"{f.stage}: {f.check}" + (f" ({f.diagnosis.replace('+', ', ')})" if f.diagnosis else "")
        else:
            text = f"{f.stage}: " + (f"blocked by {f.blocked_by}" if f.status == "blocked" else "not started")
        if text not in shown:
            shown.append(text)
    return "; ".join(html.escape(t) for t in shown)


def failing_sections(left: dict[str, list[Failing]], show) -> list[str]:
    """Per student, every failing check (with its diagnosis); for the class, the checks failed most often (by
    students whose stage failed on its own: a blocked stage's checks are its blocker's), each with how many."""
    e = html.escape
    out: list[str] = []
    rows = [(show(name), items) for name, items in left.items() if items]
    if not rows:
        return out
    out.append("<h2>What each student has left</h2><p>Every failing check, with its diagnosis where there is one; "
               "a stage blocked by an earlier one it calls, or not started, once.</p><table id='failing'>"
               "<tr><th>student</th><th>failing checks</th></tr>")
    out += [f"<tr><td class='name'>{e(n)}</td><td class='name'>{_what_is_left(items)}</td></tr>"
            for n, items in sorted(rows)]
    out.append("</table>")
    own: Counter = Counter()  # (stage, check) -> students who failed it in a stage failing on its own
    named: dict[tuple[str, str], Counter] = {}  # (stage, check) -> the diagnoses it named, by students
    for items in left.values():
        for f in items:
            if f.status == "failed":
                own[(f.stage, f.check)] += 1
                named.setdefault((f.stage, f.check), Counter()).update(m.id for m in mistakes_of(f.diagnosis))
    if own:
        out.append("<h2>Checks failed most often</h2><p>By how many students failed each in a stage of their own "
                   "failing (not blocked), with the diagnoses it named: a recitation's plan.</p><table id='most_failed'>"
                   "<tr><th>students</th><th>stage</th><th>check</th><th>what it checks</th><th>diagnoses</th></tr>")
        number = {s.name: s.number for s in STAGES}
        for (stage, check), n in sorted(own.items(), key=lambda kv: (-kv[1], number.get(kv[0][0], 99), kv[0][1])):
            diag = ", ".join(f"{d} ({c})" for d, c in named[(stage, check)].most_common())
            out.append(f"<tr><td>{n}</td><td class='name'>{e(stage)}</td><td class='name'>{e(check)}</td>"
                       f"<td class='name'>{e(_check_doc(stage, check))}</td><td class='name'>{e(diag)}</td></tr>")
        out.append("</table>")
    return out


DIAGNOSES_HEAD = ["student", "stage", "check", "status", "diagnosis", "blocked_by"]


def build(batch: Batch, anonymize: bool = False) -> tuple[str, list[list[str]], list[list]]:
    """(the page, the diagnoses.csv rows (DIAGNOSES_HEAD: one per student and failing check), the grades.csv
    rows). Under `anonymize` the page has no links to the submissions' files, whose names are the students'."""
    show = pseudonym if anonymize else (lambda n: n)
    e = html.escape
    who = students(batch)
    counted = {name: batch.results[st.counted] for name, st in who.items() if st.counted}
    per_student = {name: diagnoses_of(r) for name, r in counted.items()}
    stage_seen = {name: seen_in(r) for name, r in counted.items()}
    where = {d: Counter(seen[d] for seen in stage_seen.values() if d in seen).most_common(1)[0][0]
             for d in {d for ds in per_student.values() for d in ds}}  # the stage most students' checks found it in
    counts = Counter(d for ds in per_student.values() for d in ds)
    blocked_by = Counter(st["blocked_by"] for r in counted.values() for st in r["extra_data"]["stages"].values()
                         if st.get("status") == "blocked" and st.get("blocked_by"))
    blocked_students = {b: sum(any(st.get("blocked_by") == b for st in r["extra_data"]["stages"].values())
                               for r in counted.values()) for b in blocked_by}
    n_entries = len({*batch.results, *batch.errors})
    merged = sum(len(st.entries) > 1 for st in who.values())
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>Attention kit: class report</title>"
           f"<style>{CSS}</style></head><body>",
           f"<h1>Class report</h1><p>{len(who)} students, {n_entries} submissions: {len(batch.results)} graded, "
           f"{len(batch.errors)} could not be graded."
           + (f" {merged} of the students handed in more than one submission (a zip and a folder of the same "
              "name): the higher total counts, of equal totals the one changed last." if merged else "")
           + f"{' Names are pseudonyms.' if anonymize else ''}</p>", run_line(batch)]
    out += students_table(who, batch, show, links=not anonymize)
    left = {name: failing(r) for name, r in counted.items()}
    if counted:
        totals = [r["score"] for r in counted.values()]
        top = max(sum(t["max_score"] for t in r["tests"]) for r in counted.values()) or max(totals) or 1
        mean = sum(totals) / len(totals)
        out.append(f"<figure><img id='totals' alt='totals' src='{totals_figure(totals, top)}'><figcaption>Totals "
                   f"of the {len(totals)} graded students (x: points, of {top:g}; y: students); mean {mean:.1f}"
                   "</figcaption></figure>")
        out.append("<h2>Stages</h2><p>Students per status, with their share of the class rounded to a whole "
                   "percent, each on its own: a row may add up to 99% or 101%.</p>"
                   "<table id='stages'><tr><th>#</th><th>stage</th><th>points</th><th>mean</th>"
                   + "".join(f"<th>{s.replace('_', ' ')}</th>" for s in STATUSES) + "</tr>")
        for s in STAGES:
            rows = [r["extra_data"]["stages"][s.name] for r in counted.values() if s.name in r["extra_data"]["stages"]]
            if not rows:
                continue
            mean = sum(x["score"] for x in rows) / len(rows)
            shares = "".join(f"<td>{shares_of(rows)[st]}</td>" for st in STATUSES)
            out.append(f"<tr><td>{s.number}</td><td class='name'>{s.name}{' (bonus)' if s.bonus else ''}</td>"
                       f"<td>{s.points}</td><td>{mean:.1f}</td>{shares}</tr>")
        out.append("</table>")
        out.append(f"<figure><img id='histograms' alt='scores per stage' src='{stage_figure(list(counted.values()))}'>"
                   "<figcaption>Scores per stage (x: points, y: students)</figcaption></figure>")
    if counts:
        out.append("<h2>Mistakes, by how many students made them</h2>")
        out.append(f"<figure><img id='mistakes' alt='diagnoses' src='{diagnosis_figure(counts)}'></figure>")
        out.append("<table id='diagnoses'><tr><th>students</th><th>diagnosis</th><th>stage</th><th>what it is</th>"
                   "<th>reread</th></tr>")
        for d, c in counts.most_common():
            m = CATALOGUE[d]
            out.append(f"<tr><td>{c}</td><td class='name'>{e(d)}</td><td class='name'>{e(where[d])}</td>"
                       f"<td class='name'>{e(m.explanation)}</td><td class='name'>{e(m.reread)}</td></tr>")
        out.append("</table>")
    out += failing_sections(left, show)
    if blocked_by:
        out.append("<h2>Stages that block others</h2>")
        out.append("<table id='blocking'><tr><th>stage</th><th>students blocked by it</th><th>stages blocked</th></tr>")
        for b, c in blocked_by.most_common():
            out.append(f"<tr><td class='name'>{e(b)}</td><td>{blocked_students[b]}</td><td>{c}</td></tr>")
        out.append("</table>")

    def shown(entry: str) -> str:
        return show(student_of(entry)) + entry[len(student_of(entry)):]

    def hide_name(text: str, entry: str) -> str:  # a reason may hold the submission's name, or its path
        return text.replace(entry, shown(entry)).replace(student_of(entry), show(student_of(entry)))

    trouble_rows = [(entry, f"could not be graded: {why}") for entry, why in batch.errors.items()]
    trouble_rows += [(entry, t) for entry, r in batch.results.items() for t in troubles(r)]
    trouble_rows.sort(key=lambda row: shown(row[0]))  # in the order of the names shown (pseudonyms: their own)
    if trouble_rows:
        out.append("<h2>Submissions that crashed, hung or could not be read</h2><table id='troubles'>"
                   "<tr><th>submission</th><th>what happened</th></tr>")
        for entry, what in trouble_rows:
            out.append(f"<tr><td class='name'>{e(shown(entry))}</td><td class='name'>{e(hide_name(what, entry))}</td></tr>")
        out.append("</table>")
    out.append(f"<script>{SORT_SCRIPT}</script></body></html>")
    csv_rows = sorted([show(name), f.stage, f.check, f.status, f.diagnosis, f.blocked_by]
                      for name, items in left.items() for f in items)
    return "\n".join(out), csv_rows, grades_rows(who, batch)


def write(results_dir: Path, out: Path | None = None, anonymize: bool = False, item: str = "") -> Path:
    """class-report.html, grades.csv, each LMS's import file (LMS) and diagnoses.csv in `out` (default:
    results_dir), every cell safe to open in a spreadsheet. `item` names the grade item in the LMS files."""
    batch = load(results_dir)
    out = Path(out or results_dir)
    page, rows, grades = build(batch, anonymize)
    (out / "class-report.html").write_text(page)
    write_csv(out / "diagnoses.csv", [DIAGNOSES_HEAD, *rows])  # names as in grades.csv, or pseudonyms
    write_csv(out / "grades.csv", grades)
    policy = policy_of(list(batch.results.values()))
    for lms in LMS:
        write_csv(out / lms.file, lms_rows(lms, grades, policy, item or ITEM))
    return out / "class-report.html"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder class-report")
    p.add_argument("results_dir")
    p.add_argument("--anonymize", action="store_true", help="stable pseudonyms instead of folder names")
    p.add_argument("--item", default=ITEM, help=f"the grade item's name in the LMS files (default {ITEM!r})")
    args = p.parse_args(argv)
    page = write(Path(args.results_dir), anonymize=args.anonymize, item=args.item)
    print(f"wrote {page}, grades.csv, {', '.join(lms.file for lms in LMS)} and diagnoses.csv")
    return 0
