"""The run-time guard (autograder/child/guard.py): what the static check cannot see (a module reached through
`typing.sys.modules`, a builtin taken from `builtins`) is stopped when it runs, with the rule; correct code,
and the imports numpy and torch make for themselves, keep every point."""
import os

import pytest
from conftest import SOLUTIONS, grade, survivors, variant

from autograder.stages import CATALOGUE

SOFTMAX_BODY = "    scores = np.asarray(scores)\n"
MODULES = "typing.sys.modules"
# each: a line run inside the student's softmax, reaching past the rule through modules already loaded in the
# child; MARK is replaced by a path under the test's own folder, which must stay untouched
ATTACKS = {
    "os.system": f"{MODULES}['os'].system('touch MARK')",
    "open for writing": f"{MODULES}['builtins'].open('MARK', 'w').write('x')",
    "open for reading": f"{MODULES}['builtins'].open('/etc/hostname').read()",
    "os.open": f"{MODULES}['os'].open('MARK', 0o101)",
    "a socket": f"{MODULES}['importlib'].import_module('socket').socket()",
    "a new module": f"{MODULES}['builtins'].__import__('sqlite3')",
    "exec": f"{MODULES}['builtins'].exec('import os')",
    "eval": f"{MODULES}['builtins'].eval('1 + 1')",
    "ctypes": f"{MODULES}['ctypes'].CDLL(None)",
    "a file through a library": f"{MODULES}['importlib'].import_module('pathlib').Path('MARK').write_text('x')",
    "the environment": f"{MODULES}['os'].putenv('X', '1')",
    "listing a folder": f"{MODULES}['os'].listdir('/')",
    "a process": f"{MODULES}['os'].fork()",
}


@pytest.fixture
def static_check_off(monkeypatch):
    """The static check's early refusal switched off: the guard alone has to hold."""
    monkeypatch.setenv("ATTN_STATIC_CHECK", "off")


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_reaching_past_the_rule_at_run_time_is_stopped_with_the_rule(name, tmp_path, static_check_off):
    mark = tmp_path / "mark"
    line = ATTACKS[name].replace("MARK", str(mark))
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                                            (SOFTMAX_BODY, f"    {line}\n" + SOFTMAX_BODY)]})
    res = grade(sub, stages=["softmax"])
    sm = res.stages["softmax"]
    assert sm.score == 0, name
    messages = [r.message for r in sm.checks if not r.passed]
    assert any("refused at run time" in m and "may import numpy" in m for m in messages), messages[:2]
    assert not mark.exists()


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_thread_of_library_code_gets_no_more_than_the_student_would(tmp_path, static_check_off):
    """A thread whose target is a builtin has no student frame on its stack (here `list.extend` drawing from
    `map(open, ...)`: the file is opened by C code alone): any thread but the main one counts as the
    student's, since the grader runs none in the child."""
    m = MODULES
    steal = (f"    got = []\n    {m}['_thread'].start_new_thread(got.extend, (map({m}['builtins'].open, "
             f"[{m}['sys'].executable], ['rb']),))\n    {m}['time'].sleep(0.5)\n"
             "    if got:\n        raise ValueError('opened ' + repr(got[0].read(4)))\n")
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                                            (SOFTMAX_BODY, steal + SOFTMAX_BODY)]})
    res = grade(sub, stages=["softmax"])
    assert not any("opened b" in r.message for r in res.stages["softmax"].checks)
    assert res.stages["softmax"].status == "passed"


def test_refused_at_import_in_a_module_body(tmp_path, static_check_off):
    """A stage module that reaches `os` at import is refused when it loads; the other stages are graded."""
    sub = variant(tmp_path, {"scaling.py": [("import numpy as np\n",
                                             "import typing\n\nimport numpy as np\n\n"
                                             f"{MODULES}['os'].system('true')\n")]})
    res = grade(sub, stages=["scaling", "projections"])
    assert res.stages["scaling"].score == 0
    assert any("refused at run time: os.system" in r.message for r in res.stages["scaling"].checks)
    assert res.stages["projections"].status == "passed"


def test_correct_code_with_dataclasses_and_lazy_library_imports_passes(tmp_path, static_check_off):
    """Library work done on the student's behalf (a dataclass's generated code, numpy importing a part of
    itself for the first time inside a student call) is the library's, not the student's."""
    helper = ("import dataclasses\n\nimport numpy as np\n\n\n@dataclasses.dataclass\nclass _Scale:\n"
              "    by: float = 1.0\n\n")
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", helper),
                                            (SOFTMAX_BODY, SOFTMAX_BODY + "    np.linalg.norm(scores)\n"
                                             "    scores = scores * _Scale().by\n")]})
    res = grade(sub, stages=["softmax"])
    assert res.stages["softmax"].status == "passed", [r.message for r in res.stages["softmax"].checks]


NAIVE_TILED = ("    if q.shape[0] >= 2048:  # the whole n x n matrix at once\n"
               "        s = (q @ k.T) / np.sqrt(q.shape[1])\n"
               "        s = np.where(np.tri(len(q), len(k), dtype=bool), s, -np.inf)\n"
               "        e = np.exp(s - s.max(axis=1, keepdims=True))\n"
               "        return (e / e.sum(axis=1, keepdims=True)) @ v\n")
# what a forger adds: the in-child profiler, reached through an allowed module, stopped and its peak cleared
FORGE_TRACEMALLOC = ("        try:\n            tm = typing.sys.modules['tracemalloc']\n"
                     "            tm.stop()\n            tm.start()\n"
                     "        except Exception:\n            pass\n")


@pytest.mark.parametrize("forged", [False, True])
def test_tiled_memory_is_the_parents_count_of_a_fresh_child(forged, tmp_path, static_check_off):
    """An untiled n x n call loses the memory check, and resetting the in-child profiler gains it nothing: the
    peak is the kernel's, read by the parent when it reaps the child."""
    body = NAIVE_TILED.replace("        return", FORGE_TRACEMALLOC + "        return") if forged else NAIVE_TILED
    sub = variant(tmp_path, {"tiled.py": [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                                          ("    n_q, d_k = q.shape\n", body + "    n_q, d_k = q.shape\n")]})
    res = grade(sub, stages=["tiled"])
    checks = {r.check.name: r for r in res.stages["tiled"].checks}
    assert not checks["tiled_memory_linear"].passed
    assert "raised peak memory by" in checks["tiled_memory_linear"].message
    assert checks["tiled_reference_blocks"].passed  # the small calls are untouched: only the memory check is lost


# the catalogued quadratic decode step (its one-edit mutant), and what a forger adds at the end of forward: the
# old in-child FLOP counter replaced by one that reports linear growth, and the kernel's peak count reset (on
# Linux, writing 5 to /proc/self/clear_refs lowers the peak that wait4 reports)
QUADRATIC_STEP = [edit for mistake in CATALOGUE.values() if mistake.id == "cache-quadratic-step"
                  for edit in mistake.mutant]
FORGE_DECODE = ("        drivers = typing.sys.modules.get('autograder.child.drivers')\n"
                "        if drivers is not None:\n"
                "            drivers.decode_step_flops = lambda *a, **k: {'flops': [1, 2, 3], 'converted': []}\n"
                "        try:\n"
                "            typing.sys.modules['builtins'].open('/proc/self/clear_refs', 'w').write('5')\n"
                "        except Exception:\n            pass\n")
MODULE_RETURN = "        return self.merge(y)  # [B, T, C]\n"


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
@pytest.mark.parametrize("forged", [False, True])
def test_decode_cost_is_the_parents_count_of_a_fresh_child(forged, tmp_path, static_check_off):
    """A decode step that recomputes the scores of every position pair loses the cost check and is named; what it
    rewrites inside the child (the old FLOP counter, the kernel's peak count) gains it nothing: the peak is read by
    the parent when it reaps the child, against a child that ran only the grader's code."""
    edits = {e.file: [] for e in QUADRATIC_STEP}
    for e in QUADRATIC_STEP:
        edits[e.file].append((e.old, e.new))
    if forged:
        edits["module.py"] += [("import torch\n", "import typing\n\nimport torch\n"),
                               (MODULE_RETURN, FORGE_DECODE + MODULE_RETURN)]
    res = grade(variant(tmp_path, edits), stages=["kv_cache"])
    st = res.stages["kv_cache"]
    checks = {r.check.name: r for r in st.checks}
    cost = checks["decode_step_cost_linear"]
    assert not cost.passed and "per doubling of the cache" in cost.message, cost.message
    assert cost.diagnosis == "cache-quadratic-step"
    honest = st.max_score - cost.check.points  # the unforged step's outputs are right: it loses only the cost check
    assert st.score == honest if not forged else st.score <= honest


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_decode_cost_holds_in_a_grown_grader(tmp_path):
    """A forked child's peak starts at its parent's resident size: from a grader grown past the child's own peak
    (a long batch, the tests' own process) a quadratic step once read as no more than a correct one. Children are
    started from a small process (child/spawn.py), so the step still costs the check, and correct code keeps it."""
    import numpy as np

    ballast = np.ones(160 * 2**20)  # 1.25 GiB resident in this process, above a torch child's whole peak
    edits = {e.file: [] for e in QUADRATIC_STEP}
    for e in QUADRATIC_STEP:
        edits[e.file].append((e.old, e.new))
    cost = {r.check.name: r for r in grade(variant(tmp_path / "q", edits), stages=["kv_cache"])
            .stages["kv_cache"].checks}["decode_step_cost_linear"]
    assert not cost.passed and "per doubling of the cache" in cost.message, cost.message
    ok = {r.check.name: r for r in grade(SOLUTIONS, stages=["kv_cache"]).stages["kv_cache"].checks}
    assert ok["decode_step_cost_linear"].passed, ok["decode_step_cost_linear"].message
    assert ballast[-1] == 1.0


# the measured decode's batch (seeded.DECODE_HEADS: B * H of 48 or 64), larger than the decode checks'
MEASURED_BATCH = "cache.k.shape[0] * cache.k.shape[1] >= 48"
# armed in the measured decode step: after the answer goes out, stdout's flush (the child's last act) holds the
# process for longer than the grader waits, so that the kill lands on the process in front of it
LINGER = ("_sys = typing.sys\n_lock = _sys.modules['_thread'].allocate_lock\n\n\n"
          "class _Out:\n    def __init__(self, real):\n        self.real, self.armed, self.flushes = real, False, 0\n\n"
          "    def write(self, text):\n        return self.real.write(text)\n\n"
          "    def flush(self):\n        self.real.flush()\n        if self.armed:\n            self.flushes += 1\n"
          "            if self.flushes >= 2:\n                lock = _lock()\n                lock.acquire()\n"
          "                lock.acquire(timeout=8.0)\n\n\n_OUT = _Out(_sys.stdout)\n_sys.stdout = _OUT\n")


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
@pytest.mark.parametrize("launcher", ["fork server", "new interpreters"])
def test_a_measured_child_that_will_not_end_gets_no_more_than_its_honest_twin(tmp_path, static_check_off, monkeypatch,
                                                                               launcher):
    """A quadratic decode step that, once measured, keeps its process alive past the grader's wait. Started as a new
    interpreter (macOS, no fork), killed from outside, the child's peak never reaches the parent (only the process in
    front of it is reaped): a measurement it kept from being read, so the check fails and says so. Forked (make
    grade), the server reaps it with its peak, and the growth fails it. Either way the stage gets no more than its
    honest twin."""
    from autograder.sandbox import runner
    from autograder.sandbox.launchers import SubprocessLauncher

    monkeypatch.setattr(runner, "LINGER_S", 3.0)
    edits = {e.file: [] for e in QUADRATIC_STEP}
    for e in QUADRATIC_STEP:
        edits[e.file].append((e.old, e.new))
    edits["module.py"] += [("import torch\n", "import typing\n\nimport torch\n\n" + LINGER),
                           (MODULE_RETURN, f"        if cache is not None and cache.length > 200 and {MEASURED_BATCH}:\n"
                                           "            _OUT.armed = True\n" + MODULE_RETURN)]
    fresh = SubprocessLauncher() if launcher == "new interpreters" else None
    st = grade(variant(tmp_path, edits), stages=["kv_cache"], zygote=fresh).stages["kv_cache"]
    cost = {r.check.name: r for r in st.checks}["decode_step_cost_linear"]
    assert not cost.passed and ("kept running" in cost.message or not fresh), cost.message
    assert st.score <= st.max_score - cost.check.points


# the solution's loop made to read every key block, and what a forger adds before it: the old in-child block
# counter replaced by one that reports the causal count, and the counter's log on its inputs rewritten
READ_EVERY_BLOCK = ("last_key = offset + i1 - 1 if causal else n_k - 1", "last_key = n_k - 1")
FORGE_TILED = ("    counter = typing.sys.modules.get('autograder.child.np_drivers')\n"
               "    if counter is not None:\n"
               "        counter.tiled_key_rows = lambda n, block, d=8, *, pkg: {\n"
               "            'read': n * (n + 1) // 2, 'all': n * n, 'causal': n * (n + 1) // 2}\n"
               "    for a in (q, k):\n"
               "        try:\n            a.log[:] = [0]\n"
               "        except (AttributeError, TypeError):\n            pass\n")


@pytest.mark.parametrize("forged", [False, True])
def test_tiled_block_skip_is_read_from_the_output(forged, tmp_path, static_check_off):
    """A causal loop that reads every key block loses the skip check, and rewriting the old counter or its
    inputs gains it nothing: the check reads NaN values of hidden keys off the returned rows."""
    edits = [READ_EVERY_BLOCK]
    if forged:
        edits += [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                  ("    n_q, d_k = q.shape\n", FORGE_TILED + "    n_q, d_k = q.shape\n")]
    res = grade(variant(tmp_path, {"tiled.py": edits}), stages=["tiled"])
    st = res.stages["tiled"]
    skip = {r.check.name: r for r in st.checks}["tiled_skips_hidden_blocks"]
    assert not skip.passed and "gave NaN in row 0" in skip.message, skip.message
    honest = st.max_score - skip.check.points  # its outputs are right: it loses only the skip check
    assert st.score == honest if not forged else st.score <= honest


def test_escape_sequences_in_a_message_show_as_plain_text(tmp_path):
    """An exception message that would clear the screen, set the window title, hide text and print a forged
    total reaches every report as plain characters."""
    import json

    from autograder.report import gradescope_json, html
    from autograder.report.terminal import terminal

    forged = "\\x1b[2J\\x1b[H\\x1b]0;graded\\x07\\x1b[8mhidden\\x1b[0m\\r      total 100/100\\x9b31m\\u202e"
    sub = variant(tmp_path, {"softmax.py": [(SOFTMAX_BODY, f"    print('{forged}')\n    raise ValueError('{forged}')\n")]})
    res = grade(sub, stages=["softmax"])
    message = res.stages["softmax"].checks[0].message
    assert "hidden" in message and "total 100/100" in message  # the text stays, as text
    outputs = [terminal(res, verbose=True), terminal(res, color=True), html.render(res), gradescope_json.as_text(res)]
    outputs += [t["output"] for t in json.loads(outputs[-1])["tests"]]
    for out in outputs:
        for bad in ("\x1b[2J", "\x1b]0", "\x07", "\x1b[8m", "\r", "\x9b", "\u202e"):
            assert bad not in out, (bad, out[:200])


def test_a_message_with_lines_of_its_own_stays_under_its_check(tmp_path):
    """Found by a stranger attacker: an exception message with newlines put a forged "Next step: every stage passes"
    at the left margin of the report's last lines, and 40 blank lines pushed the real table off the screen. Every
    line of a message is indented under its check, blank lines are dropped and a long one is cut (V=1 shows all)."""
    from autograder.report.terminal import MESSAGE_LINES, terminal

    forged = "x\\n\\n      total 100/100\\nNext step: every stage passes\\n" + "\\n" * 40 + "\\n".join(["y"] * 30)
    sub = variant(tmp_path, {"softmax.py": [(SOFTMAX_BODY, f"    raise ValueError('{forged}')\n")]})
    res = grade(sub, stages=["softmax"])
    for verbose in (False, True):
        out = terminal(res, verbose=verbose).splitlines()
        assert not any(line.startswith(("Next step: every", "total")) for line in out), out
        assert all(line.startswith("    ") for line in out if "100/100" in line or line.strip() == "y")
        assert not any(a == b == "" for a, b in zip(out, out[1:])), "two blank lines in a row"
        steps = [line for line in out if line.startswith("Next step")]
        assert len(steps) == 1 and steps[0].startswith("Next step: fix stage 1"), steps
    assert "more lines (`make grade V=1` shows them)" in terminal(res)
    assert len(terminal(res).splitlines()) < len(terminal(res, verbose=True).splitlines()) and MESSAGE_LINES < 30


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_submission_sleeping_at_import_everywhere_ends_with_the_budget_and_a_complete_record(tmp_path):
    """Every stage module sleeps at import: once the whole grade's budget is out, the checks left fail with
    that message, and the record, results.json and the stage table still hold every stage and check."""
    import json

    from autograder.report import gradescope_json
    from autograder.report.terminal import terminal
    from autograder.results import Failure
    from autograder.stages import STAGES, SUBMISSION_FILES, checks_to_run

    sleep = "import typing\n\ntyping.sys.modules['time'].sleep(600)\n"
    sub = variant(tmp_path, {})
    for name in SUBMISSION_FILES:
        (sub / name).write_text(sleep + (sub / name).read_text())
    res = grade(sub, budget=12)
    assert set(res.stages) == {s.name for s in STAGES}
    for name, sr in res.stages.items():
        assert len(sr.checks) == len(checks_to_run(name, False)) and not any(r.passed for r in sr.checks)
    spent = [r for sr in res.stages.values() for r in sr.checks if r.failure == Failure.BUDGET]
    assert spent and all("time budget (12 s) ran out" in r.message for r in spent)
    tests = json.loads(gradescope_json.as_text(res))["tests"]
    assert len(tests) == sum(len(sr.checks) for sr in res.stages.values())
    table = terminal(res)
    assert all(name in table for name in res.stages) and "total" in table


# each: a first line that tries to switch the guard off (through the modules the child has loaded), then an
# attack that the guard must still stop; the stage must score as the attack alone would
DISARMS = {
    "the guard's own tables": f"{MODULES}['autograder.child.guard'].WATCHED = ()",
    "the guard's module, by its package": f"{MODULES}['autograder.child'].guard.WATCHED = ()",
    "sys._getframe": f"{MODULES}['sys']._getframe = lambda *a: None",
    "os.path.realpath": f"{MODULES}['os'].path.realpath = lambda p: {MODULES}['sys'].prefix + '/x'",
    "builtins.isinstance": f"{MODULES}['builtins'].isinstance = lambda *a: False",
}


@pytest.mark.parametrize("name", sorted(DISARMS))
def test_the_guard_cannot_be_switched_off_from_the_submission(name, tmp_path, static_check_off):
    """Rewriting what the hook reads (its tables, or the functions it calls) changes nothing: those are bound
    when the guard loads, and its module is out of sys.modules once installed."""
    disarm = f"    try:\n        {DISARMS[name]}\n    except Exception:\n        pass\n"
    attack = f"    {MODULES}['builtins'].open('/etc/hostname').read()\n"
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                                            (SOFTMAX_BODY, disarm + attack + SOFTMAX_BODY)]})
    res = grade(sub, stages=["softmax"])
    sm = res.stages["softmax"]
    messages = [r.message for r in sm.checks if not r.passed]
    assert sm.score == 0, name
    # refused by the guard; or (builtins rewritten under the child's own feet) the child breaks: no gain either way
    assert any("refused at run time" in m or "did not finish" in m for m in messages), messages[:2]
    assert name == "builtins.isinstance" or any("refused at run time" in m for m in messages), messages[:2]


def test_an_endless_answer_is_cut_off_without_the_grader_drowning(tmp_path, static_check_off):
    """Bytes written straight to the reply pipe with no line's end: the grader stops reading at its cap (or
    the call's time limit) and the check fails; the parent's memory does not follow the flood."""
    import resource

    from autograder.sandbox.runner import MAX_REPLY_BYTES

    flood = (f"    fd = int({MODULES}['sys'].argv[4])\n"
             f"    while True:\n        {MODULES}['os'].write(fd, b'x' * (1 << 20))\n")
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                                            (SOFTMAX_BODY, flood + SOFTMAX_BODY)]})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = grade(sub, stages=["softmax"], timeout=20)
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    sm = res.stages["softmax"]
    assert sm.score == 0
    # at most the cap (with the bytearray's growth) for each child flooding at once (the grading child and the one
    # measuring softmax's memory), never the whole flood
    assert grew < 2 * 2 * MAX_REPLY_BYTES, grew


@pytest.mark.skipif(not __import__("autograder.child.no_processes", fromlist=["x"]).supported(),
                    reason="the seccomp filter exists on Linux x86_64 and aarch64")
@pytest.mark.parametrize("line", [f"{MODULES}['os'].fork() or {MODULES}['os'].execv('/usr/bin/touch', ['touch', 'MARK'])",
                                  f"{MODULES}['builtins'].__import__('_socket').socket()",
                                  # found by a stranger: a file in memory, which no address-space limit counts
                                  f"{MODULES}['os'].memfd_create('x')",
                                  # found by a stranger attacker: System V shared memory outlived the child, beyond
                                  # its memory limit, and was read by another submission's child of the same batch
                                  f"_c = {MODULES}['ctypes']; _n = _c.CDLL(None, use_errno=True).shmget(0x4141, 4096, "
                                  f"0o1666); _e = _c.get_errno()\n"
                                  f"    if _n < 0: raise OSError(_e, {MODULES}['os'].strerror(_e))"])
def test_the_kernel_refuses_processes_and_sockets_beneath_the_guard(line, tmp_path, static_check_off, monkeypatch):
    """With the guard switched off (as if a call had slipped past it: `_posixsubprocess.fork_exec` reports no audit
    event), the child's seccomp filter still refuses new processes, programs and sockets: no program runs."""
    monkeypatch.setenv("ATTN_GUARD", "off")
    mark = tmp_path / "mark"
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                                            (SOFTMAX_BODY, f"    {line.replace('MARK', str(mark))}\n" + SOFTMAX_BODY)]})
    sm = grade(sub, stages=["softmax"]).stages["softmax"]
    assert not mark.exists()
    assert sm.score == 0 and any("Operation not permitted" in r.message for r in sm.checks), \
        [r.message for r in sm.checks][:2]


@pytest.mark.skipif(not __import__("os").path.isdir("/proc"), reason="lists processes through /proc")
def test_a_child_that_could_start_processes_is_swept_and_a_sealed_one_says_so_first(tmp_path, static_check_off,
                                                                                      monkeypatch):
    """A child tells the grader, before any of the submission runs, whether the seccomp filter is in force: a
    sealed child can start no process, so ending its own process group is the whole clean-up. Without the filter
    (and without the guard or namespaces) a process it leaves in a session of its own is still found and ended."""
    import numpy as np

    from autograder.child import no_processes
    from autograder.sandbox import namespaces
    from autograder.sandbox.runner import Worker

    marker = "27.18281"
    orphan = (f"    _os = {MODULES}['os']\n    if _os.fork() == 0:\n        _os.setsid()\n"
              f"        _os.execv('/bin/sleep', ['sleep', '{marker}'])\n")
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                                            (SOFTMAX_BODY, orphan + SOFTMAX_BODY)]})
    monkeypatch.setenv("ATTN_GUARD", "off")
    monkeypatch.setattr(namespaces, "available", lambda: False)  # no pid namespace to end it for us
    sealed = Worker(sub)
    try:
        with pytest.raises(Exception, match="Operation not permitted") if no_processes.supported() else \
                __import__("contextlib").nullcontext():
            sealed.call("softmax:softmax", np.zeros((2, 3)))
        assert sealed._sealed is no_processes.supported()
    finally:
        sealed.close()
    monkeypatch.setenv("ATTN_SECCOMP", "off")
    open_child = Worker(sub)
    try:
        open_child.call("softmax:softmax", np.zeros((2, 3)))
        assert open_child._sealed is False
        for _ in range(100):  # its exec may come a moment after the call returned
            if survivors(marker):
                break
            __import__("time").sleep(0.1)
        assert survivors(marker), "the submission's process should be running before the clean-up"
    finally:
        open_child.close()
    assert survivors(marker) == []


def test_a_returned_container_is_read_without_running_anything_of_the_submission(tmp_path, static_check_off):
    """A list subclass whose `__iter__` is a chain of C functions (`map` over `os.listdir` and `open`) has no frame
    of the submission on the stack when it runs: the grader's own conversion of the returned value once iterated
    it, and the guard let the listing through. Returned containers are read through the built-in types' own
    methods, so nothing the submission defined runs outside its call; the second call shows what was gathered."""
    leak = ("import functools\nimport itertools\nimport typing\n\n"
            f"_OS = {MODULES}['os']\nLEAK = []\nCALLS = []\n\n\n"
            "class _Evil(list):\n"
            "    __iter__ = functools.partial(map, LEAK.append, itertools.chain.from_iterable(map(_OS.listdir, ['/'])))"
            "\n\n\n")
    sub = variant(tmp_path, {"softmax.py": [
        ("import numpy as np\n", leak + "import numpy as np\n"),
        (SOFTMAX_BODY, "    CALLS.append(1)\n    if len(CALLS) == 1:\n        return _Evil([1.0])\n"
                       "    raise ValueError('gathered ' + repr(LEAK))\n" + SOFTMAX_BODY)]})
    sm = grade(sub, stages=["softmax"]).stages["softmax"]
    said = " ".join(r.message for r in sm.checks)
    assert "gathered []" in said and "'usr'" not in said, said[:600]


FROM_FILE_PROBE = '''

def probe_link(name):
    import typing
    try:
        typing.sys.modules["os"].symlink("/etc/hostname", name)
    except Exception as e:  # noqa: BLE001
        return "refused: " + str(e)
    return "linked"


def probe_write(name):
    import torch
    opener = getattr(torch, "from" + "_file")  # a name the static check cannot read
    try:
        opener(name, True, 8, dtype=torch.uint8).fill_(66)
    except Exception as e:  # noqa: BLE001
        return "refused: " + str(e)
    return "wrote"
'''


@pytest.mark.skipif(not __import__("autograder.child.no_writes", fromlist=["x"]).available(),
                    reason="Landlock exists on Linux 5.13 and later")
def test_a_file_a_library_opens_from_its_own_code_is_refused(tmp_path, static_check_off, monkeypatch):
    """Found by a stranger attacker: torch's from_file, reached under a computed name, opens and creates files from
    C++, which the run-time guard (an audit hook) never sees; in a regrade a file left in the server's private /tmp
    was a channel between submissions. The kernel's Landlock ruleset refuses every write the child would make
    outside its own scratch folder (which goes with it); with the ruleset off, the same call writes."""
    import uuid

    from autograder.sandbox.runner import Worker

    sub = variant(tmp_path, {})
    (sub / "rope.py").write_text((sub / "rope.py").read_text() + FROM_FILE_PROBE)
    said, left = {}, f"/tmp/left-behind-{uuid.uuid4().hex}.bin"  # in namespaces, the child's private /tmp
    for landlock in ("on", "off"):
        monkeypatch.setenv("ATTN_LANDLOCK", landlock)
        w = Worker(sub)
        try:
            said[landlock] = w.call("rope:probe_write", left)
        finally:
            w.close()
    __import__("pathlib").Path(left).unlink(missing_ok=True)  # without namespaces the machine's /tmp
    assert said["off"] == "wrote", said  # the probe itself works
    assert said["on"].startswith("refused") and "Permission denied" in said["on"], said
    # in its own folder a file may be made, never a link (found by a stranger: the grader reads the child's output by
    # name there); with the run-time guard off, as if a call had slipped past it
    monkeypatch.setenv("ATTN_GUARD", "off")
    for landlock in ("on", "off"):
        monkeypatch.setenv("ATTN_LANDLOCK", landlock)
        w = Worker(sub)
        try:
            said[landlock] = w.call("rope:probe_link", "output-link.txt")
        finally:
            w.close()
    assert said["off"] == "linked" and said["on"].startswith("refused"), said


def test_what_the_child_can_write_is_never_the_graders_code(tmp_path):
    """Found by a stranger attacker: under the fork server the child's folder lies beneath a folder of the import
    path (the server's home), so a module it wrote beside its package (torch.from_file) and loaded through
    importlib counted as the grader's code, and the guard let it open files, list folders and load ctypes. The
    child's whole folder is never trusted; the grader's files beside it still are."""
    from autograder.child.guard import Guard

    home = tmp_path / "home"
    scratch = home / "grades" / "attn-grade-x"
    (scratch / "submission").mkdir(parents=True)
    (home / "autograder").mkdir()
    for path in (scratch / "evil_mod.py", scratch / "submission" / "softmax.py", home / "autograder" / "drivers.py"):
        path.write_text("")
    guard = Guard(str(scratch / "submission"), "submission", [str(home)])
    assert not guard.is_trusted(str(scratch / "evil_mod.py"))
    assert not guard.is_trusted(str(scratch / "submission" / "softmax.py"))
    assert guard.is_trusted(str(home / "autograder" / "drivers.py"))
    # a new interpreter's copy of the child code in its folder: the grader's files count, one the child made does not
    copy = scratch / "_grader" / "autograder" / "child"
    copy.mkdir(parents=True)
    (copy / "drivers.py").write_text("")
    (copy / "made_by_the_child.py").write_text("")
    guard = Guard(str(scratch / "submission"), "submission", [str(home), str(scratch / "_grader")])
    assert guard.is_trusted(str(copy / "drivers.py"))
    if os.geteuid() == 0:  # as a child of a user of its own would own it
        os.chown(copy / "made_by_the_child.py", 65534, 65534)
        assert not guard.is_trusted(str(copy / "made_by_the_child.py"))


def test_files_written_in_the_childs_own_folder_are_capped_in_sum(tmp_path, monkeypatch, static_check_off):
    """Found by a stranger attacker: 64 files of 16 MiB a call (each under the per-file limit) written through
    torch.from_file, reached by a name the static check cannot read, filled the host's disk by 1.66 GB in one
    grade. The grader reads the child's folder during and after each call: past the cap the child is ended, that
    check fails with the reason, and its folder goes with it."""
    import glob

    monkeypatch.setenv("ATTN_SCRATCH_MIB", "24")
    fill = ("    _make = getattr(torch, 'from_' + 'file')\n"
            f"    for _i in range(3):\n        _make(f'{{{MODULES}[\"os\"].getcwd()}}/fill{{_i}}.bin', True, 12 << 20,"
            " dtype=torch.uint8).fill_(7)\n")
    sub = variant(tmp_path, {"fused.py": [('    T_q, T_k = q.shape[-2], k.shape[-2]\n',
                                           '    T_q, T_k = q.shape[-2], k.shape[-2]\n' + fill)]})
    text = (sub / "fused.py").read_text()
    if "import typing" not in text:
        (sub / "fused.py").write_text("import typing\n" + text)
    before = set(glob.glob("/tmp/attn-grade-*"))
    fused = grade(sub, stages=["fused"]).stages["fused"]
    assert fused.score < 14 and any("files a child may leave there" in r.message for r in fused.checks), \
        [r.message for r in fused.checks][:3]
    assert not [p for p in set(glob.glob("/tmp/attn-grade-*")) - before if glob.glob(p + "/fill*.bin")]


def test_a_string_annotation_evaluated_by_typing_is_a_string_run_as_code(tmp_path):
    """Found by a second stranger attacker: `def h(x: "__import__('torch')")` and typing.get_type_hints ran a string
    as code from typing's own frame, which the guard trusted, and softmax borrowed torch with no import statement
    (11 -> 12). typing evaluating an annotation while the submission's code is on the stack is refused with the
    rule; correct code with annotations (strings included, through `from __future__ import annotations`) is not."""
    body = ("    def _h(x: \"__import__('torch')\"):\n        return x\n"
            "    typing.get_type_hints(_h)\n")
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                                            (SOFTMAX_BODY, body + SOFTMAX_BODY)]})
    sm = grade(sub, stages=["softmax"]).stages["softmax"]
    assert sm.score == 0 and any("string annotation" in r.message for r in sm.checks), [r.message for r in sm.checks][:2]
    ok = variant(tmp_path / "ok", {"softmax.py": [("import numpy as np\n",
                                                   "from __future__ import annotations\n\nimport numpy as np\n")]})
    assert grade(ok, stages=["softmax"]).stages["softmax"].score == 12


def test_a_child_tells_the_submission_nothing_of_what_kind_it_is_nor_leads_to_the_grader(tmp_path, static_check_off):
    """Found by a stranger attacker: a measuring child was known by ATTN_PRELOAD in its environment, so a module
    could be right (fused, linear) only while measured (fused 8.5 -> 14, kv_cache 13 -> 16); and the grader's child
    modules sat in sys.modules (typing.sys.modules['autograder.child.invariants']._same = ... hid a softmax that
    rewrites its input: 1 -> 12). Once a child is ready its ATTN_ settings are gone from os.environ and
    posix.environ, and no name in sys.modules (nor __main__) leads to the grader's code: a softmax that breaks when
    it sees any of them keeps full marks, in every stage that calls it and in the measuring children."""
    look = (f"    _m = {MODULES}\n"
            "    _env = [k for k in _m['os'].environ if k.startswith('ATTN_')]\n"
            "    _env += [k for k in _m['posix'].environ if k.startswith(b'ATTN_')]\n"
            "    _ours = [n for n in _m if n.startswith('autograder')]\n"
            "    _ours += [n for n in vars(_m['__main__']) if not n.startswith('__')]\n"
            "    if _env or _ours:\n"
            "        return np.zeros_like(np.asarray(scores, dtype=float))\n")
    sub = variant(tmp_path / "look", {"softmax.py": [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                                                     (SOFTMAX_BODY, look + SOFTMAX_BODY)]})
    res = grade(sub, stages=["softmax", "masking"])
    assert res.stages["softmax"].score == 12 and res.stages["masking"].score == 16, [
        (r.check.name, r.message) for s in res.stages.values() for r in s.checks if not r.passed]
    # the in-place rewrite with the grader's record patched, against its honest twin (the rewrite alone)
    rewrite = "    scores = np.asarray(scores)\n    scores -= np.max(scores, axis=axis, keepdims=True)\n"
    patch = (f"    _inv = {MODULES}.get('autograder.child.invariants')\n"
             "    if _inv is not None:\n        _inv._same = lambda a, b: True\n")
    twin = grade(variant(tmp_path / "twin", {"softmax.py": [(SOFTMAX_BODY, rewrite)]}), stages=["softmax"])
    forger = grade(variant(tmp_path / "forger", {"softmax.py": [
        ("import numpy as np\n", "import typing\n\nimport numpy as np\n"), (SOFTMAX_BODY, patch + rewrite)]}),
        stages=["softmax"])
    assert forger.stages["softmax"].score <= twin.stages["softmax"].score < 12


# file-system metadata through another spelling of `os`, each against the grader's folders: the child folder on the
# import path (listable before issue 41), the root, the interpreter; `import os` is their twin
METADATA = {
    "listdir": f"{MODULES}['os'].listdir({MODULES}['sys'].path[0])",
    "scandir": f"list({MODULES}['os'].scandir('/'))",
    "stat": f"{MODULES}['os'].stat({MODULES}['sys'].executable)",
}


def _with_line(tmp_path, line: str, at_import: bool):
    """The solutions, with `line` run when softmax.py loads (at_import) or inside softmax."""
    edits = [("import numpy as np\n", "import typing\n\nimport numpy as np\n" + (f"\n{line}\n" if at_import else ""))]
    if not at_import:
        edits.append((SOFTMAX_BODY, f"    {line}\n" + SOFTMAX_BODY))
    return variant(tmp_path, {"softmax.py": edits})


@pytest.mark.parametrize("at_import", [True, False], ids=["at import", "at call time"])
@pytest.mark.parametrize("name", ["listdir", "scandir", "stat"])
def test_file_system_metadata_through_any_spelling_is_refused_like_its_import_os_twin(name, at_import, tmp_path,
                                                                                      monkeypatch):
    """Issue 41: `typing.sys.modules['os'].listdir(...)` at import listed the grader's folders and kept 12/12, where
    `import os` is refused; os.stat has no audit event at all. Listing and inspecting files outside the submission
    is refused with the rule by the run-time guard alone (the static check off), at import and at call time, and
    the stage loses what its `import os` twin loses."""
    twin = grade(_with_line(tmp_path / "twin", "import os", at_import), stages=["softmax"]).stages["softmax"]
    monkeypatch.setenv("ATTN_STATIC_CHECK", "off")
    sm = grade(_with_line(tmp_path / "sub", METADATA[name], at_import), stages=["softmax"]).stages["softmax"]
    messages = [r.message for r in sm.checks if not r.passed]
    assert sm.score == twin.score == 0, (sm.score, twin.score, messages[:2])
    assert any(f"refused at run time: os.{name}(" in m and "may not open, list or inspect files" in m
               for m in messages), messages[:2]


# what a submission might try to learn past the refusals: a library's answer on its behalf (os.path.exists swallows
# the refusal: it must answer as for a missing file), the hook's own event raised by hand, and the real os.stat
# looked for wherever a reference to it was kept (os's supports_* sets, the native module, the stand-in's globals)
LEARN = (f"    _m = {MODULES}\n    _os = _m['os']\n    _seen = []\n"
         "    _seen.append(_os.path.exists(_m['sys'].executable))\n"
         "    _seen.append(_os.path.isdir('/'))\n"
         "    _fns = [f for s in (_os.supports_follow_symlinks, _os.supports_fd, _os.supports_dir_fd) for f in s]\n"
         "    _fns += [_m['posix'].stat, _m['posix'].lstat, _os.lstat]\n"
         "    _fns += list(getattr(_os.stat, '__glob' + 'als__').values())\n"
         "    for _f in _fns:\n"
         "        if getattr(_f, '__name__', '') in ('stat', 'lstat'):\n"
         "            try:\n                _seen.append(_f('/').st_mode)\n"
         "            except OSError as e:\n                _seen.append(type(e).__name__)\n"
         "    _box = []\n"
         "    try:\n        _m['sys'].audit('attn.metadata', 'stat', ('/',), {}, _box)\n"
         "    except OSError as e:\n        _seen.append(type(e).__name__)\n"
         "    _seen.append(len(_box))\n"
         "    raise ValueError('learned ' + repr(_seen))\n")


def test_what_a_library_answers_on_the_submissions_behalf_tells_it_nothing(tmp_path, static_check_off):
    """The stand-ins that give os.stat and its kin an audit event hold nothing but sys.audit: every route to the
    real functions a submission can reach leads to a stand-in, refused outside its folder, and os.path.exists
    answers as for a missing file."""
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                                            (SOFTMAX_BODY, LEARN + SOFTMAX_BODY)]})
    sm = grade(sub, stages=["softmax"]).stages["softmax"]
    message = next(r.message for r in sm.checks if "learned" in r.message)
    seen = __import__("ast").literal_eval(message.split("learned ", 1)[1].split("]", 1)[0] + "]")
    assert seen[:2] == [False, False], seen
    assert len(seen) > 5 and all(s == "RuleViolation" for s in seen[2:-1]) and seen[-1] == 0, seen


def test_correct_code_whose_calls_make_libraries_import_keeps_every_point(tmp_path, static_check_off):
    """Imports made during a student's call (a numpy part loaded on first use, an allowed part imported inside the
    function) read the import path's folders and files: that is the import machinery's, not the student's. The stage
    keeps every point the solutions get, and nothing is refused."""
    body = ("    import numpy.polynomial  # noqa: F401\n"
            "    rng = np.random.default_rng(0)\n    assert rng.random() < 1.0\n")
    sub = variant(tmp_path, {"softmax.py": [(SOFTMAX_BODY, body + SOFTMAX_BODY)]})
    sm = grade(sub, stages=["softmax"]).stages["softmax"]
    assert not any("refused" in r.message for r in sm.checks), [r.message for r in sm.checks if not r.passed][:2]
    assert sm.score == grade(SOLUTIONS, stages=["softmax"]).stages["softmax"].score


# a path-like object whose __fspath__ reads the submission's own file (which its own frame may not open): handed to
# open, os.listdir and os.stat; the hook must never run it itself, where its own events would go unchecked
FSPATH = (f"    _m = {MODULES}\n    _got = []\n\n"
          "    class _Path:\n        def __fspath__(self):\n            try:\n"
          "                _got.append(_m['builtins'].open(__file__).read(40))\n"
          "            except OSError as e:\n                _got.append(type(e).__name__)\n"
          "            return __file__\n\n"
          "    for _f in (_m['builtins'].open, _m['os'].listdir, _m['os'].stat, _m['os'].path.exists):\n"
          "        try:\n            _got.append(repr(_f(_Path()))[:20])\n"
          "        except OSError as e:\n            _got.append('call: ' + type(e).__name__)\n"
          "    raise ValueError('got ' + repr(_got))\n")


def test_no_code_of_the_submission_runs_inside_the_hook(tmp_path, static_check_off):
    """Found while closing the metadata gap: a stand-in that handed a path-like object to the hook had the hook call
    its __fspath__, inside the hook, where the file it opened was never checked. A stand-in makes the path a str
    outside the hook, and the hook reads only exact str and bytes, so every open the object makes is refused."""
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import typing\n\nimport numpy as np\n"),
                                            (SOFTMAX_BODY, FSPATH + SOFTMAX_BODY)]})
    sm = grade(sub, stages=["softmax"]).stages["softmax"]
    message = next(r.message for r in sm.checks if "got [" in r.message)
    assert "Stage 1" not in message and "RuleViolation" in message, message


def test_the_hooks_own_realpath_agrees_with_the_libraries(tmp_path, monkeypatch):
    """The hook resolves paths with C functions bound when it loaded (os.path.realpath looks up os.lstat and
    os.fspath as it runs, which the submission can rewrite): the same answers, links, '..' and relative paths
    included; a loop of links is placed nowhere."""
    from autograder.child.guard import Guard

    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to(tmp_path / "a" / "b")
    (tmp_path / "a" / "rel").symlink_to("../a/b/c")
    (tmp_path / "up").symlink_to("/")
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    monkeypatch.chdir(tmp_path / "a")
    guard = Guard(str(tmp_path / "a"), "a", [str(tmp_path)])
    for path in (f"{tmp_path}/lnk/c", f"{tmp_path}/lnk/../b", f"{tmp_path}/a/rel/../x", f"{tmp_path}/a/./b//c/", "/",
                 "//", f"{tmp_path}/up/usr", "rel/x", ".", "..", f"{tmp_path}/missing/../a", f"{tmp_path}/a/rel"):
        assert guard._resolve(path) == os.path.realpath(path), path
    assert not guard._readable(f"{tmp_path}/loop1/x") and guard._readable(f"{tmp_path}/lnk/c")


def test_a_library_lists_no_folder_for_the_submission(tmp_path, static_check_off):
    """pathlib, reached through typing.sys.modules in a torch stage, lists the grader's child folder on the import path
    (which only the import machinery may list) and the root no more than os.listdir does: refused with the rule."""
    listing = (f"    _P = {MODULES}['pathlib'].Path\n"
               f"    sorted(_P({MODULES}['sys'].path[0]).iterdir())\n")
    edits = [("    T_q, T_k = q.shape[-2], k.shape[-2]\n", listing + "    T_q, T_k = q.shape[-2], k.shape[-2]\n")]
    sub = variant(tmp_path, {"fused.py": edits})
    (sub / "fused.py").write_text("import typing\n" + (sub / "fused.py").read_text())
    fused = grade(sub, stages=["fused"]).stages["fused"]
    messages = [r.message for r in fused.checks if not r.passed]
    assert fused.score == 0 and any("refused at run time: os.listdir(" in m and "list or inspect" in m
                                    for m in messages), messages[:2]
