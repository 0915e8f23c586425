"""The journal's API (``dircleaner.journal``): slots, shards, TTLs, rows merged per request."""

from __future__ import annotations

import time
from pathlib import Path

from dircleaner.journal import (
    JOURNAL_SHARDS,
    JOURNAL_SLOT_S,
    JOURNAL_TTL_S,
    journal_entries,
    record_deletes,
    shard_of,
    slot_of,
    ttl_for,
)
from dircleaner.store import open_store
from dircleaner.store.records import JournalEntry

HOUR_US = JOURNAL_SLOT_S * 1_000_000
#: 2026-11-26 07:28:40 UTC
NOW_US = 1_795_678_120_000_000


def test_a_slot_is_the_hour_a_write_falls_in() -> None:
    assert slot_of(NOW_US) == 1_795_676_400
    assert slot_of(NOW_US) % JOURNAL_SLOT_S == 0
    assert slot_of(1_795_676_400_000_000) == 1_795_676_400  # an hour's first µs
    assert slot_of(1_795_676_400_000_000 - 1) == 1_795_676_400 - JOURNAL_SLOT_S


def crc32(data: bytes) -> int:
    """CRC-32 (IEEE 802.3, as zlib, Java's CRC32 and Go's hash/crc32 compute it), bit by bit."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_shards_spread_rows_and_are_crc32_as_any_language_computes_it() -> None:
    shards = {shard_of("b", f"logs/{i}/") for i in range(2000)}
    assert shards == set(range(JOURNAL_SHARDS))
    assert crc32(b"123456789") == 0xCBF43926  # the algorithm's check value
    for bucket, parent in [("b", "a/"), ("photos", "2026/ü/"), ("b", "")]:
        data = (bucket + "\0" + parent).encode("utf-8")
        assert shard_of(bucket, parent) == crc32(data) % JOURNAL_SHARDS


def test_a_row_lives_a_week_and_a_day_after_its_slot_ends() -> None:
    slot = slot_of(NOW_US)
    ends = (slot + JOURNAL_SLOT_S) * 1_000_000
    assert ttl_for(slot, NOW_US) == (ends - NOW_US) / 1e6 + JOURNAL_TTL_S
    assert JOURNAL_TTL_S > 7 * 86_400
    # A slot in the future (a deferred directory): its row lives until a week after it.
    later = slot + 240 * JOURNAL_SLOT_S
    assert ttl_for(later, NOW_US) > 240 * 3600 + JOURNAL_TTL_S - 3600
    assert ttl_for(slot - 10 * 86_400, NOW_US) == 1.0  # never 0 (no TTL at all)


def test_one_request_is_one_row_per_parent_counting_its_keys() -> None:
    keys = ["logs/a/1", "logs/a/2", "logs/b/1", "top", "logs/a/3", "m/"]
    slot = slot_of(NOW_US)
    assert journal_entries("b", keys, NOW_US) == [
        JournalEntry(slot, shard_of("b", ""), "b", "", 1),
        JournalEntry(slot, shard_of("b", "logs/a/"), "b", "logs/a/", 3),
        JournalEntry(slot, shard_of("b", "logs/b/"), "b", "logs/b/", 1),
        JournalEntry(slot, shard_of("b", "m/"), "b", "m/", 1),
    ]
    assert journal_entries("b", [], NOW_US) == []


def test_record_deletes_writes_the_rows_of_the_current_slot(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        assert record_deletes(store, "b", ["x/1", "x/2", "y/1"]) == 2
        assert record_deletes(store, "b", []) == 0
        slot = slot_of(time.time_ns() // 1000)
        rows = [e for s in (slot - JOURNAL_SLOT_S, slot) for b in store.journal_read(s) for e in b]
        assert sorted((e.parent, e.deleted) for e in rows) == [("x/", 2), ("y/", 1)]
        assert record_deletes(store, "b", ["z/1"], now_us=NOW_US) == 1
        assert [e.parent for b in store.journal_read(slot_of(NOW_US)) for e in b] == ["z/"]
