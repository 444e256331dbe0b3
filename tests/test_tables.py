"""Both READMEs' stage tables and totals are the declarations' (instructor/tables.py), never copies."""
from conftest import ROOT

from autograder.instructor import tables
from autograder.instructor.build import student_readme
from autograder.stages import BONUS, BONUS_POINTS, CORE, CORE_POINTS, STAGES, numbers


def test_the_readme_table_is_the_generated_one():
    assert tables.main(["--check"]) == 0, "run `make readme`"
    text = (ROOT / "README.md").read_text()
    assert tables.readme_table() in text
    for s in STAGES:
        assert f"| {s.number} | {s.name}{' (bonus)' if s.bonus else ''} | " in text


def test_the_student_readme_lists_every_stage_and_the_totals():
    text = student_readme()
    assert tables.student_table() in text and tables.student_totals() in text
    assert f"make {CORE_POINTS} points" in tables.student_totals()
    assert f"({numbers(BONUS)}, {BONUS_POINTS} points)" in tables.readme_table()
    assert len(tables.student_table().splitlines()) == 2 + len(CORE) + len(BONUS)


def test_a_stale_table_is_found():
    text = (ROOT / "README.md").read_text()
    stale = text.replace(tables.readme_table(), tables.readme_table().replace(f"{CORE_POINTS} core", "99 core"))
    assert stale != text and tables.with_table(stale) == text


def test_stage_numbers_read_as_a_range():
    stages = sorted(STAGES, key=lambda s: s.number)
    assert numbers(stages[:3]) == f"{stages[0].number}-{stages[2].number}"
    assert numbers([stages[0], stages[2]], " to ") == f"{stages[0].number}, {stages[2].number}"
