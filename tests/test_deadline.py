"""The night's end (``dircleaner.deadline``): --deadline and --max-run-time resolved to one
instant, and the deleter that stops at it with the audit log and the ledger exact."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from dircleaner.audit import AuditLog
from dircleaner.deadline import Deadline, night_end, parse_deadline
from dircleaner.errors import UsageError
from dircleaner.pipeline.budget import ledger_charger
from dircleaner.pipeline.delete import execute_plan
from dircleaner.timeutil import parse_utc_time
from tests.test_deleter import (
    DELETE_TS,
    GENERATION,
    SURVIVORS,
    FaultyStore,
    audited_rows,
    fast,
    make_plan,
    plan_rows,
    populate,
    remaining,
)


@pytest.fixture
def local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process in Paris time (UTC+1 in November, +2 in July)."""
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def us(text: str) -> int:
    return parse_utc_time(text)


def test_a_time_of_day_is_its_next_occurrence_in_local_time(local_time: None) -> None:
    night = us("2026-11-27T01:15:00Z")  # 02:15 in Paris
    assert parse_deadline("06:00", night) == us("2026-11-27T05:00:00Z")
    assert parse_deadline("6:30", night) == us("2026-11-27T05:30:00Z")
    # Earlier in the day than the start: tomorrow's.
    assert parse_deadline("01:00", night) == us("2026-11-28T00:00:00Z")
    assert parse_deadline("02:15", night) == us("2026-11-28T01:15:00Z")
    # Across the change to summer time (29 March 2026, 02:00 → 03:00 in Paris).
    before = us("2026-03-28T22:00:00Z")  # 23:00, UTC+1
    assert parse_deadline("06:00", before) == us("2026-03-29T04:00:00Z")  # 06:00, UTC+2
    assert datetime.fromtimestamp(parse_deadline("06:00", before) / 1e6).hour == 6


def test_a_full_time_is_taken_as_written() -> None:
    now = us("2026-11-27T01:15:00Z")
    assert parse_deadline("2026-11-27T06:00:00Z", now) == us("2026-11-27T06:00:00Z")
    assert parse_deadline("2026-11-27T07:00:00+02:00", now) == us("2026-11-27T05:00:00Z")
    assert parse_deadline("2026-11-27 06:00", now) == us("2026-11-27T06:00:00Z")  # UTC


@pytest.mark.parametrize("text", ["25:00", "06:61", "six", "6", "06:00:00:00"])
def test_a_malformed_deadline_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="--deadline"):
        parse_deadline(text, us("2026-11-27T01:15:00Z"))


def test_the_night_ends_at_the_earlier_of_the_two() -> None:
    start = us("2026-11-27T02:15:00Z")
    assert night_end(None, None, start) is None
    assert night_end(None, 3600.0, start) == us("2026-11-27T03:15:00Z")
    assert night_end("2026-11-27T06:00:00Z", None, start) == us("2026-11-27T06:00:00Z")
    assert night_end("2026-11-27T06:00:00Z", 3600.0, start) == us("2026-11-27T03:15:00Z")
    assert night_end("2026-11-27T03:00:00Z", 3 * 3600.0, start) == us("2026-11-27T03:00:00Z")
    with pytest.raises(UsageError, match="has passed already"):
        night_end("2026-11-27T02:00:00Z", None, start)
    with pytest.raises(UsageError, match="more than 0"):
        night_end(None, 0.0, start)


def test_a_deadline_is_reached_on_its_clock() -> None:
    assert not Deadline(100, clock=lambda: 99).reached()
    assert Deadline(100, clock=lambda: 100).reached()
    assert Deadline(0).reached() and not Deadline(2**62).reached()


# -- the deleter at its deadline -----------------------------------------------------------------


class Countdown:
    """A clock that reaches the deadline (1) after ``checks`` looks at it."""

    def __init__(self, checks: int) -> None:
        self.left = checks

    def __call__(self) -> int:
        self.left -= 1
        return 0 if self.left >= 0 else 1


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FaultyStore]:
    opened = FaultyStore.open("sqlite:///" + str(tmp_path / "meta.db"), create=True)
    assert isinstance(opened, FaultyStore)
    with opened:
        yield opened


def test_the_deletes_stop_at_the_deadline_with_the_audit_log_and_ledger_exact(
    store: FaultyStore,
) -> None:
    populate(store)
    plan = make_plan()  # 2 partition deletes, then 6 row deletes
    buffer = io.BytesIO()
    charged: list[int] = []
    charge = ledger_charger(store, GENERATION, "attempt", 3600.0)

    def charging(actions: object) -> None:
        charged.append(len(actions))  # type: ignore[arg-type]
        charge(actions)  # type: ignore[arg-type]

    stats = execute_plan(
        store,
        plan,
        DELETE_TS,
        fast(concurrency=1),  # a group is one request: the deadline is looked at before each
        AuditLog(buffer, GENERATION, DELETE_TS),
        charge=charging,
        deadline=Deadline(1, clock=Countdown(3)),
    )
    assert stats.stopped_at_deadline
    assert (stats.deletes.partition, stats.deletes.row) == (2, 1)
    # Exactly the three groups sent were charged and audited, nothing of the rest.
    assert charged == [1, 1, 1]
    sent = plan_rows(plan.actions)[: stats.directories]
    assert audited_rows(buffer) == sent
    assert remaining(store) == (SURVIVORS | set(plan_rows(plan.actions))) - set(sent)


def test_a_deadline_already_past_sends_nothing(store: FaultyStore) -> None:
    populate(store)
    plan = make_plan()
    buffer = io.BytesIO()
    stats = execute_plan(
        store,
        plan,
        DELETE_TS,
        fast(),
        AuditLog(buffer, GENERATION, DELETE_TS),
        deadline=Deadline(0),
    )
    assert stats.stopped_at_deadline and stats.directories == 0
    assert audited_rows(buffer) == []
    assert remaining(store) == SURVIVORS | set(plan_rows(plan.actions))


def test_a_far_deadline_changes_nothing(store: FaultyStore) -> None:
    populate(store)
    stats = execute_plan(store, make_plan(), DELETE_TS, fast(), deadline=Deadline(2**62))
    assert not stats.stopped_at_deadline
    assert remaining(store) == SURVIVORS
