"""Stopping cleanly on SIGINT or SIGTERM: after the batch in flight, never in the middle of one.

The CLI installs the handlers; a signal only records a request. Every phase reports progress
after each batch (scanned, swept, re-checked, deleted), and the progress hook calls ``check``,
which raises ``Interrupted`` there: the batch in flight is finished (its deletes issued and
audited), the checkpoints already recorded stay, and the next run resumes. A second signal
stops at once.

Between batches dircleaner also waits: for the scan cap's and the delete rate's tokens, before
a retry, for a worker's result. Every such wait is ``wait``, which sleeps in slices of
``POLL_S`` and raises ``Interrupted`` as soon as a stop is requested: a run throttled to one row
a second stops as promptly as an unthrottled one, and a wait is never in the middle of a batch
(the deleter waits for a group's share of the rate before its lease check, charge and audit).

A task on a Dask worker gets no signal: the client, stopped, calls ``stop_run`` on every
worker, and the tasks running for that run (``obeying``) see the stop in the same ``check``
and ``wait``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import FrameType
from typing import Any

from dircleaner.errors import DircleanerError

#: a wait notices a stop request within this long
POLL_S = 0.05

_requested: int | None = None
#: runs whose client asked their tasks in this process to stop (run → the signal it got)
_stopped_runs: dict[str, int] = {}
#: the run the calling task works for, on a Dask worker (None: this process's own run)
_obeyed_run: ContextVar[str | None] = ContextVar("dircleaner_obeyed_run", default=None)


class Interrupted(DircleanerError):
    """The run was stopped by a signal after the batch in flight (or at once, by a second
    signal); the CLI says how far it got."""

    def __init__(self, signum: int, *, at_once: bool = False) -> None:
        name = signal.Signals(signum).name
        super().__init__(
            f"interrupted by a second {name}: stopped at once"
            if at_once
            else f"interrupted by {name}: stopped after the batch in flight"
        )
        self.signum = signum
        self.at_once = at_once
        self.exit_code = 128 + signum

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (self.signum, self.at_once))


def _rebuilt(signum: int, at_once: bool) -> Interrupted:
    """Unpickling (an Interrupted sent back by a worker process)."""
    return Interrupted(signum, at_once=at_once)


def requested() -> int | None:
    """The signal that asked this process, or the run the calling task works for, to stop."""
    if _requested is not None:
        return _requested
    run = _obeyed_run.get()
    return None if run is None else _stopped_runs.get(run)


def request(signum: int) -> None:
    """Ask this process to stop after the batch in flight (what the signal handler does)."""
    global _requested
    _requested = signum


def check() -> None:
    """Raise ``Interrupted`` if a stop was requested (called between batches)."""
    signum = requested()
    if signum is not None:
        raise Interrupted(signum)


def wait(seconds: float) -> None:
    """Sleep ``seconds`` unless a stop is requested: then raise ``Interrupted`` (within
    ``POLL_S``). The one way dircleaner waits; any thread may call it."""
    deadline = time.monotonic() + seconds
    while True:
        check()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, POLL_S))


def wait_until(done: threading.Event) -> None:
    """Until ``done`` is set (a request answered), unless a stop is requested: then raise
    ``Interrupted`` (within ``POLL_S``), leaving the request to end unheard."""
    check()
    while not done.wait(POLL_S):
        check()


@contextmanager
def obeying(run: str) -> Iterator[None]:
    """The calling task (on a Dask worker) stops when ``stop_run(run, …)`` is called in its
    process: its ``check`` and ``wait`` raise ``Interrupted`` then. Threads it starts obey too
    when they run in a copy of its context (``contextvars.copy_context``)."""
    token = _obeyed_run.set(run)
    try:
        yield
    finally:
        _obeyed_run.reset(token)


def stop_run(run: str, signum: int) -> None:
    """Ask the tasks of ``run`` in this process to stop (the client, stopped by ``signum``,
    calls it on every Dask worker)."""
    _stopped_runs[run] = signum


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if _requested is not None:
        raise Interrupted(signum, at_once=True)  # a second signal: stop now
    request(signum)


def _record_only(signum: int, _frame: FrameType | None) -> None:
    request(signum)


#: the signals that ask for a stop
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while the block runs (a fork): a child starts with them
    pending rather than meeting one before it installed its own handlers."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def quiet_in_worker() -> None:
    """In a worker process (forked within ``signals_held``): a signal only records a stop
    request, never raises, and the worker stops after its batch in flight and reports that to
    its parent, which says what happened. Then the signals held back at the fork are let in.

    A Ctrl-C at a terminal reaches every process of the group, and the parent passes the stop
    on too: a worker that raised where the signal found it would print a traceback of its own.
    """
    with contextlib.suppress(ValueError):  # not the main thread: only a test forks there
        for sig in STOP_SIGNALS:
            signal.signal(sig, _record_only)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM request a clean stop while the block runs (main thread only)."""
    global _requested
    _requested = None
    try:
        previous = {sig: signal.signal(sig, _on_signal) for sig in STOP_SIGNALS}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _requested = None
