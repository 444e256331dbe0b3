"""What the class gets wrong: `class-report.html` and `diagnoses.csv` from a folder of results.

    python -m autograder class-report RESULTS_DIR [--anonymize]

RESULTS_DIR holds one results JSON per submission in the kit's format (what `make regrade` or the
Gradescope zip writes) and, when `make regrade` wrote it, summary.csv (whose error column names the
submissions that could not be graded at all). The page is self-contained (inline PNG plots, no
script) and never shows code: per stage, the scores' histogram and the share passed / failed /
blocked / not started; the diagnoses ranked by how many students made them, each with its stage,
its explanation and the section to reread; which stages block how many students; and the
submissions that crashed, hung or could not be read, with the reason.
"""
import argparse
import base64
import csv
import hashlib
import html
import io
import json
from collections import Counter
from pathlib import Path

from ..results import Failure
from ..stages import CATALOGUE, STAGES, mistakes_of

STATUSES = ("passed", "failed", "blocked", "not_started")


def pseudonym(name: str) -> str:
    """A stable stand-in for a submission's name: the same name gives the same pseudonym every run."""
    return "student-" + hashlib.sha256(name.encode()).hexdigest()[:8]


def load(results_dir: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """(name -> results JSON, name -> why it could not be graded)."""
    results = {p.stem: json.loads(p.read_text()) for p in sorted(Path(results_dir).glob("*.json"))}
    errors = {}
    summary = Path(results_dir) / "summary.csv"
    if summary.is_file():
        for row in csv.DictReader(open(summary)):
            if row.get("error"):
                errors[Path(row["submission"]).stem] = row["error"]
    return {n: r for n, r in results.items() if "tests" in r and "extra_data" in r}, errors


def diagnoses_of(result: dict) -> list[str]:
    """The catalogue ids named in one submission's results ('a+b' counts as both), first seen first."""
    found = [m.id for t in result["tests"] for m in mistakes_of(t.get("extra_data", {}).get("diagnosis"))
             if m.id in CATALOGUE]
    return list(dict.fromkeys(found))


def troubles(result: dict) -> list[str]:
    """Why a graded submission's code stopped: hangs and crashes, one line each."""
    out = []
    for t in result["tests"]:
        data = t.get("extra_data", {})
        if data.get("failure") and Failure(data["failure"]).aborted:
            line = (data.get("message") or "").strip().splitlines()[:1] or [""]
            out.append(f"{data['stage']}: {line[0].strip()[:200]}")
    return list(dict.fromkeys(out))


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def stage_figure(results: dict[str, dict]) -> str:
    """One row of small histograms: each stage's scores over the class."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, (len(STAGES) + 1) // 2, figsize=(2.3 * ((len(STAGES) + 1) // 2), 4.4))
    for ax, s in zip(axes.flat, STAGES):
        scores = [r["extra_data"]["stages"][s.name]["score"] for r in results.values() if s.name in r["extra_data"]["stages"]]
        ax.hist(scores, bins=10, range=(0, s.points), color="#36c")
        ax.set_title(f"{s.number} {s.name}", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(STAGES):]:
        ax.set_axis_off()
    fig.tight_layout()
    uri = _png(fig)
    plt.close(fig)
    return uri


def diagnosis_figure(counts: Counter) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranked = counts.most_common(15)[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(ranked) + 0.8))
    ax.barh([k for k, _ in ranked], [v for _, v in ranked], color="#a11")
    ax.set_xlabel("students")
    ax.tick_params(labelsize=8)
    fig.tight_layout()
    uri = _png(fig)
    plt.close(fig)
    return uri


def build(results: dict[str, dict], errors: dict[str, str], anonymize: bool = False) -> tuple[str, list[list[str]]]:
    """(the page, the diagnoses.csv rows)."""
    show = pseudonym if anonymize else (lambda n: n)
    e = html.escape
    n = len(results) + len(errors)
    per_student = {name: diagnoses_of(r) for name, r in results.items()}
    counts = Counter(d for ds in per_student.values() for d in ds)
    blocked_by = Counter(st["blocked_by"] for r in results.values() for st in r["extra_data"]["stages"].values()
                         if st.get("status") == "blocked" and st.get("blocked_by"))
    blocked_students = {b: sum(any(st.get("blocked_by") == b for st in r["extra_data"]["stages"].values())
                               for r in results.values()) for b in blocked_by}
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>Attention kit: class report</title><style>",
           "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}table{border-collapse:"
           "collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:"
           "#f3f3f3}td.name{text-align:left}img{max-width:100%}</style></head><body>",
           f"<h1>Class report</h1><p>{n} submissions: {len(results)} graded, {len(errors)} could not be graded."
           f"{' Names are pseudonyms.' if anonymize else ''}</p>",
           "<h2>Stages</h2><table id='stages'><tr><th>#</th><th>stage</th><th>points</th><th>mean</th>"
           + "".join(f"<th>{s.replace('_', ' ')}</th>" for s in STATUSES) + "</tr>"]
    for s in STAGES:
        rows = [r["extra_data"]["stages"][s.name] for r in results.values() if s.name in r["extra_data"]["stages"]]
        if not rows:
            continue
        mean = sum(x["score"] for x in rows) / len(rows)
        shares = "".join(f"<td>{100 * sum(x['status'] == st for x in rows) / len(rows):.0f}%</td>" for st in STATUSES)
        out.append(f"<tr><td>{s.number}</td><td class='name'>{s.name}{' (bonus)' if s.bonus else ''}</td>"
                   f"<td>{s.points}</td><td>{mean:.1f}</td>{shares}</tr>")
    out.append("</table>")
    if results:
        out.append(f"<figure><img id='histograms' alt='scores per stage' src='{stage_figure(results)}'>"
                   "<figcaption>Scores per stage (x: points, y: students)</figcaption></figure>")
    out.append("<h2>Mistakes, by how many students made them</h2>")
    if counts:
        out.append(f"<figure><img id='mistakes' alt='diagnoses' src='{diagnosis_figure(counts)}'></figure>")
        out.append("<table id='diagnoses'><tr><th>students</th><th>diagnosis</th><th>stage</th><th>what it is</th>"
                   "<th>reread</th></tr>")
        for d, c in counts.most_common():
            m = CATALOGUE[d]
            out.append(f"<tr><td>{c}</td><td class='name'>{e(d)}</td><td class='name'>{e(m.stage)}</td>"
                       f"<td class='name'>{e(m.explanation)}</td><td class='name'>{e(m.reread)}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p>No catalogued mistake was named.</p>")
    out.append("<h2>Stages that block others</h2>")
    if blocked_by:
        out.append("<table id='blocking'><tr><th>stage</th><th>students blocked by it</th><th>stages blocked</th></tr>")
        for b, c in blocked_by.most_common():
            out.append(f"<tr><td class='name'>{e(b)}</td><td>{blocked_students[b]}</td><td>{c}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p>No stage was blocked by another.</p>")
    out.append("<h2>Submissions that crashed, hung or could not be read</h2><table id='troubles'>"
               "<tr><th>submission</th><th>what happened</th></tr>")
    for name, why in sorted(errors.items()):
        why = why.replace(name, show(name))  # the reason may hold the folder's path
        out.append(f"<tr><td class='name'>{e(show(name))}</td><td class='name'>could not be graded: {e(why)}</td></tr>")
    for name, r in sorted(results.items()):
        for t in troubles(r):
            out.append(f"<tr><td class='name'>{e(show(name))}</td><td class='name'>{e(t.replace(name, show(name)))}</td></tr>")
    out.append("</table></body></html>")
    csv_rows = [[show(name), d, CATALOGUE[d].stage] for name, ds in sorted(per_student.items()) for d in ds]
    return "\n".join(out), csv_rows


def write(results_dir: Path, out: Path | None = None, anonymize: bool = False) -> Path:
    """class-report.html and diagnoses.csv in `out` (default: results_dir)."""
    results, errors = load(results_dir)
    out = Path(out or results_dir)
    page, rows = build(results, errors, anonymize)
    (out / "class-report.html").write_text(page)
    with open(out / "diagnoses.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["submission", "diagnosis", "stage"])
        w.writerows(rows)
    return out / "class-report.html"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder class-report")
    p.add_argument("results_dir")
    p.add_argument("--anonymize", action="store_true", help="stable pseudonyms instead of folder names")
    args = p.parse_args(argv)
    print(f"wrote {write(Path(args.results_dir), anonymize=args.anonymize)} and diagnoses.csv")
    return 0
