"""Text the kit writes for the course staff, made inert: CSV cells a spreadsheet cannot run, terminal lines a
terminal cannot act on. Submission names are chosen by students (`=1+1`, an OSC title sequence), so every
CSV cell and every line to a staff terminal passes through here."""
import csv
from pathlib import Path

from ..outcomes import plain

# OWASP "CSV Injection": a cell starting with one of these is a formula (or starts one) in a spreadsheet. A cell
# starting with the quote itself is quoted too, so that reading a file back (`uncell`) gives the text as written.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
QUOTE = "'"


def cell(value):
    """One CSV cell, safe to open in a spreadsheet: text starting like a formula gets a leading `'` (OWASP's
    advice); numbers and other text are as given."""
    if isinstance(value, str) and value.startswith((*FORMULA_START, QUOTE)):
        return QUOTE + value
    return value


def uncell(text: str) -> str:
    """The text a cell was made from (`cell`'s inverse, for the kit's own CSV files read back)."""
    return text[1:] if text.startswith(QUOTE) else text


def write_csv(path: Path, rows: list[list]) -> None:
    """`rows` (the header first) to `path`, every cell made safe."""
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([[cell(v) for v in row] for row in rows])


def read_csv(path: Path) -> list[dict[str, str]]:
    """A CSV file `write_csv` wrote, as dicts of the cells' texts as given."""
    with open(path, newline="") as f:
        return [{uncell(k): uncell(v or "") for k, v in row.items()} for row in csv.DictReader(f)]


def one_line(text: str) -> str:
    """`text` for one line of a staff terminal: the grade's printable filter (no escape sequence, no control
    character), and its line breaks and tabs as spaces."""
    return " ".join(plain(str(text)).replace("\t", " ").split("\n"))
