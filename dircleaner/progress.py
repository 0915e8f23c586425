"""Progress reporting hook: library code reports, the CLI decides how (or whether) to show it."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Called now and then during long phases with items done so far (total when known)."""

    def __call__(self, phase: str, done: int, total: int | None) -> None: ...


def no_progress(phase: str, done: int, total: int | None) -> None:
    """The silent default."""
