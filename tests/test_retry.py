"""Tests of the one retry policy: tries, waits, and which failures are tried again."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from dircleaner.retry import RetryPolicy


class Flaky:
    """Fails ``failures`` times with ``exc``, then returns how many calls it took."""

    def __init__(self, failures: int, exc: Exception) -> None:
        self.failures = failures
        self.exc = exc
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc
        return self.calls


def test_delay_is_full_jitter_under_a_doubling_capped_bound() -> None:
    class MaxJitter(random.Random):
        def uniform(self, a: float, b: float) -> float:
            assert a == 0
            return b

    policy = RetryPolicy(attempts=9, base_s=0.1, cap_s=1.0)
    assert [policy.delay(n, MaxJitter()) for n in range(1, 6)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    rng = random.Random(3)
    assert all(0 <= policy.delay(n, rng) <= min(1.0, 0.1 * 2**n) for n in range(1, 50))


def test_call_retries_accepted_failures_then_returns() -> None:
    waits: list[float] = []
    retried: list[Exception] = []
    flaky = Flaky(2, TimeoutError("slow"))
    policy = RetryPolicy(attempts=3, base_s=1.0, cap_s=10.0)
    result = policy.call(
        flaky,
        lambda exc: isinstance(exc, TimeoutError),
        on_retry=retried.append,
        sleep=waits.append,
        rng=random.Random(5),
    )
    assert result == 3
    twin = random.Random(5)
    assert waits == [twin.uniform(0, 2.0), twin.uniform(0, 4.0)]
    assert [str(e) for e in retried] == ["slow", "slow"]


def test_call_raises_the_last_failure_after_its_attempts() -> None:
    waits: list[float] = []
    flaky = Flaky(99, TimeoutError("slow"))
    with pytest.raises(TimeoutError, match="slow"):
        RetryPolicy(4, 0.0, 0.0).call(flaky, lambda exc: True, sleep=waits.append)
    assert flaky.calls == 4
    assert len(waits) == 3


def test_call_raises_a_refused_failure_at_once() -> None:
    waits: list[float] = []
    flaky = Flaky(99, KeyError("bad"))
    with pytest.raises(KeyError):
        RetryPolicy(4, 0.0, 0.0).call(
            flaky, lambda exc: isinstance(exc, TimeoutError), sleep=waits.append
        )
    assert (flaky.calls, waits) == (1, [])


def test_rerun_failed_sends_only_the_failed_items_again() -> None:
    left = {"a": 0, "b": 2, "c": 1, "d": 9}
    batches: list[list[str]] = []

    def run(items: Sequence[str]) -> list[str]:
        batches.append(list(items))
        out = []
        for item in items:
            out.append("fail" if left[item] else f"ok {item}")
            left[item] = max(0, left[item] - 1)
        return out

    waits: list[float] = []
    results = RetryPolicy(3, 0.0, 0.0).rerun_failed(
        ["a", "b", "c", "d"], run, lambda r: r == "fail", sleep=waits.append
    )
    assert batches == [["a", "b", "c", "d"], ["b", "c", "d"], ["b", "d"]]
    assert results == ["ok a", "ok b", "ok c", "fail"]  # d: its last result, out of attempts
    assert len(waits) == 2


def test_rerun_failed_of_nothing_runs_nothing() -> None:
    def run(items: Sequence[int]) -> list[int]:
        raise AssertionError("ran")

    assert RetryPolicy(3, 0.0, 0.0).rerun_failed([], run, lambda r: True) == []


def test_a_policy_makes_at_least_one_attempt() -> None:
    with pytest.raises(ValueError, match="at least one attempt"):
        RetryPolicy(0, 0.1, 1.0)


def test_next_wait_is_the_delay_until_the_attempts_are_spent() -> None:
    policy = RetryPolicy(attempts=3, base_s=1.0, cap_s=100.0)
    waits = [policy.next_wait(tries, random.Random(7)) for tries in (1, 2, 3, 4)]
    assert waits[:2] == [policy.delay(n, random.Random(7)) for n in (1, 2)]
    assert waits[2:] == [None, None]
