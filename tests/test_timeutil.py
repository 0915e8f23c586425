"""Tests of duration parsing and formatting and the µs clock."""

from __future__ import annotations

import time

import pytest

from dircleaner.errors import UsageError
from dircleaner.timeutil import (
    format_duration,
    format_utc,
    now_us,
    parse_duration,
    parse_utc_time,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("0s", 0.0),
        ("0.0", 0.0),
        ("45s", 45.0),
        ("90s", 90.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1.5m", 90.0),
        ("0.5s", 0.5),
        ("24h", 86400.0),
        (" 2h ", 7200.0),
        ("007m", 420.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert isinstance(parse_duration(text), float)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "abc",
        "m",
        "-1s",
        "+5s",
        "1x",
        "1.5.5m",
        "1e3",
        "10M",
        "2H",
        "1h30m",
        "1,5m",
        ".5m",
        "5.m",
        "inf",
        "nan",
        "1 d 2",
    ],
)
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_duration(text)
    assert str(caught.value) == f"invalid duration {text!r} (use e.g. 0, 90s, 10m, 2h, 1d)"
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("text", ["10", " 45 ", "1.5", "007"])
def test_a_duration_other_than_zero_needs_its_unit(text: str) -> None:
    """``--min-age 10`` was 10 seconds to dircleaner and 10 minutes to whoever typed it."""
    with pytest.raises(UsageError) as caught:
        parse_duration(text)
    number = text.strip()
    assert str(caught.value) == (
        f"duration {number!r} has no unit: write e.g. {number}m (minutes) or {number}s (seconds)"
    )
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0ms"),
        (0.95, "950ms"),
        (12.34, "12.3s"),
        (59.9, "59.9s"),
        (60.0, "1m00s"),
        (245.0, "4m05s"),
        (3599.0, "59m59s"),
        (3600.0, "1h00m"),
        (11_520.0, "3h12m"),
        (172_800.0, "48h00m"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_now_us_is_wall_clock_microseconds() -> None:
    before = time.time_ns() // 1000
    value = now_us()
    after = time.time_ns() // 1000
    assert isinstance(value, int)
    assert before <= value <= after


# 2026-11-26T07:23:40Z
AT = 1_795_677_820_000_000


@pytest.mark.parametrize(
    ("text", "us"),
    [
        ("2026-11-26T07:23:40Z", AT),
        ("2026-11-26T09:23:40+02:00", AT),
        ("2026-11-26T02:23:40-05:00", AT),
        ("2026-11-26T07:23:40", AT),  # no offset: UTC
        ("2026-11-26 07:23:40", AT),
        ("2026-11-26 07:23", AT - 40_000_000),
        ("2026-11-26T07:23:40.5Z", AT + 500_000),
        ("2026-11-26", AT - (7 * 3600 + 23 * 60 + 40) * 1_000_000),
    ],
)
def test_parse_utc_time(text: str, us: int) -> None:
    assert parse_utc_time(text) == us


@pytest.mark.parametrize("bad", ["07:28:00", "yesterday", "2026-11-26 7h", "%Y-%m-%d", ""])
def test_parse_utc_time_rejects_with_an_example(bad: str) -> None:
    with pytest.raises(UsageError, match=r"invalid time .* \(use e\.g\. 2026-11-26T07:28:00Z"):
        parse_utc_time(bad)


def test_format_utc_is_iso_8601_with_z() -> None:
    assert format_utc(AT + 999_999) == "2026-11-26T07:23:40Z"
