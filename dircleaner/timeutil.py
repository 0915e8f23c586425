"""Clock and duration helpers (µs timestamps, as Cassandra's write times)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from dircleaner.errors import UsageError

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def now_us() -> int:
    """Wall-clock time in µs since the epoch."""
    return time.time_ns() // 1000


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``90s``, ``10m``, ``2h``, ``1d`` or ``0``: a number other
    than zero needs its unit (``10`` meant minutes as often as seconds)."""
    match = _DURATION.match(text)
    if not match:
        raise UsageError(f"invalid duration {text!r} (use e.g. 0, 90s, 10m, 2h, 1d)")
    number, unit = match.group(1), match.group(2)
    if not unit and float(number) != 0:
        raise UsageError(
            f"duration {number!r} has no unit: write e.g. {number}m (minutes) or {number}s"
            " (seconds)"
        )
    return float(number) * _UNITS[unit]


def format_duration(seconds: float) -> str:
    """A short human form: ``950ms``, ``12.3s``, ``4m05s``, ``3h12m``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


#: what ``parse_utc_time``'s errors and the help texts show
UTC_TIME_EXAMPLE = "2026-11-26T07:28:00Z, 2026-11-26T09:28:00+02:00 or '2026-11-26 07:28' (UTC)"


def parse_utc_time(text: str) -> int:
    """µs since the epoch of an ISO 8601 time: with ``Z`` or an offset, or without one (UTC);
    a space may stand for the ``T`` and the seconds may be left out (``2026-11-26 07:28``)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"invalid time {text!r} (use e.g. {UTC_TIME_EXAMPLE})") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def format_utc(timestamp_us: int) -> str:
    """A µs timestamp as ISO 8601 UTC to the second: ``2026-11-26T07:28:40Z``."""
    moment = datetime.fromtimestamp(timestamp_us // 1_000_000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_utc_us(timestamp_us: int) -> str:
    """A µs timestamp as UTC, to the µs: ``2026-11-26 08:03:12.123456 UTC``."""
    moment = datetime.fromtimestamp(timestamp_us // 1_000_000, UTC)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{timestamp_us % 1_000_000:06d} UTC"
