"""A rate the slices that run share: ``--scan-rate`` and ``--rate`` are totals, for every worker
and task together, however many slices run at a time.

A slice that reads (or deletes) joins its rate's ``Sharers`` for as long as it does, and sizes
its part by how many have joined: the total divided by their count. As slices come and go the
parts follow, so the last slice of a pass runs at the whole rate instead of the part it started
with, and a slice starting beside others takes its part from theirs (their throttles look at
the count before every page or group, ``RateParts``).

An adaptive rate (the deletes') ramps up from a fraction of its part while the cluster stays
healthy: a process's next slice starts where its last one ended (``start_fraction``), not
from the bottom again, so that a pass cut into many slices ramps up once per process.

The job asks its workers for the sharers of each rate (``Workers.sharers``):

- ``Alone(n)``: always ``n`` parts (one process by itself: 1), nothing shared;
- ``ProcessSharers``: a counter in shared memory that the forked local workers inherit;
- ``DaskSharers`` (``workers.dasksharing``): the leases of a Dask semaphore, which the
  scheduler counts (read again at most every quarter of a second).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

#: a throttle waiting for its part looks at the count again at least this often (a part grown
#: meanwhile pays its debt off sooner)
FOLLOW_S = 0.1
#: the most a throttle saves up while it is not spending its rate (waiting for the store,
#: planning), in seconds of the rate: in any second the total goes over the cap by at most
#: this much (and a request in flight), never by a second's worth after a pause
BURST_S = 0.1


class Sharers(Protocol):
    """The slices that share one rate now."""

    def count(self) -> int:
        """How many share it now (at least 1): each takes the total divided by this."""
        ...

    def joined(self) -> AbstractContextManager[None]:
        """The calling slice shares the rate while inside."""
        ...

    def start_fraction(self, first: float) -> float:
        """Where an adaptive rate starts, as a fraction of its part: ``first`` for this
        process's first slice, after that where its last slice ended (``ended_at``)."""
        ...

    def ended_at(self, fraction: float) -> None:
        """A slice of this process ended its adaptive rate at ``fraction`` of its part."""
        ...


@dataclass(frozen=True)
class Alone:
    """A fixed number of parts, whatever runs (1: the rate is the caller's alone)."""

    parts: int = 1

    def count(self) -> int:
        return max(1, self.parts)

    def joined(self) -> AbstractContextManager[None]:
        return nullcontext()

    def start_fraction(self, first: float) -> float:
        return first

    def ended_at(self, fraction: float) -> None:
        """Nothing kept: a rate of its own starts afresh each time."""


class ProcessSharers:
    """Slices in this process and the processes it forks: a counter in shared memory.

    Created in the parent before the workers fork (they inherit it; it cannot be pickled)."""

    def __init__(self) -> None:
        self._joined: Any = multiprocessing.get_context("fork").Value("i", 0)
        #: where this process's last slice ended its adaptive rate (each process its own)
        self._ended_at: float | None = None

    def count(self) -> int:
        return max(1, int(self._joined.value))

    def start_fraction(self, first: float) -> float:
        return first if self._ended_at is None else self._ended_at

    def ended_at(self, fraction: float) -> None:
        self._ended_at = fraction

    @contextmanager
    def joined(self) -> Iterator[None]:
        with self._joined.get_lock():
            self._joined.value += 1
        try:
            yield
        finally:
            with self._joined.get_lock():
                self._joined.value -= 1


class RateParts:
    """One slice's part of a total, following the sharers' count.

    ``follow`` is called before each step that spends the rate (outside the throttle's lock:
    a cluster's count may be a round trip away); it returns the factor the part changed by
    since the last call (1.0: unchanged), by which the throttle scales what it derives from
    its part (its adaptive rate, its ceiling).
    """

    def __init__(self, total: float, sharers: Sharers) -> None:
        self.total = total
        self._sharers = sharers
        self.parts = sharers.count() if total else 1
        #: the count cannot change (``Alone``, or no total): a wait needs no second look
        self.fixed = isinstance(sharers, Alone) or not total

    def step(self, wait_s: float) -> float:
        """How long to wait before looking at the count again, of ``wait_s`` still due."""
        return wait_s if self.fixed else min(wait_s, FOLLOW_S)

    @property
    def part(self) -> float:
        """This slice's part of the total now."""
        return self.total / self.parts

    def follow(self) -> float:
        if not self.total:
            return 1.0
        parts = self._sharers.count()
        if parts == self.parts:
            return 1.0
        scale, self.parts = self.parts / parts, parts
        return scale
