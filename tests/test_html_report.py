"""The HTML report: self-contained, with the stage table, marked cells and non-blank heatmaps,
rendered by headless Chromium (installed by .ci/run; the browser part skips where it is missing)."""
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import CHROMIUM, FLAGS, ROOT, png_images, variant


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    sub = variant(tmp, {"masking.py": [("return j <= i + (n_k - n_q)", "return j <= i")]})
    out = tmp / "report.html"
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", "--submission", str(sub), "--html", str(out),
                        "--stage", "softmax,scaling,masking,dot_products"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return out


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_report_is_self_contained_and_complete(report):
    text = report.read_text()
    assert not re.search(r"(src|href)=['\"]https?://", text), "the report must not fetch anything"
    assert "id='stages'" in text and "masking" in text and "Next step:" in text
    assert "Diagnosis mask-top-left" in text and "href='#hint-masking'" in text and "id='hint-masking'" in text
    assert "class=\"bad\"" in text  # the differing cells of the failing mask are marked
    imgs = png_images(text)
    assert len(imgs) == 6  # dot products, projections, causal, head 2, the mask, the KV cache reads
    assert all(img.std() > 5 for img in imgs), "a heatmap came out blank"


@pytest.mark.slow  # a browser's run of the whole page (CONTRIBUTING.md, the tiers): make test only
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_report_renders_in_chromium(report, tmp_path):
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p1'}", "--dump-dom", report.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert "Attention, stage by stage" in dom and "masking" in dom and "not started" not in dom.split("Next step")[0][-20:]
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p2'}", f"--screenshot={shot}",
                    "--window-size=1200,3000", report.as_uri()], capture_output=True, timeout=120)
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert img.shape[0] >= 1000 and img.std() > 10  # something was drawn, not a blank page


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_report_shows_the_next_hint_rung_only(report, tmp_path):
    """Each failing stage's hint section holds the rung `make hint` gives next, not the whole ladder; after
    `make hint` the next report shows the rung after it."""
    import html

    from autograder.feedback.hint_ladders import ladder
    from autograder.stages import CATALOGUE, HINTS

    steps = ladder(CATALOGUE["mask-top-left"])  # the mistake this run names: its ladder comes first
    assert len(steps) >= 2
    text = report.read_text()
    section = text.split("id='hint-masking'")[1].split("</details>")[0]
    assert html.escape(steps[0]) in section and f"hint 1/{len(steps)}" in section, section
    assert not any(html.escape(s) in text for s in steps[1:]), "a later rung is shown before `make hint` reached it"
    assert not any(html.escape(h) in section for h in HINTS["masking"]), "the general ladder is shown as well"

    sub = tmp_path / "submission"
    shutil.copytree(report.parent / "submission", sub)
    for state in (".grade-state.json", ".hints.json"):  # what the run left beside the submission: `make hint` reads it
        if (report.parent / state).exists():
            shutil.copy2(report.parent / state, tmp_path / state)
    given = subprocess.run([sys.executable, "-m", "autograder", "hint", "masking", "--submission", str(sub)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120).stdout
    assert steps[0] in given, given  # `make hint` gives the rung the report showed...
    again = tmp_path / "again.html"
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", "--submission", str(sub), "--html", str(again),
                        "--stage", "masking"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    section = again.read_text().split("id='hint-masking'")[1].split("</details>")[0]
    assert html.escape(steps[1]) in section and f"hint 2/{len(steps)}" in section, section  # ...and then the next
    assert html.escape(steps[0]) not in section


# Injected into a copy of a report: after layout, every element that is not clipped by a scrolling box
# inside its card must end within its card (`.check`), or within the viewport; the measures go into the DOM.
MEASURE = """<script>
window.addEventListener('load', () => {
  const vw = document.documentElement.clientWidth, bad = [];
  const clipped = el => {
    for (let p = el.parentElement; p && p !== document.body && !p.classList.contains('check'); p = p.parentElement) {
      if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX)) return true;
    }
    return false;
  };
  for (const el of document.body.querySelectorAll('*')) {
    if (el.tagName === 'SCRIPT' || clipped(el)) continue;
    const r = el.getBoundingClientRect(), card = el.parentElement && el.parentElement.closest('.check');
    const right = card ? card.getBoundingClientRect().right : vw;
    if (r.right > right + 1 || r.left < -1) bad.push(`${el.tagName}.${el.className} ends at ${r.right|0} > ${right|0}`);
  }
  const matrices = [...document.querySelectorAll('.matrix')];
  const out = document.createElement('pre');
  out.id = 'measured';
  out.textContent = JSON.stringify({vw, page: document.documentElement.scrollWidth, bad, matrices: matrices.length,
                                    scrolling: matrices.filter(m => m.scrollWidth > m.clientWidth + 1).length});
  document.body.appendChild(out);
});
</script>"""


@pytest.fixture(scope="module")
def wide_report(report, tmp_path_factory):
    """A graded report whose failing checks carry the widest views the grader makes: a 20 x 40 mask as
    masking's checks report it, and a 12 x 12 view (compare._view's limit) of large and infinite values."""
    import dataclasses

    from autograder.evidence.compare import _view
    from autograder.grade import grade
    from autograder.report.html import render

    res = grade(report.parent / "submission", stages=["softmax", "scaling", "masking"])
    checks = res.stages["masking"].checks
    failing = next(r for r in checks if not r.passed and not r.not_run)  # the mask's own check
    rng = np.random.default_rng(0)
    expected = rng.normal(scale=1e5, size=(2, 16, 16))
    expected[0, :, -3:] = -np.inf
    mask = np.tril(np.ones((20, 40), dtype=bool), 20)
    failing.arrays = {"expected": mask.astype(int).tolist(), "got": (~mask).astype(int).tolist(),
                      "bad": np.ones_like(mask).tolist()}
    checks.append(dataclasses.replace(failing, arrays=_view(expected * 1.5, expected, 1e-5, 1e-4)))
    page = tmp_path_factory.mktemp("wide") / "wide.html"
    page.write_text(render(res).replace("</body>", MEASURE + "</body>"))
    return page


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_wide_matrices_fit_their_card_at_1280_px(wide_report, tmp_path):
    import json

    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p'}", "--window-size=1280,1000",
                          "--virtual-time-budget=5000", "--dump-dom", wide_report.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    found = re.search(r"<pre id=\"measured\">(.*?)</pre>", dom, re.S)
    assert found, dom[-2000:]
    m = json.loads(found.group(1).replace("&gt;", ">").replace("&lt;", "<").replace("&amp;", "&"))
    assert 1200 <= m["vw"] <= 1280, m  # the page was laid out at 1280 px
    assert m["matrices"] >= 4, m  # expected and got, for both wide checks
    assert m["bad"] == [], m["bad"][:10]  # nothing wider than its card
    assert m["page"] <= m["vw"], m  # and the page never scrolls sideways
