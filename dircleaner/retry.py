"""The one retry policy: bounded attempts, exponential backoff with full jitter.

Every wait before a retry in dircleaner comes from ``RetryPolicy.delay``: retry ``n`` (1 for the
first) waits ``uniform(0, min(cap_s, base_s * 2**n))``, so the mean wait doubles up to half the
cap and simultaneous clients spread out. The store's requests retry through ``call`` (one
request, again whole) and ``rerun_failed`` (a batch, only its failed items again); connecting
uses ``call``. The deleter's window, whose requests complete on the driver's threads, asks
``next_wait`` before it sends a group's failed deletes again (``pipeline/delete.py``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from dircleaner.workers import interrupt

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 - an item of a batch
R = TypeVar("R")

_RNG = random.Random()


@dataclass(frozen=True)
class RetryPolicy:
    """How many tries, and how long to wait between them."""

    #: tries in all, the first one included
    attempts: int
    #: the wait before retry ``n`` is drawn from ``[0, min(cap_s, base_s * 2**n)]``
    base_s: float
    cap_s: float

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("a retry policy makes at least one attempt")

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        return (rng or _RNG).uniform(0.0, min(self.cap_s, self.base_s * 2**retry))

    def next_wait(self, tries: int, rng: random.Random | None = None) -> float | None:
        """After ``tries`` failed tries, the wait before the next one; None once the attempts
        are spent (for a caller whose tries complete on other threads, as the deleter's)."""
        return None if tries >= self.attempts else self.delay(tries, rng)

    def call(
        self,
        fn: Callable[[], T],
        retry_if: Callable[[Exception], bool],
        *,
        on_retry: Callable[[Exception], None] | None = None,
        sleep: Callable[[float], None] = interrupt.wait,
        rng: random.Random | None = None,
    ) -> T:
        """``fn()``, tried again after a wait while it raises what ``retry_if`` accepts.

        The last try's exception, or any that ``retry_if`` refuses, propagates unchanged.
        """
        for attempt in range(1, self.attempts):
            try:
                return fn()
            except Exception as exc:
                if not retry_if(exc):
                    raise
                if on_retry is not None:
                    on_retry(exc)
                sleep(self.delay(attempt, rng))
        return fn()

    def rerun_failed(
        self,
        items: Sequence[I],
        run: Callable[[Sequence[I]], Sequence[R]],
        retry_if: Callable[[R], bool],
        *,
        sleep: Callable[[float], None] = interrupt.wait,
        rng: random.Random | None = None,
    ) -> list[R]:
        """``run`` the batch; run its items whose result ``retry_if`` accepts again, after a wait.

        ``run`` returns one result per item, in order (a value or an exception, never raising
        for one item). Returns each item's last result, in the batch's order.
        """
        results: dict[int, R] = {}
        pending = list(range(len(items)))
        for attempt in range(self.attempts):
            if not pending:
                break
            if attempt:
                sleep(self.delay(attempt, rng))
            again: list[int] = []
            for index, result in zip(pending, run([items[i] for i in pending]), strict=True):
                results[index] = result
                if retry_if(result):
                    again.append(index)
            pending = again
        return [results[i] for i in range(len(items))]
