"""The churn night in the library, on SQLite: which slots it reads and marks, its batches, its
guard, and T."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from dircleaner.errors import TooManyCandidates
from dircleaner.job.changed import (
    ChangedCleanConfig,
    churn_fraction_refusal,
    directory_count,
    journal_batches,
    run_changed_clean,
)
from dircleaner.job.journalstate import done_slots
from dircleaner.journal import JOURNAL_SLOT_S, record_deletes, slot_of
from dircleaner.paths import dir_of_row
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.store import Store, open_store
from dircleaner.timeutil import now_us

B = "b"
HOUR_US = JOURNAL_SLOT_S * 1_000_000


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as opened:
        yield opened


def listed(store: Store) -> set[str]:
    return {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows(B)}


def lose(store: Store, keys: list[str], at_us: int) -> None:
    """The keys' objects deleted and journaled at ``at_us``."""
    store.delete_objects(B, keys, at_us)
    record_deletes(store, B, keys, now_us=at_us)


def night(tmp_path: Path, **changes: object) -> ChangedCleanConfig:
    config = ChangedCleanConfig(
        bucket=B,
        min_age_s=0,
        throttle=ThrottleConfig(rate=0),
        guards=GuardConfig(max_delete_fraction=1.0),
        audit_log=tmp_path / "audit.jsonl",
    )
    return replace(config, **changes)  # type: ignore[arg-type]


def test_a_night_takes_the_settled_hours_and_marks_them_done(store: Store, tmp_path: Path) -> None:
    start = now_us()
    store.put_objects(B, ["old/a/1", "new/a/1", "live/x"], start - 3 * HOUR_US)
    lose(store, ["old/a/1"], start - 2 * HOUR_US)  # two hours ago: settled
    lose(store, ["new/a/1"], start)  # this hour: still open
    report = run_changed_clean(store, night(tmp_path, started_us=start))
    assert listed(store) == {"new/", "new/a/", "live/"}
    assert report.slots.open_slot is None and slot_of(start) not in report.slots.read
    assert set(report.slots_done) == set(report.slots.closing)
    assert slot_of(start - 2 * HOUR_US) in done_slots(store, B)
    assert 2 * 3600 <= report.oldest_entry_age_s < 3 * 3600
    # --settle 0s takes the open hour too, and leaves it undone.
    later = run_changed_clean(store, night(tmp_path, settle_s=0, started_us=now_us()))
    assert listed(store) == {"live/"}
    assert later.slots.read == [slot_of(start)] or later.slots.read[-1] == slot_of(now_us())
    assert slot_of(now_us()) not in done_slots(store, B)


def test_batches_cut_between_slots_and_the_cascade_crosses_them(
    store: Store, tmp_path: Path
) -> None:
    start = now_us()
    store.put_objects(B, ["p/a/1", "p/b/1", "q/live"], start - 5 * HOUR_US)
    lose(store, ["p/a/1"], start - 4 * HOUR_US)
    lose(store, ["p/b/1"], start - 3 * HOUR_US)
    batches = list(journal_batches(store, [slot_of(start - k * HOUR_US) for k in (4, 3)], B, 1))
    assert [len(b.hints) for b in batches] == [1, 1]
    report = run_changed_clean(store, night(tmp_path, started_us=start, max_batch_dirs=1))
    # Batch one: p/a/ goes, p/ keeps p/b/. Batch two: p/b/ goes, and p/ with it. The third
    # holds the hours after, which name nothing (they are marked done all the same).
    assert report.totals.batches == 3
    assert (report.totals.with_subdirectories, report.totals.empty) == (1, 3)
    assert listed(store) == {"q/"}


def test_the_guard_counts_the_whole_night_against_the_store(store: Store, tmp_path: Path) -> None:
    start = now_us()
    keys = [f"d{i}/x" for i in range(10)] + [f"keep{i}/x" for i in range(10)]
    store.put_objects(B, keys, start - 3 * HOUR_US)
    lose(store, keys[:3], start - 2 * HOUR_US)  # 3 of 20 directories: 15%
    guarded = night(tmp_path, started_us=start, guards=GuardConfig(max_delete_fraction=0.1))
    with pytest.raises(TooManyCandidates, match=r"3 of the store's 20 directories \(15.0%\)"):
        run_changed_clean(store, guarded)
    assert len(listed(store)) == 20 and done_slots(store, B) == set()
    dry = run_changed_clean(store, replace(guarded, dry_run=True))
    assert dry.would_be_refused and "15.0%" in dry.would_be_refused
    assert run_changed_clean(store, replace(guarded, guards=GuardConfig(force=True))).plan
    assert len(listed(store)) == 17


def test_the_fraction_refusal_and_the_count_it_uses(store: Store) -> None:
    guards = GuardConfig(max_delete_fraction=0.1)
    assert churn_fraction_refusal(10, 100, guards) is None
    assert churn_fraction_refusal(11, 100, guards) is not None
    assert churn_fraction_refusal(11, 100, GuardConfig(force=True)) is None
    assert churn_fraction_refusal(0, 0, guards) is None
    store.put_objects(B, ["a/b/c", "d/e"], 1)
    assert directory_count(store, B) == (3, "exact count of folder rows")
    from dircleaner.pipeline.build import scope_of, swept_count_key

    store.put_state(swept_count_key(scope_of(store, B)), "1000")
    assert directory_count(store, B) == (1000, "the last full night's sweep")


def test_t_is_the_nights_start_less_min_age(store: Store, tmp_path: Path) -> None:
    start = now_us()
    report = run_changed_clean(store, night(tmp_path, started_us=start, min_age_s=600))
    assert report.delete_timestamp_us == start - 600_000_000
    assert report.generation.startswith("changed-")
