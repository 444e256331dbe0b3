"""Gradescope's results.json: one test per check, stage summaries in extra_data."""
import json
from pathlib import Path

from ..advice import next_step
from ..grade import Results
from ..stages import STAGE


def results_json(res: Results) -> dict:
    tests = []
    for sr in res.stages.values():
        for r in sr.checks:
            c = r.check
            output = ("passed" + (f". {r.note}" if r.note else "")) if r.passed else f"{c.doc}\n{r.message}"
            if sr.status == "blocked" and not r.passed:
                output = f"blocked by {sr.blocked_by}: {output}"
            tests.append({
                "name": f"{STAGE[c.stage].number}. {c.stage}: {c.name}",
                "score": c.points if r.passed else 0.0,
                "max_score": c.points,
                "status": "passed" if r.passed else "failed",
                "output": output + (f"\nSee {c.cite}." if c.cite and not r.passed else ""),
                "visibility": "visible" if c.visibility == "public" else "after_published",
                "extra_data": {"stage": c.stage, "check": c.name, "kind": c.kind, "visibility": c.visibility,
                               "diagnosis": r.diagnosis, "worked_id": c.worked_id},
            })
    return {
        "score": res.score,  # the core points; the bonus is reported apart
        "execution_time": round(res.seconds, 3),
        "output": f"{res.score:g}/{res.max_score:g}. Next step: {next_step(res)}",
        "tests": tests,
        "extra_data": {
            "seed": res.seed,
            "bonus": {"score": res.bonus_score, "max_score": res.bonus_max_score},
            "stages": {n: {"score": s.score, "max_score": s.max_score, "status": s.status,
                           "blocked_by": s.blocked_by} for n, s in res.stages.items()},
        },
    }


def write_json(res: Results, path: Path) -> None:
    Path(path).write_text(json.dumps(results_json(res), indent=2) + "\n")
