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


@dataclass
class LineEndings:
    """What ``read_key_lines`` found out about the file's line endings."""

    #: the first line ended in CRLF: the file was written with Windows line endings
    crlf: bool = False
    #: lines whose trailing ``\r`` was stripped
    stripped: int = 0


def read_key_lines(lines: Iterable[bytes], endings: LineEndings | None = None) -> Iterator[KeyLine]:
    """Decode and validate each line (only the line ending is stripped; keys are exact).

    A file whose first line ends in CRLF is taken for a Windows file: the ``\r`` before each
    newline is stripped too (a key ending in a carriage return is then not expressible), and
    ``endings`` says so. Elsewhere a ``\r`` is part of the key."""
    seen = endings if endings is not None else LineEndings()
    for number, raw in enumerate(lines, start=1):
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if number == 1 and raw.endswith(b"\r"):
                seen.crlf = True
            if seen.crlf and raw.endswith(b"\r"):
                raw = raw[:-1]
                seen.stripped += 1
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
