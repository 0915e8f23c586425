"""--scan-rate and --rate are totals the slices running share as they come and go
(``dircleaner.rateshare``): the throttles follow the count of their sharers, the local
workers count them in shared memory, and over a pass the total stays at the cap, never above
it in any second by more than a small burst."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import sqlite3
import threading
import time
from bisect import bisect_right
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pytest

from dircleaner.model import Shard
from dircleaner.pipeline.deleterate import AdaptiveRate, ThrottleConfig
from dircleaner.rateshare import Alone, ProcessSharers, RateParts
from dircleaner.scanrate import ScanRate, ScanThrottle
from dircleaner.store.records import murmur_token
from tests.helpers import invoke, write_lines


class CountedSharers:
    """Sharers whose count the test sets."""

    def __init__(self, n: int) -> None:
        self.n = n

    def count(self) -> int:
        return self.n

    def joined(self) -> AbstractContextManager[None]:
        return nullcontext()

    def start_fraction(self, first: float) -> float:
        return first

    def ended_at(self, fraction: float) -> None:
        pass


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_alone_is_a_fixed_count() -> None:
    assert (Alone().count(), Alone(3).count(), Alone(0).count()) == (1, 3, 1)


def test_the_parts_follow_the_count() -> None:
    sharers = CountedSharers(2)
    parts = RateParts(1000.0, sharers)
    assert parts.part == 500
    assert parts.follow() == 1.0
    sharers.n = 1
    assert parts.follow() == 2.0 and parts.part == 1000
    sharers.n = 4
    assert parts.follow() == 0.25 and parts.part == 250
    # Unlimited stays unlimited, whatever the count.
    assert RateParts(0.0, sharers).part == 0 and RateParts(0.0, sharers).follow() == 1.0


def _hold(sharers: ProcessSharers, ready: object, release: object) -> None:
    with sharers.joined():
        ready.set()  # type: ignore[attr-defined]
        release.wait(10)  # type: ignore[attr-defined]


def test_forked_processes_count_in_shared_memory() -> None:
    sharers = ProcessSharers()
    context = multiprocessing.get_context("fork")
    ready = [context.Event() for _ in range(3)]
    release = context.Event()
    procs = [context.Process(target=_hold, args=(sharers, r, release)) for r in ready]
    for proc in procs:
        proc.start()
    try:
        for event in ready:
            assert event.wait(10)
        assert sharers.count() == 3
        with sharers.joined():
            assert sharers.count() == 4
    finally:
        release.set()
        for proc in procs:
            proc.join(10)
    assert sharers.count() == 1  # none joined: a slice alone takes it all


def test_a_scan_throttle_follows_its_sharers() -> None:
    sharers = CountedSharers(2)
    clock = FakeClock()
    throttle = ScanThrottle(ScanRate(1000).shared(sharers), clock, clock.sleep)
    assert throttle.rate == 500
    # Two slices read: this one at its half.
    start = clock.now
    for _ in range(10):
        throttle.page(100, 0.001)
    assert clock.now - start == pytest.approx(2.0)
    # The other finished: this one reads at the whole cap.
    sharers.n = 1
    start = clock.now
    for _ in range(10):
        throttle.page(100, 0.001)
    assert throttle.rate == 1000
    assert clock.now - start == pytest.approx(1.0, abs=0.11)
    # Three more joined: a quarter, and no second's worth saved up at the old rate.
    sharers.n = 4
    throttle.page(100, 0.001)
    assert throttle.rate == 250
    stats = throttle.stats()
    assert (stats.cap, stats.final_rate) == (1000, 1000)  # the total, as the job reports it


def test_a_backed_off_scan_keeps_its_back_off_as_its_part_changes() -> None:
    sharers = CountedSharers(1)
    clock = FakeClock()
    throttle = ScanThrottle(ScanRate(1000, 0.5).shared(sharers), clock, clock.sleep)
    throttle.page(10, 2.0)  # a slow page: halved
    assert throttle.rate == 500
    sharers.n = 2
    throttle.page(10, 0.001)
    assert throttle.rate == pytest.approx(250, rel=0.01)  # half of its half
    assert throttle.stats().final_rate == pytest.approx(500, rel=0.01)


def test_the_delete_rate_follows_its_sharers() -> None:
    sharers = CountedSharers(4)
    clock = FakeClock()
    config = ThrottleConfig(rate=1000.0, start_fraction=1.0, shared_by=sharers)
    rate = AdaptiveRate(config, clock=clock, sleep=clock.sleep)
    assert (rate.max_rate, rate.rate, rate.floor) == (250, 250, 2.5)
    for _ in range(25):
        rate.acquire(10)
    assert clock.now == pytest.approx(1.0)
    sharers.n = 1
    start = clock.now
    for _ in range(100):
        rate.acquire(10)
    assert clock.now - start == pytest.approx(1.0, abs=0.02)
    assert (rate.max_rate, rate.total_rate) == (1000, 1000)
    rate.on_overload()
    sharers.n = 2
    rate.acquire(1)
    assert (rate.max_rate, rate.rate, rate.total_rate) == (500, 250, 500)


def test_a_process_s_next_slice_starts_its_deletes_where_its_last_one_ended() -> None:
    sharers = ProcessSharers()
    config = ThrottleConfig(rate=1000.0, start_fraction=0.25, shared_by=sharers)
    first = AdaptiveRate(config)
    assert first.rate == 250
    for _ in range(10):
        first.on_success()
    sharers.ended_at(first.fraction)
    assert AdaptiveRate(config).rate == 750
    # A rate of its own starts afresh.
    assert AdaptiveRate(ThrottleConfig(rate=1000.0, start_fraction=0.25)).rate == 250


def test_an_unlimited_delete_rate_never_waits_whatever_the_count() -> None:
    clock = FakeClock()
    rate = AdaptiveRate(ThrottleConfig(rate=0.0, shared_by=CountedSharers(3)), clock, clock.sleep)
    rate.acquire(10_000)
    assert (clock.now, rate.total_rate) == (0.0, 0.0)


# -- on the real clock: two slices, one leaving early ---------------------------------------------

CAP = 2000.0
PAGE = 50


def _slice(sharers: ProcessSharers, seconds: float, stamps: list[float]) -> None:
    """A slice reading pages of PAGE rows through its throttle for ``seconds``."""
    throttle = ScanThrottle(ScanRate(CAP, adaptive=False).shared(sharers))
    with sharers.joined():
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            reserved = throttle.reserve(PAGE)
            stamps.append(time.monotonic())
            throttle.page(PAGE, 0.0, reserved)


def test_two_slices_read_the_whole_cap_and_never_over_it() -> None:
    sharers = ProcessSharers()
    short: list[float] = []
    long: list[float] = []
    threads = [
        threading.Thread(target=_slice, args=(sharers, 1.0, short)),
        threading.Thread(target=_slice, args=(sharers, 3.0, long)),
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stamps = sorted(short + long)
    elapsed = stamps[-1] - started
    # The slice left alone takes the whole cap: about 3 s at the cap, not 1 s at it and 2 s at
    # half of it (a fixed part each: 2/3 of it).
    assert len(stamps) * PAGE / elapsed >= 0.9 * CAP
    # Never more than the cap in any second, but for a page or two in flight.
    busiest = max(bisect_right(stamps, t + 1.0) - i for i, t in enumerate(stamps)) * PAGE
    assert busiest <= CAP + 3 * PAGE


# -- the job's passes with two workers, on slices of very unequal size -----------------------------

#: one partition of WIDE rows: one slice of the sweep holds nearly every row
WIDE = 40_000
SCAN_CAP = 20_000.0
DELETE_RATE = 1000.0
#: the share of a cap the last slice must reach: a fixed half each reaches at most 0.5, the
#: whole cap about 0.95 on an idle machine; 0.7 leaves room for a loaded one (2 cores, Dask)
SHARED_FLOOR = 0.7


def _wide_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'wide.db'}"
    keys = write_lines(tmp_path / "keys", (f"wide/{i}/o" for i in range(WIDE)))
    assert invoke(url, "import-keys", str(keys)).exit_code == 0
    assert invoke(url, "build").exit_code == 0
    return url


def _swept_rate(url: str, *args: str) -> float:
    result = invoke(url, "sweep", "--scan-rate", str(SCAN_CAP), "--json", *args)
    assert result.exit_code == 0, result.output
    scan = json.loads(result.stdout)["scan"]
    assert scan["rows"] == WIDE + 1 and scan["cap_rows_per_s"] == SCAN_CAP
    return float(scan["rows_per_s"])


def test_the_last_slice_scanning_reads_at_the_whole_cap(tmp_path: Path) -> None:
    # Two workers, eight slices: the other worker's seven are done at once, and the wide one
    # reads alone. A fixed half each read it at half the cap.
    rate = _swept_rate(_wide_store(tmp_path), "--workers", "2")
    assert SHARED_FLOOR * SCAN_CAP <= rate <= 1.1 * SCAN_CAP


def test_the_last_task_scanning_reads_at_the_whole_cap_on_dask(tmp_path: Path) -> None:
    from tests.daskcluster import LoopbackCluster

    url = _wide_store(tmp_path)
    cluster = LoopbackCluster(tmp_path, workers=2)
    try:
        cluster.wait_for_workers(2)
        rate = _swept_rate(url, "--scheduler", cluster.address)
    finally:
        cluster.close()
    assert SHARED_FLOOR * SCAN_CAP <= rate <= 1.1 * SCAN_CAP


def _parents_in_first_slice(count: int, slices: int) -> list[str]:
    """Directories whose partition falls in the first of ``slices`` slices of the ring."""
    _lo, hi = Shard().split(slices)[0].token_range()
    found = (f"d{j}/" for j in itertools.count())
    return list(itertools.islice((p for p in found if murmur_token("default", p) <= hi), count))


def test_the_last_slice_deleting_deletes_at_the_whole_rate(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    # 300 live partitions of the first slice, each with 10 empty directories between live
    # ones: 3,000 row deletes, all in one slice of eight.
    parents = _parents_in_first_slice(300, 8)
    live = [f"{p}{k:02d}l/o" for p in parents for k in range(10)]
    dead = [f"{p}{k:02d}x/o" for p in parents for k in range(10)]
    assert (
        invoke(url, "import-keys", str(write_lines(tmp_path / "put", live + dead))).exit_code == 0
    )
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "dead", dead))).exit_code == 0
    started_us = time.time_ns() // 1000
    result = invoke(
        url,
        *("run", "--workers", "2", "--rate", str(DELETE_RATE), "--min-age", "0", "--fpr", "1e-6"),
        *("--max-delete-fraction", "1", "--audit-log", str(tmp_path / "a.jsonl"), "--json"),
    )
    assert result.exit_code == 0, result.output
    clean = json.loads(result.stdout)["clean"]
    deleted = clean["row_tombstones"]
    assert deleted >= 2990  # but for the filter's rare false positives
    rate = deleted / clean["phase_seconds"]["delete"]
    # It ramps up from a quarter of the rate; a fixed half each deleted at half of it.
    assert rate >= 0.65 * DELETE_RATE  # a fixed half: at most 0.5
    # And never over the rate in any second, but for a group of requests.
    with sqlite3.connect(tmp_path / "meta.db") as conn:
        stamps = sorted(
            t
            for (t,) in conn.execute(
                "SELECT written_us FROM tombstones WHERE written_us >= ?", (started_us,)
            )
        )
    assert len(stamps) == deleted
    busiest = max(bisect_right(stamps, t + 999_999) - i for i, t in enumerate(stamps))
    assert busiest <= 1.1 * DELETE_RATE + 32
