"""`make capstone` with the solutions, as a student runs it: the model trains to the accuracy, the cached and
uncached generations agree, and capstone.html draws a previous-token head and an induction head."""
import base64
import os
import re
import subprocess

import pytest
from conftest import SOLUTIONS, copy_repo, share_venv

pytestmark = pytest.mark.slow  # builds or runs a whole channel: `make test` only (CONTRIBUTING.md)


def test_make_capstone_trains_the_solutions_to_95_percent(tmp_path):
    repo = share_venv(copy_repo(tmp_path / "repo"))
    # -o: the venv is set up already; its marker's age must not start an install. About 5 minutes beside the other
    # tests; on a machine busier still (CI's load doubled) training took four times that: no figure is asserted here
    p = subprocess.run(["make", "-s", "-o", ".venv/.student", "capstone", f"SUBMISSION={SOLUTIONS}"], cwd=repo,
                       capture_output=True, timeout=2400, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin",
                       **{k: v for k, v in os.environ.items() if k.endswith("_NUM_THREADS")}})
    out = (p.stdout + p.stderr).decode()  # bytes: text mode would turn the progress bar's \r into newlines
    assert p.returncode == 0, out[-3000:]
    assert "\r  training [" in out  # the progress bar redraws one line
    accuracy = float(re.search(r"trained in [\d.]+ s: ([\d.]+)% of the repeated half's tokens right", out).group(1))
    assert accuracy >= 95.0, out[-3000:]
    assert "(the rest of the repetition: right)" in out  # the cached generation continues the copy
    rows = re.findall(r"^\s+(\d+)\s+(\d+)/s\s+(\d+)/s\s+(yes|NO)$", out, re.M)
    assert [int(n) for n, *_ in rows] == [32, 64, 128] and all(same == "yes" for *_, same in rows), out[-3000:]
    m = re.search(r"previous-token head: layer 0 head \d \(score ([\d.]+)\); induction head: layer 1 head \d "
                  r"\(score ([\d.]+)\)", out)
    assert m and float(m.group(1)) > 0.3 and float(m.group(2)) > 0.5, out[-3000:]

    page = (repo / "capstone.html").read_text()
    assert "<figure id='previous-token'>" in page and "<figure id='induction'>" in page
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 2 and all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    assert "http" not in page  # self-contained: nothing to fetch
