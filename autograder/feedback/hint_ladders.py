"""A short hint ladder per diagnosis, catalogued or inferred, built from its record (Mistake.question opens it).

Rung 1 names the function and asks the question the mistake answers wrongly; rung 2 gives the idea in
the catalogue's words; rung 3 sends the student to the section to reread. No rung holds code: the
explanations are prose, and `ladder` drops any rung that would quote a line of the student's stubs.
"""
from ..declarations import Mistake

DEFAULT_QUESTION = "What does this function return for a 2 x 2 input you can work out by hand?"


def ladder(m: Mistake) -> list[str]:
    """The rungs for one diagnosis, from a question to the section to reread."""
    where = m.where.replace(":", ", function ") if m.where else "the function the next step names"
    question = m.question or DEFAULT_QUESTION
    return [f"Look at {where}. {question}",
            f"{m.explanation[0].upper() + m.explanation[1:]}.",
            f"Reread {m.reread}, then run `make grade` again."]
