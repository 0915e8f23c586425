"""Which journal slots a churn night reads and marks done, and the rows that defer a directory
(pure), and the done marks in a store."""

from __future__ import annotations

from pathlib import Path

from dircleaner.job.journalstate import (
    defer,
    deferral_entries,
    done_slots,
    mark_done,
    slots_to_read,
)
from dircleaner.journal import JOURNAL_SLOT_S, JOURNAL_TTL_S, shard_of, slot_of
from dircleaner.store import open_store
from dircleaner.store.records import JournalEntry

H = JOURNAL_SLOT_S
#: 2026-11-26 02:20:00 UTC, a night's start
NIGHT_US = 1_795_659_600_000_000
SLOT = slot_of(NIGHT_US)  # 02:00


def test_a_night_reads_the_settled_slots_of_the_rows_still_alive() -> None:
    slots = slots_to_read([], NIGHT_US, 900)
    # 01:00-02:00 ended 20 minutes ago, more than the 15 settled; 02:00 is still open.
    assert slots.read[-1] == SLOT - H
    assert slots.closing == slots.read and slots.open_slot is None
    # The oldest: rows of older slots have expired.
    assert slots.read[0] == slot_of(NIGHT_US - JOURNAL_TTL_S * 1_000_000)
    assert len(slots.read) == JOURNAL_TTL_S // H


def test_settle_holds_back_a_slot_whose_writers_may_still_be_in_flight() -> None:
    assert slots_to_read([], NIGHT_US, 1800).read[-1] == SLOT - 2 * H  # 01:00 ends +30m: no
    assert slots_to_read([], NIGHT_US, 1200).read[-1] == SLOT - H  # exactly settled: yes


def test_settle_zero_reads_the_open_slot_too_but_never_marks_it_done() -> None:
    slots = slots_to_read([], NIGHT_US, 0)
    assert slots.read[-1] == SLOT and slots.open_slot == SLOT
    assert SLOT not in slots.closing and slots.closing == slots.read[:-1]


def test_done_slots_are_not_read_again() -> None:
    done = {SLOT - H, SLOT - 5 * H}
    slots = slots_to_read(done, NIGHT_US, 900)
    assert not done & set(slots.read)
    assert slots.read[-1] == SLOT - 2 * H
    assert slots_to_read({SLOT}, NIGHT_US, 0).open_slot is None


def test_deferral_rows_bring_directories_back_a_delay_later_with_no_count() -> None:
    rows = deferral_entries([("b", "x/"), ("a", "y/"), ("b", "x/")], NIGHT_US, 10 * 86_400)
    later = slot_of(NIGHT_US + 10 * 86_400 * 1_000_000)
    assert rows == [
        JournalEntry(later, shard_of("a", "y/"), "a", "y/", 0),
        JournalEntry(later, shard_of("b", "x/"), "b", "x/", 0),
    ]


def test_done_marks_per_bucket_and_for_every_bucket(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        assert done_slots(store, None) == set()
        mark_done(store, "b|odd", [SLOT - H], NIGHT_US)
        mark_done(store, None, [SLOT - 2 * H], NIGHT_US)
        assert done_slots(store, "b|odd") == {SLOT - H, SLOT - 2 * H}
        assert done_slots(store, "other") == {SLOT - 2 * H}
        assert done_slots(store, None) == {SLOT - 2 * H}
        # One record per scope, rewritten: the slots whose rows expired are dropped from it.
        expired = SLOT - JOURNAL_TTL_S - 2 * H
        mark_done(store, None, [expired, SLOT - 3 * H], NIGHT_US)
        assert done_slots(store, None) == {SLOT - 2 * H, SLOT - 3 * H}
        assert [e.key for e in store.kv_read("journal")] == ["done|*", "done|b|odd"]
        now = slot_of(NIGHT_US)
        assert defer(store, [("b", "x/")], NIGHT_US, 0) == 1
        assert [e.parent for batch in store.journal_read(now) for e in batch] == ["x/"]
        assert defer(store, [], NIGHT_US, 0) == 0
