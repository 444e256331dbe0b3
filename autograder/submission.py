"""Finding the stage modules in what a student hands in, and packing `make submit`'s zip."""
import hashlib
import json
import shutil
import tempfile
import zipfile
from pathlib import Path

from . import KIT_VERSION
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
    """Extract only the stage modules (flattened), refusing oversized or odd members."""
    out = Path(tempfile.mkdtemp(prefix="attn-sub-"))
    with zipfile.ZipFile(path) as z:
        total = 0
        for info in z.infolist():
            name = Path(info.filename).name
            if name not in STAGE_FILES and name != "manifest.json":
                continue
            total += info.file_size
            if total > MAX_UNZIPPED:
                raise ValueError(f"{path}: too large once unzipped")
            with z.open(info) as src, open(out / name, "wb") as dst:
                shutil.copyfileobj(src, dst)
    return out


def make_zip(src: Path, dest: Path) -> list[str]:
    """Write `dest` with the stage modules and a manifest; returns problems found (missing, unparsable)."""
    problems = []
    manifest = {"kit_version": KIT_VERSION, "files": {}}
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for name in STAGE_FILES:
            path = src / name
            if not path.is_file():
                problems.append(f"{name}: missing")
                continue
            data = path.read_bytes()
            try:
                compile(data, name, "exec")
            except SyntaxError as e:
                problems.append(f"{name}:{e.lineno}: does not parse ({e.msg})")
            manifest["files"][name] = hashlib.sha256(data).hexdigest()
            z.writestr(name, data)
        manifest["problems"] = problems
        z.writestr("manifest.json", json.dumps(manifest, indent=2))
    return problems
