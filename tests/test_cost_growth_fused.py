"""The fused and tiled memory rules judged by growth over three lengths drawn from the grade's seed (stages/growth.py),
and an SDPA spy that changes nothing it watches (issue 41, items 1, 2 and 4): correct code grows near 2x per doubling
and keeps its points, T x T code near 4x and loses them, and code that switches to the fused or tiled path only from
some length on loses them at (almost) every seed, wherever the switch lies in the stated range."""
import pytest
from conftest import HAND_TILED, SOLUTIONS, grade

from autograder.api import StudentAPI
from autograder.child import seeded
from autograder.sandbox.launchers import ForkServer
from autograder.sandbox.runner import Worker
from autograder.stages import CATALOGUE, fused, growth, tiled

FUSED_START = "    T_q, T_k = q.shape[-2], k.shape[-2]\n"
HAND_FUSED = ("    T_q, T_k = q.shape[-2], k.shape[-2]\n"
              "    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5\n"
              "    if causal:\n"
              "        allowed = torch.ones(T_q, T_k, dtype=torch.bool).tril(T_k - T_q)\n"
              "        scores = scores.masked_fill(~allowed, float('-inf'))\n"
              "    return scores.softmax(-1) @ v\n")
LOWER_RIGHT = ("    from torch.nn.attention.bias import causal_lower_right\n\n"
               "    p = dropout_p if training else 0.0\n"
               "    mask = causal_lower_right(q.shape[-2], k.shape[-2]) if causal else None\n"
               "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)\n")
QUERY_CHUNKS = ("    T_q, T_k = q.shape[-2], k.shape[-2]\n"
                "    p = dropout_p if training else 0.0\n"
                "    if not causal:\n"
                "        return F.scaled_dot_product_attention(q, k, v, dropout_p=p)\n"
                "    outs = []\n"
                "    for s0 in range(0, T_q, 512):  # 512 queries at a time, each with its own bottom-right mask\n"
                "        qc = q[..., s0:s0 + 512, :]  # [B, H, c, d]\n"
                "        rows = torch.arange(s0, s0 + qc.shape[-2])[:, None] + (T_k - T_q)\n"
                "        allowed = torch.arange(T_k)[None, :] <= rows  # [c, T_k]\n"
                "        outs.append(F.scaled_dot_product_attention(qc, k, v, attn_mask=allowed, dropout_p=p))\n"
                "    return torch.cat(outs, dim=-2)  # [B, H, T_q, d]\n")
TILED_START, TILED_END = "    n_k, d_v = v.shape\n", "    return out\n"
FUSED_GATES = (1100, 2048, 3000, 4096, 6000, 8000)  # switches across seeded.FUSED_RANGE
TILED_GATES = (560, 1024, 2048, 3000, 4000)  # across seeded.TILED_RANGE


def _fused_body(body: str) -> str:
    src = (SOLUTIONS / "fused.py").read_text()
    i, j = src.index(FUSED_START), src.index("    # END SOLUTION")
    return src[:i] + body + src[j:]


def _tiled_body(body: str) -> str:
    src = (SOLUTIONS / "tiled.py").read_text()
    i = src.index(TILED_START)
    j = src.index(TILED_END, i) + len(TILED_END)
    return src[:i] + body + src[j:]


def _fused_gated(gate: int) -> str:
    """Hand-written T x T attention that calls SDPA only from `gate` tokens on."""
    return _fused_body(f"    if causal and q.shape[-2] == k.shape[-2] >= {gate}:\n"
                       "        return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n" + HAND_FUSED)


def _tiled_gated(gate: int) -> str:
    """The whole n x n matrix below `gate` rows, the tiled loop from there on."""
    src = (SOLUTIONS / "tiled.py").read_text()
    i = src.index(TILED_START)
    return src[:i] + f"    if n_q < {gate}:\n" + "".join("    " + line for line in HAND_TILED.splitlines(True)) + src[i:]


# Issue 41: cheap only at the measured calls' old constant shapes, which no correctness check used (both kept full
# points): the fused call's H = 1 and d_head = 32, the tiled call's blocks of 256. Elsewhere the hand-written T x T
# attention (right values, eval only) or the whole n x n scores, from the rules' ranges on (below them, the checks'
# small calls take the right path)
OLD_FUSED = "q.shape[1] == 1 and q.shape[-1] == 32"
OLD_TILED = "block_q == 256"


def _fused_unless(shape: str) -> str:
    """Hand-written T x T attention for causal calls of 1,024 tokens or more, unless `shape` holds."""
    src = (SOLUTIONS / "fused.py").read_text()
    i = src.index(FUSED_START)
    gate = f"    if causal and q.shape[-2] == k.shape[-2] >= 1024 and not (training and dropout_p) and not ({shape}):\n"
    return src[:i] + gate + "".join("    " + line for line in HAND_FUSED.splitlines(True)) + src[i:]


def _tiled_unless(shape: str) -> str:
    """The whole n x n scores for causal calls of 512 rows or more, unless `shape` holds; the tiled loop otherwise."""
    src = (SOLUTIONS / "tiled.py").read_text()
    i = src.index(TILED_START)
    return (src[:i] + f"    if causal and n_q == k.shape[0] >= 512 and not ({shape}):\n"
            + "".join("    " + line for line in HAND_TILED.splitlines(True)) + src[i:])


def _submission(tmp_path, name: str, files: dict):
    sub = tmp_path / name
    sub.mkdir()
    for f in SOLUTIONS.glob("*.py"):
        (sub / f.name).write_text(files.get(f.name, f.read_text()))
    return sub


class _Measurer:
    """The growth of one measured driver, as the stage judges it (growth.measure + growth.judge), for a submission."""

    def __init__(self, sub, torch: bool) -> None:
        self.server = ForkServer(torch=torch)
        self.worker = Worker(sub, zygote=self.server)
        self.api = StudentAPI(self.worker)

    def growth(self, name: str, sizes, rest: tuple, seed: int, own, label: str = "T", scores=None):
        runs = growth.measure(self.api, name, sizes, rest, seed)
        return growth.judge(self.api, name, sizes, rest, seed, runs, own, label, scores)

    def close(self) -> None:
        self.worker.close()
        self.server.close()


def _fused_growth(m: _Measurer, seed: int, module: bool = False):
    salt = fused.MODULE_SALT if module else 0
    name = "module_fused_memory_run" if module else "fused_memory_run"
    shape = seeded.fused_shape(seed, salt)
    return m.growth(name, seeded.growth_sizes(*seeded.FUSED_RANGE, seed, salt), shape, seed, fused._own_bytes(shape),
                    scores=fused.scores_bytes(shape))


def _tiled_growth(m: _Measurer, seed: int):
    block, d = seeded.tiled_shape(seed)
    return m.growth("tiled_memory_run", seeded.growth_sizes(tiled.LOW, tiled.HIGH, seed), (d, block), seed,
                    tiled.own_bytes(d), "n", tiled.scores_bytes)


def test_the_lengths_cover_the_range_and_a_correctness_check_shares_it():
    for seed in range(50):
        for low, high in (seeded.FUSED_RANGE, seeded.TILED_RANGE):
            a, b, c = seeded.growth_sizes(low, high, seed)
            assert low <= a < low * 17 // 16 and 2 * a <= b <= c // 2 and high * 3 // 4 <= c <= high
            assert low <= seeded.checked_size(low, 2 * low, seed) <= 2 * low
    assert len({seeded.growth_sizes(*seeded.FUSED_RANGE, s) for s in range(20)}) == 20  # no size to branch on


def test_growth_judges_a_law_not_a_size():
    """Linear memory (plus a constant) keeps the rule, quadratic memory and memory that falls break it."""
    sizes, own = (1024, 3000, 7000), tuple(4 * n * 32 * 4 for n in (1024, 3000, 7000))
    linear = growth.Growth(sizes, (2**20, 2**20, 2**20), own)
    assert linear.broken() is None and all(1.2 < g < 2.2 for g in linear.per_doubling())
    square = growth.Growth(sizes, tuple(3 * 4 * n * n for n in sizes), own)
    assert square.broken() == 0 and f"grew {square.per_doubling()[0]:.1f}x when T doubled" in growth.verdict(square)
    gated = growth.Growth(sizes, (3 * 4 * 1024**2, 0, 0), own)
    assert gated.broken() == 0 and "fell from" in growth.verdict(gated)


def test_a_call_that_uses_half_its_scores_at_the_longest_length_breaks_the_rule():
    """A constant reads as linear to the growth law, and memory held from earlier calls can be one (a stranger's
    ballast held the whole matrix at every length: 633, 635, 633 MiB at T = 1,051 .. 6,187). At the longest length a
    call may add less than half its n x n scores (growth.SCORES_SHARE): correct code adds a few MiB there, and the
    most a linear style has added is a strip of 256 query rows against every key (27.5 MiB at n = 3,441, 30 %)."""
    mib = 2**20
    sizes = (541, 1718, 3441)
    own = tuple(tiled.own_bytes(16)(n) for n in sizes)
    scores = tuple(tiled.scores_bytes(n) for n in sizes)
    ballast = growth.Growth(sizes, (509 * mib, 510 * mib, 509 * mib), own, scores)
    assert ballast.broken() is None and ballast.holds_scores() and ballast.decisive()
    said = growth.verdict(ballast, "n")
    assert "at n = 3,441 your call used 509.0 MiB" in said and "of the n x n scores" in said, said
    strip = growth.Growth(sizes, (int(6.2 * mib), int(13.4 * mib), int(27.5 * mib)), own, scores)
    assert not strip.holds_scores() and growth.verdict(strip, "n") is None
    half = growth.Growth(sizes, (scores[-1] // 2,) * 3, own, scores)  # the least room a matrix can be made in
    assert half.broken() is None and half.holds_scores() and not half.decisive()  # near the limit: measured again
    assert not growth.Growth(sizes, (scores[-1] // 2,) * 3, own).holds_scores()  # no scores told: not judged


def test_memory_a_call_lets_go_of_counts_as_the_calls():
    """per_call.Cost.memory_bytes: a call that lets go of memory held before it may have made its matrix in that room
    under the reset high-water mark, so its peak over its size at the end counts; a call that lets go of nothing is
    judged as before."""
    from autograder.sandbox.per_call import Cost

    mib = 2**20
    assert Cost(0, 0.1, 0, 640 * mib).memory_bytes == 640 * mib  # ballast let go of: peak 0 over the start
    assert Cost(5 * mib, 0.1, 0, 640 * mib).memory_bytes == 645 * mib
    assert Cost(5 * mib, 0.1, 0, 0).memory_bytes == 5 * mib
    # memory held before and touched (weights every step reads) adds to what the call made: a step's scores (8 MiB
    # of peak) are not hidden under 12 MiB of weights touched; pages it made and kept count once
    assert Cost(8 * mib, 0.1, 12 * mib, 0, 0).memory_bytes == 20 * mib
    assert Cost(3 * mib, 0.1, 12 * mib, 0, 3 * mib).memory_bytes == 12 * mib
    assert Cost(None, None).memory_bytes is None


def test_a_few_mib_of_allocator_noise_is_not_a_t_by_t_matrix():
    """Found by CI: the solutions' module (d = 32) added 1.0, 0.1 and 2.9 MiB at T = 1,059, 3,372 and 7,344 on a
    busy machine and lost the point (3.2x per doubling). What stays under growth.NOISE_BYTES is noise; a T x T
    matrix at the same lengths still breaks the rule, and so does one kept at the longer lengths only."""
    sizes = (1059, 3372, 7344)
    own = tuple(4 * n * 32 * 4 for n in sizes)
    noisy = growth.Growth(sizes, tuple(int(x * 2**20) for x in (1.0, 0.1, 2.9)), own)
    assert noisy.broken() is None, growth.verdict(noisy)
    assert growth.Growth(sizes, tuple(4 * n * n for n in sizes), own).broken() == 0
    assert growth.Growth(sizes, (0, 0, 4 * 7344**2), own).broken() == 1


def test_only_a_failure_within_reach_of_noise_is_measured_again():
    """A growth that breaks the rule is measured once more before it costs a point (judge), unless it breaks it by a
    margin no noise reaches (Growth.decisive: the catalogued T x T mistakes add 50 to 650 MiB at 3.5x and more):
    a just-broken law, or the CI machine's noise, is never decisive."""
    sizes = (1059, 3372, 7344)
    own = tuple(4 * n * 32 * 4 for n in sizes)
    assert growth.Growth(sizes, tuple(4 * n * n for n in sizes), own).decisive()
    assert growth.Growth(sizes, (0, 0, 4 * 7344**2), own).decisive()
    assert not growth.Growth(sizes, tuple(int(x * 2**20) for x in (1.0, 0.1, 2.9)), own).decisive()
    just = growth.Growth(sizes, (2**20, 12 * 2**20, 44 * 2**20), own)  # broken (2.9x), within reach of a re-measure
    assert just.broken() is not None and not just.decisive(), just.per_doubling()


def test_a_linear_addition_above_the_noise_floor_reads_linear():
    """Found by a stranger: additions of 6.2, 13.4 and 27.5 MiB at n = 516, 1,366, 3,456 (linear in n, a constant
    besides) read as 10x per doubling once 8 MiB of noise was taken off each. The floor now only decides whether a
    step counts; the ratios are the memory's own."""
    sizes = (516, 1366, 3456)
    g = growth.Growth(sizes, tuple(int(x * 2**20) for x in (6.2, 13.4, 27.5)), tuple(4 * n * 16 * 8 for n in sizes))
    assert g.broken() is None and max(g.per_doubling()) < 2.0, g.per_doubling()
    assert growth.Growth(sizes, tuple(8 * n * n for n in sizes), g.own).broken() == 0  # the n x n scores still do


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_a_probe_changes_no_peak_and_causal_lower_right_stays_lazy(tmp_path):
    """Found by a stranger: the spy compared a float mask with 0 and 1, which materialised a CausalBias as a T x T
    tensor (386 MiB watched, 4.5 MiB not). The spy now records types, shapes and dtypes only: a correct call's
    peak is the same watched or not, for is_causal and for torch's own causal_lower_right mask."""
    sub = _submission(tmp_path, "lower-right", {"fused.py": _fused_body(LOWER_RIGHT)})
    for folder in (SOLUTIONS, sub):
        m = _Measurer(folder, torch=True)
        try:
            peaks = {watched: m.worker.measure("driver:fused_memory_run", 4096, 1, 1, 32, timeout=120, loads=("torch",),
                                               seed=3, watched=watched)[1] for watched in (True, False)}
        finally:
            m.close()
        # A materialised 4096 x 4096 float32 mask would be 64 MiB; allocator noise is about 1 MiB (CI saw 1.02 MiB).
        assert abs(peaks[True] - peaks[False]) < 8 * 2**20, (folder.name, peaks)


MATERIALISED = [e for m in CATALOGUE.values() if m.id == "fused-materialized-mask" for e in m.mutant]
SPIKES = {"fused": ("import torch\n", "import torch\n\n_spike = torch.ones(400 * 2**20 // 4)  # at import\ndel _spike\n"),
          "tiled": ("import numpy as np\n", "import numpy as np\n\n_spike = np.ones(600 * 2**20 // 8)  # at import\n"
                                           "del _spike\n")}


@pytest.mark.slow  # two grades whose children touch 400-600 MiB each, at three lengths: make test only
@pytest.mark.parametrize("stage", ["fused", "tiled"])
def test_memory_spent_at_import_hides_no_quadratic_call(tmp_path, stage):
    """Found by a stranger attacker: a quadratic call (fused: the materialised mask; tiled: the whole n x n scores)
    whose module touched 400 to 600 MiB at import kept every memory point: the child's whole-life peak was the
    import's at every length (379, 379, 378 MiB: 'grew 1.0x'). The measured call is now bracketed on its own (the
    import and the ordinary calls run first, in a call of their own), so the spike is not the call's."""
    check = {"fused": "no_quadratic_memory", "tiled": "tiled_memory_linear"}[stage]
    if stage == "fused":
        src = (SOLUTIONS / "fused.py").read_text()
        for e in MATERIALISED:
            src = src.replace(e.old, e.new)
    else:
        src = _tiled_body(HAND_TILED)
    old, new = SPIKES[stage]
    files = {f"{stage}.py": src.replace(old, new, 1)}
    honest = grade(_submission(tmp_path, "honest", {f"{stage}.py": src}), stages=[stage], seed=4).stages[stage]
    spiked = grade(_submission(tmp_path, "spiked", files), stages=[stage], seed=4).stages[stage]
    lost = {r.check.name: r for r in spiked.checks}[check]
    assert not lost.passed, lost.note
    assert spiked.score <= honest.score, (spiked.score, honest.score)


# A T x T matrix written into a buffer the module filled at import (found by a second stranger attacker): the high-
# water mark cannot see memory held before the call; the pages the call touches can. {buffer} is the scratch buffer
# line; the honest twin allocates the same matrix per call.
SCRATCH = {
    "fused": ("import torch\nimport torch.nn.functional as F\n\n{buffer}\n\n"
              "def fused_attention(q, k, v, causal=True, dropout_p=0.0, training=False):\n"
              "    T_q, T_k = q.shape[-2], k.shape[-2]\n    p = dropout_p if training else 0.0\n"
              "    if not causal:\n        return F.scaled_dot_product_attention(q, k, v, dropout_p=p)\n"
              "    m = {take}(T_q, T_k)  # [T_q, T_k], filled in place: -inf above the bottom-right diagonal\n"
              "    m.fill_(float('-inf'))\n    m.triu_(T_k - T_q + 1)\n"
              "    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=p)\n",
              "_SCR = torch.ones(8192 * 8192)  # 256 MiB, touched at import",
              "_SCR[: T_q * T_k].view", "torch.empty"),
    "tiled": ("import numpy as np\n\n{buffer}\n\n"
              "def tiled_attention(q, k, v, causal=True, block_q=64, block_k=64):\n"
              "    n_q, n_k = q.shape[0], k.shape[0]\n"
              "    if causal and n_q > n_k:\n        raise ValueError('a query row has no allowed key')\n"
              "    s = {take}((n_q, n_k))  # every pair of scores\n    np.matmul(q, k.T, out=s)\n"
              "    s /= np.sqrt(q.shape[1])\n    out = np.empty((n_q, v.shape[1]))\n"
              "    for i0 in range(0, n_q, block_q):\n        i1 = min(i0 + block_q, n_q)\n"
              "        last = n_k - n_q + i1 - 1 if causal else n_k - 1\n        blk = s[i0:i1, : last + 1]\n"
              "        if causal:\n"
              "            blk[np.arange(last + 1)[None, :] > (n_k - n_q + np.arange(i0, i1))[:, None]] = -np.inf\n"
              "        blk -= blk.max(axis=1, keepdims=True)\n        np.exp(blk, out=blk)\n"
              "        blk /= blk.sum(axis=1, keepdims=True)\n        out[i0:i1] = blk @ v[: last + 1]\n"
              "    return out\n",
              "_SCR = np.ones(4200 * 4200)  # 135 MiB, touched at import",
              "_SCR[: n_q * n_k].reshape", "np.empty"),
}


@pytest.mark.slow  # two grades whose children hold 135-256 MiB each, at three lengths: make test only
@pytest.mark.parametrize("stage", ["fused", "tiled"])
def test_a_matrix_written_into_memory_held_since_import_is_still_the_calls(tmp_path, stage):
    """Quadratic work in a buffer filled at import kept the memory points (fused 14/14, tiled 10/10; honest twins
    8.5): the call raised no high-water mark. The pages a call touches are counted now, held ones included."""
    check = {"fused": "no_quadratic_memory", "tiled": "tiled_memory_linear"}[stage]
    text, buffer, scratch, honest = SCRATCH[stage]
    sources = {"trick": text.format(buffer=buffer, take=scratch), "honest": text.format(buffer="", take=honest)}
    scores = {}
    for name, src in sources.items():
        st = grade(_submission(tmp_path, name, {f"{stage}.py": src}), stages=[stage], seed=2).stages[stage]
        cost = {r.check.name: r for r in st.checks}[check]
        assert not cost.passed, (name, cost.note)
        scores[name] = st.score
    assert scores["trick"] <= scores["honest"], scores


# A stranger's ballast (issue 41): memory made by the ordinary calls (8 to 64 rows) and let go of by the measured call,
# whose n x n scores then fit in the room under the reset high-water mark (it kept 10/10 at every seed tried); with
# {again}, made again before the call returns, so that nothing is let go of by its end either.
BALLAST = ("import numpy as np\n\n_KEPT = []\n\n\n"
           "def tiled_attention(q, k, v, causal=True, block_q=64, block_k=64):\n"
           "    n_q, n_k = q.shape[0], k.shape[0]\n"
           "    if n_k <= 256:  # an ordinary call: the ballast, made once and touched\n"
           "        if not _KEPT:\n            _KEPT.extend(np.ones(2**21) for _ in range(10))  # 10 x 16 MiB\n"
           "    else:\n        _KEPT.clear()  # let go of: room for the scores under the reset mark\n"
           "    if causal and n_q > n_k:\n        raise ValueError('a query row has no allowed key')\n"
           "    s = q @ k.T / np.sqrt(q.shape[1])  # [n_q, n_k]: every pair\n"
           "    if causal:\n"
           "        s = np.where(np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + n_k - n_q, s, -np.inf)\n"
           "    w = np.exp(s - s.max(axis=1, keepdims=True))\n"
           "    out = (w / w.sum(axis=1, keepdims=True)) @ v\n"
           "{again}    return out\n")
AGAIN = ("    if n_k > 256:\n        del s, w\n"
         "        _KEPT.extend(np.ones(2**21) for _ in range(10))  # made again: nothing let go of by the end\n")


@pytest.mark.slow  # four measurements of 160 MiB children: make test only
@pytest.mark.parametrize("again", [False, True])
def test_scores_made_in_memory_let_go_of_by_the_call_are_still_the_calls(tmp_path, again):
    """The ballast let go of at the call's start hid the n x n scores from the reset high-water mark and read flat
    at every length; counted (what the call let go of, or the ballast made again and touched), it holds more than
    half the scores at the longest length, at every seed."""
    src = BALLAST.format(again=AGAIN if again else "")
    m = _Measurer(_submission(tmp_path, "ballast", {"tiled.py": src}), torch=False)
    try:
        for seed in (0, 9):
            g, why = _tiled_growth(m, seed)
            assert why is not None and "of the n x n scores" in why, (seed, why)
    finally:
        m.close()


# A stranger's attacks on how the measured calls were handed their inputs: the whole matrix unless the tensors lay on
# numpy's memory (which cannot be resized: torch.from_numpy), or unless earlier calls had been handed views of the
# same arrays (the ordinary calls were prefixes of the measured call's q, k, v). Every call gets inputs of its own.
ON_NUMPY = ("    try:  # torch's own memory can be resized, numpy's cannot\n"
            "        torch.empty(0, dtype=q.dtype).set_(q).resize_(q.numel() + 1)\n"
            "        by_hand = True\n    except RuntimeError:\n        by_hand = False\n"
            "    if by_hand:\n" + "".join("    " + line for line in HAND_FUSED.splitlines(True)))
SEEN_VIEWS = ("    _SEEN.update(id(a.base) for a in (q, k, v) if a.base is not None)\n"
              "    if id(q) not in _SEEN:  # arrays no earlier call had a view of: the whole matrix\n")


@pytest.mark.slow  # hand-written T x T attention at three lengths up to 8,192: make test only
def test_a_call_gated_on_how_its_inputs_were_made_loses(tmp_path):
    src = (SOLUTIONS / "fused.py").read_text()
    fused_src = src.replace(FUSED_START, FUSED_START + ON_NUMPY, 1)
    tiled_src = (SOLUTIONS / "tiled.py").read_text()
    i = tiled_src.index(TILED_START)
    tiled_src = tiled_src[:i] + SEEN_VIEWS + "".join("    " + line for line in HAND_TILED.splitlines(True)) + tiled_src[i:]
    tiled_src = tiled_src.replace("import numpy as np\n", "import numpy as np\n\n_SEEN: set = set()\n", 1)
    for kind, files in (("fused", {"fused.py": fused_src}), ("tiled", {"tiled.py": tiled_src})):
        m = _Measurer(_submission(tmp_path, kind, files), torch=kind == "fused")
        try:
            g, why = _fused_growth(m, 4) if kind == "fused" else _tiled_growth(m, 4)
            assert why is not None, (kind, g)
        finally:
            m.close()


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
def test_causal_lower_right_keeps_every_fused_point(tmp_path):
    sub = _submission(tmp_path, "lower-right", {"fused.py": _fused_body(LOWER_RIGHT)})
    st = grade(sub, stages=["fused"], seed=5).stages["fused"]
    assert st.score == st.max_score, [(r.check.name, r.message) for r in st.checks if not r.passed]


@pytest.mark.slow  # three seeds at three lengths: make test only
def test_a_fused_call_in_query_chunks_keeps_the_memory_rule(tmp_path):
    """512 queries at a time, each chunk with a [512, T] mask: linear in T by design. With glibc's mmap threshold
    left dynamic, the chunks' freed blocks stayed in the children's heap and the rule was lost at these seeds
    (3.1-3.3x per doubling; 8 of 10 seeds in bench/growth.py); the children's allocator is fixed now
    (sandbox/launchers.py, FIXED_ALLOCATOR)."""
    m = _Measurer(_submission(tmp_path, "chunks", {"fused.py": _fused_body(QUERY_CHUNKS)}), torch=True)
    try:
        for seed in (1, 8, 9):
            g, why = _fused_growth(m, seed)
            assert why is None, (seed, why)
    finally:
        m.close()


@pytest.mark.slow  # over ~8 s alone (CONTRIBUTING.md, the tiers): make test only
@pytest.mark.parametrize("seed", [0, 11])
def test_fused_growth_of_correct_quadratic_and_gated_code(tmp_path, seed):
    """Correct code keeps the rule, T x T code breaks it near 4x per doubling, and a switch to SDPA at a length
    inside the range breaks it (the shortest length is always below the switch)."""
    found = {}
    for name, text in (("correct", None), ("square", _fused_body(HAND_FUSED)), ("gate3000", _fused_gated(3000))):
        m = _Measurer(_submission(tmp_path, name, {"fused.py": text} if text else {}), torch=True)
        try:
            found[name] = _fused_growth(m, seed)
        finally:
            m.close()
    g, why = found["correct"]
    assert why is None and max(g.per_doubling()) < 2.6, growth.describe(g)
    g, why = found["square"]
    assert why and "raised peak memory by" in why and min(g.per_doubling()) > 3.0, growth.describe(g)
    assert found["gate3000"][1], growth.describe(found["gate3000"][0])


@pytest.mark.parametrize("seed", [0, pytest.param(11, marks=pytest.mark.slow)])  # another seed: make test
def test_tiled_growth_of_correct_untiled_and_gated_code(tmp_path, seed):
    found = {}
    for name, text in (("correct", None), ("square", _tiled_body(HAND_TILED)), ("gate2048", _tiled_gated(2048))):
        m = _Measurer(_submission(tmp_path, name, {"tiled.py": text} if text else {}), torch=False)
        try:
            found[name] = _tiled_growth(m, seed)
        finally:
            m.close()
    g, why = found["correct"]
    assert why is None, growth.describe(g, "n")
    g, why = found["square"]
    assert why and min(g.per_doubling()) > 3.0, growth.describe(g, "n")
    assert found["gate2048"][1], growth.describe(found["gate2048"][0], "n")


def _gate_sweep(tmp_path, kind: str, gate: int, seeds=range(20)) -> list:
    """The seeds at which a gated version keeps the rule (should be at most 1 of 20)."""
    text = _fused_gated(gate) if kind == "fused" else _tiled_gated(gate)
    m = _Measurer(_submission(tmp_path, f"{kind}{gate}", {f"{kind}.py": text}), torch=kind == "fused")
    kept = []
    try:
        for seed in seeds:
            g, why = _fused_growth(m, seed) if kind == "fused" else _tiled_growth(m, seed)
            if why is None:
                kept.append((seed, growth.describe(g)))
    finally:
        m.close()
    return kept


@pytest.mark.sweep  # `make sweep`: about an hour on 2 cores (CONTRIBUTING.md)
@pytest.mark.parametrize("kind, gate", [("fused", g) for g in FUSED_GATES] + [("tiled", g) for g in TILED_GATES])
def test_a_size_gate_anywhere_in_the_range_loses_at_19_of_20_seeds(tmp_path, kind, gate):
    kept = _gate_sweep(tmp_path, kind, gate)
    assert len(kept) <= 1, kept


@pytest.mark.sweep  # `make sweep`: about an hour on 2 cores (CONTRIBUTING.md)
def test_correct_code_keeps_the_rules_at_20_seeds(tmp_path):
    for kind, sub in (("fused", SOLUTIONS), ("tiled", SOLUTIONS)):
        m = _Measurer(sub, torch=kind == "fused")
        try:
            for seed in range(20):
                g, why = _fused_growth(m, seed) if kind == "fused" else _tiled_growth(m, seed)
                assert why is None, (kind, seed, why)
                if kind == "fused":
                    g, why = _fused_growth(m, seed, module=True)
                    assert why is None, (kind, "module", seed, why)
        finally:
            m.close()


@pytest.mark.slow  # hand-written T x T attention at three lengths up to 8,192, twice: make test only
def test_fused_code_cheap_only_at_the_old_shape_loses_the_memory_points(tmp_path):
    """Issue 41: hand-written T x T attention unless H == 1 and d_head == 32 kept 14/14; at the default seed the
    function's and the module's measured shapes are others (seeded.fused_shape), so both memory checks are lost and
    nothing else (the values are right on both paths)."""
    st = grade(_submission(tmp_path, "old-shape", {"fused.py": _fused_unless(OLD_FUSED)}), stages=["fused"],
               seed=0).stages["fused"]
    lost = {r.check.name: r for r in st.checks if not r.passed}
    assert set(lost) == {"no_quadratic_memory", "module_fused_path"}, {n: r.message for n, r in lost.items()}
    assert st.score == st.max_score - sum(r.check.points for r in lost.values())
    assert all(s[1:] != (1, 32) for s in (seeded.fused_shape(0), seeded.fused_shape(0, fused.MODULE_SALT)))


def test_tiled_code_cheap_only_at_the_old_block_loses_the_memory_point(tmp_path):
    """Issue 41: the whole n x n scores unless the blocks are 256 kept 10/10; at the default seed the measured
    block is another (seeded.tiled_shape), so the memory check is lost and nothing else."""
    st = grade(_submission(tmp_path, "old-block", {"tiled.py": _tiled_unless(OLD_TILED)}), stages=["tiled"],
               seed=0).stages["tiled"]
    lost = {r.check.name: r for r in st.checks if not r.passed}
    assert set(lost) == {"tiled_memory_linear"}, {n: r.message for n, r in lost.items()}
    assert st.score == st.max_score - lost["tiled_memory_linear"].check.points
    assert seeded.tiled_shape(0)[0] != 256


@pytest.mark.sweep  # `make sweep` (CONTRIBUTING.md)
@pytest.mark.parametrize("kind", ["fused", "module", "tiled"])
def test_code_cheap_at_one_drawn_shape_loses_wherever_another_is_drawn(tmp_path, kind):
    """Issue 41: code cheap only at one shape (the old constants) keeps a memory rule only at the seeds that draw
    that shape, and loses it at 16 of 20 or more."""
    stage = "tiled" if kind == "tiled" else "fused"
    text = _tiled_unless(OLD_TILED) if kind == "tiled" else _fused_unless(OLD_FUSED)
    m = _Measurer(_submission(tmp_path, kind, {f"{stage}.py": text}), torch=stage == "fused")
    kept, drawn = [], []
    try:
        for seed in range(20):
            if kind == "tiled":
                g, why = _tiled_growth(m, seed)
                old = seeded.tiled_shape(seed)[0] == 256
            else:
                g, why = _fused_growth(m, seed, module=kind == "module")
                old = seeded.fused_shape(seed, fused.MODULE_SALT if kind == "module" else 0)[1:] == (1, 32)
            kept += [seed] if why is None else []
            drawn += [seed] if old else []
    finally:
        m.close()
    assert set(kept) <= set(drawn) and len(kept) <= 4, (kept, drawn)


def fresh_children(monkeypatch) -> list:
    """The targets of the fresh children every Worker starts from now on, in order (cleared by the caller)."""
    children = []
    counted = Worker._in_fresh_child

    def counting(self, target, run, loads=()):
        children.append(target)
        return counted(self, target, run, loads)

    monkeypatch.setattr(Worker, "_in_fresh_child", counting)
    return children


def test_one_child_per_side_measures_what_a_child_per_length_did(tmp_path, monkeypatch):
    """Where one call is counted alone (Linux's /proc), each side's three lengths run in one child (growth.one_child:
    2 children where 6 were): the correct call's additions stay within a MiB of the per-length ones and keep the
    rule, and the T x T call breaks it either way (the per-length way is what a system without /proc still uses)."""
    children = fresh_children(monkeypatch)
    found = {}
    for name, text in (("correct", None), ("square", _fused_body(HAND_FUSED))):
        for one in (True, False):
            monkeypatch.setattr(growth, "one_child", lambda one=one: one)
            monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / f"cache-{name}-{one}"))  # no baseline kept yet
            m = _Measurer(_submission(tmp_path, f"{name}{one}", {"fused.py": text} if text else {}), torch=True)
            children.clear()
            try:
                found[name, one] = _fused_growth(m, 0)
            finally:
                m.close()
            assert len(children) == (2 if one else 6), children  # the square's failure is decisive: no re-measure
    (one, why_one), (per, why_per) = found["correct", True], found["correct", False]
    assert why_one is None and why_per is None, (growth.describe(one), growth.describe(per))
    assert all(abs(a - b) < 2**20 for a, b in zip(one.added, per.added)), (one.added, per.added)
    assert found["square", True][1] and found["square", False][1]


def test_a_baseline_counted_alone_is_kept_for_the_next_grade(tmp_path, monkeypatch):
    """The baseline's counts (the grader's own call, counted alone at each length) are kept between grades where no
    child can rewrite them (common._baseline_file): the next grade of the same rule runs the student's child only,
    with the same verdict; another seed is another key."""
    if not growth.one_child():
        pytest.skip("this system cannot count one call alone: every length has a child of its own, nothing is kept")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    children = fresh_children(monkeypatch)
    m = _Measurer(SOLUTIONS, torch=False)
    try:
        counts = []
        for seed in (0, 0, 1):
            children.clear()
            g, why = _tiled_growth(m, seed)
            assert why is None, growth.describe(g, "n")
            counts.append(len(children))
        assert counts == [2, 1, 2], counts
        assert len(list((tmp_path / "cache" / "attention-kit").glob("growth-*"))) == 6  # 3 lengths, 2 seeds
        # where a child could reach the user's cache (no namespaces, no user of its own), nothing is kept or read
        monkeypatch.setattr(growth.launchers, "contained", lambda: False)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "open"))
        counts.clear()
        for seed in (0, 0):
            children.clear()
            assert _tiled_growth(m, seed)[1] is None
            counts.append(len(children))
        assert counts == [2, 2] and not (tmp_path / "open").exists(), counts
    finally:
        m.close()
