"""A memory rule judged by growth: one call measured at three lengths drawn from the grade's seed, beside a baseline
(the grader's own code on the same inputs), each call counted alone by the grader from outside its child
(sandbox/per_call.py): one child per side makes every length's call, shortest first (one_child); where this
system cannot count one call alone, each length runs in a fresh child of its own and the kernel's whole-life
peaks, read when it reaps them, are compared. Whatever a child holds at every length (the interpreter, the
libraries, a buffer built once) cancels in the comparison; what the call adds at each length is compared with
the memory of its own tensors, which grows with T * d. A call that keeps no T x T matrix grows about 2x when T
doubles, one that keeps one about 4x, and one that changes its algorithm at some length shows the change."""
import functools
import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

from .. import messages as say
from ..child.policy import container_memory
from ..sandbox import launchers
from .common import _save_baseline, _saved_baseline, imported_libraries, worker_snapshot

MAX_GROWTH = 2.8  # per doubling of the length: 2x is linear (exponent 1), 4x quadratic (exponent 2)
MIN_GROWTH = 0.9  # below it the memory fell while the length grew: a T x T matrix at the shorter length only
# A step of growth that blames no more than this is the allocator's noise, not the call's law: found by CI, a correct
# module (d = 32, where its own tensors are 1 to 4 MiB) added 1.0, 0.1 and 2.9 MiB on a busy machine, which read as
# 3.2x per doubling. A T x T float32 matrix passes it from T = 1,449 on: at every length of the fused and tiled
# ranges but their shortest. It is a floor, never subtracted: a stranger's row-block tiled loop (256 query rows
# against every key: linear in n) added 6.2, 13.4, 27.5 MiB, which less 8 MiB each read as 10x per doubling.
NOISE_BYTES = 8 * 2**20
# A fall needs less: a correct call never holds more at a shorter length, and what one call adds, counted around it
# alone, stays within a few MiB of the grader's own (solutions: 0.0 to 1.4 MiB at the shortest length; a tiled loop
# whose file imports torch: 3.1 MiB there at every seed, by the allocator's small-size path); a matrix kept below a
# switch held 5.0 to 5.5 MiB (tiled, n = 541) and 7.6 MiB (fused, T = 1,034), under the rise's floor.
FALL_BYTES = 4 * 2**20
# A rise past both by this much is measured once only (judge): at least 3.5x per doubling (nearer 4x than the limit)
# and 32 MiB added at the longer length, four times the noise floor; correct calls add a few MiB either way
DECISIVE_GROWTH = 3.5
DECISIVE_BYTES = 4 * NOISE_BYTES
# At the longest length a call may add less than this share of the memory of its n x n scores. The growth law alone
# reads a constant as linear, and memory held from earlier calls can be a constant: a stranger's ballast (640 MiB made
# by the ordinary calls, let go of and refilled by the measured one) held the whole T x T matrix at every length and
# read flat. Counted (per_call.Cost.memory_bytes: touched or let go of), such a call uses at least half the scores
# at the longest length (it needs room for them there), while correct calls use a few MiB and the most a linear style
# has used is a quarter to a third (a strip of 256 query rows against every key, n from 3,072)
SCORES_SHARE = 0.5


@dataclass(frozen=True)
class Growth:
    """What one call's memory did over its lengths: `added` [bytes] over the baseline child at each length, and
    `own` [bytes], the memory of its tensors there (inputs and output, which grow with T * d)."""

    sizes: tuple[int, ...]
    added: tuple[int, ...]
    own: tuple[int, ...]
    scores: tuple[int, ...] = ()  # [bytes] of the n x n scores at each length, where the stage says (SCORES_SHARE)

    @property
    def memory(self) -> list[int]:
        """The call's memory at each length: its tensors and what it added over the grader's own code."""
        return [o + max(a, 0) for o, a in zip(self.own, self.added)]

    def per_doubling(self) -> list[float]:
        """Between each pair of neighbouring lengths, how many times the memory grew per doubling of the length."""
        m, n = self.memory, self.sizes
        return [2 ** (math.log(m[i + 1] / m[i]) / math.log(n[i + 1] / n[i])) for i in range(len(n) - 1)]

    def exponent(self) -> float:
        """The least-squares exponent p of memory ~ length^p over all lengths (1: linear, 2: quadratic)."""
        xs, ys = [math.log(n) for n in self.sizes], [math.log(m) for m in self.memory]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)

    def broken(self) -> int | None:
        """The first step (index into per_doubling) outside the linear law, or None when every step keeps it. A step
        counts only where the memory it blames is more than the floor: the addition at the longer length over
        NOISE_BYTES for a rise, at the shorter one over FALL_BYTES for a fall (a few MiB of allocator noise is no
        T x T matrix; a constant held at every length only lowers the ratios)."""
        for i, g in enumerate(self.per_doubling()):
            if (g > MAX_GROWTH and self.added[i + 1] > NOISE_BYTES) or (g < MIN_GROWTH and self.added[i] > FALL_BYTES):
                return i
        return None

    def holds_scores(self) -> bool:
        """Whether at the longest length the call added SCORES_SHARE or more of its n x n scores' memory."""
        return bool(self.scores) and self.added[-1] >= SCORES_SHARE * self.scores[-1]

    def decisive(self) -> bool:
        """Whether a step breaks the law by a margin no noise reaches (DECISIVE_GROWTH and DECISIVE_BYTES), or the
        longest length held all its scores' memory (twice SCORES_SHARE): measuring it again could not take the
        failure back."""
        return (any(g >= DECISIVE_GROWTH and self.added[i + 1] >= DECISIVE_BYTES for i, g in enumerate(self.per_doubling()))
                or (bool(self.scores) and self.added[-1] >= self.scores[-1]))

    def lower(self, again: "Growth") -> "Growth":
        """This one and a re-measurement combined: at each length the smaller addition (noise and load only add)."""
        return Growth(self.sizes, tuple(min(a, b) for a, b in zip(self.added, again.added)), self.own, self.scores)


def _a(name: str) -> str:
    return "an" if name[0] in "naeiou" else "a"


def mib(n: float) -> str:
    return f"{n / 2**20:.1f}"


def _figures(g: Growth, name: str) -> dict:
    """What the growth's sentences say: the lengths, what the call added, its memory, the steps, the exponent."""
    return {"name": name, "sizes": ", ".join(f"{n:,}" for n in g.sizes), "memory": ", ".join(mib(m) for m in g.memory),
            "added": ", ".join(mib(max(a, 0)) for a in g.added),
            "steps": say.GROWTH_THEN.join(f"{x:.1f}x" for x in g.per_doubling()), "exponent": g.exponent(),
            "noise": mib(NOISE_BYTES)}


def describe(g: Growth, name: str = "T") -> str:
    """The measured memories and the growth, in the student's words."""
    return say.GROWTH_DESCRIBED.format(**_figures(g, name))


def verdict(g: Growth, name: str = "T") -> str | None:
    """Why the growth breaks the rule, in words, or None when it keeps it."""
    i = g.broken()
    if i is None and not g.holds_scores():
        return None
    if i is None:
        why = say.GROWTH_HELD_SCORES.format(name=name, n=g.sizes[-1], added=mib(g.added[-1]), scores=mib(g.scores[-1]),
                                            share=g.added[-1] / g.scores[-1], limit=SCORES_SHARE)
    elif (step := g.per_doubling()[i]) > MAX_GROWTH:
        a, b = g.sizes[i], g.sizes[i + 1]
        why = say.GROWTH_TOO_FAST.format(step=step, name=name, a=a, b=b, article=_a(name))
    else:
        why = say.GROWTH_FELL.format(before=mib(g.memory[i]), name=name, a=g.sizes[i], after=mib(g.memory[i + 1]),
                                     b=g.sizes[i + 1], article=_a(name))
    return say.GROWTH_VERDICT.format(why=why, **_figures(g, name))


def _loads(api, reads: tuple) -> tuple:
    snap = worker_snapshot(api)
    return imported_libraries(snap, [f.removesuffix(".py") for f in reads]) if snap is not None else ()


def _calls(fn, n: int, rest: tuple, seed: int, baseline: bool) -> list:
    """The driver's start, then its measured call, bracketed from outside (sandbox.Worker.measure_calls)."""
    args = (n, *rest, True) if baseline else (n, *rest)
    return [(fn.target, args, {"seed": seed, "phase": "prepare"}, False),
            (fn.target, args, {"seed": seed, "phase": "call"}, True)]


def _key(name: str, n, seed: int, baseline: bool) -> str:
    return f"growth:{name}:{n}:{seed}:{'baseline' if baseline else 'student'}"


def _every_length(fn, sizes, rest: tuple, seed: int, baseline: bool) -> list:
    """Each length's start and measured call, shortest first, for one child: every measured call counted alone."""
    return [c for n in sizes for c in _calls(fn, n, rest, seed, baseline)]


def one_child() -> bool:
    """Whether each side's lengths are measured in one child: where this system counts one call alone (Linux's
    /proc: sandbox/per_call.py), what a call adds does not depend on the calls before it (its high-water mark is
    reset and its pages' referenced bits cleared just before it; allocations past 128 KiB go back to the system
    when freed: launchers.FIXED_ALLOCATOR), so one child per side does what one per length did, at a third of the
    children. Elsewhere the whole-life peak is all there is: a child per length."""
    return os.path.exists("/proc/self/clear_refs")


@functools.cache
def _counting_code() -> str:
    """A digest of the code that decides what a baseline's call counts (how it is run here and counted outside)."""
    here = Path(__file__).resolve().parent
    return hashlib.sha256((here / "growth.py").read_bytes() + (here.parent / "sandbox" / "per_call.py").read_bytes()
                          ).hexdigest()[:16]


def _kept_key(api, name: str, n: int, rest: tuple, seed: int, loads: tuple) -> tuple:
    """What a baseline call's count depends on: the call, its inputs, how its child starts (forked, from a server
    holding torch or numpy alone), the preloads, and the code that counts it (common._baseline_file adds the
    interpreter, torch and the drivers' code)."""
    launcher = api.worker.launcher
    return ("growth", name, n, tuple(rest), seed, tuple(loads), getattr(launcher, "forks", False),
            getattr(launcher, "torch", None), _counting_code())


def _kept(api, name: str, sizes, rest: tuple, seed: int, loads: tuple) -> list[int] | None:
    """The baseline's count at every length, kept from an earlier grade (the grader's own code on the same inputs
    counts the same: one torch child less per rule), or None. Kept only where no child can rewrite it
    (common._baseline_file) and only counts of one call alone (one_child)."""
    if not kept_here():
        return None
    found = [_saved_baseline(_kept_key(api, name, n, rest, seed, loads)) for n in sizes]
    return None if any(v is None for v in found) else found


def kept_here() -> bool:
    """Whether baselines are kept here: only where every child is contained (namespaces, or a user of its own), so
    none can reach the user's cache, whoever runs the grade (common._baseline_file also refuses root in plain view)."""
    return launchers.contained()


def start(api, name: str, sizes, rest: tuple, seed: int) -> None:
    """Start the student's and the baseline's children now (Worker.measure_calls_soon), beside the stage's other
    checks; measure() takes their results. Not in a memory-limited container (one at a time)."""
    from . import FUNCTIONS

    soon = getattr(api.worker, "measure_calls_soon", None)
    if soon is None or container_memory() is not None:
        return
    fn = FUNCTIONS[name]
    loads = _loads(api, fn.reads)
    for baseline in (False, True):
        if one_child() and baseline and _kept(api, name, sizes, rest, seed, loads) is not None:
            continue
        if one_child():
            soon(_key(name, tuple(sizes), seed, baseline), _every_length(fn, sizes, rest, seed, baseline), timeout=60,
                 loads=loads)
            continue
        for n in sizes:
            soon(_key(name, n, seed, baseline), _calls(fn, n, rest, seed, baseline), timeout=60, loads=loads)


def _one(api, fn, name: str, n: int, rest: tuple, seed: int, loads: tuple, baseline: bool) -> tuple:
    """(value, bytes, whole-life peak) of the measured call at length n, read around it from outside
    (sandbox/per_call.py): what it added to its child's peak (or let go of) and what it touched of the memory the
    child held before (per_call.Cost.memory_bytes); None where the system tells neither (then the child's whole-life peak, with
    what the submission's import and the ordinary calls held in it, is compared instead: macOS)."""
    results, whole, _ = api.worker.measure_calls(_calls(fn, n, rest, seed, baseline), timeout=60, loads=loads,
                                                 key=_key(name, n, seed, baseline))
    value, cost = results[-1]
    return value, None if cost is None else cost.memory_bytes, whole


def measure(api, name: str, sizes, rest: tuple, seed: int, baseline: bool = True) -> list[tuple]:
    """[(value, added peak bytes or None, the student's peak), ...] per length: the declared driver `name` called
    as (length, *rest) in a fresh child, on inputs drawn from `seed`, its measured call's peak over a fresh child's
    that ran it with baseline=True on the same inputs (baseline=False: the student's children only, the added
    bytes then None). Per call where this system counts it (the import of the submission, the module it built and
    the ordinary calls before are not the call's), else over each child's whole life, on both sides alike."""
    from . import FUNCTIONS

    fn = FUNCTIONS[name]
    loads = _loads(api, fn.reads)
    api.called.append(name)
    if one_child():
        found = _in_one_child(api, fn, name, sizes, rest, seed, loads, baseline)
        if found is not None:
            return found
    found = []
    for n in sizes:
        value, call, whole = _one(api, fn, name, n, rest, seed, loads, False)
        if not baseline:
            found.append((value, None, call if call is not None else whole))
            continue
        _, base_call, base_whole = _one(api, fn, name, n, rest, seed, loads, True)
        if call is not None and base_call is not None:
            found.append((value, call - base_call, call))
        else:
            found.append((value, None if whole is None or base_whole is None else whole - base_whole, whole))
    return found


def _in_one_child(api, fn, name: str, sizes, rest: tuple, seed: int, loads: tuple, baseline: bool) -> list | None:
    """measure()'s answer from one child per side (one_child), or None where a call was not counted alone after
    all (clear_refs refused): then a child per length decides, whole lives compared."""
    sides = {}
    kept = _kept(api, name, sizes, rest, seed, loads) if baseline else None
    for side in (False, True) if baseline and kept is None else (False,):
        results, _, _ = api.worker.measure_calls(_every_length(fn, sizes, rest, seed, side), timeout=60, loads=loads,
                                                 key=_key(name, tuple(sizes), seed, side))
        measured = results[1::2]  # each length's measured call, after its start
        if len(measured) != len(sizes) or any(cost is None or cost.memory_bytes is None for _, cost in measured):
            return None
        sides[side] = [(value, cost.memory_bytes) for value, cost in measured]
    student = sides[False]
    if not baseline:
        return [(value, None, used) for value, used in student]
    if kept is None:
        kept = [used for _, used in sides[True]]
        for n, used in zip(sizes, kept) if kept_here() else ():
            _save_baseline(_kept_key(api, name, n, rest, seed, loads), used)
    return [(value, used - base, used) for (value, used), base in zip(student, kept)]


def judge(api, name: str, sizes, rest: tuple, seed: int, runs: list, own, label: str = "T", scores=None) -> tuple:
    """The growth of `runs` (measure()'s, at `sizes`) and why it breaks the rule: (Growth or None where this system
    does not count peaks, the reason or None). `own(n)` is the bytes of the call's tensors at length n, `scores(n)`
    those of its n x n scores (SCORES_SHARE; None: not judged). A growth
    that breaks the rule is measured once more (the student's children; the baselines are the grader's own code)
    and judged on the smaller addition at each length, so a moment's noise takes no point (unless it breaks it by a
    margin no noise reaches: Growth.decisive)."""
    if any(r[1] is None for r in runs):
        return None, None
    g = Growth(tuple(sizes), tuple(r[1] for r in runs), tuple(own(n) for n in sizes),
               tuple(scores(n) for n in sizes) if scores is not None else ())
    if (g.broken() is not None or g.holds_scores()) and not g.decisive():
        again = measure(api, name, sizes, rest, seed, baseline=False)
        g = g.lower(Growth(g.sizes, tuple(a + (r[2] - p[2]) for a, r, p in zip(g.added, again, runs)), g.own))
    return g, verdict(g, label)
