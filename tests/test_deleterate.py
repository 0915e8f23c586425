"""Tests of the delete throttle: the AIMD token bucket and the throttle's settings."""

from __future__ import annotations

import pytest

from dircleaner.errors import UsageError
from dircleaner.pipeline.deleterate import AdaptiveRate, ThrottleConfig

# -- a fake clock for the token bucket -------------------------------------------------------------


class FakeClock:
    """A monotonic clock that only moves when someone sleeps (or the test advances it)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "never asked to sleep a non-positive time"
        self.sleeps.append(seconds)
        self.now += seconds


def limiter(rate: float, start_fraction: float = 1.0) -> tuple[AdaptiveRate, FakeClock]:
    clock = FakeClock()
    config = ThrottleConfig(rate=rate, start_fraction=start_fraction)
    return AdaptiveRate(config, clock=clock, sleep=clock.sleep), clock


# -- AdaptiveRate ----------------------------------------------------------------------------------


def test_rate_starts_at_its_fraction_with_a_floor_of_one_percent() -> None:
    rate, _ = limiter(1000.0, start_fraction=0.25)
    assert rate.rate == 250.0
    assert rate.max_rate == 1000.0
    assert rate.floor == 10.0


def test_acquire_one_waits_one_over_the_rate() -> None:
    rate, clock = limiter(4.0)
    rate.acquire(1)
    assert clock.sleeps == [0.25]
    assert clock.now == 0.25


def test_acquire_paces_a_stream_at_the_rate() -> None:
    rate, clock = limiter(4.0)
    for _ in range(8):
        rate.acquire(1)
    assert clock.sleeps == [0.25] * 8
    assert clock.now == 2.0  # 8 deletes at 4/s


def test_acquire_batches_at_the_rate() -> None:
    # A power-of-two rate keeps the fake clock's arithmetic exact.
    rate, clock = limiter(1024.0)
    for _ in range(64):
        rate.acquire(4)
    # 256 deletes at 1024/s take 0.25 s of waiting, 4/1024 s before each batch.
    assert clock.sleeps == [4 / 1024] * 64
    assert clock.now == 0.25


def test_idle_time_fills_the_bucket_up_to_a_tenth_of_a_second_of_rate() -> None:
    rate, clock = limiter(1000.0)
    clock.now = 100.0  # long idle: the bucket holds at most 100 tokens (BURST_S of the rate)
    rate.acquire(100)
    assert clock.sleeps == []
    rate.acquire(10)
    assert clock.sleeps == [pytest.approx(0.01)]
    # A slow rate keeps a bucket of one delete.
    slow, slow_clock = limiter(4.0)
    slow_clock.now = 100.0
    slow.acquire(1)
    slow.acquire(1)
    assert slow_clock.sleeps == [0.25]


def test_acquire_more_than_the_burst_goes_into_debt() -> None:
    rate, clock = limiter(2.0)
    rate.acquire(5)  # waits for a full bucket (1 token), then owes 4
    assert clock.sleeps == [0.5]
    rate.acquire(1)  # pays off the debt of 4 plus its own 1 at 2/s
    assert clock.sleeps == [0.5, 2.5]
    assert clock.now == 3.0


def test_a_rate_below_one_still_admits_single_deletes() -> None:
    rate, clock = limiter(2.0, start_fraction=0.25)  # 0.5/s, burst of 1
    rate.acquire(1)
    assert clock.sleeps == [2.0]
    clock.now += 60.0  # idle: the bucket still holds only one token
    rate.acquire(1)
    rate.acquire(1)
    assert clock.sleeps == [2.0, 2.0]


def test_rate_zero_is_unlimited_and_never_sleeps() -> None:
    rate, clock = limiter(0.0)
    for n in (1, 32, 10**6):
        rate.acquire(n)
    rate.on_success()
    rate.on_overload()
    assert clock.sleeps == []
    assert rate.rate == 0.0


def test_on_success_adds_a_twentieth_of_the_max_up_to_the_max() -> None:
    rate, _ = limiter(1000.0, start_fraction=0.25)
    seen = []
    for _ in range(17):
        rate.on_success()
        seen.append(rate.rate)
    assert seen[:3] == [300.0, 350.0, 400.0]
    assert seen[14] == 1000.0  # 250 + 15 * 50
    assert seen[15:] == [1000.0, 1000.0]


def test_on_overload_halves_down_to_the_floor() -> None:
    rate, _ = limiter(1000.0)
    seen = []
    for _ in range(9):
        rate.on_overload()
        seen.append(rate.rate)
    assert seen == [500.0, 250.0, 125.0, 62.5, 31.25, 15.625, 10.0, 10.0, 10.0]


def test_overload_slows_acquire_down() -> None:
    rate, clock = limiter(8.0)
    rate.acquire(1)
    rate.on_overload()  # 8/s → 4/s
    rate.acquire(1)
    assert clock.sleeps == [0.125, 0.25]


@pytest.mark.parametrize(("field", "value"), [("rate", -1.0), ("concurrency", 0)])
def test_throttle_config_rejects_bad_values(field: str, value: float) -> None:
    with pytest.raises(UsageError, match=f"--{field} must be"):
        ThrottleConfig(**{field: value})  # type: ignore[arg-type]
