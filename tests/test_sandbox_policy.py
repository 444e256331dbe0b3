"""What a submission may use (autograder/sandbox/static_check.py), and measurements it cannot reach: each hostile
submission here gains nothing and costs only its own stage; correct code from elsewhere keeps every point."""
import os

import pytest
from conftest import HAND_FUSED, HAND_TILED, ROOT, SOLUTIONS, grade, variant

from autograder.api import Context
from autograder.sandbox.static_check import RULE, refusals, source_defaults
from autograder.stages import SUBMISSION_FILES

OWN = {f.removesuffix(".py") for f in SUBMISSION_FILES}
SOFTMAX_BODY = "    scores = np.asarray(scores)\n"
SOFTMAX_IMPORT = "import numpy as np\n"
# each a way of reaching past the stage module: its refusal names the line
ESCAPES = {
    "dynamic import of torch": "import importlib\nT = importlib.import_module('tor' + 'ch')\n",
    "__import__": "T = __import__('tor' + 'ch')\n",
    "the caller's frame (fixture lookup)": "import sys\nF = sys._getframe\n",
    "inspect": "import inspect\n",
    "tracemalloc reset": "import tracemalloc\ntracemalloc.reset_peak()\n",
    "os": "import os\n",
    "ctypes through numpy": "P = np.zeros(1).ctypes\n",
    "a file through numpy": "np.array([53], dtype=np.uint8).tofile('/tmp/x')\n",
    "subclasses escape": "E = ().__class__.__bases__[0].__subclasses__()\n",
    "globals of a function": "G = np.asarray.__globals__\n",
    "computed getattr": "G = getattr(np, '__dict' + '__')\n",
    "open": "open('/etc/passwd')\n",
    "the grader's modules": "import autograder.child.drivers\n",
    "a helper file of its own": "from .answers import ANSWERS\n",
    "a signature forged": "def f(x=0):\n    return x\nf.__signature__ = None\n",
    "numpy patched": "np.allclose = lambda *a, **k: True\n",
    "processes (300 spinners)": "import subprocess\n",
    "threads": "import threading\n",
    "multiprocessing through torch": "import torch.multiprocessing\n",
    "sockets": "import socket\n",
    "torch's class patched": "import torch\ntorch.Tensor.numel = lambda self: 0\n",
    "setattr on torch": "import torch\nsetattr(torch.nn.functional, 'scaled_dot_product_attention', None)\n",
    "the FLOP counter": "import torch\nC = torch.utils.flop_counter.FlopCounterMode\n",
    "hiding from the SDPA spy": "import torch\nM = torch.overrides._pop_mode_temporarily\n",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_each_escape_is_refused_with_its_line(name):
    source = "import numpy as np\n\n" + ESCAPES[name]
    found = refusals(source, OWN)
    assert found and found[0].line >= 3, (name, found)


def test_a_helper_file_of_ones_own_is_named_in_the_refusal():
    """Found by a stranger TA: `from .helpers import load` read "from .helpers import ...." in the message (its
    ellipsis ran into the sentence's full stop), and did not say why."""
    from autograder.sandbox.static_check import describe

    text = describe("softmax.py", refusals("import numpy as np\nfrom .helpers import load, save\n", OWN))
    assert "line 2: from .helpers import load, save (helpers.py is not one of the stage modules). Only" in text, text


def test_correct_code_from_elsewhere_is_not_refused():
    folders = [ROOT / "solutions", ROOT / "exercises", ROOT / "tests" / "outside"]
    for path in (p for folder in folders for p in folder.glob("*.py")):
        assert refusals(path.read_bytes(), OWN) == [], path
    nanogpt_style = ("import math\nimport inspect_me\n" if False else "import math\nfrom dataclasses import dataclass\n"
                     "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n"
                     "class A(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                     "        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')\n"
                     "        self.register_buffer('bias', torch.tril(torch.ones(4, 4)).view(1, 1, 4, 4))\n"
                     "    def forward(self, x):\n        y = torch.einsum('bhqd,bhkd->bhqk', x, x) * (1.0 / math.sqrt(4))\n"
                     "        return y.masked_fill(self.bias[:, :, :4, :4] == 0, float('-inf')).softmax(dim=-1)\n")
    assert refusals(nanogpt_style, OWN) == []


def test_a_refused_stage_fails_alone_and_says_why(tmp_path):
    sub = variant(tmp_path, {"softmax.py": [(SOFTMAX_IMPORT, SOFTMAX_IMPORT + ESCAPES["dynamic import of torch"])]})
    res = grade(sub, stages=["softmax", "projections", "scaling"])
    sm = res.stages["softmax"]
    assert sm.score == 0 and all("softmax.py was refused before any of it ran: line" in r.message for r in sm.checks)
    assert all("import importlib" in r.message for r in sm.checks)
    assert res.stages["projections"].status == res.stages["scaling"].status == "passed"


def test_a_refused_file_points_the_student_at_its_refused_line(tmp_path):
    """The next step and a dependent stage's traceback name the refused line (a TA saw them point at line 1, and
    the next step say the function's own output was wrong, though none of it ran)."""
    sub = variant(tmp_path, {"softmax.py": [(SOFTMAX_IMPORT, SOFTMAX_IMPORT + "import os\n")]})
    line = (sub / "softmax.py").read_text().splitlines().index("import os") + 1
    res = grade(sub, stages=["softmax", "dot_products"])
    assert res.next_step.startswith(f"fix stage 1 (softmax): softmax.py was refused before any of it ran: line {line}:")
    assert "output is wrong" not in res.next_step
    raised = [r for r in res.stages["dot_products"].checks if r.error]
    assert raised and all(r.error.get("file") == "softmax.py" and r.error.get("line") == line for r in raised)


def test_the_rule_is_in_the_student_readme():
    """Both READMEs hold the section a refusal points at (found by a stranger student: only the release's did), and
    a stage module imported through the folder's name is refused with how to import it."""
    from autograder.instructor.build import student_readme

    assert RULE in student_readme()
    kit = (ROOT / "README.md").read_text()
    assert "What your code may use" in kit and RULE in kit
    found = refusals("from exercises.softmax import softmax\n", {f.removesuffix(".py") for f in SUBMISSION_FILES})
    assert "from .softmax import" in str(found[0])


def test_extra_files_are_never_run(tmp_path):
    """An extra module (say, answers recorded offline) is left out of the sandbox copy, and named."""
    sub = variant(tmp_path, {"softmax.py": [(SOFTMAX_IMPORT, SOFTMAX_IMPORT + "from answers import ANSWERS\n")]})
    (sub / "answers.py").write_text("ANSWERS = {}\n")
    res = grade(sub, stages=["softmax", "scaling"])
    assert res.stages["softmax"].score == 0
    assert "answers.py" in res.ignored_files
    assert res.stages["scaling"].status == "passed"


def test_defaults_are_read_from_the_source(tmp_path):
    """The defaults check reads the def, never the running object (whose signature code can forge): a name
    rebound after its def holds something else, and does not count."""
    assert source_defaults("import torch as T\ndef f(a, b=20_000, *, c=T.float32, d=None):\n    pass\n", "f") == \
        {"b": "20000", "c": "torch.float32", "d": "None"}
    assert source_defaults("from dataclasses import dataclass\n@dataclass\nclass C:\n    a: int\n    b: int = 1\n",
                           "C") == {"b": "1"}
    assert source_defaults("def f(axis=-1):\n    pass\ng = f\nf = g\n", "f") is None
    forged = variant(tmp_path, {"softmax.py": [("def softmax(scores: np.ndarray, axis: int = -1)",
                                                "def _softmax(scores: np.ndarray, axis: int = 0)")]})
    (forged / "softmax.py").write_text((forged / "softmax.py").read_text() + "\n\ndef softmax(scores, axis=-1):\n"
                                       "    return _softmax(scores, axis)\n\n\nsoftmax = _softmax\n")
    res = grade(forged, stages=["softmax"])
    defaults = [r for r in res.stages["softmax"].checks if r.check.name == "keeps_the_defaults"]
    assert defaults and not defaults[0].passed and "rebound" in defaults[0].message


def test_defaults_written_another_way_with_the_same_value_keep_their_points(tmp_path):
    """Found by a stranger student: 0 for the contract's float 0.0, 10_000 for 10000.0 and torch.float (torch's own
    name for torch.float32) give a caller the same value and lost half a point each, compared as text. An int the
    contract writes must stay an int (20000.0 pairs cannot size an array)."""
    from autograder.sandbox.static_check import same_default

    assert same_default("0", "0.0") and same_default("10000", "10000.0") and same_default("torch.float", "torch.float32")
    assert not same_default("20000.0", "20000") and not same_default("0.5", "0.0") and not same_default("1", "True")
    sub = variant(tmp_path, {"fused.py": [("    dropout_p: float = 0.0,", "    dropout_p: float = 0,")],
                             "kv_cache.py": [("dtype: torch.dtype = torch.float32,", "dtype: torch.dtype = torch.float,")],
                             "rope.py": [("base: float = 10000.0)", "base: float = 10_000)")]})
    res = grade(sub, stages=["kv_cache", "fused", "rope"])
    kept = {n: [r for r in res.stages[n].checks if r.check.name == "keeps_the_defaults"][0] for n in res.stages}
    assert all(r.passed for r in kept.values()), {n: r.message for n, r in kept.items()}


def test_defaults_written_as_constants_or_sums_keep_their_points(tmp_path):
    """Found by a stranger student: module constants (N_PAIRS = 20_000, ROPE_BASE = 1e4), 2 ** 6 and int(64) give
    a caller the contract's values and lost half a point per stage, with a message saying they "differ". They are
    folded from the source (never run); a constant rebound later, or a value that differs, still loses."""
    from autograder.sandbox.static_check import source_defaults

    sub = variant(tmp_path, {
        "scaling.py": [("def score_variance(d_k: int, n_pairs: int = 20000, seed: int = 0,",
                        "N_PAIRS = 20_000\nDEFAULT_SEED = 0\n\n\ndef score_variance(d_k: int, n_pairs: int = N_PAIRS, "
                        "seed: int = DEFAULT_SEED,")],
        "tiled.py": [("block_q: int = 64, block_k: int = 64", "block_q: int = 2 ** 6, block_k: int = int(64)")],
        "costs.py": [("def score_count(n_tokens: int, n_heads: int = 1)",
                      "SINGLE_HEAD = 1\n\n\ndef score_count(n_tokens: int, n_heads: int = SINGLE_HEAD)")],
        "rope.py": [("def rotate(x: np.ndarray, offset: int = 0, base: float = 10000.0)",
                     "ROPE_BASE = 1e4\n\n\ndef rotate(x: np.ndarray, offset: int = 0, base: float = ROPE_BASE)")]})
    res = grade(sub, stages=["scaling", "tiled", "costs", "rope"])
    kept = {n: [r for r in res.stages[n].checks if r.check.name == "keeps_the_defaults"][0] for n in res.stages}
    assert all(r.passed for r in kept.values()), {n: r.message for n, r in kept.items()}
    rebound = "N = 64\nN = 32\n\n\ndef f(a=N, b=2 * 10_000, c=N_MISSING):\n    pass\n"
    assert source_defaults(rebound, "f") == {"a": "N", "b": "20000", "c": "N_MISSING"}
    # found by a second stranger student: 1 << 6, constants bound by unpacking or in a chain, an __init__ inherited
    # from a class of the same file
    shapes = ("import torch\nBQ, BK = 64, 64\nA = B = 64\nDT, DEV = torch.float32, None\n"
              "class _Base:\n    def __init__(self, n, dtype=DT, device=DEV):\n        pass\n"
              "class Cache(_Base):\n    pass\n"
              "def g(q=1 << 6, k=BK, a=A, b=B):\n    pass\n")
    assert source_defaults(shapes, "g") == {"q": "64", "k": "64", "a": "64", "b": "64"}
    assert source_defaults(shapes, "Cache") == {"dtype": "torch.float32", "device": "None"}


def test_defaults_a_decorator_changes_at_run_time_fail(tmp_path):
    """Found by a stranger attacker: the def says causal=True, a decorator's wrapper makes a call without arguments
    non-causal. The call made with the defaults must behave as the source says."""
    head = "def fused_attention(\n"
    wrapper = ("def _runtime_defaults(f):\n    def wrapper(q, k, v, causal=False, dropout_p=0.0, training=False):\n"
               "        return f(q, k, v, causal, dropout_p, training)\n    return wrapper\n\n\n@_runtime_defaults\n")
    res = grade(variant(tmp_path, {"fused.py": [(head, wrapper + head)]}), stages=["fused"])
    defaults = [r for r in res.stages["fused"].checks if r.check.name == "keeps_the_defaults"][0]
    assert not defaults.passed and "with its defaults" in defaults.message, defaults.message


def test_public_checks_draw_from_the_grading_seed_where_the_reference_is():
    """On the autograder no input is the one the release's fixtures answer: public checks use the grading
    seed there, and seed 0 only where their answers come from the fixtures (the student repo)."""
    assert Context(7, None, None, None).for_check("public").seed == 7
    assert Context(7, None, None, None, fixed_public=True).for_check("public").seed == 0
    assert Context(7, None, None, None, fixed_public=True).for_check("hidden").seed == 7
    res = grade(SOLUTIONS, stages=["softmax", "masking"], seed=12345)
    assert res.score == res.max_score  # correct code passes on any seed's public inputs


@pytest.mark.slow
def test_a_decoy_sdpa_call_does_not_hide_the_scores_from_the_memory_check(tmp_path):
    """The fused memory check reads the kernel's count of a fresh child's peak from the parent: a hand-written
    softmax(q k^T) v with a decoy 1 x 1 SDPA call still shows its T x T scores."""
    decoy = ("    F.scaled_dot_product_attention(q[..., :1, :], k[..., :1, :], v[..., :1, :], is_causal=True)\n"
             "    T_q, T_k = q.shape[-2], k.shape[-2]\n"
             "    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])\n"
             "    keep = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)\n"
             "    return torch.softmax(s.masked_fill(~keep, float('-inf')), dim=-1) @ v\n")
    src = (SOLUTIONS / "fused.py").read_text()
    head = src[:src.index("    T_q, T_k = q.shape[-2], k.shape[-2]\n")]
    sub = variant(tmp_path, {})
    (sub / "fused.py").write_text(("import math\n" if "import math" not in head else "") + head + decoy)
    res = grade(sub, stages=["fused"])
    mem = [r for r in res.stages["fused"].checks if r.check.name == "no_quadratic_memory"][0]
    assert not mem.passed and "raised peak memory by" in mem.message, mem.message


def _with_tiled(tmp_path, source: str):
    sub = variant(tmp_path, {})
    (sub / "tiled.py").write_text(source)
    return grade(sub, stages=["tiled"])


def test_blocks_made_with_split_keep_full_marks(tmp_path):
    """Correct code that cuts its blocks with np.split, np.array_split or np.vsplit keeps every point."""
    res = _with_tiled(tmp_path, (ROOT / "tests" / "outside" / "split_tiled.py").read_text())
    st = res.stages["tiled"]
    assert st.score == st.max_score, [(r.check.name, r.message) for r in st.checks if not r.passed]


UNTILED = ("import numpy as np\n\n\ndef tiled_attention(q, k, v, causal=True, block_q=64, block_k=64):\n"
           "    s = q @ k.T / np.sqrt(q.shape[1])\n"
           "    n_q, n_k = s.shape\n"
           "    if causal:\n"
           "        s = np.where(np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + n_k - n_q, s, -np.inf)\n"
           "    if np.isinf(s).all(axis=1).any():\n"
           "        raise ValueError('a row has no key')\n"
           "    w = np.exp(s - s.max(axis=1, keepdims=True))\n"
           "    return (w / w.sum(axis=1, keepdims=True)) @ v\n")


def _skip_check(res):
    return [r for r in res.stages["tiled"].checks if r.check.name == "tiled_skips_hidden_blocks"][0]


def test_reading_every_block_fails_the_skip_check_however_it_is_dressed(tmp_path):
    """Plain n x n attention reads every key block: the skip check fails on its own output (NaN where the
    hidden values reach the rows). Cleaning the NaN away gains nothing: rows that attend to a NaN value then
    come back finite, which the check refuses too."""
    res = _with_tiled(tmp_path / "plain", UNTILED)
    honest = res.stages["tiled"].score
    assert not _skip_check(res).passed and "gave NaN in row 0" in _skip_check(res).message
    cleaned = UNTILED.replace("    s = q @ k.T", "    v = np.nan_to_num(v)\n    s = q @ k.T")
    res = _with_tiled(tmp_path / "cleaned", cleaned)
    assert not _skip_check(res).passed and "gave a finite row" in _skip_check(res).message
    assert res.stages["tiled"].score <= honest


# a stranger's own loop (a running log-sum-exp): a row that sees none of a key block gets the block maximum -inf,
# and -inf - -inf is NaN, with every value finite
LSE_LOOP = ("import numpy as np\n\n\ndef tiled_attention(q, k, v, causal=True, block_q=64, block_k=64):\n"
            "    n_q, n_k = len(q), len(k)\n"
            "    if causal and n_q > n_k:\n        raise ValueError('a query row would have no key')\n"
            "    out = np.empty((n_q, v.shape[-1]))\n"
            "    for start in range(0, n_q, block_q):\n"
            "        stop = min(start + block_q, n_q)\n"
            "        qb = q[start:stop] / np.sqrt(q.shape[-1])\n"
            "        lse, acc = np.full(stop - start, -np.inf), np.zeros((stop - start, v.shape[-1]))\n"
            "        visible, ks = (n_k - n_q + stop if causal else n_k), 0\n"
            "        while ks < visible:\n"
            "            ke = min(ks + block_k, visible)\n"
            "            s = qb @ k[ks:ke].T\n"
            "            if causal:\n"
            "                s = np.where(np.arange(ks, ke) > (np.arange(start, stop) + n_k - n_q)[:, None], -np.inf, s)\n"
            "            top = s.max(axis=1)\n"
            "            new = np.logaddexp(lse, top + np.log(np.exp(s - top[:, None]).sum(axis=1)))\n"
            "            acc = acc * np.exp(lse - new)[:, None] + np.exp(s - new[:, None]) @ v[ks:ke]\n"
            "            lse, ks = new, ke\n"
            "        out[start:stop] = acc\n"
            "    return out\n")


def test_a_nan_made_inside_the_call_is_not_blamed_on_the_hidden_keys(tmp_path):
    """Found by a stranger: the skip check said 'a key block from 150 on reached' row 32 of a loop that never read
    past key 123; its NaN came from a block maximum of -inf. The check now says so when the same call with every
    value finite gives the NaN too, and names no skipping it cannot see."""
    skip = _skip_check(_with_tiled(tmp_path / "lse", LSE_LOOP))
    assert not skip.passed and "every value finite" in skip.message and "reached it" not in skip.message, skip.message


@pytest.mark.slow
def test_the_secret_never_travels_on_a_command_line(tmp_path):
    """regrade takes the course secret from a file (or ATTN_SECRET), so no process list shows it; the seeds it
    derives are the zip's."""
    import json
    import shutil
    import subprocess
    import sys

    from autograder.instructor.gradescope import derive_seed

    batch = tmp_path / "batch"
    batch.mkdir()
    shutil.copytree(SOLUTIONS, batch / "alice")
    (tmp_path / "secret").write_text("course-secret-42\n")
    p = subprocess.run([sys.executable, "-m", "autograder", "regrade", str(batch), "--secret-file",
                        str(tmp_path / "secret")], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    seed = json.loads((tmp_path / "batch-results" / "alice.json").read_text())["extra_data"]["seed"]
    assert seed == derive_seed("course-secret-42", batch / "alice")
    help_text = subprocess.run([sys.executable, "-m", "autograder", "regrade", "--help"], cwd=ROOT,
                               capture_output=True, text=True).stdout
    assert "--secret-file" in help_text and "--secret " not in help_text


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_the_zips_secret_is_kept_beside_it_for_a_regrade(tmp_path, monkeypatch):
    """`make autograder` writes the course secret beside the zip, readable by its owner alone; a rebuild with no
    secret given keeps it; `regrade --secret-file` with that file draws the seeds the zip draws on Gradescope."""
    import json
    import shutil
    import stat
    import subprocess
    import sys
    import zipfile

    from autograder.instructor.build import autograder_zip
    from autograder.instructor.gradescope import derive_seed

    monkeypatch.delenv("COURSE_SECRET", raising=False)
    built = autograder_zip(tmp_path / "dist" / "autograder.zip")
    kept = tmp_path / "dist" / "autograder.secret"
    zipped = zipfile.ZipFile(built).read("course_secret").decode()
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and kept.read_text().strip() == zipped and len(zipped) >= 32
    autograder_zip(built)  # rebuilt: the same secret, so earlier Gradescope runs stay reproducible
    assert zipfile.ZipFile(built).read("course_secret").decode() == zipped == kept.read_text().strip()
    kept.chmod(0o644)
    autograder_zip(built, "a-new-secret")  # given one: it replaces the kept one, and the mode is put back
    assert kept.read_text().strip() == "a-new-secret" and stat.S_IMODE(kept.stat().st_mode) == 0o600
    batch = tmp_path / "batch"
    batch.mkdir()
    shutil.copytree(SOLUTIONS, batch / "alice")
    p = subprocess.run([sys.executable, "-m", "autograder", "regrade", str(batch), "--secret-file", str(kept),
                        "--trust"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    seed = json.loads((tmp_path / "batch-results" / "alice.json").read_text())["extra_data"]["seed"]
    assert seed == derive_seed("a-new-secret", batch / "alice") != derive_seed(zipped, batch / "alice")


def test_the_baselines_are_kept_only_where_no_child_can_rewrite_them(monkeypatch, tmp_path):
    """Between runs of `make grade` the baseline children's peaks are kept (one torch start less per
    measurement), per key, interpreter and driver code; as root they are kept only where the children run under
    a user of their own or in namespaces (else a child, being root too, could rewrite its own baseline)."""
    import os

    from autograder.sandbox import launchers, namespaces
    from autograder.stages import common

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    common._save_baseline(("sdpa-peak", False, (8192, 32)), 123456)
    assert common._saved_baseline(("sdpa-peak", False, (8192, 32))) == 123456
    assert common._saved_baseline(("sdpa-peak", True, (8192, 32))) is None
    assert common._saved_baseline(("decode-peak", False, (8192, 32))) is None
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(launchers, "separate_user_possible", lambda: False)
    monkeypatch.setattr(namespaces, "available", lambda: False)
    assert common._baseline_file(("sdpa-peak", False, (8192, 32))) is None
    monkeypatch.setattr(launchers, "separate_user_possible", lambda: True)
    assert common._baseline_file(("sdpa-peak", False, (8192, 32))) is not None


def test_a_baseline_is_kept_for_each_kind_of_server_a_child_forks_from():
    """A numpy child forked from a server holding torch starts far larger than one forked from a numpy server, so a
    baseline measured from one is no baseline for the other. They had one key: a tiled baseline kept from a numpy
    server's child (35 MiB) was taken for a torch server's (about 170 MiB), and the correct tiled loop lost
    tiled_memory_linear ("raised peak memory by 133 MiB")."""
    from types import SimpleNamespace

    from autograder.sandbox.launchers import ForkServer
    from autograder.sandbox.runner import Worker
    from autograder.stages.common import _baseline_key

    peaks, keys = {}, {}
    for torch_loaded in (False, True):
        server = ForkServer(torch=torch_loaded)
        w = Worker(SOLUTIONS, zygote=server)
        try:
            peaks[torch_loaded] = w.measure("npdriver:tiled_memory_run", 256, 16, 64, True)[1]
        finally:
            w.close()
            server.close()
        keys[torch_loaded] = _baseline_key(SimpleNamespace(worker=w), "tiled_memory_run", (256, 16, 64), ("numpy",))
    assert peaks[True] - peaks[False] > 50 * 2**20, peaks  # what one key had mixed up
    assert keys[True] != keys[False]


def test_a_measurement_started_ahead_is_the_one_its_check_takes(tmp_path):
    """A stage's declared measurements start as soon as its child is ready, each in a fresh child of its own:
    the check that asks for one takes that child's result (no second child), and one that no check took is ended
    with the grade instead of outliving it."""
    from autograder.sandbox.runner import Worker
    from autograder.stages import FUNCTIONS

    fn = FUNCTIONS["tiled_memory_run"]
    w = Worker(SOLUTIONS, reuse_memory=True)
    launched = []
    real = w.launcher.launch
    w.launcher.launch = lambda *a, **k: launched.append(a) or real(*a, **k)
    try:
        args = (1024, 16, 256)  # a length, d, a block (the stage draws its lengths: stages/growth.py)
        w.measure_soon(fn.target, *args, timeout=60)
        value, peak, cpu = w.measure(fn.target, *args, timeout=60)
        assert value["shape"] == [args[0], args[1]] and len(launched) == 1
        w.measure(fn.target, *args, timeout=60)  # asked again: measured again, in a child of its own
        assert len(launched) == 2
    finally:
        w.close()
    slow = variant(tmp_path, {"tiled.py": [("    n_q, d_k = q.shape\n", "    while True:\n        pass\n")]})
    w = Worker(slow, reuse_memory=True)
    w.measure_soon(fn.target, 1024, 16, 256, timeout=300)
    thread, box = next(iter(w._soon.values()))
    thread.join(1.5)
    assert thread.is_alive(), box  # still measuring: its call never ends by itself
    w.end_measurements()
    assert not thread.is_alive() and not w._fresh and not w._soon
    assert "value" not in box and "refused" not in str(box["error"]), box  # ended while it ran
    w.close()


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_decode_work_hidden_in_numpy_is_caught(tmp_path):
    """A quadratic decode step done on numpy copies still raises the child's peak memory, which the parent reads:
    the cost check fails and names the mistake; the other checks pass."""
    src = (SOLUTIONS / "module.py").read_text()
    hidden = src.replace(
        "        scores = q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5  # [B, H, T, T_k]\n",
        "        import numpy as np\n"
        "        qn, kn = np.asarray(q), np.asarray(k)\n"
        "        scores = torch.as_tensor(qn @ kn.swapaxes(-2, -1) / kn.shape[-1] ** 0.5)  # [B, H, T, T_k]\n")
    pad = "torch.cat([q.new_zeros(*q.shape[:2], k.shape[-2] - q.shape[-2], q.shape[-1]), q], -2)"  # every row
    hidden = hidden.replace("        y = self.attend(q, k, v)  #", f"        if cache is not None:\n            q = {pad}\n"
                            "        y = self.attend(q, k, v)[..., -x.shape[1]:, :]  #")
    assert "qn, kn = np.asarray(q), np.asarray(k)" in hidden and "new_zeros" in hidden
    sub = variant(tmp_path, {})
    (sub / "module.py").write_text(hidden)
    res = grade(sub, stages=["kv_cache"])
    cost = [r for r in res.stages["kv_cache"].checks if r.check.name == "decode_step_cost_linear"][0]
    assert not cost.passed and cost.diagnosis == "cache-quadratic-step", cost.message
    assert [r.check.name for r in res.stages["kv_cache"].checks if not r.passed] == ["decode_step_cost_linear"]


ROW_BY_ROW = ("            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included\n",
              "            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included\n"
              "            L, T = k.shape[-2], q.shape[-2]\n"
              "            qq = torch.cat([q.new_zeros(q.shape[0], self.n_heads, L - T, q.shape[-1]), q], -2)\n"
              "            rows = []\n"
              "            for i in range(L):  # every row of the full causal attention, one at a time\n"
              "                row = self.attend(qq[:, :, i:i + 1], k[:, :, :i + 1], v[:, :, :i + 1])\n"
              "                if i >= L - T:\n"
              "                    rows.append(row)\n"
              "            return self.merge(torch.cat(rows, -2))\n")


# found by a stranger attacker: the step used to be timed at 1,023 and at 255 positions, and burning CPU at the
# shorter length hid the growth (13/16 -> 16/16); the grader's own step at the same length is what it is held to now
PADDED = ("            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included\n",
          "            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included\n"
          "            T, L = q.shape[-2], k.shape[-2]\n"
          "            qq = torch.cat([q.new_zeros(q.shape[0], self.n_heads, L - T, q.shape[-1]), q], -2)\n"
          "            y = torch.empty_like(qq)\n"
          "            pos = torch.arange(L)\n"
          "            for i in list(range(0, L, 16)) * (round((1024 / L) ** 2) if 128 <= L < 1024 else 1):\n"
          "                j = min(i + 16, L)\n"
          "                sc = qq[..., i:j, :] @ k.transpose(-2, -1) / k.shape[-1] ** 0.5\n"
          "                sc.masked_fill_(pos[None, :] > pos[i:j, None], float('-inf'))\n"
          "                torch.matmul(sc.softmax(dim=-1), v, out=y[..., i:j, :])\n"
          "            return self.merge(y[..., L - T:, :])\n")


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
@pytest.mark.parametrize("edit", [ROW_BY_ROW, PADDED], ids=["row by row", "padded at shorter lengths"])
def test_a_quadratic_decode_step_done_a_few_rows_at_a_time_is_caught_by_its_cpu_time(tmp_path, edit):
    """Redoing every pair of positions a few rows at a time keeps the step's memory small and its output right,
    but its CPU time (the kernel's count, read by the grader) is far above the grader's own step at the same
    length, whatever it does at other lengths: the cost check fails and names the mistake, and the correct
    step's difference is reported in milliseconds."""
    res = grade(variant(tmp_path, {"module.py": [edit]}), stages=["kv_cache"])
    cost = [r for r in res.stages["kv_cache"].checks if r.check.name == "decode_step_cost_linear"][0]
    assert not cost.passed and cost.diagnosis == "cache-quadratic-step", cost.message
    # row by row holds one row of scores at a time: only its CPU time shows it; 16 rows at a time, repeated, may
    # also show in the peak (tens of MiB over a correct step), which is checked first
    assert "more than the grader's own steps" in cost.message or "CPU time grew" in cost.message, cost.message
    assert [r.check.name for r in res.stages["kv_cache"].checks if not r.passed] == ["decode_step_cost_linear"]
    ok = [r for r in grade(SOLUTIONS, stages=["kv_cache"]).stages["kv_cache"].checks
          if r.check.name == "decode_step_cost_linear"][0]
    assert ok.passed and "over the grader's own steps" in ok.note, ok.note


def test_names_the_rule_does_not_name_are_the_modules_own(tmp_path):
    """A parameter called `input` (as torch's F.softmax has it) and locals called `vars` and `help` are the
    module's own names, not the builtins: the correct softmax written with them keeps every point. The builtins
    the rule names stay refused where the name is the builtin."""
    sub = variant(tmp_path, {"softmax.py": [
        ("def softmax(scores: np.ndarray, axis: int = -1)", "def softmax(input: np.ndarray, axis: int = -1)"),
        ("    scores = np.asarray(scores)\n    top = np.max(scores, axis=axis, keepdims=True)\n",
         "    vars = np.asarray(input)\n    help = np.max(vars, axis=axis, keepdims=True)\n    scores, top = vars, help\n")]})
    assert refusals((sub / "softmax.py").read_bytes(), OWN) == []
    res = grade(sub, stages=["softmax"])
    assert res.stages["softmax"].score == res.stages["softmax"].max_score == 12
    for source in ("def f(x):\n    return vars(x)\n", "def f(vars):\n    return 1\n\n\ndef g(x):\n    return vars(x)\n",
                   "def f(x):\n    open = x\n    return open\n\n\nopen('y')\n"):
        assert [r.what for r in refusals(source, OWN)] == (["vars"] if "vars" in source else ["open"]), source


def test_correct_code_a_stranger_wrote_keeps_every_point(tmp_path):
    """Three correct ways of writing that a blocklist of names used to refuse: an unused `import torch` in a numpy
    stage (torch loading itself is torch's work, not the student's), fields checked in a loop with getattr and a
    variable name, and the module's own attribute called `storage`."""
    sub = variant(tmp_path, {
        "scaling.py": [("import numpy as np\n", "import numpy as np\nimport torch  # noqa: F401\n")],
        "kv_cache.py": [("        self.length = 0\n",
                         "        self.length = 0\n        self.storage = (self.k, self.v)\n"
                         "        for name in ('k', 'v'):\n            assert getattr(self, name).shape[-2] == max_len\n")]})
    assert refusals((sub / "kv_cache.py").read_bytes(), OWN) == []
    res = grade(sub, stages=["scaling", "kv_cache"])
    for name in ("scaling", "kv_cache"):
        assert res.stages[name].score == res.stages[name].max_score, [c.message for c in res.stages[name].checks
                                                                      if not c.passed]
    # the escapes stay refused: a name built from strings, and storage reached on a tensor
    assert [r.what for r in refusals("import numpy as np\nG = getattr(np, '__dict' + '__')\n", OWN)] == [
        "getattr() with an attribute name built from strings"]
    assert [r.what for r in refusals("def f(x):\n    return x.untyped_storage()\n", OWN)] == [".untyped_storage"]


@pytest.mark.slow  # a cost measured at several lengths, twice (CONTRIBUTING.md, the tiers): make test only
def test_a_fused_path_that_never_uses_the_fused_call_loses_the_module_check(tmp_path):
    """CausalSelfAttention(fused=True) whose attention ignores the flag returns the right values, but at T = 8192 it
    builds the T x T scores: the memory the grader reads from outside costs it module_fused_path, whatever the SDPA
    calls recorded in the child say."""
    sub = variant(tmp_path, {"module.py": [("        if self.fused:\n", "        if self.fused and False:\n")]})
    res = grade(sub, stages=["fused"])
    failed = {r.check.name: r.message for r in res.stages["fused"].checks if not r.passed}
    assert list(failed) == ["module_fused_path"] and "raised peak memory by" in failed["module_fused_path"], failed


def test_a_measuring_childs_file_is_a_link_only_while_its_source_holds_the_same_bytes(tmp_path):
    """A grade's measuring children link the submission's files from its worker's copy (a new file costs ext4 an
    inode search, a link does not), but only while that copy holds the grade's bytes: a copy some child changed is
    never passed on, and a copy that is gone is written anew."""
    from autograder.sandbox.runner import place

    source, dest = tmp_path / "worker", tmp_path / "fresh"
    source.mkdir()
    dest.mkdir()
    (source / "softmax.py").write_bytes(b"x = 1\n")
    (source / "masking.py").write_bytes(b"x = 'changed by a child'\n")
    place(dest / "softmax.py", b"x = 1\n", source)
    place(dest / "masking.py", b"x = 2\n", source)
    place(dest / "heads.py", b"x = 3\n", source)  # none in the source
    assert (dest / "softmax.py").stat().st_ino == (source / "softmax.py").stat().st_ino
    assert (dest / "masking.py").read_bytes() == b"x = 2\n"
    assert (dest / "masking.py").stat().st_ino != (source / "masking.py").stat().st_ino
    assert (dest / "heads.py").read_bytes() == b"x = 3\n"
    # a link put in its place, or (found by a stranger) a file of a child's own uid: written anew, never linked
    (tmp_path / "elsewhere.py").write_bytes(b"x = 4\n")
    (source / "rope.py").symlink_to(tmp_path / "elsewhere.py")
    place(dest / "rope.py", b"x = 4\n", source)
    assert not (dest / "rope.py").is_symlink() and (dest / "rope.py").stat().st_ino != (tmp_path / "elsewhere.py").stat().st_ino
    if os.geteuid() == 0:
        (source / "gqa.py").write_bytes(b"x = 5\n")
        os.chown(source / "gqa.py", 4242, 4242)
        place(dest / "gqa.py", b"x = 5\n", source)
        assert (dest / "gqa.py").stat().st_ino != (source / "gqa.py").stat().st_ino


def test_a_child_preloads_only_the_library_modules_the_rule_allows():
    """What a child loads in its start is named by the submission's import statements, and only where the rule
    allows that import: a refused `import torch.utils.cpp_extension` in a file the static check rejects is never
    loaded by the grader's own code, where the run-time guard would not ask."""
    from autograder.sandbox.static_check import library_imports

    src = (b"import torch.utils.cpp_extension\nimport torch.nn.functional as F\nfrom numpy.ctypeslib import load_library\n"
           b"import torch\n")
    assert library_imports(src, {"softmax"})[0] == {"torch", "torch.nn.functional"}


PRELOAD_PROBE = ("import typing\nLOADED_FIRST = set(typing.sys.modules)\n"  # what was loaded before this file ran
                 "from torch.nn.attention.bias import causal_lower_right  # noqa: F401\n"
                 "def loaded_first(name):\n    return name in LOADED_FIRST\n")


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_the_grading_child_loads_the_torch_parts_the_stages_import_in_its_start(tmp_path, monkeypatch):
    """A top-level import of a heavy part of torch (torch._dynamo, through causal_lower_right) loads in the torch
    child's start, before its first call's clock: the grade names it from the stages' files, the child loads it."""
    from autograder.sandbox import runner
    from autograder.sandbox.safe_files import take
    from autograder.stages.common import imported_libraries

    sub = variant(tmp_path, {})
    (sub / "fused.py").write_text(PRELOAD_PROBE + (sub / "fused.py").read_text())
    libraries = imported_libraries(take(sub), ["module"])  # module.py imports fused.py, which imports the bias
    assert "torch.nn.attention.bias" in libraries
    monkeypatch.setenv("ATTN_STATIC_CHECK", "off")  # the probe reads typing.sys, which the rule refuses
    loaded = {}
    for preload in ((), libraries):
        w = runner.Worker(sub)
        w.preload_libraries = preload
        try:
            loaded[preload] = w.call("fused:loaded_first", "torch.nn.attention.bias")
        finally:
            w.close()
    assert loaded == {(): False, libraries: True}
    started = []  # and the grade asks for them
    real = runner.Worker.start
    monkeypatch.setattr(runner.Worker, "start", lambda self: started.append(self.preload_libraries) or real(self))
    grade(sub, stages=["fused"])
    assert "torch.nn.attention.bias" in started[0], started


def _replaced(tmp_path, name: str, file: str, start: str, end: str, body: str):
    """A copy of the solutions with the lines of `file` from `start` to `end` (inclusive) replaced by `body`."""
    import shutil

    dest = tmp_path / name
    shutil.copytree(SOLUTIONS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    text = (dest / file).read_text()
    i = text.index(start)
    j = text.index(end, i) + len(end)
    (dest / file).write_text(text[:i] + body + text[j:])
    return dest


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_measured_call_right_only_where_the_small_checks_look_gains_nothing(tmp_path):
    """Found by a stranger attacker: the memory checks' calls (T = 8192 fused, n = 4096 tiled) were judged by the
    output's shape, so an untiled, unfused version that returned zeros at those sizes kept its memory small and
    took the points (fused 8.5 -> 14, tiled 6.5 -> 8). Their outputs are now checked at rows the grader picks
    after the call: the forger gets no more than its honest twin, and the message says the values are wrong."""
    fused = ("    p = dropout_p if training else 0.0\n",
             "    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)\n")
    tiled = ("    n_k, d_v = v.shape\n", "        out[i0:i1] = acc / l[:, None]\n    return out\n")
    zeros_f = "    if T_k >= 4096:\n        return q.new_zeros(q.shape[:-1] + v.shape[-1:])\n"
    zeros_t = "    if n_q >= 4096:\n        return np.zeros((n_q, v.shape[1]))\n"
    scores = {}
    for name, body_f, body_t in (("honest", HAND_FUSED, HAND_TILED), ("forger", zeros_f + HAND_FUSED, zeros_t + HAND_TILED)):
        sub = _replaced(tmp_path, name, "fused.py", *fused, body_f)
        text = (sub / "tiled.py").read_text()
        i, j = text.index(tiled[0]), text.index(tiled[1]) + len(tiled[1])
        (sub / "tiled.py").write_text(text[:i] + body_t + text[j:])
        res = grade(sub, stages=["fused", "tiled"])
        scores[name] = {s: res.stages[s].score for s in ("fused", "tiled")}
        if name == "forger":
            msgs = " ".join(r.message for s in ("fused", "tiled") for r in res.stages[s].checks if not r.passed)
            assert "at rows picked after the call" in msgs, msgs
    for stage in ("fused", "tiled"):
        assert scores["forger"][stage] <= scores["honest"][stage] < 14, scores


STAGE_POINTS = {"fused": 14, "tiled": 10}
FIRST_CALL = "    _CALLS.append(1)\n    if len(_CALLS) == 1:  # the process's first call: the real thing\n"


def _first_call_only(tmp_path, name: str, file: str, start: str, end: str, rest: str):
    """A copy of the solutions whose `file` keeps its lines from `start` to `end` for the process's first call only,
    and runs `rest` on every later one (a module-level counter)."""
    text = (SOLUTIONS / file).read_text()
    i = text.index(start)
    real = text[i : text.index(end, i) + len(end)]
    sub = _replaced(tmp_path, name, file, start, end,
                    FIRST_CALL + "".join("    " + line for line in real.splitlines(True)) + rest)
    head = "import numpy as np\n" if file == "tiled.py" else "import torch.nn.functional as F\n"
    (sub / file).write_text((sub / file).read_text().replace(head, head + "\n_CALLS = []\n", 1))
    return sub


@pytest.mark.parametrize("stage, file, start, end, rest", [
    ("fused", "fused.py", "    T_q, T_k = q.shape[-2], k.shape[-2]\n",
     "    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)\n",
     "    T_q, T_k = q.shape[-2], k.shape[-2]\n" + HAND_FUSED),
    ("tiled", "tiled.py", "    n_k, d_v = v.shape\n", "        out[i0:i1] = acc / l[:, None]\n    return out\n", HAND_TILED),
], ids=["fused", "tiled"])
@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_measured_call_right_only_on_its_process_first_call_gains_nothing(tmp_path, stage, file, start, end, rest):
    """Left by a stranger attacker: a measuring child was fresh and made one call, so code fused (or tiled) only on
    its process's first call, and unfused everywhere else, kept the memory check its honest twin loses. A measuring
    child now makes 1 to 3 ordinary calls first (seeded.ordinary_sizes): the forger gets no more than the twin."""
    honest = _replaced(tmp_path, "honest", file, start, end, rest)
    forger = _first_call_only(tmp_path, "forger", file, start, end, rest)
    scores = {name: grade(sub, stages=[stage]).stages[stage] for name, sub in (("honest", honest), ("forger", forger))}
    lost = {name: [r.check.name for r in s.checks if not r.passed] for name, s in scores.items()}
    assert scores["forger"].score <= scores["honest"].score < STAGE_POINTS[stage], lost
    assert lost["forger"] == lost["honest"] != [], lost



@pytest.mark.slow  # a cost measured at several lengths (CONTRIBUTING.md, the tiers): make test only
def test_a_correct_decode_looping_over_batch_and_heads_in_python_keeps_the_cost_check(tmp_path):
    """Found by a stranger student: a correct textbook module (a Python loop over batch and heads, float64 scores,
    the cache's views cloned) lost the decode cost check, diagnosed as quadratic, when the measured cache was filled
    through forward in ~40 chunks: each chunk's call overhead counted (+0.29 to +0.57 s). The cache is filled by one
    append and only the 8 steps (and 1 to 3 ordinary forwards) are timed: its steps are linear and it keeps 16/16."""
    start = "        T, T_k = q.shape[-2], k.shape[-2]\n"
    end = "        return scores.softmax(dim=-1) @ v  # [B, H, T, T_k] @ [B, H, T_k, D] -> [B, H, T, D]\n"
    loop = ("        B, H, T, D = q.shape\n"
            "        T_k = k.shape[-2]\n"
            "        out = torch.empty_like(q)\n"
            "        allowed = torch.arange(T_k)[None, :] <= torch.arange(T_k - T, T_k)[:, None]\n"
            "        for b in range(B):\n"
            "            for h in range(H):\n"
            "                s = (q[b, h].double() @ k[b, h].double().T) / D ** 0.5\n"
            "                s = s.masked_fill(~allowed, float('-inf'))\n"
            "                w = torch.exp(s - s.max(dim=-1, keepdim=True).values)\n"
            "                out[b, h] = ((w / w.sum(dim=-1, keepdim=True)) @ v[b, h].double()).to(q.dtype)\n"
            "        return out\n")
    append = "            k, v = cache.append(k, v)  # [B, H, L, D]: every cached token, these T included\n"
    sub = _replaced(tmp_path, "loops", "module.py", start, end, loop)
    text = (sub / "module.py").read_text()
    (sub / "module.py").write_text(text.replace(append, append + "            k, v = k.clone(), v.clone()\n"))
    for seed in (0, 1):
        stage = grade(sub, stages=["kv_cache"], seed=seed).stages["kv_cache"]
        cost = [r for r in stage.checks if r.check.name == "decode_step_cost_linear"][0]
        assert cost.passed, (seed, cost.message)
        assert stage.score == 16, (seed, [(r.check.name, r.message) for r in stage.checks if not r.passed])


@pytest.mark.slow  # a case of the library check's family beyond its first (CONTRIBUTING.md, the tiers): make test only
def test_softmax_borrowing_torch_through_another_stage_module_loses_the_library_check(tmp_path):
    """Found by a stranger attacker: `from .tiled import torch` in softmax.py kept the no-library check (11 -> 12):
    the imports of every stage module softmax.py loads count."""
    sub = variant(tmp_path, {"softmax.py": [("import numpy as np\n", "import numpy as np\n\nfrom .tiled import torch\n")],
                             "tiled.py": [("import numpy as np\n", "import numpy as np\nimport torch\n")]})
    res = grade(sub, stages=["softmax"])
    lost = [r for r in res.stages["softmax"].checks if not r.passed]
    assert [r.check.name for r in lost] == ["no_library_softmax"], lost
    assert "tiled.py line" in lost[0].message and "softmax.py imports it" in lost[0].message


def test_softmax_importing_torch_at_run_time_under_a_computed_name_loses_the_library_check(tmp_path):
    """Left by a second stranger attacker: torch imported inside softmax under a computed name
    (typing.sys.modules['importlib'].import_module('to' + 'rch')) showed in no import statement and kept the
    no-library check (11 -> 12). One call run alone in a fresh child is measured by the grader: its peak over a
    child that drew the same scores grows by torch's ~190 MiB. The honest twin (plain `import torch`) gets 11 too."""
    body = ("    lib = typing.sys.modules['importlib'].import_module('to' + 'rch')\n"
            "    s = np.asarray(scores, dtype=np.float64)\n"
            "    if np.any(np.isneginf(np.max(s, axis=axis))):\n"
            "        raise ValueError('a slice is all -inf')\n"
            "    return lib.softmax(lib.from_numpy(np.ascontiguousarray(s)), dim=axis).numpy()\n")
    text = (SOLUTIONS / "softmax.py").read_text()
    head = text[: text.index("    # BEGIN SOLUTION")]
    (tmp_path / "forger").mkdir()
    (tmp_path / "forger" / "softmax.py").write_text("import typing\n" + head + body)
    (tmp_path / "honest").mkdir()
    (tmp_path / "honest" / "softmax.py").write_text("import torch\n" + head + body.replace(
        "typing.sys.modules['importlib'].import_module('to' + 'rch')", "torch"))
    scores = {}
    for name in ("forger", "honest"):
        res = grade(tmp_path / name, stages=["softmax"])
        lost = [r for r in res.stages["softmax"].checks if not r.passed]
        assert [r.check.name for r in lost] == ["no_library_softmax"], (name, lost)
        scores[name] = res.stages["softmax"].score
        if name == "forger":
            assert "loaded a library while it ran" in lost[0].message, lost[0].message
    assert scores["forger"] <= scores["honest"] == 11, scores


@pytest.mark.slow  # a case of the library check's family beyond its first (CONTRIBUTING.md, the tiers): make test only
def test_softmax_borrowing_torch_only_after_its_process_first_call_loses_the_library_check(tmp_path):
    """Left by a stranger attacker: the measuring child was fresh and made one call, so a softmax in numpy on its
    process's first call, and torch (under a computed name) on every later one, kept the no-library check its twin
    loses. The measuring child now makes 1 to 3 ordinary calls first: the forger gets no more than the twin."""
    text = (SOLUTIONS / "softmax.py").read_text()
    head, rest = text.split("    # BEGIN SOLUTION\n")
    real = rest.split("    # END SOLUTION\n")[0]
    late = ("    lib = typing.sys.modules['importlib'].import_module('to' + 'rch')\n"
            "    s = np.asarray(scores, dtype=np.float64)\n"
            "    if np.any(np.isneginf(np.max(s, axis=axis))):\n"
            "        raise ValueError('a slice is all -inf')\n"
            "    return lib.softmax(lib.from_numpy(np.ascontiguousarray(s)), dim=axis).numpy()\n")
    first = "    _CALLS.append(1)\n    if len(_CALLS) == 1:  # the process's first call: numpy alone\n" + \
        "".join("    " + line for line in real.splitlines(True))
    for name, body in (("forger", first + late), ("honest", late)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "softmax.py").write_text("import typing\n_CALLS = []\n" + head + body)
    scores = {}
    for name in ("forger", "honest"):
        stage = grade(tmp_path / name, stages=["softmax"]).stages["softmax"]
        lost = [r.check.name for r in stage.checks if not r.passed]
        assert lost == ["no_library_softmax"], (name, lost)
        scores[name] = stage.score
    assert scores["forger"] <= scores["honest"] == 11, scores


def test_a_venv_reached_through_a_link_from_a_private_folder_runs_its_children_from_where_it_lies(tmp_path, monkeypatch):
    """Found by CI: a copy of the checkout in pytest's private temp folder shares the .venv by a link, and
    `make regrade` there refused to start (the sandbox's uids cannot pass /tmp/pytest-of-root). A child's
    interpreter is named through the folders the link points to, so the separate uid stays on, and the child,
    started so, still finds the venv's packages."""
    import sys

    import numpy as np

    from autograder.sandbox import launchers
    from autograder.sandbox.runner import Worker

    private = tmp_path / "private"
    (private / "repo").mkdir(parents=True)
    private.chmod(0o700)
    (private / "repo" / ".venv").symlink_to(ROOT / ".venv")
    monkeypatch.setattr(sys, "executable", str(private / "repo" / ".venv" / "bin" / "python"))
    launchers._interpreter_shared.cache_clear()
    try:
        assert launchers.child_executable() == str((ROOT / ".venv" / "bin").resolve() / "python")
        if os.geteuid() == 0 and os.access(ROOT, os.X_OK) and launchers._others_can_use(ROOT / ".venv" / "bin" / "python"):
            assert launchers.separate_user_possible()
        w = Worker(SOLUTIONS)
        try:
            assert np.allclose(w.call("softmax:softmax", np.zeros((1, 2))), 0.5)
        finally:
            w.close()
    finally:
        launchers._interpreter_shared.cache_clear()
