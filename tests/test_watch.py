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


def test_a_hang_a_crash_or_a_killed_fork_server_costs_only_that_grade(tmp_path):
    """Watch forks every grade's children from one fork server; code that hangs, exits, or kills that
    server loses that grade only: the next save grades normally."""
    sub = tmp_path / "exercises"
    shutil.copytree(SOLUTIONS, sub)
    good = (SOLUTIONS / "softmax.py").read_text()
    bad = {
        "hang": good.replace("import numpy as np\n", "import numpy as np\nwhile True:\n    pass\n", 1),
        "crash": good.replace("import numpy as np\n", "import numpy as np\nimport os\nos._exit(3)\n", 1),
        "kill the fork server": good.replace(
            "import numpy as np\n", "import numpy as np\nimport os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", 1),
    }
    p = subprocess.Popen([sys.executable, "-m", "autograder", "watch", "--submission", str(sub), "--timeout", "2"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    threading.Thread(target=lambda: seen.extend(iter(lambda: p.stdout.read(1), "")), daemon=True).start()

    def wait_for(pattern, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pattern not in "".join(seen):
            time.sleep(0.05)
        return pattern in "".join(seen)

    try:
        assert wait_for("stage 1 softmax: passed")
        for name, text in bad.items():
            seen.clear()
            (sub / "softmax.py").write_text(text)
            assert wait_for("stage 1 softmax: failed"), (name, "".join(seen)[-1500:])
            seen.clear()
            (sub / "softmax.py").write_text(good)
            assert wait_for("stage 1 softmax: passed"), (name, "".join(seen)[-1500:])
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
    assert p.returncode == 0


def test_a_burst_of_saves_is_one_grade_and_a_new_save_cancels_the_running_one(tmp_path):
    sub = tmp_path / "exercises"
    shutil.copytree(SOLUTIONS, sub)
    good = (SOLUTIONS / "scores.py").read_text()
    hang = good.replace("import numpy as np\n", "import numpy as np\nimport time\ntime.sleep(60)\n", 1)
    p = subprocess.Popen([sys.executable, "-m", "autograder", "watch", "--submission", str(sub), "--timeout", "30"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    threading.Thread(target=lambda: seen.extend(iter(lambda: p.stdout.read(1), "")), daemon=True).start()

    def wait_for(pattern, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pattern not in "".join(seen):
            time.sleep(0.02)
        return pattern in "".join(seen)

    try:
        assert wait_for("stage 2 dot_products: passed") and wait_for("Next step: every stage passes")
        time.sleep(0.5)
        seen.clear()
        for _ in range(3):  # an editor writing a file several times in a row
            (sub / "scores.py").write_text(good)
        assert wait_for("stage 2 dot_products: passed")
        time.sleep(1.5)
        assert "".join(seen).count("\033[2J") == 1, "three writes in a burst were graded once"

        seen.clear()
        (sub / "scores.py").write_text(hang)  # its grade waits on the sleep (up to the 30 s limit)...
        time.sleep(1.0)
        t0 = time.monotonic()
        (sub / "scores.py").write_text(good)  # ...and this save cancels it
        assert wait_for("stage 2 dot_products: passed", timeout=20)
        assert time.monotonic() - t0 < 15, "the new save did not wait for the old grade's time limit"
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
