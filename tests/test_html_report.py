"""The HTML report: self-contained, with the stage table, marked cells and non-blank heatmaps,
rendered by headless Chromium (installed by .ci/run; the browser part skips where it is missing)."""
import base64
import io
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, variant

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


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


def _images(text: str) -> list[np.ndarray]:
    from PIL import Image

    return [np.asarray(Image.open(io.BytesIO(base64.b64decode(b))).convert("L"), dtype=float)
            for b in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", text)]


def test_report_is_self_contained_and_complete(report):
    text = report.read_text()
    assert not re.search(r"(src|href)=['\"]https?://", text), "the report must not fetch anything"
    assert "id='stages'" in text and "masking" in text and "Next step:" in text
    assert "Diagnosis mask-top-left" in text and "href='#hint-masking'" in text and "id='hint-masking'" in text
    assert "class=\"bad\"" in text  # the differing cells of the failing mask are marked
    imgs = _images(text)
    assert len(imgs) == 6  # dot products, projections, causal, head 2, the mask, the KV cache reads
    assert all(img.std() > 5 for img in imgs), "a heatmap came out blank"


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
