"""The verdict rules (autograder/grade/verdict.py) on records made by hand: no grade runs, no child starts."""
from conftest import SOLUTIONS

from autograder.grade.verdict import decide_status, origin_of, root_of
from autograder.results import NIE, CheckResult, CheckStatus, Failure, StageResult, StageStatus
from autograder.sandbox.safe_files import take
from autograder.stages import BY_NAME, CATALOGUE, STAGES

FIRST, SECOND, THIRD = (s.name for s in STAGES[:3])


def results(stage: str, **kw) -> list[CheckResult]:
    """Every check of `stage` passing, or failing alike when `kw` (CheckResult's fields) is given."""
    status = CheckStatus.FAILED if kw else CheckStatus.PASSED
    return [CheckResult(c, status, **kw) for c in BY_NAME[stage].checks]


def decided(stage: str, checks: list[CheckResult], done: dict | None = None) -> StageResult:
    sr = StageResult(stage, checks)
    decide_status(sr, done or {}, take(SOLUTIONS))
    return sr


def nie(stage: str) -> dict:
    return {"type": NIE, "message": f"{stage}: write this", "file": BY_NAME[stage].files[0], "line": 3}


def test_every_check_passing_is_passed_and_a_fault_of_the_kits_own_check_costs_nothing():
    assert decided(FIRST, results(FIRST)).status == StageStatus.PASSED
    checks = results(FIRST)
    checks[0] = CheckResult(checks[0].check, CheckStatus.NOT_RUN, "the kit's bug", Failure.GRADER)
    sr = decided(FIRST, checks)
    assert sr.status == StageStatus.PASSED and sr.score == sr.max_score


def test_a_stub_is_not_started_and_a_missing_file_too():
    assert decided(FIRST, results(FIRST, failure=Failure.RAISED, error=nie(FIRST), origin=FIRST)).status \
        == StageStatus.NOT_STARTED
    assert decided(FIRST, [CheckResult(c, CheckStatus.NOT_RUN, "missing", Failure.MISSING)
                           for c in BY_NAME[FIRST].checks]).status == StageStatus.NOT_STARTED


def test_raised_in_an_earlier_unfinished_stage_is_blocked_by_it_and_the_chain_leads_to_its_root():
    done = {FIRST: decided(FIRST, results(FIRST, failure=Failure.WRONG))}
    assert done[FIRST].status == StageStatus.FAILED
    error = {"type": "ValueError", "message": "bad", "file": BY_NAME[FIRST].files[0], "line": 9}
    assert origin_of(error, SECOND) == FIRST
    done[SECOND] = decided(SECOND, results(SECOND, failure=Failure.RAISED, error=error, origin=FIRST), done)
    assert (done[SECOND].status, done[SECOND].blocked_by) == (StageStatus.BLOCKED, FIRST)
    # the same error with the earlier stage passing: handed good values, the stage's own failure
    passed = {FIRST: decided(FIRST, results(FIRST))}
    assert decided(SECOND, results(SECOND, failure=Failure.RAISED, error=error, origin=FIRST), passed).status \
        == StageStatus.FAILED
    done[THIRD] = StageResult(THIRD, results(THIRD, failure=Failure.WRONG), StageStatus.BLOCKED, SECOND)
    assert root_of(THIRD, done) == FIRST
    assert root_of(THIRD, done, reached={THIRD, SECOND}) == SECOND  # the failing code never reached the first


def test_evidence_naming_an_earlier_stages_mistake_blocks_on_that_stage():
    earlier = next(m for m in CATALOGUE.values() if m.stage == FIRST)
    later = next(s.name for s in STAGES if FIRST in s.calls and any(m.stage == s.name for m in CATALOGUE.values()))
    done = {FIRST: decided(FIRST, results(FIRST, failure=Failure.WRONG))}
    sr = decided(later, results(later, failure=Failure.WRONG, diagnosis=earlier.id), done)
    assert (sr.status, sr.blocked_by) == (StageStatus.BLOCKED, FIRST)
    # its own stage's mistake: failed on its own, whatever else is unfinished
    own = next(m for m in CATALOGUE.values() if m.stage == later)
    assert decided(later, results(later, failure=Failure.WRONG, diagnosis=own.id), done).status == StageStatus.FAILED
