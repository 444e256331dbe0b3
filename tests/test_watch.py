"""Watch mode: re-grades only what a saved file affects, and stops cleanly on Ctrl-C."""
import shutil
import time

from conftest import EXERCISES, SOLUTIONS, Watching

from autograder.stages import CORE, STAGES
from autograder.watch import affected_stages

FIRST, SECOND = STAGES[0], STAGES[1]  # the first two stages, whatever they are


def test_affected_stages_follow_the_calls():
    """A saved file re-grades the stages written in it and every stage that calls one of those, directly or
    not (read off each declaration's `calls`), and nothing else."""
    for s in STAGES:
        for file in s.files:
            hit = {st.name for st in STAGES if file in st.files}
            grew = True
            while grew:  # every stage that calls one already hit
                new = {d.name for d in STAGES if set(d.calls) & hit} - hit
                hit |= new
                grew = bool(new)
            got = affected_stages({file})
            assert got == [d.name for d in STAGES if d.name in hit], (file, got)
            assert s.name in got


def test_watch_regrades_on_save_and_stops_on_ctrl_c(tmp_path):
    sub = tmp_path / "exercises"
    shutil.copytree(EXERCISES, sub)
    w = Watching(sub, "--interval", "0.1")
    try:
        assert w.wait_for(f"Next step: start stage {FIRST.number} ({FIRST.name})")
        w.clear()
        time.sleep(0.2)
        t0 = time.monotonic()
        for f in FIRST.files:
            shutil.copy2(SOLUTIONS / f, sub / f)
        assert w.wait_for(f"stage {FIRST.number} {FIRST.name}: passed")
        numpy_feedback = time.monotonic() - t0
        assert f"1/{len(CORE)} core stages pass" in w.text
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
    file = SECOND.files[0]
    good = (SOLUTIONS / file).read_text()
    hang = good.replace("import numpy as np\n", "import numpy as np\nwhile True:  # a long import\n    pass\n", 1)
    w = Watching(sub, "--timeout", "30")
    try:
        assert w.wait_for(f"stage {SECOND.number} {SECOND.name}: passed") and w.wait_for("Next step: every stage passes")
        time.sleep(0.5)
        w.clear()
        for _ in range(3):  # an editor writing a file several times in a row
            (sub / file).write_text(good)
        assert w.wait_for(f"stage {SECOND.number} {SECOND.name}: passed")
        time.sleep(1.5)
        assert w.text.count("\033[2J") == 1, "three writes in a burst were graded once"

        w.clear()
        (sub / file).write_text(hang)  # its grade waits on the sleep (up to the 30 s limit)...
        time.sleep(1.0)
        t0 = time.monotonic()
        (sub / file).write_text(good)  # ...and this save cancels it
        assert w.wait_for(f"stage {SECOND.number} {SECOND.name}: passed", timeout=20)
        assert time.monotonic() - t0 < 15, "the new save did not wait for the old grade's time limit"
    finally:
        w.stop()
