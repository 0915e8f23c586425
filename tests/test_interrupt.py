"""Stopping on a signal: a first SIGINT/SIGTERM is only a request, checked between batches; a
second one stops at once; an Interrupted crosses a process boundary intact."""

from __future__ import annotations

import os
import pickle
import signal
import threading

import pytest

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
