"""A broken submission costs its own points, never the grader's life or another stage's score."""

import pytest
from conftest import ROOT, grade, variant

SOFTMAX_BODY = "    scores = np.asarray(scores)\n"
# the interpreter dies of a segmentation fault: a view far past its buffer, summed (no import needed)
SEGFAULT = "np.lib.stride_tricks.as_strided(np.zeros(1), shape=(1 << 40,), strides=(1 << 20,)).sum()"


def _only_stage_lost(res, stage, others):
    assert res.stages[stage].score < res.stages[stage].max_score
    for o in others:
        assert res.stages[o].status == "passed", (o, [r.message for r in res.stages[o].checks if not r.passed])


@pytest.mark.slow
def test_endless_loop_costs_only_its_stage(tmp_path):
    sub = variant(tmp_path, {"scaling.py": [('    d_k = q.shape[-1]\n', '    while True:\n        pass\n')]})
    res = grade(sub, stages=["softmax", "scaling", "projections"], timeout=2.0)
    assert res.stages["scaling"].status == "failed"
    msgs = [r.message for r in res.stages["scaling"].checks if not r.passed]
    assert any("did not finish" in m and "2 s" in m for m in msgs)
    assert any(m.startswith("not run: an earlier check of this stage did not finish") for m in msgs)
    _only_stage_lost(res, "scaling", ["softmax", "projections"])
    # not one wait per check: after a second call that does not finish, the stage's other checks are not run
    assert sum("did not finish" in m and not m.startswith("not run") for m in msgs) <= 2


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_module_that_never_finishes_loading_is_waited_for_once_and_costs_only_what_loads_it(tmp_path):
    """An endless loop in a file's body hangs every start that imports it, whatever the call: the grade waits out
    its limit once (it had waited three times, twice more for each stage using it: 116 s of one regrade), then
    every call that would load it is not run, the stages that import it are blocked by it, and the next step
    names the line outside any function. Found by a stranger TA: heads lost its module.py checks too (7 points),
    though module.py never imports softmax.py; they run and pass."""
    # a loop whose body takes nearly all its time: the hang is caught in the body, the loop's line is what is named
    loop = "while True:\n    _ = sum(range(10_000))\n"
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import numpy as np\n" + loop)]})
    line = (sub / "softmax.py").read_text().splitlines().index("while True:") + 1
    # 3 s a call: the torch stage's own checks must finish on a loaded machine (four test workers beside it)
    res = grade(sub, stages=["softmax", "dot_products", "projections", "heads"], timeout=3.0)
    hung = [r for r in res.stages["softmax"].checks if r.failure == "timeout"]
    # the loop's own line, every run (a stranger TA saw the line, and so the next step, flip between the loop's
    # header and its body from one regrade to the next)
    assert len(hung) == 1 and hung[0].where.file == "softmax.py" and hung[0].where.line == line, hung
    assert f"softmax.py:{line}," in hung[0].message
    dots = [r for r in res.stages["dot_products"].checks if not r.passed]
    assert dots and all(r.not_run and "softmax.py never finished loading" in r.message for r in dots), dots
    assert res.stages["dot_products"].status == "blocked" and res.stages["dot_products"].blocked_by == "softmax"
    assert res.stages["projections"].status == "passed"
    heads = res.stages["heads"]
    module_checks = [r for r in heads.checks if "softmax.py" not in r.message]
    assert module_checks and all(r.passed for r in module_checks), [(r.check.id, r.message) for r in module_checks]
    assert 0 < heads.score < heads.max_score and heads.status == "blocked" and heads.blocked_by == "softmax"
    assert len([r for r in heads.checks if r.failure == "timeout"]) <= 1  # its child may meet the loop first
    assert f"softmax.py never finished loading: line {line}, outside any function" in res.next_step


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_hang_in_another_stages_code_blocks_a_stage_after_one_limit(tmp_path):
    """Found by a stranger TA: an endless loop in causal_mask cost heads, gqa and rope two limits each (the second
    three times as long, in a fresh child), 150 s of one submission's regrade, and they read as failed. A stage
    whose call hangs in another stage's code stops there, blocked by that stage."""
    sub = variant(tmp_path, {"masking.py": [("    if n_k is None:\n        n_k = n_q\n", "    while True:\n        pass\n")]})
    res = grade(sub, stages=["softmax", "masking", "heads"], timeout=1.0)
    hung = [r for r in res.stages["heads"].checks if r.failure == "timeout"]
    assert len(hung) == 1 and hung[0].where.file == "masking.py", hung
    assert res.stages["heads"].status == "blocked" and res.stages["heads"].blocked_by == "masking"
    assert len([r for r in res.stages["masking"].checks if r.failure == "timeout"]) == 2  # its own: twice, as before


def test_interpreter_crash_and_systemexit(tmp_path):
    sub = variant(tmp_path, {
        "softmax.py": [(SOFTMAX_BODY, f"    {SEGFAULT}\n")],
        "projections.py": [("    q = x @ w_q", "    raise SystemExit(0)\n    q = x @ w_q")],
    })
    res = grade(sub, stages=["softmax", "projections", "scaling"])
    sm = [r.message for r in res.stages["softmax"].checks if not r.passed]
    assert any("segmentation fault" in m for m in sm), sm
    pj = [r.message for r in res.stages["projections"].checks if not r.passed]
    assert pj and all("SystemExit" in m for m in pj), pj
    assert res.stages["projections"].score == 0 and res.stages["softmax"].score == 0
    assert res.stages["scaling"].status == "passed"


def test_import_error_and_syntax_error(tmp_path):
    sub = variant(tmp_path, {"scores.py": [("import numpy as np\n", "import numpy as np\nimport not_a_module\n")],
                             "projections.py": [("    q = x @ w_q", "    q = x @@ w_q")]})
    res = grade(sub, stages=["softmax", "dot_products", "projections", "scaling"])
    dp = [r.message for r in res.stages["dot_products"].checks if not r.passed]
    assert dp and all("refused" in m and "import not_a_module" in m and "scores.py" in m for m in dp), dp
    pj = [r.message for r in res.stages["projections"].checks if not r.passed]
    assert pj and all("SyntaxError" in m and "projections.py" in m for m in pj), pj
    assert res.stages["softmax"].status == "passed" and res.stages["scaling"].status == "passed"


def test_missing_module_is_reported(tmp_path):
    sub = variant(tmp_path, {})
    (sub / "scaling.py").unlink()
    res = grade(sub, stages=["softmax", "scaling"])
    assert res.stages["scaling"].score == 0
    assert all("scaling.py missing" in r.message for r in res.stages["scaling"].checks)
    assert res.stages["softmax"].status == "passed"


def test_printing_student_code_does_not_disturb(tmp_path):
    fake = '    print(\'{"id": 1, "ok": true, "value": 1}\')\n    scores = np.asarray(scores)\n'
    res = grade(variant(tmp_path, {"softmax.py": [(SOFTMAX_BODY, fake)]}), stages=["softmax"])
    assert res.stages["softmax"].status == "passed"


def test_numpy_stages_never_import_torch(tmp_path, monkeypatch):
    # the guard reads sys.modules, which the static check refuses in a submission: let it through here
    monkeypatch.setattr("autograder.sandbox.static_check.refusals", lambda source, own: [])
    guard = ('    import sys\n    if "torch" in sys.modules:\n        raise RuntimeError("torch was imported")\n'
             + SOFTMAX_BODY)
    numpy_stages = ["softmax", "dot_products", "projections", "scaling", "masking"]
    res = grade(variant(tmp_path, {"softmax.py": [(SOFTMAX_BODY, guard)]}), stages=numpy_stages)
    assert res.score == res.max_score == 54


@pytest.mark.slow
def test_torch_stage_crash_leaves_numpy_stages(tmp_path):
    sub = variant(tmp_path, {"kv_cache.py": [("        t = k_new.shape[-2]\n", f"        import numpy as np; {SEGFAULT}\n")]})
    res = grade(sub, stages=["softmax", "kv_cache", "fused"])
    assert res.stages["kv_cache"].status == "failed"
    assert any("signal" in r.message for r in res.stages["kv_cache"].checks)
    assert res.stages["softmax"].status == "passed"
    # fused decodes with a cache in one check: that check alone is lost, and the stage is blocked by kv_cache
    assert [r.check.name for r in res.stages["fused"].checks if not r.passed] == ["module_fused_with_cache"]
    assert res.stages["fused"].status == "blocked" and res.stages["fused"].blocked_by == "kv_cache"


def test_odd_return_values(tmp_path):
    sub = variant(tmp_path, {"scores.py": [("    return x @ x.T  #", "    return object()  #")],
                             "projections.py": [("    return q, k, v", "    return None")]})
    res = grade(sub, stages=["dot_products", "projections"])
    dp = [r.message for r in res.stages["dot_products"].checks if not r.passed]
    assert any("not an array or number" in m for m in dp), dp
    assert res.stages["projections"].score < res.stages["projections"].max_score
    assert ROOT.exists()


BURN = '''

def burn(n):
    a = np.ones((200, 200)) / 200.0
    for _ in range(n):
        a = a @ a
    return float(a[0, 0])
'''


@pytest.mark.serial  # it shares one CPU with spinning processes: other tests beside it would only add noise
def test_a_call_kept_waiting_for_a_cpu_is_not_timed_out_for_it(tmp_path, monkeypatch):
    """Found by CI: under four test workers on two cores a solution's 0.3 s score_variance call waited out its
    10 s limit and lost the point. A call's limit counts the time its child ran, not the time it stood ready
    while the machine ran others (per_call.queue_wait_s): pinned to one CPU beside three spinning processes, a
    call that needs a third of its limit still answers, and is timed out when nothing is lent."""
    import os
    import subprocess
    import sys
    import time

    from autograder.outcomes import StudentTimeout
    from autograder.sandbox import runner
    from autograder.sandbox.per_call import _cpu_s, worker_pid

    if not os.path.exists("/proc/self/schedstat") or not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs Linux's /proc schedstat (elsewhere the limit is wall-clock time alone)")
    sub = variant(tmp_path, {})
    (sub / "softmax.py").write_text((sub / "softmax.py").read_text() + BURN)
    w = runner.Worker(sub, timeout=60)
    spinners = []
    try:
        w.call("softmax:burn", 1)  # the child is ready: its first call's one-time work is behind it
        pid = worker_pid(w.child.pid)
        n, work = 8, 0.0
        while work < 0.3:  # as much work as takes 0.3 s of the child's own CPU time (one thread: ONE_THREAD)
            n *= 2
            c0 = _cpu_s(pid)
            w.call("softmax:burn", n)
            work = _cpu_s(pid) - c0
        # the limit is twice the work, whatever the machine is doing: sharing one CPU with three spinners (and with
        # whatever else runs there), the call stands ready at least three times as long as it runs
        os.sched_setaffinity(pid, {0})
        # each in a session of its own, as the child is: the scheduler shares a CPU between sessions first
        spinners = [subprocess.Popen([sys.executable, "-c", "import os\nos.sched_setaffinity(0, {0})\nwhile True: pass"],
                                     start_new_session=True) for _ in range(3)]
        time.sleep(0.5)
        monkeypatch.setattr(runner, "CPU_WAIT_FACTOR", 50)  # how much may be lent is not what this test is about
        w.call("softmax:burn", n, timeout=2 * work)
        assert w.lent_s > 0, "the call should have needed the time it waited for a CPU"
        monkeypatch.setattr(runner, "CPU_WAIT_FACTOR", 0)  # nothing lent: the same call runs past its limit
        with pytest.raises(StudentTimeout, match="no answer within"):
            w.call("softmax:burn", n, timeout=2 * work)
    finally:
        for s in spinners:
            s.kill()
            s.wait()
        w.close()


def test_ending_a_childs_processes_waits_on_no_lock_another_thread_holds():
    """Found in CI: watch hung while cancelling a grade. Its sweep of a child's uid ran `kill -9 -1` through a
    preexec_fn, which takes the interpreter's at-fork locks (logging's among them) in a grader full of threads; a
    thread holding one kept it waiting for ever. The sweep now forks and drops to the uid without running Python."""
    import logging
    import os
    import threading

    from autograder.sandbox.launchers import kill_everything

    if os.geteuid() != 0:
        pytest.skip("the sweep drops to a child's uid only as root")
    held, release, done = threading.Event(), threading.Event(), threading.Event()

    def hold_loggings_lock() -> None:  # what a thread importing a module that makes a logger does for a moment
        with logging._lock:
            held.set()
            release.wait(60)

    threading.Thread(target=hold_loggings_lock, daemon=True).start()
    assert held.wait(10)
    unused_uid = 1_999_999_999  # a uid no process has: `kill -9 -1` under it ends nothing

    def sweep() -> None:
        kill_everything("0" * 16, unused_uid, [], processes=True, temp=False)
        done.set()

    threading.Thread(target=sweep, daemon=True).start()
    try:
        assert done.wait(30), "the sweep waited on a lock another thread held"
    finally:
        release.set()
