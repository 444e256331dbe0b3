"""Finding the stage modules in what a student hands in, and packing `make submit`'s zip."""
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import stat
import tempfile
import textwrap
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from . import KIT_VERSION
from .sandbox.safe_files import MAX_FILE_BYTES, MAX_NOTEBOOK_BYTES, UnusableFile, problem, read_bytes
from .stages import SUBMISSION_FILES as STAGE_FILES

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
    """The folder to grade in `path` (a folder, a zip or a notebook), with notes on duplicates and ignored copies.
    A zip, a notebook, or a level spread over several folders, is copied into a temporary folder, and the messages
    then name each file as uploaded; `as_uploaded` does the same for a folder (Gradescope's upload). An upload
    with no stage module but a notebook is graded from the notebook's `%%writefile` cells (from_notebooks)."""
    path = Path(path)
    if path.suffix.lower() == NOTEBOOK and not path.is_dir():
        return notebook_survey(path)
    if path.is_file() and zipfile.is_zipfile(path):
        return unzip_survey(path)
    if not path.is_dir():
        raise NotASubmission(not_a_submission(path))
    walked = _walk(path)
    chosen, notes = choose(walked)
    zips, books = sorted(path.glob("*.zip")), notebooks_in(walked)
    if not chosen and zips:  # e.g. the submission.zip that `make submit` wrote, uploaded as is
        found = unzip_survey(zips[0])
        if found.shown or not books:
            return found
        discard(found)
    if not chosen and books:  # a notebook edition handed in as it is
        return from_notebooks(books, lambda p: read_bytes(path / p, MAX_NOTEBOOK_BYTES), "")
    if not chosen:
        return Located(path)
    if books:
        notes.append(f"ignored {', '.join(map(str, books))}: the stage modules (.py) of the upload are graded")
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
    left out (its stage then says it is missing). A zip with no stage module but a notebook: its cells'."""
    with zipfile.ZipFile(path) as z:
        members = {PurePosixPath(i.filename): i for i in z.infolist()
                   if not i.is_dir() and not stat.S_ISLNK(i.external_attr >> 16)}
        usable = {p: i for p, i in members.items() if i.file_size <= MAX_FILE_BYTES}
        chosen, notes = choose(list(usable))
        books = notebooks_in(list(members))
        if not chosen and books:
            return from_notebooks(books, lambda p: _member(z, members[p], MAX_NOTEBOOK_BYTES), path.name)
        out = Path(tempfile.mkdtemp(prefix="attn-sub-"))
        total = 0
        for name, member in chosen.items():
            info = usable[member]
            total += info.file_size
            if total > MAX_UNZIPPED:
                raise ValueError(f"{path.name}: too large once unzipped")
            with contextlib.suppress(UnusableFile):  # the declared size may lie: then it is left out
                (out / name).write_bytes(_member(z, info, MAX_FILE_BYTES))
    found = Located(out, notes, {name: str(p) for name, p in chosen.items()}, path.name)
    show(found)
    return found


# ------------------------------------------------------------------------------------ notebooks --
# A notebook edition handed in (nbgrader's or otter's attention.ipynb) is read as JSON, never run: each code cell
# that IPython would run as `%%writefile [-a] submission/<file>` becomes that file, as running the notebook top to
# bottom would write it, and the files are graded like any submission's. No other cell runs, so nothing a kernel
# did (a patched grader, a redefined np.allclose) reaches the grade.
NOTEBOOK = ".ipynb"
MAX_NOTEBOOKS = 8  # notebooks read in one upload, shallowest first, until one writes a stage module
APPEND = ("-a", "--append")


@dataclass
class Written:
    """What one notebook's `%%writefile submission/<file>` cells write: the bytes of each stage module, each
    named as uploaded ('attention.ipynb, cell 12 (softmax.py)'), and notes on cells written over or ignored."""

    files: dict[str, bytes] = field(default_factory=dict)
    shown: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def notebooks_in(paths: list[PurePosixPath]) -> list[PurePosixPath]:
    """The notebooks among an upload's files, shallowest first (checkpoints, hidden files and Mac junk left out)."""
    def junk(p: PurePosixPath) -> bool:
        return any(part.startswith(".") or part == "__MACOSX" or part in SKIPPED_FOLDERS for part in p.parts)

    return sorted((p for p in paths if p.suffix.lower() == NOTEBOOK and not junk(p)), key=lambda p: (len(p.parts), str(p)))


def cell_text(cell: object) -> str | None:
    """A code cell's text (nbformat 4 keeps it as one string or a list of lines), else None."""
    if not isinstance(cell, dict) or cell.get("cell_type") != "code":
        return None
    source = cell.get("source")
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        return "".join(source)
    return source if isinstance(source, str) else None


def writefile_cell(text: str) -> tuple[str, bool, str] | None:
    """(target, append, body) where IPython would run `text` as a `%%writefile` cell, else None. The cell is
    prepared as IPython's input transformer does it (a final newline added, leading blank lines dropped,
    common indentation removed), so the body is what the kernel writes."""
    lines = (text if text.endswith("\n") else text + "\n").splitlines(keepends=True)
    while lines and lines[0].isspace():
        lines.pop(0)
    lines = textwrap.dedent("".join(lines)).splitlines(keepends=True)
    if not lines or not lines[0].startswith("%%"):
        return None
    magic, _, args = lines[0][2:].rstrip().partition(" ")
    try:
        words = shlex.split(args)
    except ValueError:
        return None
    targets = [w for w in words if w not in APPEND]
    if magic != "writefile" or len(targets) != 1:
        return None
    return targets[0], any(w in APPEND for w in words), "".join(lines[1:])


def stage_file(target: str) -> str | None:
    """The stage module a `%%writefile` target names (`submission/softmax.py`, `./submission/softmax.py`), else None."""
    parts = PurePosixPath(os.path.normpath(target)).parts
    return parts[1] if len(parts) == 2 and parts[0] == "submission" and parts[1] in STAGE_FILES else None


def notebook_modules(data: bytes, label: str) -> Written:
    """The stage modules the notebook `data` (named `label` as uploaded) writes: the last cell for a file
    wins, `-a` appends. Raises NotASubmission where it is not a notebook or writes no stage module."""
    try:
        cells = json.loads(data).get("cells")
    except (ValueError, RecursionError, AttributeError):  # not JSON (or not UTF-8), or JSON but not an object
        raise NotASubmission(f"{label}: not a notebook (its JSON does not parse)") from None
    if not isinstance(cells, list):
        raise NotASubmission(f"{label}: not a notebook (it has no list of cells)")
    out, cells_of, ignored = Written(), defaultdict(list), []
    for number, cell in enumerate(cells, 1):  # cells counted from the top, 1 the first
        text = cell_text(cell)
        found = writefile_cell(text) if text is not None else None
        if found is None:
            continue
        target, append, body = found
        name = stage_file(target)
        if name is None:
            ignored.append(f"cell {number} ({target})")
            continue
        data = body.encode("utf-8", "replace")
        out.files[name] = out.files.get(name, b"") + data if append else data
        out.shown[name] = f"{label}, cell {number} ({name})"
        cells_of[name].append(number)
    if not out.files:
        raise NotASubmission(f"{label}: no cell writes a stage module (a code cell that starts "
                             "`%%writefile submission/softmax.py`, as the notebook edition's do)")
    for name, numbers in sorted(cells_of.items()):
        if len(numbers) > 1:
            out.notes.append(f"{name} is written by cells {', '.join(map(str, numbers))} of {label}: graded "
                             f"what running them in order writes (cell {numbers[-1]} last)")
    if ignored:
        out.notes.append(f"{label}: ignored {', '.join(ignored)}: only submission/<stage module> files are graded")
    return out


def from_notebooks(books: list[PurePosixPath], read: Callable[[PurePosixPath], bytes], label: str) -> Located:
    """The stage modules of the first of `books` (shallowest first, see notebooks_in) that writes one, written
    into a temporary folder as regular files; `label` names the upload (a zip), else the notebook does."""
    errors: list[str] = []
    for book in books[:MAX_NOTEBOOKS]:
        try:
            written = notebook_modules(read(book), str(book))
        except UnusableFile as e:  # its message starts with the file's bare name
            errors.append(f"{book}: {str(e).removeprefix(book.name + ' ')}")
            continue
        except NotASubmission as e:
            errors.append(str(e))
            continue
        others = [str(b) for b in books if b != book]
        notes = written.notes + ([f"ignored {', '.join(others)}: one notebook is graded ({book})"] if others else [])
        return _write_notebook(written, notes, label or str(book))
    raise NotASubmission("; ".join(errors))


def _write_notebook(written: Written, notes: list[str], label: str) -> Located:
    """A temporary folder holding what `written` writes: a module over the size limit is left out (its stage
    then says it is missing), all of them over the zip's limit together refuse the notebook."""
    if sum(len(b) for b in written.files.values() if len(b) <= MAX_FILE_BYTES) > MAX_UNZIPPED:
        raise ValueError(f"{label}: its stage modules are too large together")
    out = Path(tempfile.mkdtemp(prefix="attn-sub-"))
    for name, data in written.files.items():
        if len(data) <= MAX_FILE_BYTES:
            (out / name).write_bytes(data)
        else:
            notes.append(f"{written.shown[name]} is larger than {MAX_FILE_BYTES // 2**20} MiB: left out")
    found = Located(out, notes, written.shown, label)
    show(found)
    return found


def notebook_survey(path: Path) -> Located:
    """A notebook handed in on its own (`make grade SUBMISSION=attention.ipynb`): read as a regular file, size-capped."""
    if not path.exists() and not path.is_symlink():
        raise NotASubmission(not_a_submission(path))
    return from_notebooks([PurePosixPath(path.name)], lambda p: read_bytes(path, MAX_NOTEBOOK_BYTES), "")


def _member(z: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    """A zip member's bytes, refusing one over `limit` whatever size it declares."""
    data = b""
    if info.file_size <= limit:
        with z.open(info) as src:
            data = src.read(limit + 1)
    if info.file_size > limit or len(data) > limit:
        raise UnusableFile(f"{PurePosixPath(info.filename).name} is larger than {limit // 2**20} MiB")
    return data


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
