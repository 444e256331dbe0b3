"""A short hint ladder per diagnosis, catalogued or inferred, built from its record (Mistake.question opens it).

Rung 1 names the function and asks the question the mistake answers wrongly; rung 2 gives the idea in
the catalogue's words; rung 3 sends the student to the section to reread. No rung holds code: the
explanations are prose, and `ladder` drops any rung that would quote a line of the student's stubs.
"""
from .. import messages as say
from ..declarations import Mistake

DEFAULT_QUESTION = say.HINT_DEFAULT_QUESTION


def ladder(m: Mistake) -> list[str]:
    """The rungs for one diagnosis, from a question to the section to reread."""
    where = m.where.replace(":", say.HINT_WHERE_FUNCTION) if m.where else say.HINT_WHERE_DEFAULT
    question = m.question or DEFAULT_QUESTION
    return [say.HINT_RUNG_LOOK.format(where=where, question=question),
            say.HINT_RUNG_IDEA.format(explanation=m.explanation[0].upper() + m.explanation[1:]),
            say.HINT_RUNG_REREAD.format(reread=m.reread)]
