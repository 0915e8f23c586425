"""How fast deletes go: the throttle's settings and the adaptive rate that enforces them.

``ThrottleConfig`` is what the CLI and the job hand the deleter (``--rate``, ``--concurrency``,
the retries); ``AdaptiveRate`` paces the deletes with a token bucket at a rate that is halved on
overload and raised while healthy (AIMD), within this slice's part of ``--rate`` when several
slices share it (``dircleaner.rateshare``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dircleaner.errors import UsageError
from dircleaner.rateshare import BURST_S, Alone, RateParts, Sharers
from dircleaner.retry import RetryPolicy
from dircleaner.workers import interrupt

#: a wait for the rate at least this long is logged (debug: ``-vv``)
LONG_WAIT_S = 1.0
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ThrottleConfig:
    """How fast and how wide deletes go."""

    #: deletes per second at most (0 = unlimited)
    rate: float = 1000.0
    #: delete requests in flight at once, per process (a Cassandra request deletes a row, a
    #: range or up to ``deletes_per_request`` partitions); a group of this many requests' worth
    #: of actions is lease-checked, charged and audited before any of it is sent
    concurrency: int = 32
    #: the adaptive rate starts at this fraction of ``rate`` and ramps up while healthy
    start_fraction: float = 0.25
    max_retries: int = 6
    base_backoff_s: float = 0.05
    max_backoff_s: float = 5.0
    #: the slices ``rate`` is shared by: each deletes at most its part of it
    shared_by: Sharers = field(default=Alone(), compare=False)

    def __post_init__(self) -> None:
        if not 0 <= self.rate < math.inf:  # nan too
            raise UsageError(f"--rate must be a finite number >= 0, not {self.rate}")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be >= 1")

    @property
    def retry_policy(self) -> RetryPolicy:
        """The first try and ``max_retries`` more, waits between ``base_backoff_s`` and the cap."""
        return RetryPolicy(self.max_retries + 1, self.base_backoff_s, self.max_backoff_s)


class AdaptiveRate:
    """AIMD rate control: add while healthy, halve on overload; a token bucket enforces it,
    within this slice's part of ``--rate`` (which follows the slices sharing it: ``RateParts``)."""

    def __init__(
        self,
        config: ThrottleConfig,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = interrupt.wait,
    ) -> None:
        self._parts = RateParts(config.rate, config.shared_by)
        self.max_rate = self._parts.part
        # A process's later slices go on from where its last one ended.
        self.rate = self.max_rate * config.shared_by.start_fraction(config.start_fraction)
        self.floor = self.max_rate / 100
        self._clock = clock
        self._sleep = sleep
        self._tokens = 0.0
        self._last = clock()

    @property
    def fraction(self) -> float:
        """The adaptive rate as a fraction of this slice's part (1.0: unlimited)."""
        return self.rate / self.max_rate if self.max_rate else 1.0

    @property
    def total_rate(self) -> float:
        """The rate all the slices sharing ``--rate`` make at this one's pace (0: unlimited)."""
        return self.rate * self._parts.parts

    def acquire(self, n: int) -> None:
        """Block until ``n`` deletes may start."""
        if not self.max_rate:
            return
        while True:
            now = self._clock()
            burst = max(self.rate * BURST_S, 1.0)
            self._tokens = min(burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._follow_parts():
                continue  # the part changed: count again at the new one
            # A hair of tolerance: float rounding must not leave a wait below clock resolution.
            if self._tokens >= n - 1e-9 or (n > burst and self._tokens >= burst - 1e-9):
                self._tokens -= n
                return
            wait = (min(n, burst) - self._tokens) / self.rate
            if wait >= LONG_WAIT_S:
                log.debug(
                    "delete rate %.6g/s: waiting %.1f s before the next deletes", self.rate, wait
                )
            self._sleep(self._parts.step(wait))

    def on_success(self) -> None:
        if self.max_rate:
            self.rate = min(self.max_rate, self.rate + self.max_rate / 20)

    def on_overload(self) -> None:
        if self.max_rate:
            self.rate = max(self.floor, self.rate / 2)

    def _follow_parts(self) -> bool:
        """This slice's part as the slices sharing ``--rate`` now make it (tokens earned
        at the old part already counted): the adaptive rate scaled with it, tokens saved up
        never more than the new burst. Whether it changed."""
        scale = self._parts.follow()
        if scale == 1.0:
            return False
        self.max_rate = self._parts.part
        self.floor = self.max_rate / 100
        self.rate = min(self.max_rate, self.rate * scale)
        self._tokens = min(self._tokens, max(self.rate * BURST_S, 1.0))
        return True
