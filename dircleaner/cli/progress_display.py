"""Progress of long phases: redrawn on a terminal, logged every ~30 s and per phase otherwise."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import IO

from dircleaner.timeutil import format_duration
from dircleaner.workers.interrupt import check as check_interrupted

log = logging.getLogger("dircleaner")

#: a command's last progress report: (phase, done, total)
Reached = tuple[str, int, int | None]

#: seconds between progress log lines when nobody watches a terminal (cron, systemd)
LOG_INTERVAL_S = 30.0

#: what each phase counts: its rate is in these per second (the clean's in deletes, the unit
#: --rate limits, a range or partition delete taking several directories)
UNITS = {
    "build": "object partitions",
    "sweep": "directories",
    "verify": "directories",
    "walk": "directories",
    "clean": "deletes",
    "put": "keys",
    "deleted": "keys",
    "generate": "directories",
    "read": "audit log entries",
    "sort": "entries",
    "restore": "entries",
}


_quiet = False


def set_quiet(on: bool) -> None:
    """``-q``: no progress on the terminal, and no notes (errors and warnings still show)."""
    global _quiet
    _quiet = on


def quiet() -> bool:
    """Whether ``-q`` was given."""
    return _quiet


def _log_interval() -> float:
    try:
        return float(os.environ.get("DIRCLEANER_PROGRESS_SECONDS", LOG_INTERVAL_S))
    except ValueError:
        return LOG_INTERVAL_S


class TerminalProgress:
    """Items per second and ETA: redrawn on a terminal at most twice a second; without one, an
    info log line every ~30 s (``DIRCLEANER_PROGRESS_SECONDS``) and at the end of each phase.

    Phases run back to back, so a phase is timed from the end of the one before: a phase that
    reports once, at its end, gets its real rate. A phase whose first report is its start
    (nothing done yet: the deletes, the re-check) is timed from that report, so the work
    between two phases (the plan before the deletes) does not slow its rate and stretch its
    ETA."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty() and not _quiet
        self._interval = _log_interval()
        self._phase = ""
        self._phase_started = time.monotonic()
        self._last_draw = 0.0
        self._last_log = 0.0
        self._last_report = self._phase_started
        self._done = 0
        self._total: int | None = None
        self._reached: Reached | None = None
        self._drawn = False
        global _latest
        _latest = self

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        now = time.monotonic()
        if phase != self._phase:
            self._end_phase(self._last_report)
            if done == 0:
                self._phase_started = now
            log.info("%s: started", phase)
            self._phase, self._last_log = phase, now
        self._done, self._total, self._last_report = done, total, now
        self._reached = (phase, done, total)
        # Between batches (this one counted): where a signal stops the run.
        check_interrupted()
        if not self._tty:
            if now - self._last_log >= self._interval and done != total:
                self._last_log = now
                log.info("%s", self._text(now))
            return
        if now - self._last_draw < 0.5 and done != total:
            return
        self._last_draw = now
        self._stream.write("\r\033[K" + self._text(now))
        self._stream.flush()
        self._drawn = True

    def _text(self, now: float) -> str:
        elapsed = max(now - self._phase_started, 1e-3)
        rate = self._done / elapsed
        total = self._total
        text = f"{self._phase}: {self._done:,}" + (f"/{total:,}" if total else "")
        text += _unit(self._phase) + f" ({rate:,.0f}/s"
        if total and rate > 0 and self._done < total:
            text += f", ETA {format_duration(max(total - self._done, 0) / rate)}"
        return text + ")"

    def _end_phase(self, ended: float) -> None:
        """Log the phase that ended at ``ended`` (its last report); the next starts there."""
        if self._phase:
            elapsed = max(ended - self._phase_started, 1e-3)
            log.info(
                "%s: done: %s in %.1fs (%s/s)",
                self._phase,
                f"{self._done:,}{_unit(self._phase)}",
                elapsed,
                f"{self._done / elapsed:,.0f}",
            )
        self._phase_started = ended

    def close(self) -> None:
        """End the last phase (its log line) and clear the terminal line."""
        self._end_phase(self._last_report)
        self._phase = ""
        if self._tty:
            self._stream.write("\r\033[K")
            self._stream.flush()
        self._drawn = False

    def stopped(self) -> Reached | None:
        """How far the command got (its last report: phase, done, total), the progress line
        ended first so that what follows starts a line of its own."""
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False
        return self._reached


#: the progress of the command running now (what an interruption reports)
_latest: TerminalProgress | None = None


def latest() -> TerminalProgress | None:
    """The progress display of the command running now, if it made one."""
    return _latest


def forget() -> None:
    """A new command starts: no progress of its own yet."""
    global _latest
    _latest = None


def _unit(phase: str) -> str:
    unit = UNITS.get(phase)
    return f" {unit}" if unit else ""
