"""The graded record as JSON (`--record FILE`): every stage and check with its status, failure kind,
diagnoses and place, for tools that want the data rather than a report."""
import json

from ..results import Results


def as_text(res: Results) -> str:
    return json.dumps(res.as_json(), indent=2) + "\n"
