"""Renderers of graded results: each is a function of one `Results` record (autograder/results.py)
and returns text. They show results and advice; they do not compute them, parse messages or read the
submission. `python -m autograder grade` writes each listed file renderer with `--<name> FILE`:
adding one is its module plus one line in RENDERERS."""
import importlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Renderer:
    name: str  # the grade command's option: --<name> FILE
    target: str  # "module:function" under autograder.report, function(res) -> str
    help: str
    pictures: bool = False  # it shows the attention heatmaps, which the grade must collect
    announce: bool = False  # say "wrote FILE" once written

    def render(self, res) -> str:
        module, func = self.target.split(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), func)(res)

    def write(self, res, path: Path) -> None:
        Path(path).write_text(self.render(res))


RENDERERS: list[Renderer] = [
    Renderer("json", "gradescope_json:as_text", "write Gradescope-format results to this file"),
    Renderer("html", "html:render", "also write a self-contained HTML report with heatmaps to this file",
             pictures=True, announce=True),
    Renderer("record", "record:as_text", "write the graded record itself (Results.as_json) to this file"),
    Renderer("classroom", "classroom:as_text", "write each stage's GitHub Classroom runner result to this file"),
]
FILE_RENDERERS: dict[str, Renderer] = {r.name: r for r in RENDERERS}
