"""Reads a live cluster can bear: a cap on the rows the scans read, and back-off when it strains.

Both passes stream a whole index table. ``ScanRate`` says how fast they may go: at most
``rows_per_s`` rows a second across every worker and task together (the slices that scan at the
same moment share it, ``rateshare``: as one finishes the others' parts grow, as the deletes'
``--rate`` is shared), 0 for no cap. ``ScanThrottle`` enforces one slice's part with a token
bucket and adapts it (AIMD, like the deleter): a page
slower than ``slow_page_s``, or a timeout / ``Overloaded`` / read failure, halves the rate (at
most once per ``slow_page_s``, so the pages in flight together count as one signal); healthy
pages raise it again by ``1 / RECOVERY_S`` of the ceiling per second. An uncapped scan runs free
until its first back-off, then adapts below the rate it was reading at.

``ScanStats`` is what a slice's scan reports: rows, pages, page latency (a log-spaced histogram,
so the slices' figures merge exactly and the p99 is within one bucket, ~19%), back-offs and the
rate it ended at. Worker processes send theirs back with their slice's result; ``merge`` adds
them up in the parent.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from dircleaner.errors import UsageError
from dircleaner.rateshare import BURST_S, Alone, RateParts, Sharers
from dircleaner.workers import interrupt

#: a page slower than this is a sign of strain (a healthy page of a few thousand rows takes
#: milliseconds to tens of milliseconds)
DEFAULT_SLOW_PAGE_S = 1.0
#: seconds of healthy pages to climb back from nothing to the ceiling (half of it after a halving)
RECOVERY_S = 20.0
#: the adaptive rate never falls below this share of its ceiling
FLOOR_FRACTION = 0.02
#: a wait for the cap at least this long is logged (debug: ``-vv``)
LONG_WAIT_S = 1.0
#: page latency histogram: bucket i holds latencies up to LATENCY_BASE_S * 2**(i / 4)
LATENCY_BASE_S = 0.0005
LATENCY_BUCKETS = 80

B = TypeVar("B", bound=Sequence[object])
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScanRate:
    """How fast the scans may read, for the whole job or for one slice's share of it.

    A field left None takes the store's setting (``StoreTraits.scan_defaults``: the Cassandra config
    file's ``scan_rate`` and ``scan_slow_page_s``), else the default.
    """

    #: rows per second at most (0 = no cap; the scans still back off when the cluster strains)
    rows_per_s: float | None = None
    #: a page slower than this makes the scan back off
    slow_page_s: float | None = None
    #: whether to adapt at all (off: a fixed cap, e.g. to measure it)
    adaptive: bool = True
    #: the slices the cap is shared by (``shared``): each reads at most its part of it
    shared_by: Sharers = field(default=Alone(), compare=False)

    def __post_init__(self) -> None:
        if self.rows_per_s is not None and not 0 <= self.rows_per_s < math.inf:  # nan too
            raise UsageError(f"--scan-rate must be a finite number >= 0, not {self.rows_per_s}")
        if self.slow_page_s is not None and not 0 < self.slow_page_s < math.inf:
            raise UsageError("the slow-page threshold must be a finite number more than 0")

    @property
    def cap(self) -> float:
        """Rows per second at most (0: no cap)."""
        return self.rows_per_s or 0.0

    @property
    def slow_s(self) -> float:
        """The page latency above which the scan backs off."""
        return self.slow_page_s or DEFAULT_SLOW_PAGE_S

    def over(self, defaults: ScanRate) -> ScanRate:
        """These settings, with ``defaults``' where none was given."""
        return replace(
            self,
            rows_per_s=defaults.rows_per_s if self.rows_per_s is None else self.rows_per_s,
            slow_page_s=defaults.slow_page_s if self.slow_page_s is None else self.slow_page_s,
        )

    def shared(self, sharers: Sharers) -> ScanRate:
        """The cap as a total that ``sharers`` share: a slice that scans joins them, and reads
        at most the cap divided by how many have joined at the time."""
        return replace(self, shared_by=sharers)


def latency_bucket(seconds: float) -> int:
    """The histogram bucket of a page latency."""
    if seconds <= LATENCY_BASE_S:
        return 0
    return min(LATENCY_BUCKETS - 1, math.ceil(4 * math.log2(seconds / LATENCY_BASE_S)))


def bucket_upper_s(index: int) -> float:
    return LATENCY_BASE_S * 2 ** (index / 4)


@dataclass(frozen=True)
class ScanStats:
    """One scan's (or several merged) reading: how much, how fast, how it was received."""

    rows: int = 0
    pages: int = 0
    latency_sum_s: float = 0.0
    #: page counts per latency bucket (``latency_bucket``)
    latency_hist: tuple[int, ...] = ()
    #: times the rate was halved (slow pages, timeouts, overload)
    backoffs: int = 0
    #: timeouts, Overloaded and read failures the cluster answered with
    errors: int = 0
    #: the rate allowed at the end, rows/s (0 = uncapped and never backed off); under a cap,
    #: the total it makes for every slice sharing it (a slice's own rate times their count)
    final_rate: float = 0.0
    #: the cap asked for, rows/s, all slices together (0 = none)
    cap: float = 0.0
    slow_page_s: float = DEFAULT_SLOW_PAGE_S
    seconds: float = 0.0

    @property
    def mean_latency_s(self) -> float:
        return self.latency_sum_s / self.pages if self.pages else 0.0

    def latency_quantile_s(self, q: float) -> float:
        """The latency under which a share ``q`` of pages took (a bucket's upper bound)."""
        if not self.pages:
            return 0.0
        rank = q * self.pages
        seen = 0
        for index, count in enumerate(self.latency_hist):
            seen += count
            if seen >= rank:
                return bucket_upper_s(index)
        return bucket_upper_s(len(self.latency_hist) - 1)

    @property
    def p99_latency_s(self) -> float:
        return self.latency_quantile_s(0.99)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict[str, object]:
        """The JSON form (rounded for people)."""
        return {
            "rows": self.rows,
            "pages": self.pages,
            "rows_per_s": round(self.rows_per_s, 1),
            "cap_rows_per_s": self.cap,
            "final_rate_rows_per_s": round(self.final_rate, 1),
            "mean_page_latency_s": round(self.mean_latency_s, 4),
            "p99_page_latency_s": round(self.p99_latency_s, 4),
            "slow_page_s": self.slow_page_s,
            "backoffs": self.backoffs,
            "errors": self.errors,
        }


def merge(parts: Iterable[ScanStats], running: int, seconds: float) -> ScanStats:
    """Several slices' scans as one; ``seconds`` is the pass's wall time.

    Under a cap each slice reports the total its final rate made with the slices sharing the
    cap then: the rate they ended at together is the mean of those. Uncapped slices that all
    backed off read on their own, ``running`` at once: their mean final rate times ``running``.
    """
    present = list(parts)
    if not present:
        return ScanStats(seconds=seconds)
    width = max(len(p.latency_hist) for p in present)
    hist = [0] * width
    for part in present:
        for index, count in enumerate(part.latency_hist):
            hist[index] += count
    cap = present[0].cap
    mean_final = sum(p.final_rate for p in present) / len(present)
    if cap:
        final = mean_final
    elif any(not p.final_rate for p in present):
        final = 0.0
    else:
        final = mean_final * min(running, len(present))
    return ScanStats(
        rows=sum(p.rows for p in present),
        pages=sum(p.pages for p in present),
        latency_sum_s=sum(p.latency_sum_s for p in present),
        latency_hist=tuple(hist),
        backoffs=sum(p.backoffs for p in present),
        errors=sum(p.errors for p in present),
        final_rate=final,
        cap=cap,
        slow_page_s=present[0].slow_page_s,
        seconds=seconds,
    )


class ScanThrottle:
    """One slice's scan rate: a token bucket at the current rate, steered by AIMD, within the
    slice's part of the cap (which follows the slices sharing it: ``RateParts``).

    Thread-safe: a Cassandra scan reads several splits at once, each from its own thread. Rows
    are paid for as pages arrive (a request goes ahead once the bucket's debt is paid off, and
    takes its rows from it), so over a scan the rows read per second converge on the rate
    however large the pages are; idle time saves up at most ``BURST_S`` of the rate.
    """

    def __init__(
        self,
        rate: ScanRate,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = interrupt.wait,
    ) -> None:
        self.config = rate
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        #: this slice's part of the cap, as the slices sharing it come and go
        self._parts = RateParts(rate.cap, rate.shared_by)
        #: the ceiling the rate recovers to (0: none yet; an uncapped scan gets one on back-off)
        self._ceiling = self._parts.part
        self._rate = self._ceiling
        self._tokens = 0.0
        self._started = clock()
        self._last = self._started
        self._last_backoff = -math.inf
        self._adjusted = self._started
        self._rows = 0
        self._pages = 0
        self._latency_sum = 0.0
        self._hist = [0] * LATENCY_BUCKETS
        self._backoffs = 0
        self._errors = 0

    def now(self) -> float:
        """This throttle's clock (pages are timed by it)."""
        return self._clock()

    @property
    def rate(self) -> float:
        """Rows per second allowed now (0 = unlimited)."""
        return self._rate

    def reserve(self, rows: int) -> int:
        """Before a request of up to ``rows`` rows: wait for its turn; the rows reserved (0
        while uncapped), to hand to ``page``.

        Reserving spaces the requests of concurrent readers out, so that a capped scan never
        starts with a burst of one page per reader. Once pages came back, a request reserves
        the mean page's rows (small splits return short pages), and ``page`` settles the rest.
        """
        self._follow_parts()
        with self._lock:
            if not self._rate:
                return 0
            if self._pages:
                rows = max(1, min(rows, round(self._rows / self._pages)))
            now = self._clock()
            self._refill(now)
            wait = -self._tokens / self._rate if self._tokens < 0 else 0.0
            self._tokens -= rows
        self._wait(wait)
        return rows

    def page(self, rows: int, latency_s: float, reserved: int = 0) -> None:
        """A page of ``rows`` arrived after ``latency_s``: adapt, then pay for it.

        Rows ``reserved`` before the request are settled (the page may have held fewer); with
        none reserved, the rows are paid now and the reader waits until they are paid off.
        """
        self._follow_parts()
        with self._lock:
            now = self._clock()
            self._rows += rows
            self._pages += 1
            self._latency_sum += latency_s
            self._hist[latency_bucket(latency_s)] += 1
            if self.config.adaptive and latency_s > self.config.slow_s:
                self._back_off(now)
            else:
                self._recover(now)
            if reserved:
                self._refill(now)
                self._tokens += reserved - rows
                wait = 0.0
            else:
                wait = self._pay(rows, now)
        self._wait(wait)

    def strained(self) -> None:
        """The cluster answered with a timeout, ``Overloaded`` or a read failure."""
        with self._lock:
            self._errors += 1
            if self.config.adaptive:
                self._back_off(self._clock())

    def stats(self) -> ScanStats:
        with self._lock:
            hist = list(self._hist)
            while hist and not hist[-1]:
                hist.pop()
            return ScanStats(
                rows=self._rows,
                pages=self._pages,
                latency_sum_s=self._latency_sum,
                latency_hist=tuple(hist),
                backoffs=self._backoffs,
                errors=self._errors,
                # Under a cap: the total this slice's rate makes with its sharers'.
                final_rate=self._rate * (self._parts.parts if self.config.cap else 1),
                cap=self.config.cap,
                slow_page_s=self.config.slow_s,
                seconds=self._clock() - self._started,
            )

    def paced(self, batches: Iterable[B]) -> Iterator[B]:
        """``batches`` at this throttle's pace: each ``next`` is timed as one page's latency.

        For stores that read in one stream (the embedded store): the token bucket wraps the
        stream, and a slow read backs off as a slow page would.
        """
        stream = iter(batches)
        while True:
            began = self._clock()
            try:
                batch = next(stream)
            except StopIteration:
                return
            self.page(len(batch), self._clock() - began)
            yield batch

    def _follow_parts(self) -> float:
        """This slice's part of the cap as the slices sharing it now make it: what was earned
        at the old part counted, the adaptive rate and its ceiling scaled alike, tokens saved
        up never more than ``BURST_S`` of the new rate. The factor the part changed by."""
        scale = self._parts.follow()
        if scale != 1.0:
            with self._lock:
                self._refill(self._clock())
                self._ceiling = self._parts.part
                self._rate = min(self._ceiling, self._rate * scale)
                self._tokens = min(self._tokens, self._rate * BURST_S)
        return scale

    def _wait(self, seconds: float) -> None:
        """Wait for the cap (outside the lock), following the slices sharing it meanwhile (a
        part that grows pays the debt off sooner); a stop request ends the wait
        (``interrupt.wait``)."""
        if seconds <= 0:
            return
        if seconds >= LONG_WAIT_S:
            log.debug(
                "scan cap %.6g rows/s: waiting %.1f s before the next page", self._rate, seconds
            )
        while seconds > 0:
            step = self._parts.step(seconds)
            self._sleep(step)
            seconds = (seconds - step) / self._follow_parts()

    # -- under the lock ---------------------------------------------------------------------------
    def _back_off(self, now: float) -> None:
        if now - self._last_backoff < self.config.slow_s:
            return  # the pages in flight at the same moment are one signal, not several
        self._last_backoff = now
        self._backoffs += 1
        if not self._ceiling:
            # Uncapped until now: adapt below what it was reading at.
            elapsed = max(now - self._started, 1e-3)
            self._ceiling = max(self._rows / elapsed, 1.0)
            self._rate = self._ceiling
            self._tokens = 0.0
            self._last = now
        self._rate = max(self._ceiling * FLOOR_FRACTION, self._rate / 2)
        self._adjusted = now

    def _recover(self, now: float) -> None:
        if self._ceiling and self._rate < self._ceiling:
            grown = self._ceiling * (now - self._adjusted) / RECOVERY_S
            self._rate = min(self._ceiling, self._rate + grown)
        self._adjusted = now

    def _refill(self, now: float) -> None:
        # At most BURST_S of rate is saved up while the readers were busy elsewhere.
        if self._rate:
            saved = self._rate * BURST_S
            self._tokens = min(saved, self._tokens + (now - self._last) * self._rate)
        self._last = now

    def _pay(self, rows: int, now: float) -> float:
        """Take ``rows`` tokens; how long to wait before the next request."""
        if not self._rate:
            self._last = now
            return 0.0
        self._refill(now)
        self._tokens -= rows
        return -self._tokens / self._rate if self._tokens < 0 else 0.0


def paced(batches: Iterable[B], throttle: ScanThrottle | None) -> Iterable[B]:
    """``batches`` through ``throttle``, or as they are without one."""
    return batches if throttle is None else throttle.paced(batches)
