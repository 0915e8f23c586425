"""A rate shared by the slices running as Dask tasks: the leases of a Dask semaphore.

A task that reads or deletes takes a lease on its rate's semaphore (named for the run and the
rate, with more leases than any cluster has threads, so it never waits) and gives it back when
done; the scheduler counts the leases (``Semaphore.get_value``), so every task sees how many
share the rate now. A task asks at most every ``REFRESH_S`` (a scheduler round trip, about a
millisecond), and at once when it joins or leaves: a slice that starts beside others reads
above the cap for at most that long, by its own part. A worker that dies loses its leases when
the scheduler's lease timeout passes (``distributed.scheduler.locks.lease-timeout``, 30 s by
default): its part goes to the others then.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: how old a count a task uses at most
REFRESH_S = 0.25
#: leases a semaphore has: more than any cluster's threads, so that taking one never waits
MAX_LEASES = 1 << 30

#: the rates of the last runs whose slices' adaptive rates a worker process remembers
_REMEMBERED = 16

_lock = threading.Lock()
#: semaphore name → (count, when it was read), in this worker process
_counts: dict[str, tuple[int, float]] = {}
#: semaphore name → where this process's last slice ended its adaptive rate (the latest last)
_ended_at: dict[str, float] = {}


@dataclass(frozen=True)
class DaskSharers:
    """The slices of one rate on a Dask cluster (plain data: tasks receive it pickled)."""

    name: str

    def count(self) -> int:
        with _lock:
            known = _counts.get(self.name)
        if known is not None and time.monotonic() - known[1] < REFRESH_S:
            return known[0]
        return self._read()

    @contextlib.contextmanager
    def joined(self) -> Iterator[None]:
        from distributed import Semaphore

        untyped: Any = Semaphore
        semaphore = untyped(max_leases=MAX_LEASES, name=self.name)
        semaphore.acquire()
        try:
            self._read()
            yield
        finally:
            try:
                semaphore.release()
            finally:
                # Its lease refresher (started before the acquire's round trip) stops with it:
                # one per joined slice, none left behind on a long-lived worker.
                if getattr(semaphore, "refresh_callback", None) is not None:
                    semaphore.refresh_callback.stop()
                with _lock:
                    _counts.pop(self.name, None)

    def start_fraction(self, first: float) -> float:
        with _lock:
            return _ended_at.get(self.name, first)

    def ended_at(self, fraction: float) -> None:
        with _lock:
            _ended_at.pop(self.name, None)
            _ended_at[self.name] = fraction
            while len(_ended_at) > _REMEMBERED:
                del _ended_at[next(iter(_ended_at))]

    def _read(self) -> int:
        """The leases the scheduler counts now (remembered for ``REFRESH_S``)."""
        from distributed import get_worker
        from distributed.utils import sync

        try:
            worker = get_worker()
            value = sync(worker.loop, worker.scheduler.semaphore_value, name=self.name)
            value = max(1, int(value))
        except Exception:  # a scheduler that does not answer: the last count stands
            with _lock:
                known = _counts.get(self.name)
            return known[0] if known is not None else 1
        with _lock:
            _counts[self.name] = (value, time.monotonic())
        return value


def close_semaphores(client: Any, names: list[str]) -> None:
    """Forget the run's semaphores on the scheduler (the client, once the run is over)."""
    for name in names:
        with contextlib.suppress(Exception):
            client.sync(client.scheduler.semaphore_close, name=name)
