"""GitHub Classroom's results: per stage, the runner result that classroom-resources/autograding-grading-reporter
reads from a step's `result` output (base64 JSON, the format autograding-command-grader writes), with one
test per check worth that check's points, so a stage earns the partial credit `make grade` gives it.

The release's workflow grades once (`--classroom FILE` writes every stage's result), then one step per
stage reports its own (`python -m autograder classroom-step STAGE FILE`): the reporter adds the tests'
scores of every runner and their max_score, as it does for the command grader's.
"""
import base64
import json
import os
from pathlib import Path

from ..results import Results, StageStatus
from ..stages import STAGES

CLASSROOM_TOTAL = 100  # GitHub Classroom shows points out of the max-scores; the core stages' share of 100


def classroom_points(points: dict[str, float] | None = None, total: int = CLASSROOM_TOTAL) -> dict[str, int]:
    """Stage points (default: the core stages') scaled to whole numbers summing to `total`; the largest
    remainders round up."""
    points = points or {s.name: s.points for s in STAGES if not s.bonus}
    exact = {n: x * total / sum(points.values()) for n, x in points.items()}
    whole = {n: int(x) for n, x in exact.items()}
    for n in sorted(exact, key=lambda n: whole[n] - exact[n])[:total - sum(whole.values())]:
        whole[n] += 1
    return whole


def stage_max_scores(bonus_folded: bool = False) -> dict[str, float]:
    """Each reported stage's max_score: the core stages' share of 100; with the bonus folded in, the bonus
    stages' own points too (apart, the bonus stages are not reported: Classroom has one total)."""
    out: dict[str, float] = dict(classroom_points())
    if bonus_folded:
        out.update({s.name: float(s.points) for s in STAGES if s.bonus})
    return out


def runner_result(res: Results, stage: str, max_score: float) -> dict:
    """One stage as the reporter reads a runner: its checks as tests, each scaled to the stage's max_score."""
    sr = res.stages.get(stage)
    if sr is None or not sr.max_score:
        return {"version": 1, "status": "error", "max_score": max_score,
                "tests": [{"name": stage, "status": "error", "score": 0, "message": "not graded",
                           "test_code": "", "filename": "", "line_no": 0, "execution_time": ""}]}
    scale = max_score / sr.max_score
    tests = [{"name": f"{stage}: {r.check.name}", "status": "pass" if r.passed or r.forgiven else "fail",
              "score": round(r.check.points * scale, 4) if r.passed or r.forgiven else 0,
              "message": "" if r.passed else (r.message.splitlines() or [""])[0][:300],
              "test_code": "", "filename": "", "line_no": 0, "execution_time": ""} for r in sr.checks]
    return {"version": 1, "status": "pass" if sr.status == StageStatus.PASSED else "fail",
            "max_score": max_score, "tests": tests}


def results_for(res: Results, bonus_folded: bool = False) -> dict[str, dict]:
    return {n: runner_result(res, n, m) for n, m in stage_max_scores(bonus_folded).items()}


def as_text(res: Results) -> str:
    """Every stage's runner result (the bonus stages' too: the step list decides which count)."""
    return json.dumps(results_for(res, bonus_folded=True), indent=1) + "\n"


def encoded(result: dict) -> str:
    return base64.b64encode(json.dumps(result).encode()).decode()


def step(stage: str, results_file: Path) -> int:
    """A workflow step: print the stage's points and failing checks, and set the step's `result` output
    (GITHUB_OUTPUT) for the reporter. A missing file (the grading step could not run) reports 0 points."""
    try:
        result = json.loads(Path(results_file).read_text())[stage]
    except (OSError, ValueError, KeyError) as e:
        result = {"version": 1, "status": "error", "max_score": stage_max_scores(True).get(stage, 0),
                  "tests": [{"name": stage, "status": "error", "score": 0, "message": f"no results: {e}",
                             "test_code": "", "filename": "", "line_no": 0, "execution_time": ""}]}
    earned = sum(t["score"] for t in result["tests"])
    print(f"{stage}: {earned:g}/{result['max_score']:g} ({result['status']})")
    for t in result["tests"]:
        if t["status"] != "pass":
            print(f"  {t['name']}: {t['message']}")
    out = os.environ.get("GITHUB_OUTPUT")
    if out:
        with open(out, "a") as f:
            f.write(f"result={encoded(result)}\n")
    return 0
