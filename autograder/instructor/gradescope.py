"""Gradescope entry point (run by the zip's run_autograder): grade $AUTOGRADER_ROOT/submission,
write $AUTOGRADER_ROOT/results/results.json. Only this process writes results, after every child
process the submission started has been ended.
"""
import hashlib
import json
import os
import sys
from pathlib import Path

from ..grade import grade
from ..report.gradescope_json import results_json
from ..safe_files import UnusableFile, read_bytes
from ..submission import STAGE_FILES, locate


def derive_seed(secret: str, submission: Path) -> int:
    """Hidden-check seed from the course secret and the submission's files: reproducible per
    submission, unknowable without the secret."""
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


def main() -> int:
    root = Path(os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    source, results = root / "source", root / "results"
    results.mkdir(parents=True, exist_ok=True)
    lock_down(source, results)
    secret = (source / "course_secret").read_text().strip() if (source / "course_secret").is_file() else ""
    out = results / "results.json"
    try:
        sub = locate(root / "submission")
    except (FileNotFoundError, ValueError) as e:
        out.write_text(json.dumps({"score": 0, "output": f"Could not read the submission: {e}", "tests": []}))
        return 0
    if not any((sub / f).is_file() for f in STAGE_FILES):
        names = ", ".join(STAGE_FILES)
        out.write_text(json.dumps({"score": 0, "tests": [], "output":
                                   f"No stage modules found. Upload {names} (at the top level, in an exercises/ "
                                   "folder, or as the submission.zip that `make submit` writes)."}))
        return 0
    res = grade(sub, seed=derive_seed(secret, sub))  # every child has been ended when this returns
    data = results_json(res)
    data["output"] = f"Graded with hidden-check seed {res.seed}. " + data["output"]
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(out)
    print(f"score {res.score:g}/{res.max_score:g}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
