"""python -m autograder {grade,watch,hint,worked,submit,capstone,regrade,class-report}: the kit's commands (`make help`)."""
import argparse
import json
import os
import sys
from pathlib import Path

from . import messages as say

ROOT = Path(__file__).resolve().parent.parent
WINDOWS = say.CLI_WINDOWS


def use_color() -> bool:
    """Colour on a terminal, plain text when piped or when NO_COLOR is set (no-color.org)."""
    import os

    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _grade(args) -> int:
    from .sandbox.runner import close_launchers, prestart

    named = ",".join(args.stage or [])  # `--stage a,b` and `--stage a --stage b` alike
    stages = [s.strip() for s in named.split(",") if s.strip()] or None
    # The children load numpy (and torch) while this process imports the stages and their checks. The
    # usual folder holds the stage modules itself: start them there now, before locate() imports the stages.
    path = Path(args.submission)
    guess = path.resolve() if path.is_dir() and any(path.glob("*.py")) else None
    if stages is None:  # every stage: both sides, known without importing the stages (that is what overlaps)
        kinds = ["torch", "numpy"]
    else:
        from .stages import child_kinds

        kinds = child_kinds(stages)
    workers = prestart(guess, kinds, args.timeout) if guess else {}
    from .submission import survey

    try:
        found = survey(path)
        sub = found.folder.resolve()
    except (FileNotFoundError, ValueError) as e:
        close_launchers(workers)
        print(say.CLI_ERROR.format(error=e), file=sys.stderr)
        return 2
    if sub != guess:
        close_launchers(workers)
        workers = prestart(sub, kinds, args.timeout)
    from .grade import grade
    from .report import RENDERERS
    from .report.terminal import terminal
    from .stages import BY_NAME

    required = [s.strip() for s in (args.require_pass or "").split(",") if s.strip()]
    unknown = [s for s in [*(stages or []), *required] if s not in BY_NAME]
    if unknown:
        close_launchers(workers)
        print(say.CLI_UNKNOWN_STAGE.format(stages=", ".join(unknown), known=", ".join(BY_NAME)), file=sys.stderr)
        return 2

    wanted = [(r, getattr(args, r.name)) for r in RENDERERS if getattr(args, r.name)]
    try:
        res = grade(sub, stages, seed=args.seed, timeout=args.timeout, workers=workers, budget=args.budget,
                    pictures=any(r.pictures for r, _ in wanted), fresh=args.fresh,
                    keep=not args.classroom)  # a Classroom run's points are always measured
    finally:
        close_launchers(workers)
    for note in found.notes:
        from .outcomes import plain

        print(say.CLI_NOTE.format(note=plain(note)))  # names paths inside the upload, which the submission chose
    print(terminal(res, verbose=args.verbose, color=use_color()))
    from .feedback.hints import remember_run

    remember_run(res)  # `make hint` follows the latest run
    for renderer, path in wanted:
        renderer.write(res, Path(path))
        if renderer.announce:
            print(say.CLI_WROTE.format(path=path))
    return required_failures(res, required)


def required_failures(res, required: list[str]) -> int:
    """1 when a stage named with --require-pass did not pass (GitHub Classroom's steps read the exit status)."""
    from .results import StageStatus

    failing = [s for s in required if s not in res.stages or res.stages[s].status != StageStatus.PASSED]
    if failing:
        print(say.CLI_REQUIRED_FAILING.format(stages=", ".join(failing)))
    return 1 if failing else 0


def _watch(args) -> int:
    from .submission import locate
    from .watch import watch

    return watch(locate(Path(args.submission)), args.interval, args.timeout, color=use_color())


def _hint(args) -> int:
    from .feedback.hints import next_hint
    from .submission import locate

    try:
        print(next_hint(locate(Path(args.submission)), args.stage))
    except (ValueError, FileNotFoundError) as e:
        print(say.CLI_ERROR.format(error=e), file=sys.stderr)
        return 2
    return 0


def _worked(args) -> int:
    from .stages.article_numbers import WORKED

    items = [w.as_json() for w in WORKED]
    if args.json:
        print(json.dumps(items, indent=2))
    else:
        for w in items:
            print(say.CLI_WORKED.format(**w))
    return 0


def _submit(args) -> int:
    from .submission import make_zip

    src = Path(args.submission)
    problems = make_zip(src, Path(args.output))
    print(say.CLI_SUBMIT_WROTE.format(output=args.output, source=src))
    for p in problems:
        print(say.CLI_SUBMIT_WARNING.format(problem=p))
    return 0


def _secret(path: str | None) -> str | None:
    """The course secret from the file at `path`, else $ATTN_SECRET; BadInput's sentence where the file cannot
    be read (a regrade must not fall back to the public inputs unasked)."""
    from .instructor.regrade import BadInput

    if not path:
        return os.environ.get("ATTN_SECRET")
    try:
        return Path(path).read_text().strip()
    except OSError as e:
        raise BadInput(f"cannot read SECRET_FILE {path} ({e.strerror}): `make autograder` writes the course secret "
                         "to dist/autograder.secret; name that file.") from e


def _regrade(args) -> int:
    from .instructor.regrade import BadInput, Untrusted, check_folder, regrade
    from .outcomes import plain

    try:
        check_folder(args.folder and Path(args.folder))  # before the secret file is read, or anything made
        # the secret comes from a file or the environment, never the command line (any user can read another's argv)
        secret = _secret(args.secret_file)
        out = regrade(Path(args.folder), args.out and Path(args.out), args.jobs, secret, args.seed, args.timeout,
                      anonymize=args.anonymize, trust=args.trust, fork_server=args.fork_server, bonus=args.bonus,
                      same_uid=args.same_uid, item=args.item)
    except (Untrusted, BadInput) as e:
        print(f"error: {plain(str(e))}", file=sys.stderr)
        return 2
    print(plain(f"wrote {out / 'summary.csv'}, {out / 'grades.csv'} (one row per student; grades-canvas.csv and "
                f"grades-brightspace.csv for those LMSs' imports), {out / 'class-report.html'}, {out / 'diagnoses.csv'} "
                f"and one results JSON and report page per submission in {out}/"))
    return 0


def _classroom_step(args) -> int:
    from .report.classroom import step

    return step(args.stage, Path(args.results))


def _class_report(args) -> int:
    from .instructor.class_report import main as class_report

    return class_report([args.results_dir] + (["--anonymize"] if args.anonymize else [])
                        + (["--item", args.item] if args.item else []))


def _capstone(args) -> int:
    from .capstone.run import main as capstone

    return capstone(args)


def main(argv: list[str] | None = None) -> int:
    if sys.platform == "win32":  # before anything that needs resource, fcntl or fork
        print(WINDOWS, file=sys.stderr)
        return 1
    p = argparse.ArgumentParser(prog="python -m autograder", description="Grade the attention exercises.")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grade", help="grade a submission folder or zip")
    g.add_argument("--submission", default=str(ROOT / "exercises"),
                   help="folder with the stage modules, a zip, or a notebook edition's .ipynb")
    g.add_argument("--stage", action="append", help="grade only these stages (comma-separated; may be repeated)")
    from .report import RENDERERS

    for renderer in RENDERERS:
        g.add_argument(f"--{renderer.name}", metavar="FILE", help=renderer.help)
    g.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    g.add_argument("--fresh", action="store_true", help="measure the cost checks again even where an earlier grade "
                   "of the very same files passed them (kept: grade/kept.py)")
    g.add_argument("--timeout", type=float, default=10.0, help="seconds allowed per call of your code")
    g.add_argument("--budget", type=float, default=None,
                   help="seconds for the whole grade (default: $ATTN_GRADE_BUDGET, else 480); past it the checks "
                        "left are not run")
    g.add_argument("-v", "--verbose", action="store_true", help="show every failing check")
    g.add_argument("--require-pass", metavar="STAGES",
                   help="exit 1 unless these stages pass (comma-separated; for CI such as GitHub Classroom)")
    g.set_defaults(fn=_grade)
    wt = sub.add_parser("watch", help="re-grade the affected stages whenever a file is saved")
    wt.add_argument("--submission", default=str(ROOT / "exercises"))
    wt.add_argument("--interval", type=float, default=0.05, help="quiet seconds that end a burst of saves")
    wt.add_argument("--timeout", type=float, default=10.0)
    wt.set_defaults(fn=_watch)
    h = sub.add_parser("hint", help="the next hint for the first unfinished stage (or STAGE)")
    h.add_argument("stage", nargs="?")
    h.add_argument("--submission", default=str(ROOT / "exercises"))
    h.set_defaults(fn=_hint)
    w = sub.add_parser("worked", help="list the articles' worked numbers that are checked")
    w.add_argument("--json", action="store_true", help="print them as a JSON array")
    w.set_defaults(fn=_worked)
    s = sub.add_parser("submit", help="pack the stage modules and a manifest into a zip")
    s.add_argument("--submission", default=str(ROOT / "exercises"))
    s.add_argument("--output", default="submission.zip")
    s.set_defaults(fn=_submit)
    r = sub.add_parser("regrade", help="grade every submission (folder or zip) in FOLDER, in parallel")
    r.add_argument("folder", nargs="?", help="the folder of submissions (make regrade DIR=...)")
    r.add_argument("--out", help="where to write summary.csv and the JSON files (default FOLDER-results)")
    r.add_argument("--jobs", type=int, help="submissions graded at once (default: the number of cores)")
    r.add_argument("--secret-file", help="a file holding the course secret: each hidden-check seed is derived from it "
                   "and the submission, as the zip does (or set ATTN_SECRET; never pass the secret itself as an argument)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--timeout", type=float, default=10.0)
    r.add_argument("--fork-server", action="store_true", help="kept for old command lines: as root every "
                   "child is forked from one warm server (each under its own uid, inside namespaces where they exist)")
    r.add_argument("--trust", action="store_true", help="run the submissions even where nothing separates them "
                   "from your account (not root): only for code you trust")
    r.add_argument("--anonymize", action="store_true", help="stable pseudonyms in the class report and diagnoses.csv")
    r.add_argument("--bonus", choices=("apart", "folded"), default="apart",
                   help="the bonus stages' points apart from the total (default) or folded into it, as in every build")
    r.add_argument("--same-uid", action="store_true", help="go on where the sandbox's separate uid is off (not root, or "
                   "an interpreter other users cannot run): namespaces alone then separate the submissions")
    r.add_argument("--item", default="", help="the grade item's name in the LMS files (default 'Attention kit')")
    r.set_defaults(fn=_regrade)
    cs = sub.add_parser("classroom-step", help="a GitHub Classroom step: report STAGE's points from a --classroom file")
    cs.add_argument("stage")
    cs.add_argument("results")
    cs.set_defaults(fn=_classroom_step)
    c = sub.add_parser("class-report", help="class-report.html, grades.csv and diagnoses.csv from a folder of results JSONs")
    c.add_argument("results_dir")
    c.add_argument("--anonymize", action="store_true", help="stable pseudonyms instead of folder names")
    c.add_argument("--item", default="", help="the grade item's name in the LMS files (default 'Attention kit')")
    c.set_defaults(fn=_class_report)
    cp = sub.add_parser("capstone", help="train a small model built from your CausalSelfAttention (or load GPT-2 into it)")
    cp.add_argument("--submission", default=str(ROOT / "exercises"), help="folder with your stage modules")
    cp.add_argument("--model", choices=("toy", "gpt2"), default="toy",
                    help="toy: train a 2-layer decoder on a copy task here; gpt2: GPT-2 small's released weights")
    cp.add_argument("--steps", type=int, default=300, help="training steps of the toy model (default 300)")
    cp.add_argument("--seed", type=int, default=0, help="seed of the toy model's weights and data (default 0)")
    cp.add_argument("--html", default="capstone.html", help="the page with the learned heads (default capstone.html)")
    cp.add_argument("--weights", default=str(Path.home() / ".cache" / "attention-kit" / "gpt2"),
                    help="gpt2: folder with model.safetensors (and vocab.json, merges.txt); downloaded when missing")
    cp.add_argument("--no-download", action="store_true", help="gpt2: use only the files already in --weights")
    cp.add_argument("--prompt", default="Attention lets every token look back at", help="gpt2: the prompt")
    cp.add_argument("--tokens", type=int, default=30, help="gpt2: new tokens to generate (default 30)")
    cp.set_defaults(fn=_capstone)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except BrokenPipeError:  # `make grade | head` closed the pipe: end quietly, as a pager expects
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's own flush at exit must not fail again
        return 0
