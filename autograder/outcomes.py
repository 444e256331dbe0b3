"""How a check or a call into student code can end, as exception types (a leaf: imports nothing).

Checks raise `Fail`; the sandbox raises the Student* types and `ServerGone`; the student repo's
fixtures raise `MissingFixture`. Anything in the package may import this module.
"""


class Fail(Exception):
    """A check failed. `diagnosis` is a catalogue id when the mistake is recognised."""

    def __init__(self, message: str, diagnosis: str | None = None, arrays: dict | None = None,
                 place: tuple[str, str, int] | None = None) -> None:
        super().__init__(message)
        self.diagnosis = diagnosis
        self.arrays = arrays  # {"expected", "got", "bad"}: a small 2-D view for the HTML report
        self.place = place  # (file, function, line) in the submission, where the check read what it faults


class StudentError(Exception):
    """The student's code raised. `info` has type, message, file, line."""

    def __init__(self, info: dict) -> None:
        self.info = info
        super().__init__(f"{info['type']}: {info['message']}")


class StudentAborted(Exception):
    """The child did not answer: it hung (timeout) or died (crash)."""


class BudgetSpent(Exception):
    """The whole grade's time budget ran out: the checks left are not run (the sandbox raises it per call)."""


class StudentTimeout(StudentAborted):
    """No answer within the time limit of one call. `where` is (file, line, function) of the submission line
    it was running, when the child's stack showed one; `loading` the submission file whose body was still
    running (its import never finished), when one was on that stack."""

    def __init__(self, message: str, where: tuple[str, int, str] | None = None, loading: str | None = None) -> None:
        super().__init__(message)
        self.where = where
        self.loading = loading


class NeverLoaded(StudentAborted):
    """A call refused before it started: a submission file it would load (`file`) never finished loading in an
    earlier call of this grade (its body hung), and a module's body runs the same whatever the call."""

    def __init__(self, message: str, file: str) -> None:
        super().__init__(message)
        self.file = file


class StudentCrash(StudentAborted):
    """The child process exited or was killed while a call was running."""


class GraderEnvironment(Exception):
    """The grader's own environment cannot run the student's code at all: the child's interpreter cannot
    start, or a package the grader needs there (numpy, torch) is missing. No line of the submission has run."""


class MissingFixture(Exception):
    """The student repo has no recorded answer for this call: the check needs the full autograder."""


class ServerGone(RuntimeError):
    """The batch's fork server died (see launchers.ForkServer.alive)."""


class ServerNeverStarted(ServerGone):
    """The fork server never said it was ready (its interpreter or its packages are missing): a worker then starts
    new interpreters instead, whose start says what is missing in the environment's words (runner.Worker.start)."""


class DeclarationError(Exception):
    """A stage's declaration is inconsistent (stages/validate.py): raised when the stages are imported."""


class GraderBug(Exception):
    """A check's own code raised where the student's code was not to blame (under the project's tests,
    where such a fault must fail loudly rather than be reported and forgiven)."""


class CannotReplay(Exception):
    """The reference cannot stand in for this student function (a driver has no reference answer)."""


_ESCAPES = None


def plain(text: str) -> str:
    """`text` with no terminal escape sequences and no control characters but newline and tab: what a
    submission writes (an exception's message, printed output, a file name) shown as the characters it
    is, never as a command to the terminal (clear the screen, set the title, hide or overwrite text).
    Carriage returns become newlines; bidirectional overrides, which reorder what is shown, are dropped."""
    global _ESCAPES
    if _ESCAPES is None:
        import re

        _ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, clearing
                              r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window title, links
                              r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
                              r"|\x1b[ -/]*[0-~]?"  # any other escape
                              r"|\x9b[0-?]*[ -/]*[@-~]"  # the 8-bit CSI
                              r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
    if not isinstance(text, str):
        return text
    return _ESCAPES.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def plain_data(value):
    """Every string in a reply from a child (nested in dicts, lists, tuples), made plain."""
    if isinstance(value, str):
        return plain(value)
    if isinstance(value, dict):
        return {plain(k) if isinstance(k, str) else k: plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain_data(v) for v in value)
    return value
