"""Grade a folder of submissions in parallel: `python -m autograder regrade DIR`.

Each entry of DIR (a folder or a zip) is one submission, graded with the same sandbox as
`make grade`. Writes DIR-results/summary.csv (submission, total, each stage), and per submission
ENTRY.json (Gradescope's format) and ENTRY.html (the report `make grade --html` writes, without
the heatmaps), where ENTRY is its name in DIR (`alice`, `alice.zip`); then the class report and
grades.csv (class_report.py), where one student's entries count as one. A broken submission is a
row with its error, never the end of the batch; so is a file handed in as a submission that cannot be
graded (entries).
"""
import json
import multiprocessing
import multiprocessing.util
import os
import stat
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from datetime import datetime, timezone
from pathlib import Path

from ..feedback.advice import handed_in
from ..grade import grade
from ..report.gradescope_json import BONUS_POLICIES, DEFAULT_BONUS_POLICY, results_json
from ..report.html import render
from ..sandbox import namespaces
from ..sandbox.launchers import (
    ForkServer,
    SubprocessLauncher,
    child_executable,
    fork_is_safe,
    separate_user_possible,
    warm_launcher,
)
from ..stages import STAGES, SUBMISSION_FILES
from ..submission import ARCHIVES, NotASubmission, discard, show, survey
from .gradescope import derive_seed
from .staff_text import one_line, write_csv

ROOT = Path(__file__).resolve().parents[2]


def entries(folder: Path) -> list[Path]:
    """The batch's submissions: its folders, zips and notebooks (a notebook edition's .ipynb), and the files handed
    in as one that cannot be graded (a loose .py, a .tar.gz), each a row that says why. Hidden entries and files of
    other kinds (Gradescope's submission_metadata.yml, a roster) are not submissions (`others`)."""
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".")
                  and (p.is_dir() or p.suffix in (".zip", ".py", ".ipynb") or p.suffix.lower() in ARCHIVES))


def others(folder: Path) -> list[str]:
    """The names in the batch that are not submissions (entries), for a line that says they were left out."""
    taken = set(entries(folder))
    return sorted(p.name for p in folder.iterdir() if p not in taken and not p.name.startswith("."))


KINDS = ("numpy", "torch")  # the kinds of child a grade starts: each batch has a fork server for each
_zygotes: dict[str, ForkServer | SubprocessLauncher] = {}  # the batch's fork servers, shared by the grading processes


def _servers(hide: list[Path] = (), fresh: bool = False) -> dict[str, ForkServer | SubprocessLauncher]:
    """The launchers to use, by kind of child. With `fresh` (an ordinary user with namespaces: every child runs
    under that one user, so only namespaces of its own separate it from the others), a new interpreter per child
    inside them; else the shared fork servers while they answer, or this process's own (inside namespaces where
    they exist; new interpreters where forking is not safe). The numpy children's server never loads torch."""
    if fresh:
        launcher = SubprocessLauncher(hide=list(hide))
        return {kind: launcher for kind in KINDS}
    for kind in KINDS:
        if kind not in _zygotes or not _zygotes[kind].alive():
            _zygotes[kind] = warm_launcher(isolate=namespaces.available(), hide=list(hide), torch=kind == "torch")
            multiprocessing.util.Finalize(_zygotes[kind], _zygotes[kind].close, exitpriority=10)
    return dict(_zygotes)


def grade_one(path: Path, secret: str | None, seed: int, timeout: float, hide: list[Path] = (),
              fresh: bool = False, bonus: str = DEFAULT_BONUS_POLICY) -> dict:
    """{"results": its results JSON, "html": its report.html, "error": None}, or the error that stopped it.
    Every message names the submission's files as the student handed them in (`masking.py`, not the
    batch's path on the instructor's machine), so the JSON and the page can go back to the student."""
    found = None
    try:
        found = survey(path, as_uploaded=True)
        found.label = found.label or path.name
        show(found)
        sub = found.folder
        if not any((sub / f).is_file() for f in SUBMISSION_FILES):  # as Gradescope says it: a row, not a graded 0
            raise NotASubmission(f"{path}: no stage modules found in it (softmax.py, scores.py, ...)")
        seed = derive_seed(secret, sub) if secret else seed
        servers = _servers(hide, fresh)
        res = grade(sub, seed=seed, timeout=timeout, zygote=servers)
        if not all(s.alive() for s in servers.values()):
            # a server died under this grading (a submission running as the grader's user killed it,
            # maybe one graded beside this one): grade again, so only the culprit loses its points
            res = grade(sub, seed=seed, timeout=timeout, zygote=_servers(hide, fresh))
        res.next_step = handed_in(res.next_step)  # the page goes back to a student whose work is handed in
        return {"results": results_json(res, notes=found.notes, bonus_policy=bonus), "html": render(res), "error": None}
    except Exception as e:  # noqa: BLE001 - a broken submission is a row, not the end of the batch
        why = (str(e) if isinstance(e, NotASubmission) else f"{type(e).__name__}: {e}").replace(str(path) + ": ", "", 1)
        why = why.replace(str(path.parent) + os.sep, "")  # the batch's path is the instructor's
        return {"results": None, "html": None, "error": why}
    finally:
        if found is not None:
            discard(found)


class Progress:
    def __init__(self, total: int, stream=sys.stderr) -> None:
        self.total, self.done, self.stream, self.t0 = total, 0, stream, time.monotonic()
        self.lock = threading.Lock()

    def step(self, name: str) -> None:
        with self.lock:
            self.done += 1
            width = 30
            filled = int(width * self.done / max(self.total, 1))
            rate = self.done / max(time.monotonic() - self.t0, 1e-9) * 60
            self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                              f"{rate:5.1f}/min  {one_line(name)[:30]:<30}")  # a name is the student's choice
            if self.done == self.total:
                self.stream.write("\n")
            self.stream.flush()

    def closing(self) -> str:
        """The run's last line: its rate, and the machine's load beside its cores (a busy machine grades slower)."""
        seconds = time.monotonic() - self.t0
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        return (f"graded {self.done} submissions in {seconds:.0f} s, {self.done / max(seconds, 1e-9) * 60:.1f} a minute; "
                f"this machine's load average was {load:.1f} on {os.cpu_count()} cores at the end (other work on it "
                "slows a regrade down: bench/README.md gives the rate on a quiet machine)")


class Untrusted(Exception):
    """regrade was asked to run others' code where nothing separates it from the instructor's account, or where
    the submissions would share the grader's uid though the instructor did not say so."""


def _private_folder(path: Path) -> Path | None:
    """The first folder on the way to `path` (as given, then as resolved) that other users cannot enter, or
    `path` itself if they cannot read it; None where they can reach it."""
    for full in (Path(os.path.abspath(path)), Path(path).resolve()):
        try:
            for folder in reversed(full.parents):  # from / down
                if not folder.stat().st_mode & stat.S_IXOTH:
                    return folder
            if not full.stat().st_mode & stat.S_IROTH:
                return full
        except OSError:
            return full
    return None


def why_no_separate_uid() -> tuple[str, str] | None:
    """(why each submission would run under the grader's own uid, what to do about it), or None where each
    gets a uid of its own (root, and an interpreter and numpy that other users can run)."""
    if separate_user_possible():
        return None
    if os.geteuid() != 0:
        return ("you are not root (only root can give each submission a uid of its own)",
                "run it as root, e.g. in a container")
    if os.environ.get("ATTN_SANDBOX_SAME_USER"):
        return "ATTN_SANDBOX_SAME_USER is set", "unset ATTN_SANDBOX_SAME_USER"
    import importlib.util

    numpy = importlib.util.find_spec("numpy")
    paths = [Path(child_executable())] + ([Path(numpy.origin).resolve()] if numpy and numpy.origin else [])
    private = next((f for f in map(_private_folder, paths) if f is not None), None)
    where = f"{private} is closed to other users" if private else "other users cannot run it"
    return (f"this interpreter ({child_executable()}) or its numpy lies where the sandbox's uids cannot reach it: "
            f"{where} (a pyenv or a checkout under /root, say)",
            "make the kit's venv, in a folder others can enter, from a Python they can run "
            "(rm -rf .venv && make setup PYTHON=/usr/bin/python3)")


SAME_UID = ("make regrade stopped before grading anything: the sandbox's separate uid is off, so every submission "
            "would run under your own uid with only namespaces between them, because {why}; to fix it, {fix}, or "
            "go on anyway with SAME_UID=1 (python -m autograder regrade --same-uid).")


UNTRUSTED = ("make regrade runs other people's code, and on this machine nothing separates it from your account "
             "(the grader is not root, so no submission gets a user of its own, and there are no namespaces to hide "
             "your files in): a submission could read, change or "
             "delete anything you can (other submissions, the results, your home folder, this checkout) and leave "
             "processes behind. Regrade on Linux (with namespaces, or as root), in a "
             "container, or on Gradescope; or, if you trust every submission in {folder}, say so: TRUST=1 "
             "(python -m autograder regrade --trust).")


class BadInput(ValueError):
    """DIR (or SECRET_FILE) does not name what regrade needs: a folder missing, a zip, another file, none given."""


def check_folder(folder: Path | None) -> None:
    """Raises BadInput (one sentence naming the fix) unless `folder` is a folder: before anything is created."""
    if folder is None or str(folder) == "":
        raise BadInput("make regrade needs the folder of submissions: name it with DIR= "
                         "(make regrade DIR=path/to/folder; python -m autograder regrade FOLDER).")
    folder = Path(folder)
    if folder.suffix.lower() == ".zip" and folder.is_file():
        raise BadInput(f"{folder} is a zip file and make regrade grades a folder of submissions: unzip it "
                         f"(unzip {folder} -d {folder.with_suffix('')}) and run make regrade "
                         f"DIR={folder.with_suffix('')}, or grade that one submission with make grade SUBMISSION={folder}.")
    if folder.exists() and not folder.is_dir():
        raise BadInput(f"{folder} is a file, not a folder: set DIR= to the folder that holds the submissions "
                         "(one folder or zip each).")
    if not folder.is_dir():
        raise BadInput(f"there is no folder {folder}: set DIR= to the folder that holds the submissions "
                         "(make regrade DIR=path/to/folder).")


def hidden_inputs(secret: str | None, seed: int) -> tuple[str, str]:
    """(where the hidden checks' inputs come from, for summary.csv and the class report; the line said before
    grading, empty with a secret). Without the course secret every submission gets `seed`: 0 is the release's
    own inputs, whose answers the student release records, so hard-coded answers could pass."""
    if secret:
        return "course secret (a seed per submission, as on Gradescope)", ""
    source = ("the release's public inputs (seed 0)" if seed == 0
              else f"seed {seed} for every submission (no course secret)")
    return source, (f"no course secret: the hidden checks use {source}, whose answers a student could have "
                    "hard-coded; to draw Gradescope's hidden inputs, pass the course secret: "
                    "SECRET_FILE=dist/autograder.secret (python -m autograder regrade --secret-file PATH).")


def sandbox_mode(same_uid: bool, trust: bool) -> str:
    """What separated the submissions, for summary.csv and the class report: a uid of their own, or the
    grader's uid (SAME_UID=1 or TRUST=1 let the regrade go on)."""
    if separate_user_possible():
        return "a uid of their own each"
    if not namespaces.available():
        return "the grader's own uid, no namespaces (TRUST=1)"
    return f"the grader's own uid, namespaces between submissions ({'SAME_UID=1' if same_uid else 'TRUST=1'})"


def regrade(folder: Path, out: Path | None = None, jobs: int | None = None, secret: str | None = None,
            seed: int = 0, timeout: float = 10.0, quiet: bool = False, anonymize: bool = False,
            trust: bool = False, fork_server: bool = False, bonus: str = DEFAULT_BONUS_POLICY,
            same_uid: bool = False, item: str = "") -> Path:
    """Raises BadInput (check_folder) before creating anything where `folder` is not a folder. Raises
    Untrusted before running anything where no boundary exists between the submissions and the
    instructor (no separate uid, no namespaces), unless `trust`. As root, every child is forked from a
    warm server (numpy and torch imported once; the numpy children's without torch) and runs under a uid of its
    own; where namespaces exist each server and its children are inside one set (no network, a file system that
    holds none of the batch, the results, the checkout or home), else the reference, solutions, tests, batch and results are made
    root-only for the batch. An ordinary user with namespaces gets a new interpreter per child, each in
    namespaces of its own. `fork_server` is kept for the command line: as root it is what happens anyway.
    Where there are namespaces but no separate uid, raises Untrusted (why, and the fix) unless `same_uid` or
    `trust`. `bonus` (BONUS_POLICIES) is how the totals count the bonus stages, as in every channel's build;
    `item` names the grade item in the LMS files (class_report.LMS)."""
    check_folder(folder)
    folder = Path(folder)
    assert bonus in BONUS_POLICIES, bonus
    if not trust and not separate_user_possible() and not namespaces.available():
        raise Untrusted(UNTRUSTED.format(folder=folder))
    off = None if trust or same_uid else why_no_separate_uid()
    if off:
        raise Untrusted(SAME_UID.format(why=off[0], fix=off[1]))
    if fork_server and not separate_user_possible():
        raise Untrusted("--fork-server (FORK_SERVER=1) needs root and an interpreter other users can run: without "
                        "namespaces, only a uid of its own separates each submission from the others")
    root, namespaced = separate_user_possible(), namespaces.available()
    fresh = namespaced and not root
    out = Path(out) if out else folder.with_name(folder.name + "-results")
    out.mkdir(parents=True, exist_ok=True)
    subs = entries(folder)
    jobs = jobs or os.cpu_count() or 1
    progress = Progress(len(subs), open(os.devnull, "w") if quiet else sys.stderr)
    source, warning = hidden_inputs(secret, seed)
    if warning:
        progress.stream.write(warning + "\n")
    if others(folder):  # names the students chose: one printable line
        progress.stream.write(f"not submissions, left out: {one_line(', '.join(others(folder)))}\n")
    rows = {}
    locked = {} if namespaced else _lock_down([ROOT / "solutions", ROOT / "attn_ref", ROOT / "tests", folder, out])
    try:
        _grade_all(subs, out, rows, jobs, secret, seed, timeout, folder, progress, fresh, bonus)
    finally:
        for path, mode in locked.items():
            path.chmod(mode)
    _write_csv(out, rows, {"hidden_inputs": source, "sandbox": sandbox_mode(same_uid, trust)})
    from .class_report import write

    write(out, anonymize=anonymize, item=item)  # class-report.html, grades*.csv, diagnoses.csv
    progress.stream.write(progress.closing() + "\n")
    return out


def _lock_down(paths: list[Path]) -> dict[Path, int]:
    """As root without namespaces, the sandbox uids could read whatever others may: for the batch, the
    reference, the solutions, the tests, the submissions and the results are root's alone. Returns the
    modes to put back."""
    if os.geteuid() != 0:
        return {}
    modes = {p: p.stat().st_mode & 0o7777 for p in paths if p.is_dir()}
    for p in modes:
        p.chmod(0o700)
    return modes


def _grade_all(subs, out, rows, jobs, secret, seed, timeout, folder, progress, fresh: bool, bonus: str) -> None:
    """One process per job (the grader's own work needs a core too, which threads would share under one
    GIL), all sharing a fork server for each kind of child that imports numpy and torch once for the whole batch
    (one torch-sized process instead of one per core; the numpy children's never loads torch), unless every child
    needs namespaces of its own (`fresh`)."""
    # where forking is not safe (macOS), the grading processes are spawned and start their children anew
    context = multiprocessing.get_context("fork" if fork_is_safe() else "spawn")
    hide = [folder.resolve(), out.resolve()]  # no submission sees the others, or the results
    # one fork server for each kind of child for the batch (in namespaces where they exist), unless each child
    # needs its own
    _zygotes.clear()
    for kind in KINDS:
        _zygotes[kind] = SubprocessLauncher() if fresh else warm_launcher(
            context.Lock(), namespaces.available(), hide, wait=False, torch=kind == "torch")
    try:  # the grading processes start while the servers load numpy and torch: a numpy side needs no torch
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = {pool.submit(grade_one, p, secret, seed, timeout, hide, fresh, bonus): p for p in subs}
            from .class_report import prepare

            prepare()  # the class report's plotting library loads now, beside the first grades, not after the last
            for fut in as_completed(futures):
                p = futures[fut]
                try:
                    r = fut.result()
                except Exception as e:  # noqa: BLE001 - a grading process died: that row says so
                    r = {"results": None, "error": f"grading failed: {type(e).__name__}: {e}"}
                r["modified"] = _modified(p)
                rows[p.name] = r
                if r["results"] is not None:  # named by the entry: alice/ and alice.zip are two files
                    (out / f"{p.name}.json").write_text(json.dumps(r["results"], indent=1))
                    (out / f"{p.name}.html").write_text(r["html"])
                progress.step(p.name)
    finally:
        for z in _zygotes.values():
            z.close()
        _zygotes.clear()


def _modified(path: Path) -> str:
    """When the submission was last changed (the newest of its files, for a folder), as ISO 8601 UTC: the
    class report counts the newer of a student's equal-scoring submissions."""
    try:
        times = [path.stat().st_mtime] + ([f.stat().st_mtime for f in path.rglob("*") if f.is_file()]
                                          if path.is_dir() else [])
    except OSError:
        return ""
    return datetime.fromtimestamp(max(times), timezone.utc).isoformat(timespec="seconds")


def _write_csv(out: Path, rows: dict, run: dict[str, str]) -> None:
    """summary.csv: one row per submission (an entry of the batch), as graded: its total as the bonus policy
    counts it, its core and bonus points, each stage's, then `run`'s columns (the same in every row: where the
    hidden inputs came from, what separated the submissions); every cell safe to open in a spreadsheet
    (staff_text). grades.csv, written with the class report, has one row per student."""
    from .class_report import points

    table = [["submission", "total", "core", "bonus", *[s.column for s in STAGES], "error", "modified", *run]]
    for name in sorted(rows):
        r = rows[name]
        if r["results"] is None:
            table.append([name, 0, 0, 0, *[0 for _ in STAGES], r["error"], r.get("modified", ""), *run.values()])
            continue
        total, core, bonus = points(r["results"])
        st = r["results"]["extra_data"]["stages"]  # numbers written as grades.csv writes them (83, 5.5)
        table.append([name, f"{total:g}", f"{core:g}", f"{bonus:g}",
                      *[f"{st.get(s.name, {}).get('score', 0):g}" for s in STAGES], "", r.get("modified", ""),
                      *run.values()])
    write_csv(out / "summary.csv", table)
