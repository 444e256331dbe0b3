"""Gradescope entry point (run by the zip's run_autograder): grade $AUTOGRADER_ROOT/submission,
write $AUTOGRADER_ROOT/results/results.json. Only this process writes results, after every child
process the submission started has been ended.

Whatever happens to the grader itself (an import that fails, a broken install, a bug), results.json is
still written: score 0 and a message saying that the grader failed, not the student. This module imports
only the standard library before that guard is in place.
"""
import hashlib
import json
import os
import sys
import traceback
from pathlib import Path

# What students read when the grader itself breaks; run_autograder writes the same if Python cannot start.
GRADER_FAILED = ("**The autograder itself failed** while grading this submission: this is not a problem with "
                 "your code, and the score of 0 is not your grade. Please tell the course staff: send them the "
                 "assignment's name, the time you submitted and this message{detail}. You may resubmit later.")


def derive_seed(secret: str, submission: Path) -> int:
    """Hidden-check seed from the course secret and the submission's files: reproducible per
    submission, unknowable without the secret."""
    from ..sandbox.safe_files import UnusableFile, read_bytes
    from ..submission import STAGE_FILES

    h = hashlib.sha256(secret.encode())
    for name in STAGE_FILES:
        path = submission / name
        try:
            data = read_bytes(path)
        except UnusableFile as e:
            data = f"<{e}>".encode()
        h.update(name.encode() + b"\0" + data + b"\0")
    return int.from_bytes(h.digest()[:4], "big") & 0x7FFFFFFF


def lock_down(*paths: Path) -> None:
    """Root-only folders (the grader's source, the results) so a sandboxed child cannot read them."""
    if os.geteuid() == 0:
        for p in paths:
            p.chmod(0o700)


def write(out: Path, data: dict) -> None:
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(out)


def read_setting(source: Path, name: str, default: str) -> str:
    """A build setting the zip carries as a file (course_secret, hidden_visibility)."""
    path = source / name
    return path.read_text().strip() if path.is_file() else default


def grade_upload(root: Path) -> dict:
    """The results of grading root/submission: the grader's imports happen here, inside main's guard."""
    from ..feedback.advice import handed_in
    from ..grade import grade
    from ..report.gradescope_json import DEFAULT_BONUS_POLICY, DEFAULT_HIDDEN_VISIBILITY, results_json
    from ..sandbox.runner import close_launchers, prestart
    from ..submission import STAGE_FILES, survey

    source = root / "source"
    try:
        found = survey(root / "submission", as_uploaded=True)
    except (FileNotFoundError, ValueError) as e:
        return message_only(f"Could not read the submission: {e}")
    if not any((found.folder / f).is_file() for f in STAGE_FILES):
        names = ", ".join(STAGE_FILES)
        return message_only(f"No stage modules found. Upload {names} (at the top level, in an exercises/ "
                            "folder, or as the submission.zip that `make submit` writes).")
    # as `make grade` does: the torch side is a fork server that imports torch once, so the grading child and
    # every measuring child are forks of it, not new interpreters each importing torch again
    workers = prestart(found.folder.resolve(), ["torch", "numpy"], 10.0)
    try:
        res = grade(found.folder, seed=derive_seed(read_setting(source, "course_secret", ""), found.folder),
                    workers=workers)
    finally:
        close_launchers(workers)
    res.next_step = handed_in(res.next_step)  # the page goes back to a student whose work is handed in
    visibility = read_setting(source, "hidden_visibility", DEFAULT_HIDDEN_VISIBILITY)
    bonus = read_setting(source, "bonus_policy", DEFAULT_BONUS_POLICY)
    return results_json(res, visibility, found.notes, bonus)  # every child has been ended when grade returns


def message_only(output: str) -> dict:
    """results.json with no tests: score 0 and one Markdown message."""
    return {"score": 0, "output": output, "output_format": "md", "stdout_visibility": "hidden", "tests": []}


def failed_results(detail: str) -> dict:
    """results.json for a grader that broke (`detail` says how): score 0 and what to tell the staff."""
    return {**message_only(GRADER_FAILED.format(detail=detail)), "extra_data": {"grader_failed": True}}


def failed(exc: BaseException) -> dict:
    """failed_results for an exception; its traceback goes to the log, which only the staff see."""
    traceback.print_exception(exc, file=sys.stdout)
    return failed_results(f" (grader error: {type(exc).__name__}: {str(exc)[:200]})")


def main() -> int:
    root = Path(os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    results = root / "results"
    results.mkdir(parents=True, exist_ok=True)
    out = results / "results.json"
    try:
        lock_down(root / "source", results)
        data = grade_upload(root)
    except BaseException as e:  # noqa: BLE001 - the grader's own failure: students must still get a result
        data = failed(e)
    write(out, data)
    print(f"score {data['score']:g}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
