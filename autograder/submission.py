"""Finding the stage modules in what a student hands in, and packing `make submit`'s zip."""
import hashlib
import json
import stat
import tempfile
import zipfile
from pathlib import Path

from . import KIT_VERSION
from .safe_files import MAX_FILE_BYTES, UnusableFile, problem, read_bytes
from .stages import SUBMISSION_FILES as STAGE_FILES

MAX_UNZIPPED = 5 * 2**20


def locate(path: Path) -> Path:
    """A folder holding the stage modules: `path` itself, its `exercises/` or a zip's contents."""
    path = Path(path)
    if path.is_file() and zipfile.is_zipfile(path):
        return locate(unzip(path))
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a folder or a zip file")
    for candidate in (path, path / "exercises", path / "submission"):
        if any((candidate / f).is_file() for f in STAGE_FILES):
            return candidate
    zips = sorted(path.glob("*.zip"))
    if zips:  # e.g. the submission.zip that `make submit` wrote, uploaded as is
        return locate(unzip(zips[0]))
    found = sorted({p.parent for f in STAGE_FILES for p in path.rglob(f)}, key=lambda p: len(p.parts))
    return found[0] if found else path


def unzip(path: Path) -> Path:
    """Extract only the stage modules (flattened) as regular files, refusing oversized or odd members:
    a symbolic link, a folder or a member over the size limit is left out (its stage then says it is missing)."""
    out = Path(tempfile.mkdtemp(prefix="attn-sub-"))
    with zipfile.ZipFile(path) as z:
        total = 0
        for info in z.infolist():
            name = Path(info.filename).name
            mode = info.external_attr >> 16
            if name not in STAGE_FILES and name != "manifest.json" or info.is_dir() or stat.S_ISLNK(mode):
                continue
            if info.file_size > MAX_FILE_BYTES:
                continue
            total += info.file_size
            if total > MAX_UNZIPPED:
                raise ValueError(f"{path}: too large once unzipped")
            with z.open(info) as src:
                data = src.read(MAX_FILE_BYTES + 1)  # the declared size may lie
            if len(data) <= MAX_FILE_BYTES:
                (out / name).write_bytes(data)
    return out


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
