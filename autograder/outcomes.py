"""How a check or a call into student code can end, as exception types (a leaf: imports nothing).

Checks raise `Fail`; the sandbox raises the Student* types and `ServerGone`; the student repo's
fixtures raise `MissingFixture`. Anything in the package may import this module.
"""


class Fail(Exception):
    """A check failed. `diagnosis` is a catalogue id when the mistake is recognised."""

    def __init__(self, message: str, diagnosis: str | None = None, arrays: dict | None = None) -> None:
        super().__init__(message)
        self.diagnosis = diagnosis
        self.arrays = arrays  # {"expected", "got", "bad"}: a small 2-D view for the HTML report


class StudentError(Exception):
    """The student's code raised. `info` has type, message, file, line."""

    def __init__(self, info: dict) -> None:
        self.info = info
        super().__init__(f"{info['type']}: {info['message']}")


class StudentAborted(Exception):
    """The child did not answer: it hung (timeout) or died (crash)."""


class StudentTimeout(StudentAborted):
    """No answer within the time limit of one call."""


class StudentCrash(StudentAborted):
    """The child process exited or was killed while a call was running."""


class GraderEnvironment(Exception):
    """The grader's own environment cannot run the student's code at all: the child's interpreter cannot
    start, or a package the grader needs there (numpy, torch) is missing. No line of the submission has run."""


class MissingFixture(Exception):
    """The student repo has no recorded answer for this call: the check needs the full autograder."""


class ServerGone(RuntimeError):
    """The batch's fork server died (see launchers.ForkServer.alive)."""


class DeclarationError(Exception):
    """A stage's declaration is inconsistent (stages/validate.py): raised when the stages are imported."""


class GraderBug(Exception):
    """A check's own code raised where the student's code was not to blame (under the project's tests,
    where such a fault must fail loudly rather than be reported and forgiven)."""


class CannotReplay(Exception):
    """The reference cannot stand in for this student function (a driver has no reference answer)."""
