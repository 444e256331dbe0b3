"""One self-contained HTML report: the stage table, each failing check with the differing cells
marked, and heatmaps of the student's attention weights beside the reference's (`--html FILE`,
`make report`). Images are inline PNGs drawn with matplotlib; nothing is fetched to view it."""
import base64
import html
import io
from pathlib import Path

import numpy as np

from .. import messages as say
from ..feedback.advice import STATUS_WORD, blocked_note
from ..feedback.hints import upcoming
from ..feedback.sources import rel
from ..outcomes import plain
from ..results import Results
from ..stages import SHOWN_ORDER, mistakes_of

# Nothing may be wider than its card: long words and paths wrap, and a matrix wider than the card scrolls
# inside its own box (.matrix) rather than pushing the page sideways.
CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f3f3f3}td.name{text-align:left}.passed{background:#dff5df}.failed{background:#fbdada}
.not_started{background:#eee;color:#666}.blocked{background:#fff1c9}.bad{background:#f7a3a3;font-weight:bold}
.next{font-size:1.1em;padding:.6em;border-left:4px solid #36c;background:#eef3fc}pre{white-space:pre-wrap}
.check{margin:1em 0;padding:.5em 1em;border:1px solid #ddd;min-width:0}.diag{color:#a11;font-weight:bold}
.printed{background:#f6f6f6;border-left:3px solid #999;padding:.4em .6em}
.cells{display:flex;flex-wrap:wrap;gap:.5em 2em;max-width:100%}
.matrix{overflow-x:auto;max-width:100%;min-width:0}.matrix table{margin:0}.matrix td{overflow-wrap:normal}
.matrix caption{text-align:left}.cut{color:#555;font-size:.9em}
.hint{margin:.5em 0;padding:.5em 1em;border-left:4px solid #c93;background:#fdf6e9}
img{max-width:100%}figure{margin:1em 0}figcaption{color:#555}
table.steps{display:block;overflow-x:auto}table.step td{border:none;padding:0 .3em;font-size:.85em}
"""
MATRIX_SHOWN = 12  # rows and columns of a matrix the report shows (the grader's views hold at most 12 x 12)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def heatmap_figure(item: dict) -> str:
    """Yours | reference | |difference|, with the token labels on the axes; a data: URI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, cols = item["labels"]
    yours, reference, difference = say.HTML_PANELS
    panels = [(yours, item["student"]), (reference, item["reference"])]
    if item["student"] is not None and np.shape(item["student"]) == np.shape(item["reference"]):
        panels.append((difference, np.abs(np.asarray(item["student"]) - np.asarray(item["reference"]))))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.2))
    for ax, (name, m) in zip(np.atleast_1d(axes), panels):
        ax.set_title(name)
        if m is None:
            ax.text(0.5, 0.5, say.HTML_NOT_AVAILABLE.format(error=(item["error"] or "")[:80]), ha="center", va="center",
                    wrap=True)
            ax.set_axis_off()
            continue
        m = np.asarray(m, dtype=float)
        diff = name == "|difference|"  # rounding-level differences (1e-16) stay white
        im = ax.imshow(m, cmap="Reds" if diff else "viridis", vmin=0,
                       vmax=max(0.05, float(np.nanmax(m))) if diff else max(1.0, float(np.nanmax(m))))
        ax.set_xticks(range(m.shape[1]), cols[: m.shape[1]], rotation=45)
        ax.set_yticks(range(m.shape[0]), rows[: m.shape[0]])
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if diff or m[i, j] >= 0.5 * np.nanmax(m) else "white")
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    uri = "data:image/png;base64," + _png(fig)
    plt.close(fig)
    return uri


def _cells(a: dict) -> str:
    """Expected beside got, the differing cells marked; side by side where the card has room, one under
    the other where it has not, each scrolling inside its own box when wider than the card."""
    def table(key: str) -> str:
        rows = []
        m = a[key]
        for i, row in enumerate(m[:MATRIX_SHOWN]):
            tds = "".join(f'<td class="{"bad" if a["bad"][i][j] else ""}">{v:.4g}</td>'
                          for j, v in enumerate(row[:MATRIX_SHOWN]))
            rows.append(f"<tr>{tds}</tr>")
        n_rows, n_cols = len(m), max((len(r) for r in m), default=0)
        said = say.HTML_MATRIX_CUT.format(rows=min(n_rows, MATRIX_SHOWN), cols=min(n_cols, MATRIX_SHOWN),
                                          n_rows=n_rows, n_cols=n_cols)
        cut = f" <span class='cut'>{said}</span>" if n_rows > MATRIX_SHOWN or n_cols > MATRIX_SHOWN else ""
        return f"<div class='matrix'><table><caption>{key}{cut}</caption>{''.join(rows)}</table></div>"

    return f"<div class='cells'>{table('expected')}{table('got')}</div>"


def _hint(res: Results, stage) -> str:
    """The rung `make hint STAGE=<stage>` gives next (the report does not climb the ladder; `make hint` does)."""
    sr = res.stages[stage.name]
    h = upcoming(res.submission, stage.name, sr.diagnoses)
    about = say.HTML_HINT_ABOUT.format(mistake=h["mistake"]) if h["mistake"] else ""
    more = say.HTML_HINT_MORE.format(stage=stage.name) if h["rung"] < h["of"] else say.HTML_HINT_LAST
    summary = say.HTML_HINT_SUMMARY.format(number=stage.number, name=stage.name, rung=h["rung"], of=h["of"], about=about)
    return (f"<details id='hint-{stage.name}' class='hint'><summary>{html.escape(summary)}</summary>"
            f"<p>{html.escape(plain(h['text']))}</p><p class='cut'>{html.escape(more)}</p></details>")


def _matrix(values) -> str:
    """A small value (the located steps keep at most 8 x 8 of one head) as a table of numbers."""
    if values is None:
        return f"<td>{html.escape(say.HTML_NO_STEP)}</td>"
    rows = values if values and isinstance(values[0], list) else [values]
    body = "".join("<tr>" + "".join(f"<td>{float(v):.3g}</td>" for v in row) + "</tr>" for row in rows)
    return f"<td><table class='step'>{body}</table></td>"


def _steps(res: Results, e) -> str:
    """Per localised stage, the student's values beside the reference's, step by step, up to the line where
    they part (marked with that line)."""
    parts = []
    for stage, loc in res.located.items():
        if not getattr(loc, "steps", None):
            continue
        rows = []
        for st in loc.steps:
            parted = st["verdict"] != "right"
            mark = " &larr; " + e(say.HTML_PART_HERE.format(where=f"{loc.file}:{st['line']}")) if parted else ""
            rows.append(f"<tr class='{'failed' if parted else 'passed'}'><td>{e(st['label'] or say.HTML_NO_STEP_LABEL)}"
                        f"{mark}</td><td>{e(st['function'])}:{st['line']} <code>{e(st['name'])}</code></td>"
                        f"{_matrix(st['got'])}{_matrix(st['want'])}</tr>")
        heads = "".join(f"<th>{html.escape(h, quote=False)}</th>" for h in say.HTML_STEPS_COLUMNS)
        parts.append(f"<h3>{e(say.HTML_STEPS_STAGE.format(stage=stage, function=loc.function))}</h3>"
                     f"<table class='steps'><tr>{heads}</tr>{''.join(rows)}</table>")
    if not parts:
        return ""
    return (f"<h2>{html.escape(say.HTML_STEPS_HEADING, quote=False)}</h2>"
            f"<p>{html.escape(say.HTML_STEPS_INTRO, quote=False)}</p>"
            + "".join(parts))


def _printed(output: str) -> str:
    """What the student's code printed during the check, under it."""
    if not output:
        return ""
    return (f"<p>{html.escape(say.PRINTED_HEADING)}</p>"
            f"<pre class='printed'>{html.escape(output)}</pre>")


def render(res: Results) -> str:
    def e(text: str) -> str:  # escaped, and without the control characters a submission's text may carry
        return html.escape(plain(text))

    graded = say.HTML_GRADED.format(submission=f"<code>{e(rel(res.submission))}</code>", seed=res.seed)
    heads = "".join(f"<th>{e(h)}</th>" for h in ("#", *say.REPORT_COLUMNS))
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(say.HTML_TITLE)}</title>"
           f"<style>{CSS}</style></head><body>",
           f"<h1>{e(say.HTML_HEADING)}</h1><p>{graded}</p>",
           f"<table id='stages'><tr>{heads}</tr>"]
    for s in SHOWN_ORDER:
        sr = res.stages.get(s.name)
        if sr is None:
            continue
        status = STATUS_WORD[sr.status] + (" " + blocked_note(sr, res) if sr.blocked_by else "")
        out.append(f"<tr class='{sr.status}'><td>{s.number}</td><td class='name'>{s.name}{say.BONUS_MARK if s.bonus else ''}"
                   f"</td><td>{sr.score:g}/{sr.max_score:g}</td><td class='name'>{e(status)}</td></tr>")
    out.append(f"<tr><th></th><th>{e(say.REPORT_TOTAL)}</th><th>{res.score:g}/{res.max_score:g}</th><th></th></tr></table>")
    if res.kept_note:
        out.append(f"<p class='kept'>{e(res.kept_note)}</p>")
    out.append(f"<p class='next'><b>{e(say.REPORT_NEXT_STEP.strip())}</b> {e(res.next_step)}</p>")

    failing = [(sr, r) for sr in res.stages.values() for r in sr.checks if not r.passed and not r.not_run]
    if failing:
        out.append(f"<h2>{e(say.HTML_FAILING)}</h2>")
    for sr, r in failing[:40]:
        diag = ""
        for m in mistakes_of(r.diagnosis):
            said = say.REPORT_DIAGNOSIS.format(id=m.id) + say.REPORT_DIAGNOSIS_TAIL.format(explanation=m.explanation,
                                                                                           reread=m.reread)
            diag += (f"<p class='diag'>{e(said)} "
                     f"<a href='#hint-{sr.stage}'>{e(say.HTML_HINTS_FOR.format(stage=sr.stage))}</a></p>")
        out.append(f"<div class='check'><b>{e(sr.stage)}: {e(r.check.name)}</b> ({e(r.check.doc)}){diag}"
                   f"<pre>{e(r.message)}</pre>{_cells(r.arrays) if r.arrays else ''}{_printed(r.output)}</div>")

    out.append(_steps(res, e))

    if res.pictures:
        out.append(f"<h2>{e(say.HTML_PICTURES)}</h2>")
        for name, item in res.pictures.items():
            out.append(f"<figure id='pic-{name}'><img class='heatmap' alt='{e(item['title'])}' "
                       f"src='{heatmap_figure(item)}'><figcaption>{e(item['title'])}</figcaption></figure>")

    unfinished = [s for s in SHOWN_ORDER if s.name in res.stages and res.stages[s.name].status != "passed"]
    if unfinished:
        out.append(f"<h2>{e(say.HTML_HINTS)}</h2><p>{say.HTML_HINTS_INTRO.format(command='<code>make hint</code>')}</p>")
    for s in unfinished:
        out.append(_hint(res, s))
    out.append("</body></html>")
    return "\n".join(out)


def write_html(res: Results, path: Path) -> None:
    Path(path).write_text(render(res))
