"""cli/changed.py: a churn night's summary for ``--json`` and its lines for people, from the
night's report (the command end to end is in ``cli/test_clean_changed.py``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from dircleaner.cli.changed import changed_lines, changed_summary
from dircleaner.job.changed import ChangedCleanConfig, ChangedCleanReport, run_changed_clean
from dircleaner.journal import JOURNAL_SLOT_S, record_deletes, slot_of
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.store import open_store
from dircleaner.timeutil import format_utc, now_us

B = "b"
HOUR_US = JOURNAL_SLOT_S * 1_000_000


def churn_night(tmp_path: Path) -> ChangedCleanReport:
    """Two settled hours of deletes: ``a/x/``, ``a/`` and ``c/d/`` emptied (and so ``c/``, a parent
    no delete named), ``b/`` and ``e/`` still live."""
    start = now_us()
    config = ChangedCleanConfig(
        bucket=B,
        min_age_s=0,
        throttle=ThrottleConfig(rate=0),
        guards=GuardConfig(max_delete_fraction=1.0),
        audit_log=tmp_path / "audit.jsonl",
        started_us=start,
    )
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        store.put_objects(
            B, ["a/x/1", "a/2", "b/1", "b/2", "c/d/1", "e/1", "e/2"], start - 4 * HOUR_US
        )
        for key, hours_ago in (("a/x/1", 3), ("a/2", 2), ("b/1", 2), ("c/d/1", 2), ("e/1", 3)):
            store.delete_objects(B, [key], start - hours_ago * HOUR_US)
            record_deletes(store, B, [key], now_us=start - hours_ago * HOUR_US)
        return run_changed_clean(store, replace(config, started_us=start))


def test_the_summary_is_the_report_as_plain_json(tmp_path: Path) -> None:
    report = churn_night(tmp_path)
    summary = json.loads(json.dumps(changed_summary(report, removal_known=True)))
    t = report.totals
    assert summary["night"] == "churn"
    assert summary["journal"]["slots_read"] == len(report.slots.read) >= 2
    assert summary["journal"]["first_slot"] == report.slots.read[0]
    assert summary["journal"]["last_slot"] == report.slots.read[-1]
    assert summary["journal"]["entries"] == t.entries == 5
    assert summary["check"]["empty"] == t.empty == 4  # a/x/, a/, c/d/ and c/
    assert summary["check"]["journaled"] == t.journaled == 5
    assert summary["check"]["parents"] == t.parents == 1  # c/
    assert summary["check"]["with_objects"] == t.with_objects == 2  # b/ and e/
    assert summary["check"]["reads"]["total"] == t.reads.total
    assert summary["delete_timestamp_us"] == report.delete_timestamp_us
    assert summary["would_be_refused"] is None


def test_the_lines_say_the_hours_read_and_what_the_check_found(tmp_path: Path) -> None:
    report = churn_night(tmp_path)
    first, last = report.slots.read[0], report.slots.read[-1]
    span = f"{format_utc(first * 1_000_000)} to {format_utc(last * 1_000_000)}"
    lines = changed_lines(report, "audit.jsonl", "0s")
    assert lines[0].startswith(f"journal {len(report.slots.read)} slots ({span}), settled ")
    assert "(the hour still open included)" not in lines[0]
    assert ": 5 rows naming 5 directories" in lines[0]
    assert lines[1].startswith("check   6 directories = 5 journaled + 1 parents of emptied ones:")
    assert "2 hold objects, 0 subdirectories, 4 empty" in lines[1]
    assert "(night start - --min-age 0s)" in "\n".join(lines)
    assert slot_of(report.started_us) not in report.slots.read


def test_a_night_that_read_no_hour_says_none(tmp_path: Path) -> None:
    report = churn_night(tmp_path)
    empty = replace(report, slots=replace(report.slots, read=[], closing=[]))
    assert changed_lines(empty, None, "1h")[0].startswith("journal 0 slots (none), settled ")
    assert changed_summary(empty, removal_known=False)["journal"]["first_slot"] is None
