"""The student repo: public checks only, fixtures instead of the reference, no solution text."""
import json
import shutil
import subprocess
import sys

import pytest
from conftest import MUTANTS, SOLUTIONS, variant

from autograder.instructor.build import release
from autograder.stages import CATALOGUE, CHECKS, CORE_POINTS

pytestmark = pytest.mark.slow  # builds or runs a whole channel: `make test` only (CONTRIBUTING.md)


@pytest.fixture(scope="module")
def student_repo(tmp_path_factory):
    return release(tmp_path_factory.mktemp("dist") / "student")


def _grade(repo, *args):
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", *args], cwd=repo, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_release_has_no_solutions_nor_reference_and_runs_hidden_checks_as_twins(student_repo):
    names = {p.relative_to(student_repo).as_posix() for p in student_repo.rglob("*") if p.is_file()}
    assert not any(n.startswith(("solutions/", "attn_ref/", "tests/")) for n in names)
    assert not any(n.startswith("autograder/instructor/") for n in names)
    assert "autograder/stages/softmax.py" in names and "autograder/child/worker.py" in names
    assert {"Makefile", "README.md", "requirements-student.txt", "autograder/fixtures.json",
            "exercises/softmax.py"} <= names
    probe = ("import sys; sys.path.insert(0, '.'); from autograder.stages import STAGES, checks_to_run\n"
             "run = [c for s in STAGES for c in checks_to_run(s.name, True)]\n"
             "print(sorted({c.visibility for c in run}), sum(c.points for c in run if c.twin))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=student_repo, capture_output=True, text=True, check=True)
    hidden = sum(c.points for c in CHECKS if c.visibility == "hidden")
    assert out.stdout.split() == ["['public']", str(float(hidden))]  # twins keep their points


def test_release_contains_no_solution_text(student_repo):
    """No line of a solution block (longer than a trivial one) appears in any shipped file."""
    solution_lines = set()
    for path in SOLUTIONS.glob("*.py"):
        inside, given = False, []
        for line in path.read_text().splitlines():
            if "# BEGIN SOLUTION" in line:
                inside = True
            elif "# END SOLUTION" in line:
                inside = False
            elif inside:
                code = line.split("#")[0].strip()
                if len(code) >= 20:
                    solution_lines.add(code)
            else:
                given.append(line)
        given_text = "\n".join(given)  # docstrings state the contract (e.g. d_head = d_model // n_heads)
        solution_lines = {c for c in solution_lines if c not in given_text}
    assert len(solution_lines) > 20
    for path in student_repo.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md", ".json", ".txt", "") and path.name != "Makefile":
            text = path.read_text()
            leaked = [s for s in solution_lines if s in text]
            assert not leaked, (path, leaked)


TWIN_POINTS = f"{sum(c.points for c in CHECKS if c.visibility == 'hidden'):g}"  # the terminal counts every stage's


def test_untouched_release_grades_zero(student_repo):
    """Twins keep their points locally: the total is out of the core points, the twins' share named."""
    out = _grade(student_repo)
    assert f"0/{CORE_POINTS:g}" in out and "not started" in out, out
    assert f"({TWIN_POINTS} of these points are twins:" in out and "the autograder runs on inputs you have not seen" \
        in out, out


def test_solutions_in_release_get_full_public_marks(student_repo, tmp_path):
    repo = tmp_path / "student"
    shutil.copytree(student_repo, repo)
    for f in SOLUTIONS.glob("*.py"):
        shutil.copy2(f, repo / "exercises" / f.name)
    out = _grade(repo)
    assert f"{CORE_POINTS:g}/{CORE_POINTS:g}" in out and "failed" not in out


def test_release_diagnoses_like_the_full_repo(student_repo, tmp_path):
    """A public check's diagnosis works from fixtures: the mask-top-left mutant is named in the release."""
    repo = tmp_path / "student"
    shutil.copytree(student_repo, repo)
    for f in SOLUTIONS.glob("*.py"):
        shutil.copy2(f, repo / "exercises" / f.name)
    mask = repo / "exercises" / "masking.py"
    mask.write_text(mask.read_text().replace("return j <= i + (n_k - n_q)", "return j <= i"))
    out = _grade(repo, "--stage", "masking")
    assert "Diagnosis mask-top-left" in out


def test_student_makefile_targets(student_repo):
    p = subprocess.run(["make", "-n", "grade", "hint", "submit"], cwd=student_repo, capture_output=True, text=True)
    assert p.returncode == 0 and "autograder grade" in p.stdout and "autograder submit" in p.stdout


def release_status(repo, submission, stages) -> dict:
    out = repo / "results.json"
    _grade(repo, "--submission", str(submission), "--stage", ",".join(stages), "--json", str(out))
    return {n: s["status"] for n, s in json.loads(out.read_text())["extra_data"]["stages"].items()}


@pytest.mark.parametrize("mistake", sorted(MUTANTS))
def test_every_catalogued_mistake_fails_its_stage_in_the_release(student_repo, tmp_path, mistake):
    """What the autograder takes points for shows locally: each mutant's stage is failed in the student repo."""
    edits, stages = MUTANTS[mistake]
    home = CATALOGUE[mistake].stage if CATALOGUE[mistake].stage in stages else stages[0]
    status = release_status(student_repo, variant(tmp_path, edits), stages)
    assert status[home] == "failed", status


def test_student_gitignore_covers_what_the_kit_writes(student_repo):
    assert "report.html" in (student_repo / ".gitignore").read_text().split()


def test_no_failed_stage_shows_full_points_locally(student_repo, tmp_path):
    """Every catalogued mistake, graded by the release's own grader (fixtures, twins): a stage that fails
    never shows full points, and the stage the mistake belongs to loses points."""
    subs = {}
    for mistake, (edits, stages) in MUTANTS.items():
        subs[mistake] = (str(variant(tmp_path / mistake, edits)), stages)
    # one fork server per kind of child for the whole batch, as a regrade has (each grade would start its own)
    script = ("import json, sys; sys.path.insert(0, '.'); from autograder.grade import grade\n"
              "from autograder.sandbox import namespaces\n"
              "from autograder.sandbox.launchers import warm_launcher\n"
              "servers = {k: warm_launcher(isolate=namespaces.available(), torch=k == 'torch') for k in ('numpy', 'torch')}\n"
              "out = {}\n"
              "for name, (sub, stages) in json.load(open(sys.argv[1])).items():\n"
              "    res = grade(sub, stages=stages, zygote=servers)\n"
              "    out[name] = {n: [s.status, s.score, s.max_score] for n, s in res.stages.items()}\n"
              "print(json.dumps(out))\n")
    (tmp_path / "subs.json").write_text(json.dumps(subs))
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path / "subs.json")], cwd=student_repo,
                       capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stderr[-2000:]
    found = json.loads(p.stdout.strip().splitlines()[-1])
    full_but_failed = [(m, n) for m, stages in found.items() for n, (status, score, top) in stages.items()
                       if status != "passed" and score >= top]
    assert not full_but_failed
    for mistake, stages in found.items():
        first = MUTANTS[mistake][1][0]
        assert stages[first][0] != "passed" and stages[first][1] < stages[first][2], (mistake, stages[first])


def test_pip_install_dot_in_the_release_installs_its_grader(student_repo, tmp_path):
    """Found by a stranger TA: both READMEs tell notebook students to `pip install .` in the student repo, which
    had no pyproject.toml. It has one now: the wheel it builds holds the public grader and its fixtures, no
    reference and no instructor code."""
    import zipfile

    from autograder.instructor.build import kit_wheel

    wheel = kit_wheel(tmp_path / "wheel", source=student_repo)
    names = zipfile.ZipFile(wheel).namelist()
    assert "autograder/fixtures.json" in names and "autograder/cli.py" in names
    assert not any(n.startswith(("attn_ref/", "autograder/instructor/")) for n in names)


# The Dev Container specification's JSON schema (containers.dev, devContainer.base.schema.json) is not
# available offline here: this is its part for the keys the release uses, with the types the spec defines
# (an image-based container: `image` a string; a lifecycle command a string, an array of strings, or an
# object of either; customizations an object keyed by tool).
COMMAND = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1},
                     {"type": "object", "additionalProperties": {"oneOf": [
                         {"type": "string"}, {"type": "array", "items": {"type": "string"}}]}}]}
DEVCONTAINER_SCHEMA = {
    "type": "object",
    "required": ["image"],
    "properties": {
        "name": {"type": "string"},
        "image": {"type": "string", "minLength": 1},
        "containerEnv": {"type": "object", "additionalProperties": {"type": "string"}},
        "remoteUser": {"type": "string"},
        "features": {"type": "object"},
        "onCreateCommand": COMMAND, "updateContentCommand": COMMAND, "postCreateCommand": COMMAND,
        "postStartCommand": COMMAND, "postAttachCommand": COMMAND,
        "customizations": {"type": "object", "properties": {"vscode": {"type": "object", "properties": {
            "extensions": {"type": "array", "items": {"type": "string"}},
            "settings": {"type": "object"}}, "additionalProperties": False}}},
    },
    "additionalProperties": False,  # a misspelt key would be ignored by the tools: none is allowed here
}


def test_the_release_ships_a_dev_container_the_spec_accepts(student_repo):
    import jsonschema

    config = json.loads((student_repo / ".devcontainer" / "devcontainer.json").read_text())
    jsonschema.validate(config, DEVCONTAINER_SCHEMA)
    assert "python:" in config["image"] and "3.12" in config["image"]
    # the command it runs after creation is a target of the release's own Makefile: the venv, torch's CPU build
    command = config["postCreateCommand"]
    assert command == "make setup"
    dry = subprocess.run(["make", "-n", "setup"], cwd=student_repo, capture_output=True, text=True)
    assert dry.returncode == 0 and "requirements-student.txt" in dry.stdout, dry.stdout + dry.stderr
    readme = (student_repo / "README.md").read_text()
    assert ".devcontainer/devcontainer.json" in readme and "Codespaces" in readme and "Chromebook" in readme
    assert "Windows without WSL" in readme and "Nothing\ndiffers there: it is Linux" in readme
    # the schema catches what it is meant to: a misspelt key, a command of the wrong type
    for broken in ({**config, "postCreateComand": command}, {**config, "postCreateCommand": 1}, {"name": "x"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, DEVCONTAINER_SCHEMA)
