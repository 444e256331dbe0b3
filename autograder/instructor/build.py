"""Instructor builds: the student repo (`make release`), the Gradescope zip (`make autograder`)
and a local run of that zip laid out like Gradescope (`make gradescope-local`).

    python -m autograder.instructor.build release [--out dist/student]
    python -m autograder.instructor.build autograder [--out dist/autograder.zip] [--secret S]
    python -m autograder.instructor.build gradescope-local --submission PATH [--zip dist/autograder.zip]

Never shipped to students: the release leaves out autograder/instructor/ as a folder.
"""
import argparse
import ast
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Callable

from ..child.seeded import DECODE_RANGE, FUSED_RANGE, TILED_RANGE
from ..declarations import DEFAULTS_RULE, INPUTS_RULE, REFERENCE_RULE, WORKED_RULE
from ..report.classroom import CLASSROOM_TOTAL, stage_max_scores
from ..report.gradescope_json import BONUS_POLICIES, DEFAULT_BONUS_POLICY, DEFAULT_HIDDEN_VISIBILITY, GRADESCOPE_VISIBILITIES
from ..sandbox.runner import PRINTED_LIMIT
from ..stages import STAGES, SUBMISSION_FILES, numbers
from .tables import code_rule, student_table, student_totals

ROOT = Path(__file__).resolve().parents[2]
GRADER = ROOT / "autograder"
DIST = ROOT / "dist"

# ---------------------------------------------------------------------------------- release --


def record_fixtures() -> dict:
    """Run the public checks on the solutions with the reference recorded: their expected values."""
    from attn_ref import mistakes

    from ..api import ReferenceAPI
    from ..evidence import compare
    from ..grade import grade
    from ..stages.fixtures import Recorder

    store: dict = {}
    compare.EAGER_MISTAKES = True  # the student repo must be able to diagnose without attn_ref
    try:
        res = grade(ROOT / "solutions", ref=Recorder(ReferenceAPI(), "ref", store),
                    mistakes=Recorder(mistakes, "mistakes", store),
                    public_only=True, pictures=True)
        from ..feedback.localise import prime

        prime(Recorder(ReferenceAPI(), "ref", store))  # the localisation probes' answers
    finally:
        compare.EAGER_MISTAKES = False
    if res.score != res.max_score:
        bad = [r.check.id for s in res.stages.values() for r in s.checks if not r.passed]
        raise RuntimeError(f"the solutions fail public checks: {bad}")
    return store


def student_readme(bonus_policy: str = DEFAULT_BONUS_POLICY) -> str:
    """The student repo's README: the commands, the stages and their files, and every kit-wide rule
    the grader enforces (the rules a check names are written here word for word)."""
    sharing = {f: [s for s in STAGES if f in s.files] for f in SUBMISSION_FILES}
    shared = "; ".join(f"`{f}` holds parts of stages {numbers(ss, ' to ')}" for f, ss in sharing.items() if len(ss) > 1)
    return f"""\
# Attention, stage by stage

You will build transformer attention one stage at a time, from softmax to a KV cache and the fused
`scaled_dot_product_attention` call, and a grader tells you after every step what is right, what is
wrong, where, and often which classic mistake it is.

```sh
make grade                  # set up .venv on first use, grade exercises/, print the next step
make grade STAGE=masking    # one stage
make grade V=1              # every failing check, not only the first four of each stage
make grade FRESH=1          # measure the cost checks again (a pass on unchanged files is kept)
make hint                   # a nudge for the stage you are on (run again for a bigger one)
make submit                 # writes submission.zip: upload it
make watch                  # re-grade every time you save
make report                 # report.html: failing cells marked, heatmaps of your attention weights
make worked                 # every number from the articles that the grader checks
make capstone               # once heads and kv_cache pass: train a small model built from your attention
```

Work in `exercises/`. Each stub raises `NotImplementedError`; its docstring is the contract: the
shapes, the mask convention (boolean, **True = may attend**), the errors to raise and the limits. A
stage may be written in more than one file ({shared}):

{student_table()}

{student_totals(bonus_policy)}

## The capstone

`make capstone` grades stages heads and kv_cache first and stops, naming the stage, until both pass.
Then it imports your `module.py` and `kv_cache.py` into its own process (no sandbox: it is your own
code on your machine) and trains a 2-layer decoder around your `CausalSelfAttention` to copy a
repeated random sequence (`STEPS=300`, `SEED=0` by default; well under a minute on a laptop CPU). It
generates with and without your `KVCache` (the same tokens, and tokens/s of each) and writes
`capstone.html`, with a previous-token head and an induction head drawn as heatmaps.

`make capstone MODEL=gpt2` puts GPT-2 small's released weights under your attention. The first run
downloads them into `GPT2_DIR` (default `~/.cache/attention-kit/gpt2`) from
`https://huggingface.co/openai-community/gpt2/resolve/main/`: `model.safetensors` (548 MB),
`vocab.json` and `merges.txt` (the tokenizer); without a network, put those three files there
yourself. It checks the logits against a plain forward of the checkpoint, then generates text with
your cache.

## How you are graded

- {WORKED_RULE} (`make worked` lists them, with article and section).
- {REFERENCE_RULE}. float32 inputs are fine; compute in any float dtype.
- Properties any correct attention has: weights that sum to 1, masked weights exactly 0, the future
  never changing the past, decoding with a cache equal to the full forward.
- Costs, judged by how they grow: the memory and CPU time of KV-cache decode steps at three cache
  lengths from {DECODE_RANGE[0]:,} to {DECODE_RANGE[1]:,}, the memory of the fused call at three T from
  {FUSED_RANGE[0]:,} to {FUSED_RANGE[1]:,}, and of the tiled bonus stage at three n from {TILED_RANGE[0]:,} to
  {TILED_RANGE[1]:,}, each drawn from the grade's seed (the autograder's is secret). Linear code grows about
  2x each time the length doubles, a T x T matrix 4x; the stubs' docstrings state each rule. The
  grader reads each call's cost from outside the process running your code, after a few ordinary
  calls of it. A cost check that passed twice in a row is not measured again for a few grades while
  none of your files changes (`make grade` says so under its table, and `make grade FRESH=1`
  measures it now); one that fails is measured in every grade, and the autograder always measures.
- {DEFAULTS_RULE}: a caller that leaves an argument out gets what the stub promises. They are read
  from your file, not from the running function: from the top-level `def` or `class` of that name
  (a class's `__init__`, or one it inherits from a class in the same file), written as a value
  (`64`, `1e4`, `2 ** 6`, `torch.float32`) or as a module constant holding one (`BLOCK = 64`).
- Errors are part of the contract: where a docstring says "Raises ValueError", a check makes that
  case happen and expects exactly that.
- {INPUTS_RULE}: every call the grader makes checks it, and a call that changes one fails its check,
  naming the argument.
- Each call of your code has 10 seconds (the first call in a fresh process 30, for one-time work such
  as imports). A call that hangs, crashes or exits loses its own check (for a hang, the report names
  the line of yours it was running, or the loop it was in), and the next check runs in a fresh process;
  after a second such call the stage's remaining checks are not run; after the first already where the
  call was stuck in another stage's code (the stage is then blocked by that one). A file that never
  finishes loading (stuck outside any function: it would be stuck again in every process) is waited
  for once: the checks of any stage that need it are then not run, the others are. Every other
  stage is still graded.
- A stage that fails only because an earlier stage it calls fails is shown as *blocked by* it. Its
  failing checks still cost their points until that stage is fixed: fix the blocking stage first.
- What your code prints (`print()`, anything on stdout or stderr) never reaches the grader's
  verdict: it is kept per check, and shown under a failing check in `make grade` (its first 12
  lines; `make grade V=1` all of it, up to {PRINTED_LIMIT:,} characters a check), in `make watch` and
  in `report.html`. A passing check's prints are not shown.

## What your code may use

{code_rule()}
Beneath that rule, on Linux, the system itself refuses your code new processes, other programs and
network sockets (a seccomp filter), and shows it only its own scratch folder and the interpreter.
Memory costs (the fused call, the KV cache's decode step, the tiled loop) are read from outside the
process that ran your call, once it has ended: a process that keeps running after answering cannot
be measured, and that check fails.

## Supported systems

Linux, macOS (Intel and Apple silicon) and Windows through WSL2 (`wsl --install`, then work inside
Ubuntu) or a dev container (below), with Python 3.11 to 3.13: `make grade` takes the first of python3.13, python3.12, python3.11
and python3 that is 3.11 or newer (`make grade PYTHON=...` names another). Where your system lacks a
protection of the grader's sandbox (macOS refuses a memory limit; there is no /proc), grading goes on
without it and the report says which, once: on your own machine only your own work is at risk.

This repo runs the public checks. The autograder runs them too, and more checks of the same kinds on
inputs you have not seen: a solution that is right in general passes them.

Without WSL (Windows), on a Chromebook, or in a browser: the repo ships `.devcontainer/devcontainer.json`
(Debian Linux, Python 3.12; after the container is made it runs `make setup`, the set-up
`make grade` does on first use, with torch's CPU build). In a browser: on the repo's GitHub page,
Code > Codespaces > Create codespace. On Windows without WSL: a codespace, or VS Code's Dev Containers
extension with Docker Desktop on its Hyper-V back end (open the folder, "Reopen in Container"). On a Chromebook:
Codespaces in the browser, or turn on Linux (Settings > Developers) and work there as on Linux. Nothing
differs there: it is Linux, and every `make` command above works as written, in its terminal.

For a GPU: install the CUDA build of the same torch version into `.venv` (pytorch.org's install
selector); every command stays the same, and the fused stage then runs on the GPU kernels.

Article A is "Attention from First Principles: One Complete Calculation"; Article B is
"Transformer attention from first principles" (krishparekhdev.com/blog/attention).
"""


CLASSROOM_RESULTS = ".classroom.json"


def classroom_workflow(bonus_folded: bool = False) -> str:
    """.github/workflows/classroom.yml: install, grade once, then one step per stage that reports that
    stage's points check by check (its `result` output, the command grader's format) to the grading
    reporter, so partial credit is the same as `make grade`'s. The bonus stages get steps only when the
    bonus is folded into the total."""
    maxima = stage_max_scores(bonus_folded)
    steps = []
    for s in STAGES:
        if s.name not in maxima:
            continue
        steps.append(f"""\
    - name: {s.number} {s.name}{' (bonus)' if s.bonus else ''}
      id: {s.name}
      run: .venv/bin/python -m autograder classroom-step {s.name} {CLASSROOM_RESULTS}
""")
    ids = [s.name for s in STAGES if s.name in maxima]
    env = "".join(f"        {i.upper()}_RESULTS: \"${{{{steps.{i}.outputs.result}}}}\"\n" for i in ids)
    bonus = "the bonus stages' points count on top" if bonus_folded else "the bonus stages are not counted"
    return f"""\
# GitHub Classroom autograding, written by `make release`: the grader runs once, then one step per stage
# reports that stage's checks with their points (the core stages' share of {CLASSROOM_TOTAL}; {bonus}).
name: Autograding Tests
'on':
- push
- workflow_dispatch
- repository_dispatch
permissions:
  checks: write
  actions: read
  contents: read
jobs:
  run-autograding-tests:
    runs-on: ubuntu-latest
    if: github.actor != 'github-classroom[bot]'
    steps:
    - name: Checkout code
      uses: actions/checkout@v4
    - name: Set up Python
      uses: actions/setup-python@v5
      with:
        python-version: '3.12'
    - name: Install the grader
      run: make setup
    - name: Grade
      run: .venv/bin/python -m autograder grade --submission exercises --classroom {CLASSROOM_RESULTS}
{"".join(steps)}\
    - name: Autograding Reporter
      uses: classroom-resources/autograding-grading-reporter@v1
      env:
{env}\
      with:
        runners: {",".join(ids)}
"""


def without_mutants(source: str) -> str:
    """A stage module's source with every `mutant=...` of its declaration emptied (`mutant=()`)."""
    tree = ast.parse(source)
    spans = [(kw.value.lineno, kw.value.col_offset, kw.value.end_lineno, kw.value.end_col_offset)
             for node in ast.walk(tree) if isinstance(node, ast.Call)
             for kw in node.keywords if kw.arg == "mutant"]
    lines = source.splitlines(keepends=True)
    for l0, c0, l1, c1 in sorted(spans, reverse=True):
        head, tail = lines[l0 - 1][:c0], lines[l1 - 1][c1:]
        lines[l0 - 1:l1] = [head + "()" + tail]
    return "".join(lines)


class NotABuild(RuntimeError):
    """A build's output folder that a rebuild must not remove (the checkout, a home, students' work)."""


def fresh(out: Path, keep: tuple[str, ...] = ()) -> Path:
    """`out` emptied and made again, so a rebuild gives the same tree as a first build (nothing of the last one
    left over). Refused, with NotABuild, where `out` holds this checkout or the home folder, or any of `keep`
    (folders of students' work, which a rebuild would lose) has something in it."""
    out = Path(out).resolve()
    if out in (ROOT, *ROOT.parents, Path.home(), *Path.home().parents):
        raise NotABuild(f"{out} holds this checkout or your home folder: name a build folder of its own (--out)")
    held = [out / name for name in keep if (out / name).is_dir() and any((out / name).iterdir())]
    if held:
        raise NotABuild(f"{out} holds students' work ({', '.join(str(h) for h in held)}): a rebuild starts from an "
                        "empty folder, so move that work elsewhere (or delete it), then build again")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return out


STAMP = (1980, 1, 1, 0, 0, 0)  # every zip member's date: a rebuild's zip is byte for byte the last one


def zip_text(z: zipfile.ZipFile, name: str, data: str | bytes, mode: int = 0o644) -> None:
    """One member of a reproducible zip: a fixed date and mode, whatever the file's on disk."""
    info = zipfile.ZipInfo(name, STAMP)
    info.external_attr = (mode | stat.S_IFREG) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)


DEVCONTAINER_IMAGE = "mcr.microsoft.com/devcontainers/python:1-3.12-bookworm"  # Debian with Python 3.12, make, git


def devcontainer() -> dict:
    """The release's .devcontainer/devcontainer.json (the Dev Container specification): a Python 3.12 Linux
    image, and after creation the venv `make grade` would make (torch's CPU build: install.py's Linux default)."""
    return {
        "name": "Attention kit",
        "image": DEVCONTAINER_IMAGE,
        "postCreateCommand": "make setup",
        "customizations": {"vscode": {"extensions": ["ms-python.python"],
                                      "settings": {"python.defaultInterpreterPath": ".venv/bin/python"}}},
    }


def release(out: Path = DIST / "student", bonus_policy: str = DEFAULT_BONUS_POLICY) -> Path:
    """Build the student repo in `out` (emptied first: see fresh): exercises, the public grader and its
    fixtures, Makefile, README."""
    out = fresh(out)
    shutil.copytree(ROOT / "exercises", out / "exercises", ignore=shutil.ignore_patterns("__pycache__"))
    for path in sorted(GRADER.rglob("*.py")):
        rel = path.relative_to(GRADER)
        if rel.parts[0] == "instructor":
            continue
        (out / "autograder" / rel).parent.mkdir(parents=True, exist_ok=True)
        if rel.parts[0] == "stages":  # a mistake's mutant is solution text: it stays in the full repo
            (out / "autograder" / rel).write_text(without_mutants(path.read_text()))
        else:
            shutil.copy2(path, out / "autograder" / rel)
    from ..stages.fixtures import save

    save(record_fixtures(), out / "autograder" / "fixtures.json")
    shutil.copy2(ROOT / "requirements-student.txt", out / "requirements-student.txt")
    shutil.copy2(ROOT / "pyproject.toml", out / "pyproject.toml")  # `pip install .` there: the public grader
    shutil.copy2(ROOT / "setup.mk", out / "setup.mk")
    shutil.copy2(ROOT / "student.mk", out / "Makefile")  # the student's commands, the same file as the full repo's
    (out / "README.md").write_text(student_readme(bonus_policy))
    (out / "autograder" / "report" / "bonus_policy.py").write_text(
        (GRADER / "report" / "bonus_policy.py").read_text().replace('BONUS = "apart"', f'BONUS = "{bonus_policy}"'))
    (out / ".github" / "workflows").mkdir(parents=True)
    (out / ".github" / "workflows" / "classroom.yml").write_text(classroom_workflow(bonus_policy == "folded"))
    (out / ".devcontainer").mkdir()
    (out / ".devcontainer" / "devcontainer.json").write_text(json.dumps(devcontainer(), indent=2) + "\n")
    (out / ".gitignore").write_text(".venv/\n__pycache__/\nsubmission.zip\n.hints.json\n.grade-state.json\nreport.html\n"
                                    "capstone.html\n")
    return out


# ---------------------------------------------------------------------------------- package --


def requirement_pins(requirements: Path = ROOT / "requirements-student.txt") -> dict[str, str]:
    """name -> `name==version` for each pinned line of a requirements file."""
    pins = {}
    for line in requirements.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line and not line.startswith("-"):
            pins[line.split("==")[0].strip().lower()] = line.replace(" ", "")
    return pins


def kit_wheel(out_dir: Path, source: Path = ROOT) -> Path:
    """Build the kit's wheel (pyproject.toml) from `source` into `out_dir` and return its path. It is built
    from a scratch copy of the packages, so the checkout gains no build/ or egg-info folder. With the
    full repo as source the wheel holds the grader and attn_ref (instructor-side channels only)."""
    import importlib.util
    import tempfile

    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="attn-wheel-") as tmp:
        src = Path(tmp) / "kit"
        src.mkdir()
        shutil.copy2(source / "pyproject.toml", src / "pyproject.toml")
        for folder in ("autograder", "attn_ref"):
            if (source / folder).is_dir():
                shutil.copytree(source / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
        # the running environment's setuptools when it has one (no download); else pip fetches it
        flags = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
        built = Path(tmp) / "wheel"
        p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *flags, "-w", str(built),
                            str(src)], capture_output=True, text=True)
        if p.returncode:
            raise RuntimeError(f"building the kit's wheel failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        wheel = next(built.glob("*.whl"))
        shutil.copy2(wheel, out_dir / wheel.name)
    return out_dir / wheel.name


# ------------------------------------------------------------------------------- gradescope --

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu 22.04 or 24.04; no GPU,
# little disk: torch is the CPU build). numpy 2.4 needs Python 3.11 or newer, and the sandbox runs student
# code under a uid of its own, so the interpreter must be one other users can run (not under /root):
# python3.13, 3.12 or 3.11 (or python3) in any folder on PATH, else the distribution's python3.12 or python3.11
# with its venv module from apt (24.04 has 3.12; 22.04's main archive has 3.11). AUTOGRADER_ROOT moves
# /autograder. Every step's output goes to the build log as it comes; a step that fails ends the script with
# one line, "setup.sh: FAILED: <step>: <its cause>", last in the log.
set -Eeuo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
trap 'echo "setup.sh: FAILED: line $LINENO: $BASH_COMMAND (exit status $?)" >&2' ERR
CANDIDATES="python3.13 python3.12 python3.11 python3"
# "<major>.<minor> <venv and ensurepip importable: 1|0> <others can run it and read its library: 1|0>"
PROBE='
import importlib.util, os, stat, sys, sysconfig
def shared(path, bits):
    for p in {os.path.abspath(path), os.path.realpath(path)}:
        parents = [os.path.dirname(p)]
        while parents[-1] != os.path.dirname(parents[-1]):
            parents.append(os.path.dirname(parents[-1]))
        if any(not os.stat(d).st_mode & stat.S_IXOTH for d in parents) or os.stat(p).st_mode & bits != bits:
            return False
    return True
venv = all(importlib.util.find_spec(m) for m in ("venv", "ensurepip"))
ok = shared(sys.executable, stat.S_IXOTH) and shared(sysconfig.get_path("stdlib"), stat.S_IROTH | stat.S_IXOTH)
print("%d.%d %d %d" % (sys.version_info[0], sys.version_info[1], venv, ok))
'

probe() {
    "$1" -c "$PROBE" 2>/dev/null || echo "0.0 0 0"
}

# The first usable interpreter, by candidate (newest first), then by PATH order: every folder on PATH is
# looked in, so an unusable python3.12 early on PATH does not hide a usable one later. Usable: 3.11+, with
# venv, and other users can run it.
pick_python() {
    local name dir path version venv shared dirs
    IFS=: read -r -a dirs <<<"$PATH"
    for name in $CANDIDATES; do
        for dir in "${dirs[@]}"; do
            path="${dir:-.}/$name"
            [ -f "$path" ] && [ -x "$path" ] || continue
            read -r version venv shared <<<"$(probe "$path")"
            if [ "${version%%.*}" = 3 ] && [ "${version#*.}" -ge 11 ] && [ "$venv" = 1 ] && [ "$shared" = 1 ]; then
                echo "$path"
                return 0
            fi
        done
    done
    return 1
}

# The distribution's packages: python3.12 (Ubuntu 24.04), else python3.11 (22.04), each with its venv.
# apt's output goes to the log (on stderr: this function's stdout is the interpreter's path).
install_python() {
    local v
    DEBIAN_FRONTEND=noninteractive apt-get update >&2 || true
    for v in 3.12 3.11; do
        if DEBIAN_FRONTEND=noninteractive apt-get install -y "python$v" "python$v-venv" >&2; then
            hash -r
            pick_python && return 0
        fi
    done
    return 1
}

# Run one step with its output shown as it comes; if it fails, end with the FAILED line naming the step and
# its cause (pip's last "ERROR:" line, else the step's last line of output).
step() {
    local what=$1 log cause
    shift
    log=$(mktemp)
    if "$@" 2>&1 | tee "$log"; then
        rm -f "$log"
        return 0
    fi
    cause=$(grep -E '^(ERROR|error|Error)' "$log" | tail -n 1 || true)
    [ -n "$cause" ] || cause=$(grep -v -E '^[[:space:]]*$' "$log" | tail -n 1 || true)
    rm -f "$log"
    trap - ERR
    echo "setup.sh: FAILED: $what: ${cause:-it exited with an error and printed nothing}" >&2
    exit 1
}

main() {
    local py
    if ! py=$(pick_python) && ! py=$(install_python); then
        trap - ERR
        echo "setup.sh: FAILED: no Python 3.11+ with venv that other users can run ($CANDIDATES on PATH), and" \\
             "apt-get could not install python3.12 or python3.11 with venv; choose Gradescope's Ubuntu 24.04" \\
             "(or 22.04) base image" >&2
        exit 1
    fi
    echo "setup.sh: making $ROOT/venv with $py ($(probe "$py" | cut -d' ' -f1))"
    step "making the venv with $py" "$py" -m venv "$ROOT/venv"
    NUMPY=$(grep -E '^numpy==' "$ROOT/source/requirements-student.txt" | cut -d' ' -f1)
    TORCH=$(grep -E '^torch==' "$ROOT/source/requirements-student.txt" | cut -d' ' -f1)
    PSUTIL=$(grep -E '^psutil==' "$ROOT/source/requirements-student.txt" | cut -d' ' -f1 || true)
    step "pip could not install $NUMPY $PSUTIL" "$ROOT/venv/bin/pip" install --no-cache-dir "$NUMPY" $PSUTIL
    step "pip could not install $TORCH (the CPU build)" \\
        "$ROOT/venv/bin/pip" install --no-cache-dir "$TORCH" --index-url https://download.pytorch.org/whl/cpu
    step "compiling the grader" \\
        "$ROOT/venv/bin/python" -m compileall -q "$ROOT/source/autograder" "$ROOT/source/attn_ref"
    echo "setup.sh: done: $ROOT/venv"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then  # run, not sourced (the tests source it to call its functions)
    main
fi
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Grades /autograder/submission into /autograder/results/results.json. AUTOGRADER_ROOT moves that
# root (local runs); AUTOGRADER_PYTHON names the interpreter (default: the venv setup.sh made).
# The grader writes results.json even when it fails; if its Python cannot run at all, this does.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PY="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
cd "$ROOT/source" || exit 1
"$PY" -m autograder.instructor.gradescope
status=$?
if [ "$status" -ne 0 ]; then
    echo "run_autograder: the grader's Python exited with status $status" >&2
    cat > "$ROOT/results/results.json" <<'JSON'
%s
JSON
fi
exit 0
"""


def fallback_results() -> str:
    """The results.json run_autograder writes when the grader's Python cannot run (static JSON)."""
    from .gradescope import failed_results

    return json.dumps(failed_results(" (grader error: its Python could not start or was stopped)"))


def secret_file(zip_path: Path) -> Path:
    """Where the course secret of the zip at `zip_path` is kept: beside it, `autograder.secret`. A rebuild
    without a secret given keeps this one, so the hidden inputs of earlier Gradescope runs stay reproducible."""
    return Path(zip_path).with_suffix(".secret")


def write_secret(path: Path, secret: str) -> None:
    """`secret` in `path`, mode 0600 from its creation on (never readable by others, not even for a moment)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a file that was there already keeps its mode otherwise
        os.write(fd, (secret + "\n").encode())
    finally:
        os.close(fd)


def autograder_zip(out: Path = DIST / "autograder.zip", secret: str | None = None,
                   hidden_visibility: str = DEFAULT_HIDDEN_VISIBILITY, bonus_policy: str = DEFAULT_BONUS_POLICY) -> Path:
    """dist/autograder.zip: setup.sh, run_autograder, the full grader, attn_ref, the course secret and
    the Gradescope visibility of the hidden checks. The secret is also written beside the zip, readable by its
    owner only (dist/autograder.secret: see secret_file), for `make regrade SECRET_FILE=...`."""
    if hidden_visibility not in GRADESCOPE_VISIBILITIES:
        raise ValueError(f"hidden visibility {hidden_visibility!r}: one of {', '.join(GRADESCOPE_VISIBILITIES)}")
    kept = secret_file(out)
    secret = (secret or os.environ.get("COURSE_SECRET") or (kept.read_text().strip() if kept.is_file() else "")
              or secrets.token_hex(16))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_secret(kept, secret)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER % fallback_results())):
            zip_text(z, name, text, 0o755)
        for folder in ("autograder", "attn_ref"):
            for path in sorted((ROOT / folder).rglob("*.py")):
                zip_text(z, str(path.relative_to(ROOT)), path.read_bytes())
        zip_text(z, "requirements-student.txt", (ROOT / "requirements-student.txt").read_bytes())
        zip_text(z, "course_secret", secret)
        zip_text(z, "hidden_visibility", hidden_visibility)
        zip_text(z, "bonus_policy", bonus_policy)
    return out


def setup_environment(root: Path, env: dict | None = None) -> Path:
    """Run `root`/source/setup.sh as Gradescope does (AUTOGRADER_ROOT=root, its environment `env`), making
    `root`/venv; return its python. The venv is kept while setup.sh and the requirements stay the same (a
    stamp of both inside it). A failed setup raises RuntimeError with the script's last lines (its FAILED line)."""
    import hashlib

    source = root / "source"
    want = hashlib.sha256((source / "setup.sh").read_bytes() + (source / "requirements-student.txt").read_bytes())
    stamp, python = root / "venv" / ".setup-stamp", root / "venv" / "bin" / "python"
    if stamp.is_file() and stamp.read_text() == want.hexdigest() and python.exists():
        return python
    shutil.rmtree(root / "venv", ignore_errors=True)
    print(f"running the zip's setup.sh to make {root / 'venv'} (once: it is kept while setup.sh is the same)")
    p = subprocess.run(["bash", str(source / "setup.sh")], env={**(os.environ if env is None else env),
                       "AUTOGRADER_ROOT": str(root.resolve())}, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError("setup.sh failed:\n" + "\n".join((p.stdout + p.stderr).splitlines()[-12:]))
    stamp.write_text(want.hexdigest())
    return python


def gradescope_local(submission: Path, zip_path: Path = DIST / "autograder.zip",
                     root: Path = DIST / "gradescope-local", python: str | None = None,
                     preexec: Callable[[], None] | None = None, setup_env: dict | None = None) -> Path:
    """Lay out `root` like Gradescope's /autograder, run the zip's run_autograder there, return results.json.
    The grader runs in the environment the zip's setup.sh builds in `root`/venv (setup_environment; kept
    between runs), as on Gradescope, unless `python` names another interpreter.
    `preexec` runs in the new process before run_autograder (e.g. to enter a cgroup with Gradescope's limits)."""
    if root.exists():
        for p in [root, *root.rglob("*")]:  # a previous run left these root-only
            if p.is_dir():
                p.chmod(0o755)
        for p in root.iterdir():  # everything but the venv setup.sh made
            if p.name == "venv":
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
    (root / "source").mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(root / "source")
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    (root / "run_autograder").chmod(0o755)
    sub = root / "submission"
    if Path(submission).is_dir():
        # links stay links, as in a Gradescope upload from GitHub or Bitbucket
        shutil.copytree(submission, sub, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        sub.mkdir()
        shutil.copy2(submission, sub / Path(submission).name)
    (root / "results").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRADER_PYTHON"}
    env["AUTOGRADER_ROOT"] = str(root.resolve())
    if python:
        env["AUTOGRADER_PYTHON"] = python
    else:  # run_autograder's own default: $ROOT/venv/bin/python
        setup_environment(root, setup_env)
    subprocess.run(["bash", str(root / "run_autograder")], env=env, check=True, preexec_fn=preexec)
    return root / "results" / "results.json"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder.instructor.build")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("release")
    r.add_argument("--out", default=str(DIST / "student"))
    a = sub.add_parser("autograder")
    a.add_argument("--out", default=str(DIST / "autograder.zip"))
    a.add_argument("--secret", help="course secret for hidden-check seeds (default: $COURSE_SECRET, else the one "
                   "kept beside the zip by an earlier build, else random)")
    a.add_argument("--hidden-visibility", choices=GRADESCOPE_VISIBILITIES, default=DEFAULT_HIDDEN_VISIBILITY,
                   help="when students see the hidden checks on Gradescope (default: %(default)s, so they see "
                        "their total at once)")
    for q in (r, a):
        q.add_argument("--bonus", choices=BONUS_POLICIES, default=DEFAULT_BONUS_POLICY,
                       help="the bonus stages apart from the core points, or folded into the score (default: %(default)s)")
    g = sub.add_parser("gradescope-local")
    g.add_argument("--submission", required=True)
    g.add_argument("--zip", default=str(DIST / "autograder.zip"))
    g.add_argument("--root", default=str(DIST / "gradescope-local"))
    args = p.parse_args(argv)
    try:
        return build(args)
    except NotABuild as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def build(args) -> int:
    """The command `args` names (see main)."""
    if args.cmd == "release":
        print(f"wrote the student repo to {release(Path(args.out), args.bonus)}")
    elif args.cmd == "autograder":
        out = autograder_zip(Path(args.out), args.secret, args.hidden_visibility, args.bonus)
        print(f"wrote {out} and its course secret {secret_file(out)} (yours alone to read: "
              f"`make regrade DIR=... SECRET_FILE={secret_file(out)}` draws Gradescope's hidden inputs)")
    else:
        if not Path(args.zip).is_file():
            autograder_zip(Path(args.zip))
        print(f"results: {gradescope_local(Path(args.submission), Path(args.zip), Path(args.root))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
