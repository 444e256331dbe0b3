"""Each sentence a student can see lives in one place a maintainer can find: its stage's declaration
(`autograder/stages/<stage>.py`) or, for kit-wide text, `autograder/messages.py`.

The walk grades the stubs, the solutions and every catalogued mutant (`MUTANTS`; each stage's first in
`make test-fast`, the rest slow: `tiered`), renders what a student sees (the terminal report, plain and `V=1`,
and for a mutant every rung `make hint` climbs after the grade) and fails on a line that says more than the
allowed modules wrote. The rule, line by line, with runs of whitespace read as one space:

1. The skeletons: every string constant and f-string of `messages.py` and of the stage modules (those that
   declare a `STAGE`), read with ast. An f-string's `{...}` parts, and `{name}` / `%s`-style placeholders of
   `.format` and `%` templates, are wildcards; the literal text between them is the skeleton's. A skeleton is
   used line by line (split at its newlines) and also whole (a docstring's paragraph is shown as one line).
2. Each skeleton line with a word of two letters or more is searched for in the output line; where it matches,
   its literal parts are covered. What a wildcard matched is not covered: it is a value, and must pass step 4.
3. The values of the run are covered wherever they occur: the messages of the student's exceptions, what their
   code printed, the lines of their files, and the message of a check that could not read their result
   (Failure.UNREADABLE: what a library raised on their value): text the student wrote or the libraries raised.
4. What is left must be values: a word (letters only, three or more) left uncovered fails the line unless it is
   a name: an identifier of the submission's files, of an allowed module (function, variable, argument,
   attribute, stage or check name), an exception's type, a folder of the submission's path. Numbers, paths,
   shapes and code are not words.

`test_the_walk_sees_a_sentence_written_elsewhere` proves the rule can fail: a sentence added by a renderer, by
the next step or by a hint, none of them written in the allowed modules, is flagged.
"""
import ast
import re
from functools import cache

import pytest
from conftest import EXERCISES, GRADER_ROOT, MUTANTS, grade, tiered, variant

from autograder.feedback import hints
from autograder.report import terminal as terminal_module
from autograder.report.terminal import terminal
from autograder.results import Failure
from autograder.stages import CATALOGUE, STAGES

PLACEHOLDER = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[sdrfgi]|\{[^{}\s]*\}")
WORD = re.compile(r"(?<![\w./\\`'-])[A-Za-z]{3,}(?![\w./(\\`'-])")


def allowed_modules() -> list:
    """messages.py, every module that declares a stage, and the declarations of the articles' worked numbers
    (stages/article_numbers.py: each quantity's words and the sections the kit sends a student to)."""
    stages = GRADER_ROOT / "stages"
    return [GRADER_ROOT / "messages.py", stages / "article_numbers.py"] + sorted(
        {stages / f"{s.module.rsplit('.', 1)[1]}.py" for s in STAGES})


def _skeletons(tree) -> list[tuple]:
    """Each string of a module as a tuple of literal parts, None for a wildcard."""
    inside, out = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    inside.add(id(v))
                    parts.append(str(v.value))
                else:
                    parts.append(None)
            out.append(tuple(parts))
    out += [(n.value,) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in inside]
    return out


def _names(tree) -> set[str]:
    """The identifiers a module defines or uses: what may stand as a value."""
    found = set()
    for n in ast.walk(tree):
        for name in (getattr(n, "id", None), getattr(n, "attr", None), getattr(n, "arg", None),
                     getattr(n, "name", None) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.alias)) else None):
            if isinstance(name, str):
                found.update(name.split("."))
    return found


def _pattern(pieces: list) -> tuple | None:
    """(its literal pieces in order, the longest) for one skeleton line: None for one with no word in it."""
    lits = tuple(p for p in pieces if p is not None)
    if not any(re.search(r"[A-Za-z]{2}", p) for p in lits):
        return None
    return lits, max(lits, key=len)


def _space(text: str) -> str:
    """Runs of whitespace as one space, lower case (a template may capitalise a declared sentence's first word)."""
    return re.sub(r"\s+", " ", text).lower()


@cache
def allowed(paths: tuple = ()) -> tuple[dict, frozenset]:
    """({a whole word inside a skeleton's longest literal ("" where none): the skeletons}, the names) of the
    allowed modules (or of `paths`)."""
    patterns, names = set(), set()
    for path in paths or allowed_modules():
        tree = ast.parse(path.read_text())
        names |= _names(tree)
        for sk in _skeletons(tree):
            split = []
            for part in sk:  # the templates' own placeholders are wildcards too
                if part is None:
                    split.append(None)
                    continue
                for i, bit in enumerate(PLACEHOLDER.split(part)):
                    split += [None] * bool(i) + ([bit] if bit else [])
            lines, whole = [[]], []
            for part in split:
                if part is None:
                    lines[-1].append(None)
                    whole.append(None)
                    continue
                for i, chunk in enumerate(part.split("\n")):
                    if i:
                        lines.append([])
                    if chunk:
                        lines[-1].append(_space(chunk))
                whole.append(_space(part))
            # a value may break its line (a printed array): a piece of two words or more covers on its own too
            alone = [[p] for p in whole if p and re.search(r"[A-Za-z]{2,}\W+[A-Za-z]{2,}|[A-Za-z]{5}", p)]
            patterns.update(filter(None, map(_pattern, [*lines, whole, *alone])))
    index: dict = {}
    for lits, longest in patterns:
        inside = [m.group() for m in re.finditer(r"\w{3,}", longest) if 0 < m.start() and m.end() < len(longest)]
        index.setdefault(max(inside, key=len, default=""), []).append(lits)
    return index, frozenset(names)


def _cover(line: str, lits: tuple, covered: list) -> None:
    """Mark the literal pieces of every match of one skeleton in `line` (wildcards between them match anything:
    the leftmost match of each piece after the one before is a match whenever there is one)."""
    at = 0
    while True:
        spans = []
        for lit in lits:
            i = line.find(lit, at)
            if i < 0:
                return
            spans.append((i, i + len(lit)))
            at = i + len(lit)
        for a, b in spans:
            covered[a:b] = [True] * (b - a)


def unexplained(text: str, values: list[str] = (), names: set[str] = frozenset(), paths: tuple = ()) -> list[str]:
    """The lines of `text` that say more than the allowed modules wrote (the rule: the module's docstring), each
    with its words that nothing covered."""
    index, known = allowed(paths)
    known = known | set(names)
    value_lines = {_space(v).strip() for text_ in values for v in text_.splitlines() if len(v.strip()) > 3}
    bad = []
    for raw in text.splitlines():
        line = _space(raw)
        covered = [False] * len(line)
        for value in value_lines:
            _cover(line, (value,), covered)
        for lits in [p for w in ("", *set(re.findall(r"\w+", line))) for p in index.get(w, ())]:
            _cover(line, lits, covered)
        words = [m.group() for m in WORD.finditer(re.sub(r"\s+", " ", raw))
                 if not all(covered[m.start():m.end()]) and m.group() not in known]
        if words:
            bad.append(f"{raw.strip()}    <- not from the allowed modules: {' '.join(words)}")
    return bad


def run_values(res) -> tuple[list[str], set[str]]:
    """(the run's own text: its exceptions' messages, its printed output, its files' lines; the files' names)."""
    values, names = [], set(res.submission.parts)
    for sr in res.stages.values():
        for r in sr.checks:
            if r.error:
                values.append(str(r.error.get("message", "")))
                names.add(str(r.error.get("type")))
            if r.failure == Failure.UNREADABLE:  # what a library raised reading the student's odd value
                values.append(r.message)
            values.append(r.output)
    for path in sorted(res.submission.glob("*.py")):
        source = path.read_text()
        values.append(source)
        try:
            names |= _names(ast.parse(source))
        except SyntaxError:
            pass
    return values, names


def seen(res) -> str:
    """What a student reads of a grade: the terminal report, plain and verbose."""
    return terminal(res) + "\n" + terminal(res, verbose=True)


def climbed(submission, res) -> str:
    """Every rung `make hint` gives after this grade, climbed to the last of the first unfinished stage's ladder."""
    hints.remember_run(res)
    out = []
    for _ in range(12):
        out.append(hints.next_hint(submission))
        if "that was the last hint" in out[-1] or out[-1].startswith("Every stage"):
            break
    return "\n".join(out)


def assert_from_allowed(text: str, res) -> int:
    values, names = run_values(res)
    bad = unexplained(text, values, names)
    assert not bad, "sentences from outside messages.py and the stage modules:\n" + "\n".join(bad)
    return len(text.splitlines())


@pytest.fixture(scope="module")
def stubs_result():
    return grade(EXERCISES, seed=0)


def test_the_stubs_say_only_allowed_sentences(stubs_result):
    assert_from_allowed(seen(stubs_result), stubs_result)


def test_the_solutions_say_only_allowed_sentences(solutions_result):
    assert_from_allowed(seen(solutions_result), solutions_result)


@pytest.mark.parametrize("mistake", tiered(list(MUTANTS), lambda i: CATALOGUE[i].stage))
def test_a_mutant_says_only_allowed_sentences(tmp_path, mistake):
    edits, stages = MUTANTS[mistake]
    submission = variant(tmp_path, edits)
    res = grade(submission, stages=stages)
    assert_from_allowed(seen(res) + "\n" + climbed(submission, res), res)


def test_every_hint_rung_is_allowed():
    """The ladders of every diagnosis and every stage's general hints, as `make hint` prints them."""
    from autograder.feedback.hint_ladders import ladder
    from autograder.stages import HINTS

    text = "\n".join([r for m in CATALOGUE.values() for r in ladder(m)] + [r for h in HINTS.values() for r in h])
    assert not unexplained(text)


def test_the_walk_sees_a_sentence_written_elsewhere(solutions_result, tmp_path, monkeypatch):
    """The rule can fail: a sentence a renderer adds, one in the next step, and one in a value the kit fills in
    (a check's message) are each flagged; the same report without them passes."""
    values, names = run_values(solutions_result)
    assert not unexplained(seen(solutions_result), values, names)
    monkeypatch.setattr(terminal_module, "text_lines",
                        lambda text, limit: [*(line for line in text.splitlines() if line.strip()),
                                             "Remember to stretch your legs between stages."])
    bad = unexplained(terminal(solutions_result), values, names)
    assert len(bad) == 1 and "stretch" in bad[0] and "legs" in bad[0], bad
    # a sentence written in a renderer's f-string around an allowed value is seen too
    assert unexplained("Your grade is saved in the cloud: softmax passed", values, names)
    # and one hidden in the next step, after an allowed template
    step = solutions_result.next_step + " Well done, go get a coffee now."
    assert unexplained(step, values, names) and not unexplained(solutions_result.next_step, values, names)


# written nowhere: the words of four allowed templates ('Look at {where}. {question}', the mask inverted (`~` added),
# ', then ', 'the failing {stage} check passes') put together around a value
ASSEMBLED = "Look at the mask inverted (`~` added), then the failing softmax check passes"


def test_the_walk_misses_an_assembled_sentence():
    """The walk's leniency, proved: a piece of two words or more of any allowed string covers text on its own, so
    a sentence written elsewhere out of the allowed modules' words passes."""
    assert not unexplained(ASSEMBLED)


def test_messages_is_a_leaf():
    """messages.py imports nothing (the standard library would do; the package never): any part may read it."""
    tree = ast.parse((GRADER_ROOT / "messages.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
