"""Every rule a check enforces is written where the student reads it: each check names its sentence,
and that sentence is in its stage's stub docstrings or in the student README, word for word."""
import ast
import re

from conftest import EXERCISES

from autograder.declarations import REFERENCE_RULE, WORKED_RULE
from autograder.instructor.build import student_readme
from autograder.stages import BY_NAME, CHECKS


def norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def docstrings(path) -> str:
    tree = ast.parse(path.read_text())
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    return " ".join(norm(ast.get_docstring(n) or "") for n in nodes)


def student_reads(stage: str) -> str:
    return norm(student_readme()) + " " + " ".join(docstrings(EXERCISES / f) for f in BY_NAME[stage].files)


def test_every_check_names_a_sentence_the_student_reads():
    missing = [(c.id, c.rule) for c in CHECKS if not c.rule or norm(c.rule) not in student_reads(c.stage)]
    assert not missing, missing


def test_the_kit_wide_rules_are_in_the_student_readme_and_a_made_up_one_is_not():
    text = norm(student_readme())
    assert norm(WORKED_RULE) in text and norm(REFERENCE_RULE) in text
    assert "10 seconds" in text and "make worked" in text and "bonus" in text
    assert norm("Raises ValueError if the queries are empty.") not in student_reads("masking")


def test_rules_name_what_the_issue_found_unwritten():
    """The three rules that were enforced before they were written down."""
    assert "may not import scipy, torch" in docstrings(EXERCISES / "softmax.py")
    assert "Raises ValueError if a query row has no allowed key" in docstrings(EXERCISES / "tiled.py")
    assert "Buffers (a causal mask, say) and submodules without parameters (Dropout) are fine" in \
        docstrings(EXERCISES / "module.py")
