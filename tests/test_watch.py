"""Watch mode: re-grades only what a saved file affects, and stops cleanly on Ctrl-C."""
import shutil
import signal
import subprocess
import sys
import threading
import time

from conftest import EXERCISES, ROOT, SOLUTIONS

from autograder.watch import affected_stages


def test_affected_stages_follow_the_calls():
    assert affected_stages({"projections.py"}) == ["projections", "heads", "kv_cache", "fused", "costs"]
    assert affected_stages({"tiled.py"}) == ["tiled"]
    assert affected_stages({"softmax.py"})[:3] == ["softmax", "dot_products", "masking"]
    assert "fused" in affected_stages({"module.py"}) and "softmax" not in affected_stages({"module.py"})


def test_watch_regrades_on_save_and_stops_on_ctrl_c(tmp_path):
    sub = tmp_path / "exercises"
    shutil.copytree(EXERCISES, sub)
    p = subprocess.Popen([sys.executable, "-m", "autograder", "watch", "--submission", str(sub), "--interval", "0.1"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    threading.Thread(target=lambda: seen.extend(iter(p.stdout.readline, "")), daemon=True).start()

    def wait_for(text, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in "".join(seen):
                return True
            time.sleep(0.05)
        return False

    try:
        assert wait_for("Next step: start stage 1 (softmax)")
        seen.clear()
        time.sleep(0.2)
        t0 = time.monotonic()
        shutil.copy2(SOLUTIONS / "softmax.py", sub / "softmax.py")
        assert wait_for("stage 1 softmax: passed")
        numpy_feedback = time.monotonic() - t0
        assert "1/8 core stages pass" in "".join(seen)
        assert numpy_feedback < 10  # generous: the figure itself is in `make bench`, not asserted here
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
    assert p.returncode == 0 and wait_for("stopped watching")
