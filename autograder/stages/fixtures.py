"""Expected values for the public checks, so the student repo can grade them without attn_ref.

In the full repo the public checks call the reference through a Recorder; `make release`
saves what it recorded to autograder/fixtures.json. In the student repo a Replayer answers
the same calls from that file. A call is keyed by the function's name and a hash of its
inputs, so a fixture can only answer the exact question it was recorded for.
"""
import hashlib
import json
from pathlib import Path

from ..child import wire
from ..outcomes import MissingFixture

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures.json"  # beside the package, written by the release


def key(name: str, args: tuple, kwargs: dict) -> str:
    blob = json.dumps(wire.encode([list(args), kwargs]), sort_keys=True).encode()
    return f"{name}:{hashlib.sha256(blob).hexdigest()[:24]}"


class Recorder:
    """Wraps the reference (or the mistakes module) and remembers every answer it gives."""

    def __init__(self, target, prefix: str, store: dict) -> None:
        self._target, self._prefix, self._store = target, prefix, store

    def __getattr__(self, name: str):
        fn = getattr(self._target, name)

        def call(*args, **kwargs):
            value = fn(*args, **kwargs)
            self._store[key(f"{self._prefix}.{name}", args, kwargs)] = wire.encode(value)
            return value

        return call


class Replayer:
    """Answers recorded calls; anything else means the check needs the full autograder."""

    def __init__(self, prefix: str, store: dict) -> None:
        self._prefix, self._store = prefix, store

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            k = key(f"{self._prefix}.{name}", args, kwargs)
            if k not in self._store:
                raise MissingFixture(f"no recorded answer for {self._prefix}.{name}; this check runs on the autograder")
            return wire.decode(self._store[k])

        return call


def load() -> dict:
    return json.loads(FIXTURES.read_text()) if FIXTURES.is_file() else {}


def save(store: dict, path: Path = FIXTURES) -> None:
    path.write_text(json.dumps(store, sort_keys=True, separators=(",", ":")))
