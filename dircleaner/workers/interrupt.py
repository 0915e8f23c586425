"""Stopping cleanly on SIGINT or SIGTERM: after the batch in flight, never in the middle of one.

The CLI installs the handlers; a signal only records a request. Every phase reports progress
after each batch (scanned, swept, re-checked, deleted), and the progress hook calls ``check``,
which raises ``Interrupted`` there: the batch in flight is finished (its deletes issued and
audited), the checkpoints already recorded stay, and the next run resumes. A second signal
stops at once.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from dircleaner.errors import DircleanerError

_requested: int | None = None


class Interrupted(DircleanerError):
    """The run was stopped by a signal after the batch in flight; the next run resumes."""

    def __init__(self, signum: int) -> None:
        name = signal.Signals(signum).name
        super().__init__(
            f"interrupted by {name}: stopped after the batch in flight; what was deleted is"
            " in the audit log and the next run resumes"
        )
        self.signum = signum
        self.exit_code = 128 + signum

    def __reduce__(self) -> tuple[type[Interrupted], tuple[int]]:
        return (Interrupted, (self.signum,))


def requested() -> int | None:
    """The signal that asked this process to stop, if one did."""
    return _requested


def request(signum: int) -> None:
    """Ask this process to stop after the batch in flight (what the signal handler does)."""
    global _requested
    _requested = signum


def check() -> None:
    """Raise ``Interrupted`` if a stop was requested (called between batches)."""
    if _requested is not None:
        raise Interrupted(_requested)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if _requested is not None:
        raise Interrupted(signum)  # a second signal: stop now
    request(signum)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM request a clean stop while the block runs (main thread only)."""
    global _requested
    _requested = None
    try:
        previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _requested = None
