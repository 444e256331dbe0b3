"""Watch and grade agree: statuses and blocked-by over separate runs, an 80-column screen, the end
with the terminal (SIGHUP), and `make grade | head` ending quietly."""
import signal
import subprocess
import sys

from conftest import MUTANTS, ROOT, Watching, grade, variant

from autograder.report.watch_screen import screen
from autograder.watch import agree_with_grade


def test_separate_runs_give_the_status_grade_gives(tmp_path):
    sub = variant(tmp_path, MUTANTS["scale-missing"][0])
    kit = {}
    for stages in (["softmax", "scaling"], ["masking"]):  # a save in masking.py grades masking alone
        res = grade(sub, stages=stages)
        kit.update(res.stages)
        agree_with_grade(kit, res.snapshot)
    whole = grade(sub, stages=["softmax", "scaling", "masking"])
    assert kit["masking"].status == whole.stages["masking"].status == "blocked"
    assert kit["masking"].blocked_by == whole.stages["masking"].blocked_by == "scaling"
    text = screen(res, kit, ["masking"], color=False)
    assert "blocked by scaling" in text
    assert max(len(line) for line in text.splitlines()) < 80, text


def test_watch_ends_on_sighup(tmp_path):
    w = Watching(variant(tmp_path, {}))
    try:
        assert w.wait_for("Next step", timeout=120), w.text
        w.proc.send_signal(signal.SIGHUP)
        assert w.proc.wait(timeout=30) == 0
    finally:
        if w.proc.poll() is None:
            w.proc.kill()


def test_closed_pipe_ends_grade_quietly():
    p = subprocess.run(f"{sys.executable} -m autograder grade --stage softmax | head -1", shell=True, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr and "BrokenPipeError" not in p.stderr, p.stderr
