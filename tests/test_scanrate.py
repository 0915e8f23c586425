"""The scans' rate: a token bucket at the cap, AIMD on slow pages and strain, merged stats.

On a fake clock (sleeping advances it), so the figures are exact and nothing is timed.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from cassandra import OperationTimedOut, ReadFailure

from dircleaner.errors import UsageError
from dircleaner.rateshare import Alone
from dircleaner.retry import RetryPolicy
from dircleaner.scanrate import (
    RECOVERY_S,
    ScanRate,
    ScanStats,
    ScanThrottle,
    latency_bucket,
    merge,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


def throttle(rate: float, slow_s: float = 1.0) -> tuple[ScanThrottle, FakeClock]:
    clock = FakeClock()
    return ScanThrottle(ScanRate(rate, slow_s), clock, clock.sleep), clock


def test_a_capped_stream_reads_at_the_cap() -> None:
    t, clock = throttle(1000)
    start = clock.now
    batches = [[0] * 100 for _ in range(50)]
    assert sum(len(b) for b in t.paced(batches)) == 5000
    assert clock.now - start == pytest.approx(5.0)
    stats = t.stats()
    assert (stats.rows, stats.pages, stats.backoffs) == (5000, 50, 0)
    assert stats.rows_per_s == pytest.approx(1000)
    assert stats.final_rate == 1000


def test_uncapped_never_waits() -> None:
    t, clock = throttle(0)
    start = clock.now
    assert len(list(t.paced([[1] * 10_000] * 20))) == 20
    assert clock.now == start
    assert t.stats().final_rate == 0


def test_reservations_space_concurrent_requests_and_short_pages_are_refunded() -> None:
    t, clock = throttle(1000)
    start = clock.now
    # Ten requests of up to 100 rows each, as ten readers would make them.
    for _ in range(10):
        reserved = t.reserve(100)
        t.page(100, 0.01, reserved)
    assert clock.now - start == pytest.approx(0.9)  # the tenth waits for nine pages' rows
    # Short pages (a small split's) reserve what the pages return on average, and the unused
    # part of a reservation comes back.
    t2, clock2 = throttle(1000)
    for _ in range(10):
        t2.page(5, 0.01, t2.reserve(100))
    assert clock2.now - 1000.0 < 0.2


def test_a_slow_page_halves_the_rate_once_and_it_recovers_gently() -> None:
    t, clock = throttle(1000, slow_s=0.5)
    t.page(10, 0.01)
    t.page(10, 2.0)  # slow
    assert t.rate == 500
    t.page(10, 2.0)  # the same moment's pages in flight: one signal
    assert t.rate == 500
    assert t.stats().backoffs == 1
    clock.now += 1.0
    t.page(10, 2.0)  # a second later, still slow: halved again
    assert t.rate == 250
    clock.now += RECOVERY_S / 4
    t.page(10, 0.01)  # healthy: a quarter of RECOVERY_S restores a quarter of the ceiling
    assert t.rate == pytest.approx(500)
    clock.now += RECOVERY_S
    t.page(10, 0.01)
    assert t.rate == 1000  # never above the cap
    assert t.stats().backoffs == 2


def test_timeouts_back_off_an_uncapped_scan_below_what_it_read() -> None:
    t, clock = throttle(0)
    t.page(5000, 0.01)
    clock.now += 1.0
    t.strained()
    stats = t.stats()
    assert (stats.errors, stats.backoffs) == (1, 1)
    assert t.rate == pytest.approx(2500)  # half the 5000 rows/s it was reading at
    start = clock.now
    t.page(2500, 0.01)  # from now on it is paced
    assert clock.now - start == pytest.approx(1.0, rel=0.01)


def test_a_fixed_cap_does_not_adapt() -> None:
    clock = FakeClock()
    t = ScanThrottle(ScanRate(1000, 0.1, adaptive=False), clock, clock.sleep)
    t.page(10, 5.0)
    t.strained()
    assert t.rate == 1000
    assert t.stats().backoffs == 0


def test_latency_figures_and_merge() -> None:
    a, _ = throttle(100)
    b, _ = throttle(100)
    for _ in range(98):
        a.page(1, 0.01)
    a.page(1, 0.5)
    b.page(1, 0.5)
    merged = merge([a.stats(), b.stats()], running=2, seconds=4.0)
    assert merged.pages == 100
    assert merged.rows == 100
    assert merged.rows_per_s == 25
    assert merged.mean_latency_s == pytest.approx((98 * 0.01 + 1.0) / 100)
    # p99: the 99th page is one of the two slow ones; the bucket's bound is within ~19%
    assert 0.5 <= merged.p99_latency_s <= 0.5 * 1.2
    assert 0.01 <= merged.latency_quantile_s(0.5) <= 0.012
    # Under a cap each slice reports the total its rate makes with its sharers: their mean.
    assert merged.final_rate == 100
    assert merged.cap == 100
    assert merge([], 1, 1.0) == ScanStats(seconds=1.0)


def test_uncapped_slices_that_backed_off_add_up_as_many_as_ran_at_once() -> None:
    parts = [ScanStats(final_rate=300.0), ScanStats(final_rate=500.0), ScanStats(final_rate=400.0)]
    assert merge(parts, running=2, seconds=1.0).final_rate == 800
    # One that never backed off read as fast as it could: no rate to report.
    assert merge([*parts, ScanStats()], running=2, seconds=1.0).final_rate == 0


def test_latency_buckets_are_monotonic() -> None:
    values = [0.0, 0.0001, 0.001, 0.01, 0.1, 1.0, 10.0, 1e6]
    buckets = [latency_bucket(v) for v in values]
    assert buckets == sorted(buckets)


def test_shares_and_defaults() -> None:
    clock = FakeClock()
    # The cap is the total: a slice of four reads a quarter of it, and reports the total.
    quarter = ScanThrottle(ScanRate(1000).shared(Alone(4)), clock, clock.sleep)
    assert quarter.rate == 250
    assert (quarter.stats().cap, quarter.stats().final_rate) == (1000, 1000)
    assert ScanThrottle(ScanRate(0).shared(Alone(4)), clock, clock.sleep).rate == 0
    assert ScanRate(None).over(ScanRate(300, 2.0)) == ScanRate(300, 2.0)
    assert ScanRate(0).over(ScanRate(300, 2.0)).cap == 0  # an explicit 0 lifts the store's cap
    with pytest.raises(UsageError):
        ScanRate(-1)


# -- the Cassandra store's pages, against a session that fails or delays -------------------------


class _Result:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.current_rows = rows
        self.paging_state = None
        # the driver's ResponseFuture keeps its (cancelled) timer: a cycle through the future
        self.response_future = SimpleNamespace(_timer=object())


class _FlakySession:
    """Answers each request after ``latency_s`` (on the fake clock), failing the first few."""

    def __init__(self, clock: FakeClock, failures: list[Exception], latency_s: float) -> None:
        self.clock = clock
        self.failures = failures
        self.latency_s = latency_s

    def execute(self, *_args: Any, **_kwargs: Any) -> _Result:
        self.clock.now += self.latency_s
        if self.failures:
            raise self.failures.pop(0)
        return _Result([(1,)] * 10)

    def execute_async(self, *args: Any, **kwargs: Any) -> _Answered:
        """The driver's asynchronous form (a scan's page is waited for through it), answered
        at once."""
        try:
            return _Answered(self.execute(*args, **kwargs), None)
        except Exception as exc:
            return _Answered(None, exc)


class _Answered:
    """A driver ``ResponseFuture`` already answered."""

    def __init__(self, result: _Result | None, error: Exception | None) -> None:
        self._result, self._error = result, error

    def add_callbacks(self, callback: Any, errback: Any) -> None:
        if self._error is None:
            callback(self._result)
        else:
            errback(self._error)

    def result(self) -> _Result:
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class _Statement:
    def bind(self, _params: Any) -> _Statement:
        return self


def cassandra_pages(session: _FlakySession, t: ScanThrottle) -> Iterator[list[tuple[Any, ...]]]:
    from dircleaner.store.cassandra.config import CassandraConfig
    from dircleaner.store.cassandra.requests import CassandraRequests

    no_wait = RetryPolicy(attempts=4, base_s=0.0, cap_s=0.0)
    requests = CassandraRequests(CassandraConfig(), None, cast(Any, session), no_wait)
    return requests.pages(_Statement(), (), "sweep", 100, throttle=t)


def test_cassandra_scan_pages_back_off_on_timeouts_and_read_failures() -> None:
    clock = FakeClock()
    t = ScanThrottle(ScanRate(1000, 1.0), clock, clock.sleep)
    failures: list[Exception] = [OperationTimedOut("slow"), ReadFailure("replica failed")]
    pages = list(cassandra_pages(_FlakySession(clock, failures, 2.0), t))
    assert pages == [[(1,)] * 10]  # retried until it read
    stats = t.stats()
    assert stats.errors == 2
    # Each failure came more than the threshold after the last, and the page that finally
    # came took three tries of 2 s each: a slow page too.
    assert stats.backoffs == 3
    assert stats.final_rate == 125
    assert stats.pages == 1
    assert stats.mean_latency_s == pytest.approx(6.0)


def test_cassandra_scan_pages_let_go_of_the_rows_the_driver_holds() -> None:
    """A page's rows are copied out and the driver's list emptied: the driver's response
    future sits in a reference cycle, so rows it still held would outlive the page until the
    cyclic GC (paused through the scans) ran."""
    held: list[list[tuple[Any, ...]]] = []
    futures: list[Any] = []

    class _Holding(_FlakySession):
        def execute(self, *args: Any, **kwargs: Any) -> _Result:
            result = super().execute(*args, **kwargs)
            held.append(result.current_rows)
            futures.append(result.response_future)
            return result

    clock = FakeClock()
    t = ScanThrottle(ScanRate(), clock, clock.sleep)
    pages = list(cassandra_pages(_Holding(clock, [], 0.1), t))
    assert pages == [[(1,)] * 10]
    assert held == [[]]
    assert [f._timer for f in futures] == [None]  # the future's timer let go too
    assert t.stats().rows == 10


def test_cassandra_scan_pages_back_off_on_slow_pages() -> None:
    clock = FakeClock()
    t = ScanThrottle(ScanRate(1000, 0.5), clock, clock.sleep)
    list(cassandra_pages(_FlakySession(clock, [], 0.8), t))
    assert t.stats().backoffs == 1
    assert t.rate == 500


def test_metrics_carry_each_pass_scan() -> None:
    from dircleaner.cli.metrics import RunMetrics, render

    a, _ = throttle(100, slow_s=0.5)
    for _ in range(99):
        a.page(10, 0.01)
    a.page(10, 2.0)
    text = render(RunMetrics(scans={"sweep": a.stats()}), success=True, finished_at=1.0)
    lines = set(text.splitlines())
    assert 'dircleaner_scan_backoffs{pass="sweep"} 1' in lines
    assert 'dircleaner_scan_rate{pass="sweep"} 50' in lines
    assert 'dircleaner_scan_rate_cap{pass="sweep"} 100' in lines
    assert 'dircleaner_scan_rows{pass="sweep"} 1000' in lines
    p99 = [line for line in lines if 'quantile="0.99"' in line]
    assert p99 and p99[0].startswith('dircleaner_scan_page_latency_seconds{pass="sweep",')
    assert 0.01 <= float(p99[0].rsplit(" ", 1)[1]) <= 0.012
    assert "# TYPE dircleaner_scan_page_latency_mean_seconds gauge" in lines


def test_a_stream_whose_reads_slow_down_backs_off() -> None:
    """The embedded store's pacing: a batch that takes long to read is a slow page."""
    t, clock = throttle(1000, slow_s=0.5)

    def slow_reads() -> Iterator[list[int]]:
        for delay in (0.01, 0.01, 2.0, 0.01, 2.0):
            clock.now += delay
            yield [0] * 100

    assert len(list(t.paced(slow_reads()))) == 5
    stats = t.stats()
    assert stats.backoffs == 2
    assert stats.final_rate < 1000
