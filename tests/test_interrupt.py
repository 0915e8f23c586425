"""Stopping on a signal: a first SIGINT/SIGTERM is only a request, checked between batches; a
second one stops at once; an Interrupted crosses a process boundary intact."""

from __future__ import annotations

import contextvars
import os
import pickle
import random
import signal
import threading
import time
from collections.abc import Callable

import pytest

from dircleaner.pipeline.deleterate import AdaptiveRate, ThrottleConfig
from dircleaner.retry import RetryPolicy
from dircleaner.scanrate import ScanRate, ScanThrottle
from dircleaner.workers import interrupt
from dircleaner.workers.interrupt import Interrupted, check, signals_held, stop_on_signals


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_first_signal_is_a_request_checked_between_batches(signum: int) -> None:
    with stop_on_signals():
        check()  # nothing requested yet
        os.kill(os.getpid(), signum)
        assert interrupt.requested() == signum
        with pytest.raises(Interrupted) as caught:
            check()
    assert caught.value.exit_code == 128 + signum
    assert not caught.value.at_once
    assert "stopped after the batch in flight" in str(caught.value)
    assert interrupt.requested() is None  # the block's end forgets the request


def test_a_second_signal_stops_at_once() -> None:
    with stop_on_signals(), pytest.raises(Interrupted) as caught:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
    assert caught.value.at_once and caught.value.signum == signal.SIGINT
    assert str(caught.value) == "interrupted by a second SIGINT: stopped at once"


def test_the_handlers_are_restored_after_the_block() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_held_back_arrives_when_the_block_ends() -> None:
    with stop_on_signals():
        with signals_held():
            # To this thread, which holds it back: a process-wide kill could be taken by any
            # other thread a previous test left running (a driver's, a heartbeat's).
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            assert interrupt.requested() is None  # pending, not delivered
        assert interrupt.requested() == signal.SIGTERM


@pytest.mark.parametrize("at_once", [False, True])
def test_interrupted_survives_pickling(at_once: bool) -> None:
    sent = Interrupted(signal.SIGTERM, at_once=at_once)
    got = pickle.loads(pickle.dumps(sent))
    assert isinstance(got, Interrupted)
    assert (got.signum, got.at_once, got.exit_code, str(got)) == (
        sent.signum,
        sent.at_once,
        143,
        str(sent),
    )


# -- waits: every wait ends at a stop request ------------------------------------------------------


def _request_later(signum: int, after_s: float) -> threading.Thread:
    """Ask for a stop from another thread, as the signal handler would, after ``after_s``."""
    thread = threading.Timer(after_s, interrupt.request, args=(signum,))
    thread.start()
    return thread


def test_a_wait_without_a_stop_sleeps_its_time() -> None:
    with stop_on_signals():
        began = time.monotonic()
        interrupt.wait(0.2)
        assert 0.2 <= time.monotonic() - began < 1.0


def test_a_wait_ends_at_a_stop_request_not_at_its_end() -> None:
    with stop_on_signals():
        began = time.monotonic()
        _request_later(signal.SIGTERM, 0.2)
        with pytest.raises(Interrupted) as caught:
            interrupt.wait(3600)
        assert time.monotonic() - began < 1.5
    assert caught.value.signum == signal.SIGTERM


@pytest.mark.parametrize(
    "waits",
    [
        pytest.param(lambda: ScanThrottle(ScanRate(rows_per_s=1)).page(10_000, 0.0), id="scan cap"),
        pytest.param(lambda: AdaptiveRate(ThrottleConfig(rate=0.5)).acquire(32), id="delete rate"),
        pytest.param(
            lambda: RetryPolicy(2, 3600, 3600).call(
                _always_failing, retry_if=lambda _exc: True, rng=_LongestWait()
            ),
            id="retry back-off",
        ),
    ],
)
def test_the_throttles_and_back_offs_wait_interruptibly(waits: Callable[[], object]) -> None:
    """The scan cap's, the delete rate's and the retry policy's waits, by default."""
    with stop_on_signals():
        began = time.monotonic()
        _request_later(signal.SIGINT, 0.3)
        with pytest.raises(Interrupted):
            waits()
        assert time.monotonic() - began < 1.5


def _always_failing() -> None:
    raise TimeoutError("never answers")


class _LongestWait(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return b


def test_a_task_stops_when_its_run_is_stopped_and_only_then() -> None:
    """On a Dask worker: a task obeys its run's stop (the threads it starts in its context
    too), not another run's."""
    results: dict[str, BaseException | None] = {}

    def task(run: str) -> None:
        with interrupt.obeying(run):

            def split() -> None:  # a thread the task starts, as a Cassandra scan's splits
                try:
                    interrupt.wait(3600)
                    results[f"{run}-split"] = None
                except Interrupted as exc:
                    results[f"{run}-split"] = exc

            started = threading.Thread(target=contextvars.copy_context().run, args=(split,))
            started.start()
            try:
                interrupt.wait(0.6)
                results[run] = None
            except Interrupted as exc:
                results[run] = exc
            started.join(0.6 if run == "mine" else 0.1)

    runs = [threading.Thread(target=task, args=(run,)) for run in ("mine", "theirs")]
    for thread in runs:
        thread.start()
    time.sleep(0.1)
    interrupt.stop_run("mine", signal.SIGTERM)
    for thread in runs:
        thread.join(5)
    assert isinstance(results["mine"], Interrupted) and results["mine"].exit_code == 143
    assert isinstance(results["mine-split"], Interrupted)
    assert results["theirs"] is None  # its wait ran out: another run's stop is not its own
    assert "theirs-split" not in results  # still waiting
    assert interrupt.requested() is None  # this process was not asked to stop
    interrupt.stop_run("theirs", signal.SIGTERM)  # let its split go


def test_a_request_waited_for_returns_when_answered_or_raises_at_a_stop() -> None:
    """A scan's page from the cluster: waited for until it is answered, or a stop comes."""
    with stop_on_signals():
        answered = threading.Event()
        threading.Timer(0.1, answered.set).start()
        interrupt.wait_until(answered)  # answered: returns
        never = threading.Event()
        began = time.monotonic()
        _request_later(signal.SIGTERM, 0.2)
        with pytest.raises(Interrupted):
            interrupt.wait_until(never)
        assert time.monotonic() - began < 1.5
