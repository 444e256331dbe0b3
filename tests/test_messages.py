"""Each sentence a student can see lives in one place a maintainer can find: its stage's declaration
(`autograder/stages/<stage>.py`) or, for kit-wide text, `autograder/messages.py` (and the names of the reference's
intermediate steps, where each is computed: `autograder/feedback/steps.py`). One exception: the child
(`autograder/child/`, copied alone into the sandbox) cannot import messages.py, so what it raises or prints (the
run-time guard's refusal, the invariants' words) is written there; the walk reads it as the run's own text (3).

The walk grades the stubs, the solutions and every catalogued mutant (`MUTANTS`; each stage's first in
`make test-fast`, the rest slow: `tiered`), renders what a student sees (the terminal report, plain and `V=1`, the
`make report` page's text, `make watch`'s screen, the Gradescope results' text, and for a mutant every rung
`make hint` climbs after the grade) and fails on a line that says more than the
allowed modules wrote. The rule, line by line, with runs of whitespace read as one space:

1. The skeletons: every string constant and f-string of `messages.py` and of the stage modules (those that
   declare a `STAGE`), read with ast. An f-string's `{...}` parts, and `{name}` / `%s`-style placeholders of
   `.format` and `%` templates, are wildcards; the literal text between them is the skeleton's. A skeleton is
   used line by line (split at its newlines) and also whole (a docstring's paragraph is shown as one line); a
   skeleton line with no word of two letters is not used.
2. A skeleton line matches where all its literal parts appear in order (each the leftmost after the one before),
   the first starting and the last ending at a word's edge unless a wildcard opens or closes the line; what lies
   between two literal parts is what a wildcard matched. A match counts (its literal parts are covered) only when
   every word in its wildcards is a value (3, 4) or lies in the literal parts of matches that count: a template's
   value may be another whole template (nesting), never a piece of one. A line may be several matches side by side
   (the code concatenates templates). A piece of a skeleton line covers nothing on its own.
3. The values of the run are covered wherever they occur: the messages of the student's exceptions (the child's
   own words among them), what their code printed, the lines of their files, and the message of a check that
   could not read their result (Failure.UNREADABLE: what a library raised on their value).
4. What is left must be values: a word (letters only, three or more) left uncovered fails the line unless it is
   a name: an identifier of the submission's files, of an allowed module (function, variable, argument,
   attribute, stage or check name), an exception's type, a folder of the submission's path. Numbers, paths,
   shapes and code are not words.
5. A value broken across lines: a line opening with `[` (or `tensor([`, `...`) while a `[` of the lines before is
   still open is a printed array's next line, joined to the line it broke before the rule applies. Nothing else
   joins lines.

`test_the_walk_sees_a_sentence_written_elsewhere` and `test_the_walk_sees_a_sentence_assembled_from_allowed_words`
prove the rule can fail: a sentence added by a renderer, by the next step or by a hint, and one put together from
pieces of allowed templates (which an older rule, where a piece of two words covered on its own, passed), are
flagged.
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
ARRAY_LINE = re.compile(r"\s*(?:\[|tensor\(\[|\.\.\.)")  # a printed array's continuation line


def _skeleton_lines(sk: tuple) -> list[tuple]:
    """One string's skeleton lines: each line as a tuple of literal parts (lower case, whitespace runs as one
    space) and None for a wildcard; and the whole string as one line."""
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
    out = []
    for line in [*lines, whole]:
        merged = []
        for p in line:  # two literals in a row (a line of a string and its next, joined): one literal
            if p is not None and merged and merged[-1] is not None:
                merged[-1] += p
            elif not (p is None and merged and merged[-1] is None):
                merged.append(p)
        if any(p is not None and re.search(r"[A-Za-z]{2}", p) for p in merged):
            out.append(tuple(merged))
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


def _space(text: str) -> str:
    """Runs of whitespace as one space, lower case (a template may capitalise a declared sentence's first word)."""
    return re.sub(r"\s+", " ", text).lower()


def allowed_modules() -> list:
    """messages.py, every module that declares a stage, the declarations of the articles' worked numbers
    (stages/article_numbers.py: each quantity's words and the sections the kit sends a student to), and the
    reference's steps (feedback/steps.py: each intermediate the report's trace shows, named where it is computed)."""
    stages = GRADER_ROOT / "stages"
    return [GRADER_ROOT / "messages.py", stages / "article_numbers.py", GRADER_ROOT / "feedback" / "steps.py"] + sorted(
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


@cache
def allowed(paths: tuple = ()) -> tuple[dict, frozenset]:
    """({a whole word inside a skeleton line's longest literal ("" where none): those skeleton lines}, the names)
    of the allowed modules (or of `paths`)."""
    lines, names = set(), set()
    for path in paths or allowed_modules():
        tree = ast.parse(path.read_text())
        names |= _names(tree)
        for sk in _skeletons(tree):
            lines.update(_skeleton_lines(sk))
    index: dict = {}
    for sk in lines:
        longest = max((p for p in sk if p is not None), key=len)
        inside = [m.group() for m in re.finditer(r"\w{3,}", longest) if 0 < m.start() and m.end() < len(longest)]
        index.setdefault(max(inside, key=len, default=""), []).append(sk)
    return index, frozenset(names)


def _in_word(line: str, i: int) -> bool:
    """Whether position i falls between two letters or digits of one word."""
    return 0 < i < len(line) and line[i - 1].isalnum() and line[i].isalnum()


def _matches(line: str, sk: tuple) -> list[tuple[list, list]]:
    """Every match of one skeleton line in `line`, as (its literals' spans, its inner wildcards' spans): its
    literal parts in order, each the leftmost after the one before; a literal that opens or closes the skeleton
    line starts or ends at a word's edge."""
    lits = [p for p in sk if p is not None]
    open_start, open_end = sk[0] is None, sk[-1] is None
    out = []
    start = line.find(lits[0])
    while start >= 0:
        if open_start or not _in_word(line, start):
            spans, at = [], start
            for lit in lits:
                i = line.find(lit, at)
                if i < 0:
                    return out
                spans.append((i, i + len(lit)))
                at = i + len(lit)
            if open_end or not _in_word(line, at):
                out.append((spans, [(a[1], b[0]) for a, b in zip(spans, spans[1:])]))
        start = line.find(lits[0], start + 1)
    return out


def logical_lines(text: str) -> list[str]:
    """The text's lines, with a printed array's continuation lines (a line opening with '[' while a '[' of the
    lines before is still open) joined to the line the array broke."""
    out: list[list] = []
    for raw in text.splitlines():
        if out and out[-1][1] > 0 and ARRAY_LINE.match(raw):
            out[-1][0] += " " + raw.strip()
            out[-1][1] += raw.count("[") - raw.count("]")
        else:
            out.append([raw, raw.count("[") - raw.count("]")])
    return [line for line, _ in out]


def unexplained(text: str, values: list[str] = (), names: set[str] = frozenset(), paths: tuple = ()) -> list[str]:
    """The lines of `text` that say more than the allowed modules wrote (the rule: the module's docstring), each
    with its words that nothing covered."""
    index, known = allowed(paths)
    known = known | set(names)
    value_lines = {_space(v).strip() for text_ in values for v in text_.splitlines() if len(v.strip()) > 3}
    bad = []
    for raw in logical_lines(text):
        spaced = re.sub(r"\s+", " ", raw)
        line = spaced.lower()
        if len(line) != len(spaced):  # a letter whose lower case is longer: read as written
            line = spaced
        covered = [False] * len(line)
        for value in value_lines:  # the run's own text, wherever it is
            at = line.find(value)
            while at >= 0:
                covered[at:at + len(value)] = [True] * len(value)
                at = line.find(value, at + 1)
        need = [(m.start(), m.end()) for m in WORD.finditer(spaced)
                if m.group() not in known and not all(covered[m.start():m.end()])]
        if not need:
            continue
        found = [m for w in ("", *set(re.findall(r"\w+", line))) for sk in index.get(w, ()) for m in _matches(line, sk)]
        accepted: set = set()
        while True:  # a match whose wildcards hold only values and accepted matches' literals is accepted
            new = [k for k, (spans, gaps) in enumerate(found) if k not in accepted and all(
                all(covered[a:b]) for a, b in need if any(a < g1 and g0 < b for g0, g1 in gaps))]
            if not new:
                break
            for k in new:
                accepted.add(k)
                for a, b in found[k][0]:
                    covered[a:b] = [True] * (b - a)
        words = [spaced[a:b] for a, b in need if not all(covered[a:b])]
        if words:
            bad.append(f"{raw.strip()}    <- not from the allowed modules: {' '.join(words)}")
    return bad


# Python's own names for code that has none of the student's (a line of a generator expression is `<genexpr>:49`)
CODE_NAMES = {"genexpr", "lambda", "listcomp", "dictcomp", "setcomp", "module"}


def run_values(res) -> tuple[list[str], set[str]]:
    """(the run's own text: its exceptions' messages, its printed output, its files' lines; the files' names)."""
    values, names = [], set(res.submission.parts) | CODE_NAMES
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
    """What a student reads of a grade, wherever it is shown: the terminal report, plain and verbose; the
    `make report` page's text; `make watch`'s screen after a grade of every stage; and the Gradescope results'
    text (the summary, each test's name and output; markdown's escapes read as the page shows them)."""
    from autograder.report import watch_screen
    from autograder.report.gradescope_json import results_json
    from autograder.report.html import render
    from autograder.report.watch_screen import screen

    gs = results_json(res)
    shown = [gs["output"], *(f"{t['name']}\n{t['output']}" for t in gs["tests"])]
    fit, watch_screen.fit = watch_screen.fit, lambda line, width=0: line  # the screen's lines unwrapped: one
    try:  # sentence wrapped at 80 columns reads as two pieces
        watched = screen(res, dict(res.stages), list(res.stages), color=False)
    finally:
        watch_screen.fit = fit
    return "\n".join([terminal(res), terminal(res, verbose=True), page_text(render(res)), watched,
                      re.sub(r"\\([\\`*_{}\[\]()#+.!<>|-])", r"\1", "\n".join(shown))])


def page_text(page: str) -> str:
    """The words a browser shows of an HTML page: no styles, scripts or pictures' data; block ends as line ends,
    entities read."""
    import html

    page = re.sub(r"(?is)<(style|script)\b.*?</\1>", "", page)
    page = re.sub(r"(?is)<code>(.*?)</code>", r"`\1`", page)  # code reads as code, as in the terminal
    page = re.sub(r"(?i)<br\s*/?>|</(p|div|li|tr|h\d|pre|table|details|summary|section|caption)>", "\n", page)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


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


@pytest.mark.parametrize("where", ["report page", "watch screen", "Gradescope results"])
def test_the_walk_reads_the_page_the_screen_and_the_gradescope_results(solutions_result, monkeypatch, where):
    """A sentence that only `make report`'s page, `make watch`'s screen or Gradescope's results add is flagged."""
    from autograder.report import gradescope_json, html, watch_screen

    values, names = run_values(solutions_result)
    assert not unexplained(seen(solutions_result), values, names)
    extra = "Remember to stretch your legs between stages."
    if where == "report page":
        render = html.render
        monkeypatch.setattr(html, "render", lambda res: render(res).replace("</body>", f"<p>{extra}</p></body>"))
    elif where == "watch screen":
        screen = watch_screen.screen
        monkeypatch.setattr(watch_screen, "screen", lambda *a, **k: screen(*a, **k) + "\n" + extra)
    else:
        results = gradescope_json.results_json
        monkeypatch.setattr(gradescope_json, "results_json", lambda res: {**results(res), "output": extra})
    bad = unexplained(seen(solutions_result), values, names)
    assert len(bad) == 1 and "stretch" in bad[0], bad


# written nowhere: the words of four allowed templates ('Look at {where}. {question}', the mask inverted (`~` added),
# ', then ', 'the failing {stage} check passes') put together around a value
ASSEMBLED = "Look at the mask inverted (`~` added), then the failing softmax check passes"


def test_the_walk_sees_a_sentence_assembled_from_allowed_words():
    """A piece of an allowed template does not cover on its own: the sentence above, which an older walk passed
    (a piece of two words or more of any allowed string covered), is flagged, and so is a parting line put
    together from allowed words; templates used whole, one nested in another, pass."""
    assert unexplained(ASSEMBLED)
    assert unexplained("with the mask inverted (`~` added) on line 14, then the weights are normalised along another "
                       "axis than the keys, so a query's weights do not sum to 1")
    assert not unexplained("Look at masking.py, function apply_mask. Is any factor applied to the weights after softmax?")
    assert not unexplained("confirmed: with the mask inverted (`~` added) on line 14, the failing masking check passes")
    # the parting line's words (feedback/relations.py, now in messages.py): a template inside a template
    assert not unexplained("line 14: your `weights` equals the reference's weights with the mask inverted (True where "
                           "the reference hides: True must mean may attend)")


def test_messages_is_a_leaf():
    """messages.py imports nothing (the standard library would do; the package never): any part may read it."""
    tree = ast.parse((GRADER_ROOT / "messages.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
