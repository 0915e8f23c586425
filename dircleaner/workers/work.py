"""What the workers run: a one-phase task per slice, or the clean's two phases per slice around
one decision the parent takes (``TwoPhaseWork``). Both mechanisms (``local``, ``daskcluster``)
and the interface (``base``) take these types; they import nothing of the workers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from dircleaner.model import Shard
from dircleaner.progress import Progress
from dircleaner.store.base import Store

R = TypeVar("R")
T = TypeVar("T")
L = TypeVar("L")
M = TypeVar("M")

#: a one-phase task: ``task(store, shard, progress)``
ShardTask = Callable[[Store, Shard, Progress], R]
#: first phase: (what the parent needs to decide, what the worker keeps for the second phase)
FirstPhase = Callable[[Store, Shard, Progress], tuple[T, L]]
#: second phase: the worker's kept state and the parent's decision in, a result out
SecondPhase = Callable[[Store, Shard, L, M, Progress], R]


def _nothing(_index: int, _result: object) -> None:
    """The default ``on_second_done``: nothing to record."""


@dataclass(frozen=True)
class TwoPhaseWork(Generic[T, L, M, R]):
    """Two phases per slice around one decision the parent takes on every first result.

    ``first`` and ``second`` run wherever the workers are (each slice's second phase where its
    first phase ran, with what that kept: ``L``); ``decide`` and ``on_second_done`` run in the
    parent. ``T`` is what a first phase reports, ``M`` the decision, ``R`` a second phase's result.
    """

    first: FirstPhase[T, L]
    #: every slice's first result → the one message every second phase gets; raising stops the
    #: work before any second phase starts
    decide: Callable[[list[T]], M]
    second: SecondPhase[L, M, R]
    #: the two phases' names, for progress and errors
    phases: tuple[str, str]
    #: called with the slice's position and result as each second phase succeeds
    on_second_done: Callable[[int, R], None] = _nothing
