"""Finding the stage modules in what a student hands in, and packing `make submit`'s zip."""
import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from .. import KIT_VERSION
from ..stages import SUBMISSION_FILES as STAGE_FILES
from .safe_files import MAX_FILE_BYTES, UnusableFile, problem, read_bytes

MAX_UNZIPPED = 5 * 2**20
SKIPPED_FOLDERS = {"__pycache__", "autograder", "attn_ref", "node_modules", "venv"}  # never the student's work

# a path the grader reads -> how the student uploaded it (a zip's member, a file of Gradescope's upload):
# filled in by survey, so that no message names a temporary copy (feedback.sources.rel reads it)
SHOWN: dict[Path, str] = {}


@dataclass
class Located:
    """Where the graded stage modules are, and what the upload held besides (named as uploaded)."""

    folder: Path
    notes: list[str] = field(default_factory=list)  # files found twice or at a deeper level, and which was graded
    shown: dict[str, str] = field(default_factory=dict)  # stage file -> its name as uploaded
    label: str = ""  # the upload's name, for a temporary folder (a zip's name)


def choose(paths: list[PurePosixPath]) -> tuple[dict[str, PurePosixPath], list[str]]:
    """The copy of each stage file to grade: files come from the shallowest level that holds stage files
    (at that level, a folder named exercises/ or submission/, else the one holding most of them), and
    every other copy of a stage file is named in a note."""
    found = [p for p in paths if p.name in STAGE_FILES]
    if not found:
        return {}, []
    top = min(len(p.parts) for p in found)
    per_folder = Counter(p.parent for p in found if len(p.parts) == top)

    def rank(p: PurePosixPath) -> tuple:
        return p.parent.name != "exercises", p.parent.name != "submission", -per_folder[p.parent], str(p)

    chosen: dict[str, PurePosixPath] = {}
    for p in sorted((p for p in found if len(p.parts) == top), key=rank):
        chosen.setdefault(p.name, p)
    notes = []
    for name in sorted({p.name for p in found}):
        others = ", ".join(str(p) for p in sorted(found, key=str) if p != chosen.get(name) and p.name == name)
        if others and name in chosen:
            notes.append(f"{name} is in the upload more than once: graded {chosen[name]}, ignored {others}")
        elif others:
            notes.append(f"ignored {others}: only the shallowest level that holds stage files is graded "
                         f"({', '.join(sorted({str(c.parent) for c in chosen.values()}))}); put {name} there")
    return chosen, notes


def _walk(root: Path) -> list[PurePosixPath]:
    """Every file under `root`, relative to it, not following links, skipping the kit's and tools' folders."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS and not d.startswith("."))
        out += [PurePosixPath(Path(folder, f).relative_to(root).as_posix()) for f in files]
    return out


ARCHIVES = (".tar", ".gz", ".tgz", ".bz2", ".xz", ".7z", ".rar")  # archives a submission may come as, unread


class NotASubmission(FileNotFoundError):
    """What was handed in is not a folder or a zip: its message says why and what would be graded."""


def not_a_submission(path: Path) -> str:
    """Why `path` (neither a folder nor a zip) cannot be graded, and what would be."""
    if not path.exists():
        return f"{path}: not found"
    if path.suffix == ".py":
        return (f"{path}: a single .py file; a submission is a folder (or a zip) holding the stage modules "
                "(softmax.py, scores.py, ...)")
    if path.suffix.lower() in ARCHIVES:
        return f"{path}: a {''.join(path.suffixes[-2:])} archive is not read; unpack it into a folder, or zip it"
    return f"{path}: not a folder or a zip file"


def survey(path: Path, as_uploaded: bool = False) -> Located:
    """The folder to grade in `path` (a folder or a zip), with notes on duplicates and ignored copies.
    A zip, or a level spread over several folders, is copied into a temporary folder, and the messages
    then name each file as uploaded; `as_uploaded` does the same for a folder (Gradescope's upload)."""
    path = Path(path)
    if path.is_file() and zipfile.is_zipfile(path):
        return unzip_survey(path)
    if not path.is_dir():
        raise NotASubmission(not_a_submission(path))
    chosen, notes = choose(_walk(path))
    zips = sorted(path.glob("*.zip"))
    if not chosen and zips:  # e.g. the submission.zip that `make submit` wrote, uploaded as is
        return unzip_survey(zips[0])
    if not chosen:
        return Located(path)
    shown = {name: str(p) for name, p in chosen.items()}
    folders = {p.parent for p in chosen.values()}
    if len(folders) == 1:
        found = Located(path / folders.pop(), notes, shown)
    else:
        out = Path(tempfile.mkdtemp(prefix="attn-sub-"))
        for name, p in chosen.items():
            with contextlib.suppress(UnusableFile):  # then its stage says why it is missing
                (out / name).write_bytes(read_bytes(path / p))
        found, as_uploaded = Located(out, notes, shown, path.name), True
    if as_uploaded:
        show(found)
    return found


def discard(found: Located) -> None:
    """Remove the folder that survey made for `found` (a zip's contents, or files gathered from several folders):
    a regrade unpacks every zip of a batch, and no student's code stays behind in the temp folder."""
    folder = found.folder
    if folder.name.startswith("attn-sub-") and folder.parent.resolve() == Path(tempfile.gettempdir()).resolve():
        shutil.rmtree(folder, ignore_errors=True)


def show(found: Located) -> None:
    """Make every message name the located files as the student uploaded them."""
    for folder in {found.folder, found.folder.resolve()}:
        if found.label:
            SHOWN[folder] = found.label
        for name in STAGE_FILES:  # a stage file the upload lacks is named bare, never by the grader's path
            SHOWN[folder / name] = found.shown.get(name, name)


def locate(path: Path) -> Path:
    """A folder holding the stage modules: `path` itself, a folder inside it or a zip's contents (see survey)."""
    return survey(path).folder


def unzip(path: Path) -> Path:
    """The stage modules of a zip, extracted into a temporary folder (see unzip_survey)."""
    return unzip_survey(path).folder


def unzip_survey(path: Path) -> Located:
    """Extract the stage modules a zip holds at its shallowest level (see choose), flattened, as regular
    files, refusing oversized or odd members: a symbolic link, a folder or a member over the size limit is
    left out (its stage then says it is missing)."""
    out = Path(tempfile.mkdtemp(prefix="attn-sub-"))
    with zipfile.ZipFile(path) as z:
        usable = {PurePosixPath(i.filename): i for i in z.infolist()
                  if not i.is_dir() and not stat.S_ISLNK(i.external_attr >> 16) and i.file_size <= MAX_FILE_BYTES}
        chosen, notes = choose(list(usable))
        total = 0
        for name, member in chosen.items():
            info = usable[member]
            total += info.file_size
            if total > MAX_UNZIPPED:
                raise ValueError(f"{path.name}: too large once unzipped")
            with z.open(info) as src:
                data = src.read(MAX_FILE_BYTES + 1)  # the declared size may lie
            if len(data) <= MAX_FILE_BYTES:
                (out / name).write_bytes(data)
    found = Located(out, notes, {name: str(p) for name, p in chosen.items()}, path.name)
    show(found)
    return found


def make_zip(src: Path, dest: Path) -> list[str]:
    """Write `dest` with the stage modules and a manifest; returns problems found (missing, unparsable)."""
    problems = []
    manifest = {"kit_version": KIT_VERSION, "files": {}}
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for name in STAGE_FILES:
            path = src / name
            why = problem(path)
            if why:
                problems.append(f"{name}: {why}" + (", not packed" if why != "missing" else ""))
                continue
            try:
                data = read_bytes(path)
            except UnusableFile as e:
                problems.append(f"{e}, not packed")
                continue
            try:
                compile(data, name, "exec")
            except SyntaxError as e:
                problems.append(f"{name}:{e.lineno}: does not parse ({e.msg})")
            manifest["files"][name] = hashlib.sha256(data).hexdigest()
            z.writestr(name, data)
        manifest["problems"] = problems
        z.writestr("manifest.json", json.dumps(manifest, indent=2))
    return problems
