"""Watch mode: re-grades only what a saved file affects, and stops cleanly on Ctrl-C."""
import shutil
import time

from conftest import EXERCISES, SOLUTIONS, Watching

from autograder.watch import affected_stages


def test_affected_stages_follow_the_calls():
    assert affected_stages({"projections.py"}) == ["projections", "heads", "kv_cache", "fused", "costs"]
    assert affected_stages({"tiled.py"}) == ["tiled"]
    assert affected_stages({"softmax.py"})[:3] == ["softmax", "dot_products", "masking"]
    assert "fused" in affected_stages({"module.py"}) and "softmax" not in affected_stages({"module.py"})


def test_watch_regrades_on_save_and_stops_on_ctrl_c(tmp_path):
    sub = tmp_path / "exercises"
    shutil.copytree(EXERCISES, sub)
    w = Watching(sub, "--interval", "0.1")
    try:
        assert w.wait_for("Next step: start stage 1 (softmax)")
        w.clear()
        time.sleep(0.2)
        t0 = time.monotonic()
        shutil.copy2(SOLUTIONS / "softmax.py", sub / "softmax.py")
        assert w.wait_for("stage 1 softmax: passed")
        numpy_feedback = time.monotonic() - t0
        assert "1/8 core stages pass" in w.text
        assert numpy_feedback < 10  # generous: the figure itself is in `make bench`, not asserted here
    finally:
        code = w.stop()
    assert code == 0 and w.wait_for("stopped watching")


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
    w = Watching(sub, "--timeout", "2")
    try:
        assert w.wait_for("Next step: every stage passes")
        for name, text in bad.items():
            w.clear()
            (sub / "softmax.py").write_text(text)
            # a hang or an exit fails softmax; killing the server (possible under the student's own uid, refused
            # under a separate one) may leave softmax itself passing but costs the stages graded after it
            assert w.wait_for("failed ("), (name, w.text[-1500:])
            w.clear()
            (sub / "softmax.py").write_text(good)
            assert w.wait_for("Next step: every stage passes"), (name, w.text[-1500:])  # the whole kit again
    finally:
        assert w.stop() == 0


def test_a_burst_of_saves_is_one_grade_and_a_new_save_cancels_the_running_one(tmp_path):
    sub = tmp_path / "exercises"
    shutil.copytree(SOLUTIONS, sub)
    good = (SOLUTIONS / "scores.py").read_text()
    hang = good.replace("import numpy as np\n", "import numpy as np\nimport time\ntime.sleep(60)\n", 1)
    w = Watching(sub, "--timeout", "30")
    try:
        assert w.wait_for("stage 2 dot_products: passed") and w.wait_for("Next step: every stage passes")
        time.sleep(0.5)
        w.clear()
        for _ in range(3):  # an editor writing a file several times in a row
            (sub / "scores.py").write_text(good)
        assert w.wait_for("stage 2 dot_products: passed")
        time.sleep(1.5)
        assert w.text.count("\033[2J") == 1, "three writes in a burst were graded once"

        w.clear()
        (sub / "scores.py").write_text(hang)  # its grade waits on the sleep (up to the 30 s limit)...
        time.sleep(1.0)
        t0 = time.monotonic()
        (sub / "scores.py").write_text(good)  # ...and this save cancels it
        assert w.wait_for("stage 2 dot_products: passed", timeout=20)
        assert time.monotonic() - t0 < 15, "the new save did not wait for the old grade's time limit"
    finally:
        w.stop()
