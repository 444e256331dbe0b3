"""Install a requirements file into this interpreter (the kit's venv), torch from the CPU wheel index on Linux.

    python -m autograder.sandbox.install requirements-student.txt

On Linux, PyPI's torch is the CUDA build (about 2.3 GiB with its nvidia packages); the CPU wheel is
under 200 MiB and is all the kit needs. TORCH_INDEX chooses another index (a CUDA build, a mirror);
TORCH_INDEX= (empty) takes torch from the default index. When the index cannot be reached, the
install goes on from the default index with a one-line warning. Standard library only: it runs
before numpy is installed.
"""
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PIP = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]


def torch_index() -> str:
    """TORCH_INDEX if set (empty: none), else the CPU index on Linux (macOS wheels are CPU builds already)."""
    if "TORCH_INDEX" in os.environ:
        return os.environ["TORCH_INDEX"].strip()
    return CPU_INDEX if sys.platform.startswith("linux") else ""


def reachable(index: str, timeout: float = 10.0) -> bool:
    try:
        with urllib.request.urlopen(index.rstrip("/") + "/torch/", timeout=timeout):
            return True
    except Exception:  # noqa: BLE001 - no network, no such host, an error page: all mean "not from there"
        return False


def torch_pin(requirements: Path) -> str | None:
    """The `torch==...` line of the requirements file (following -r includes), if any."""
    for line in requirements.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            found = torch_pin(requirements.parent / line[3:].strip())
            if found:
                return found
        elif line.replace(" ", "").startswith("torch=="):
            return line.replace(" ", "")
    return None


def installed(pin: str) -> bool:
    """Whether `torch==X` is what this interpreter has already (then no index is asked, and nothing said about one):
    X itself or a local build of it (2.13.0+cpu, which pip takes as X; found by a stranger TA: the warning about a
    2.3 GiB download was printed over an installed CPU build)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        have, want = version("torch"), pin.split("==", 1)[1]
        return have == want or have.split("+", 1)[0] == want
    except PackageNotFoundError:
        return False


def main(argv: list[str]) -> int:
    requirements = Path(argv[0] if argv else "requirements-student.txt")
    pin, index = torch_pin(requirements), torch_index()
    if pin and index and not installed(pin):
        if not reachable(index):
            print(f"warning: {index} cannot be reached; torch comes from the default index instead (on Linux "
                  "x86_64 that is the CUDA build, about 2.3 GiB; set TORCH_INDEX to a mirror to avoid it)",
                  file=sys.stderr)
        elif subprocess.run([*PIP, "--index-url", index, "--extra-index-url", "https://pypi.org/simple", pin]).returncode:
            print(f"warning: installing {pin} from {index} failed; trying the default index", file=sys.stderr)
    return subprocess.run([*PIP, "-r", str(requirements)]).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
