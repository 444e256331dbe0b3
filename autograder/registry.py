"""The stages, their points, and the checks that grade them."""
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Stage:
    name: str
    number: int
    points: int
    files: tuple[str, ...]  # the submission modules this stage is written in
    calls: tuple[str, ...]  # earlier stages whose functions it uses
    torch: bool  # needs torch (runs in the torch child)
    bonus: bool = False


STAGES: list[Stage] = [
    Stage("softmax", 1, 12, ("softmax.py",), (), False),
    Stage("dot_products", 2, 8, ("scores.py",), ("softmax",), False),
    Stage("projections", 3, 8, ("projections.py",), (), False),
    Stage("scaling", 4, 10, ("scaling.py",), (), False),
    Stage("masking", 5, 16, ("masking.py",), ("softmax", "scaling"), False),
    Stage("heads", 6, 16, ("heads.py", "module.py"), ("projections", "masking"), True),
    Stage("kv_cache", 7, 16, ("kv_cache.py",), ("heads",), True),
    Stage("fused", 8, 14, ("fused.py",), ("heads",), True),
    # bonus stages: graded apart from the 100 core points
    Stage("tiled", 9, 10, ("tiled.py",), (), False, bonus=True),
    Stage("backward", 10, 10, ("backward.py",), (), False, bonus=True),
    Stage("dropout", 11, 5, ("dropout.py",), (), False, bonus=True),
    Stage("costs", 12, 5, ("costs.py",), ("kv_cache",), True, bonus=True),
]
STAGE = {s.name: s for s in STAGES}
CORE_POINTS = sum(s.points for s in STAGES if not s.bonus)
BONUS_POINTS = sum(s.points for s in STAGES if s.bonus)


def stage_of_file(filename: str | None) -> str | None:
    """Which stage a submission file belongs to (module.py counts as heads)."""
    for s in STAGES:
        if filename in s.files:
            return s.name
    return None


@dataclass
class Check:
    stage: str
    name: str
    points: float
    kind: str  # worked | reference | property
    visibility: str  # public | hidden (hidden needs attn_ref)
    fn: Callable
    doc: str = ""
    cite: str = ""
    worked_id: str | None = None

    @property
    def id(self) -> str:
        return f"{self.stage}/{self.name}"


CHECKS: list[Check] = []


def check(stage: str, points: float, kind: str, visibility: str = "hidden", cite: str = ""):
    """Register `fn(api, ctx)` as a check: it raises compare.Fail (or lets a student error through) to fail."""
    assert stage in STAGE, stage
    assert kind in ("worked", "reference", "property"), kind

    def deco(fn: Callable) -> Callable:
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else fn.__name__
        CHECKS.append(Check(stage, fn.__name__, points, kind, visibility, fn, doc, cite))
        return fn

    return deco
