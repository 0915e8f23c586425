"""Reading object keys, one per line, with per-line validation."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dircleaner.paths import InvalidKey, validate_key


@dataclass(frozen=True, slots=True)
class KeyLine:
    """One line of a key file: the key, or why it was rejected."""

    number: int
    key: str | None
    error: str | None = None


def read_key_lines(lines: Iterable[bytes]) -> Iterator[KeyLine]:
    """Decode and validate each line (only the trailing newline is stripped; keys are exact)."""
    for number, raw in enumerate(lines, start=1):
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield KeyLine(number, None, f"invalid UTF-8 at byte {exc.start}")
            continue
        try:
            validate_key(key)
        except InvalidKey as exc:
            yield KeyLine(number, None, str(exc))
            continue
        yield KeyLine(number, key)
