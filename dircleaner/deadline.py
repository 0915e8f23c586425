"""The night's end: ``--deadline`` and ``--max-run-time`` resolved to one instant, after which no
delete starts.

A night that reaches it stops deleting cleanly: each deleter finishes the group of requests it
has sent (charged to the ledger and audited before it went, as every group) and sends no more;
a slice whose deletes had not started is not planned; the slices that finished are recorded,
and the next run resumes. The build and the sweep always finish (they only read: stopped half
way, they would leave the next night nothing to go on from); a night whose deadline passed
before its deletes deletes nothing.

The instant is wall-clock time (µs since the epoch), so every worker and Dask task compares its
own clock with it: hosts with clocks apart stop that far apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dircleaner.errors import UsageError
from dircleaner.timeutil import UTC_TIME_EXAMPLE, now_us, parse_utc_time

_CLOCK = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*$")
#: what ``--deadline``'s errors and help show
DEADLINE_EXAMPLE = f"06:00 (the next 06:00, local time), or a time such as {UTC_TIME_EXAMPLE}"


@dataclass(frozen=True)
class Deadline:
    """No delete starts at or after ``at_us`` (wall clock, µs since the epoch)."""

    at_us: int
    #: the wall clock in µs (tests give their own)
    clock: Callable[[], int] = field(default=now_us, compare=False, repr=False)

    def reached(self) -> bool:
        return self.clock() >= self.at_us


def parse_deadline(text: str, now: int) -> int:
    """µs since the epoch of ``--deadline``: ``HH:MM`` is the next such local time after
    ``now`` (µs), anything else an ISO 8601 time as ``--since`` takes it (UTC unless it says)."""
    match = _CLOCK.match(text)
    if match is None:
        try:
            return parse_utc_time(text)
        except UsageError:
            raise UsageError(f"invalid --deadline {text!r} (use e.g. {DEADLINE_EXAMPLE})") from None
    hour, minute = int(match.group(1)), int(match.group(2))
    if hour > 23 or minute > 59:
        raise UsageError(f"invalid --deadline {text!r}: no such time of day")
    start = datetime.fromtimestamp(now / 1e6).astimezone()
    moment = start.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if moment <= start:
        moment += timedelta(days=1)
    # Local wall time, through the zone's rules on that day (a DST change in between counts).
    local = datetime(moment.year, moment.month, moment.day, hour, minute).astimezone()
    return int(local.timestamp()) * 1_000_000


def night_end(deadline: str | None, max_run_time_s: float | None, started_us: int) -> int | None:
    """The instant no delete starts after: the earlier of ``--deadline`` and the run's start
    plus ``--max-run-time`` (None: neither was given). A deadline already past is refused."""
    ends: list[int] = []
    if deadline is not None:
        at = parse_deadline(deadline, started_us)
        if at <= started_us:
            raise UsageError(f"--deadline {deadline} has passed already")
        ends.append(at)
    if max_run_time_s is not None:
        if max_run_time_s <= 0:
            raise UsageError("--max-run-time must be more than 0")
        ends.append(started_us + int(max_run_time_s * 1_000_000))
    return min(ends) if ends else None
