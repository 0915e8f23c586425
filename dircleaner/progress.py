"""Progress reporting hook: library code reports, the CLI decides how (or whether) to show it."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sized
from typing import Protocol, TypeVar


class _Covers(Protocol):
    """An action that covers items (a delete and the directory entries it removes)."""

    @property
    def rows(self) -> Sized: ...


A = TypeVar("A", bound=_Covers)


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


class ActionCounter:
    """``progress`` of phase ``counted`` in actions rather than in the items they cover, for
    actions handed out once, in order, through ``through``: each action's end (the items
    covered up to it) is kept from when it is handed out until a report counts it done, so a
    plan read back as a stream is never held whole for its progress."""

    def __init__(self, progress: Progress, counted: str, total: int) -> None:
        self._progress = progress
        self._counted = counted
        self._total = total
        self._ends: deque[int] = deque()
        self._covered = 0
        self._done = 0

    def through(self, actions: Iterable[A]) -> Iterator[A]:
        """``actions``, each one's end noted as it is handed out."""
        for action in actions:
            self._covered += len(action.rows)
            self._ends.append(self._covered)
            yield action

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        if phase != self._counted:
            self._progress(phase, done, total)
            return
        ends = self._ends
        while ends and ends[0] <= done:
            ends.popleft()
            self._done += 1
        self._progress(phase, self._done, self._total)
