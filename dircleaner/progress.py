"""Progress reporting hook: library code reports, the CLI decides how (or whether) to show it."""

from __future__ import annotations

from bisect import bisect_right
from typing import Protocol


class Progress(Protocol):
    """Called now and then during long phases with items done so far (total when known)."""

    def __call__(self, phase: str, done: int, total: int | None) -> None: ...


def no_progress(phase: str, done: int, total: int | None) -> None:
    """The silent default."""


def expecting(progress: Progress, phase: str, total: int | None) -> Progress:
    """``progress``, told ``total`` for ``phase`` where the reports do not say (a scan that
    cannot count ahead): an expectation, so a count that passes it raises it."""
    if total is None:
        return progress
    expected_phase = phase

    expected = total

    def report(phase: str, done: int, total: int | None) -> None:
        if phase == expected_phase and total is None:
            total = max(expected, done)
        progress(phase, done, total)

    return report


def counting_actions(progress: Progress, counted: str, sizes: list[int]) -> Progress:
    """``progress`` of phase ``counted`` in actions rather than in the items they cover:
    ``sizes`` are the items of each action, in the order they are done."""
    ends: list[int] = []
    covered = 0
    for size in sizes:
        covered += size
        ends.append(covered)

    def report(phase: str, done: int, total: int | None) -> None:
        if phase == counted:
            progress(phase, bisect_right(ends, done), len(ends))
        else:
            progress(phase, done, total)

    return report
