"""The journal of dirty directories: the parents of deleted objects, for the churn night.

A metastore deletes objects lazily: the object row goes, the folder index is left alone. So
that a nightly ``clean --changed`` can check only the directories that lost an object, the
delete path records each such directory once per request in the store's journal::

    from dircleaner.journal import record_deletes

    store.delete_objects(bucket, keys, now)      # the request's deletes, as before
    record_deletes(store, bucket, keys)          # one upsert per parent directory

A row is ``(slot, shard, bucket, parent, deleted)``: ``slot`` the hour it was written in
(``slot_of``), ``shard`` any of the slot's ``JOURNAL_SHARDS`` partitions (``shard_of`` spreads
them; a reader reads them all), ``deleted`` how many of the request's keys were under
``parent``. Each row expires ``JOURNAL_TTL_S`` after its slot ends (``ttl_for``). The journal
is a hint: a row lost (a crash between the delete and the upsert) only leaves an empty
directory for the weekly full night, and a row for a directory that is not empty costs the
night one read. docs/cassandra.md gives the CQL for a delete path written in another language.
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence

from dircleaner.paths import split_key, validate_bucket
from dircleaner.store.base import Store
from dircleaner.store.records import (
    JOURNAL_SHARDS,
    JOURNAL_SLOT_S,
    JOURNAL_TTL_S,
    JournalEntry,
)

__all__ = [
    "JOURNAL_SHARDS",
    "JOURNAL_SLOT_S",
    "JOURNAL_TTL_S",
    "JournalEntry",
    "journal_entries",
    "record_deletes",
    "shard_of",
    "slot_of",
    "ttl_for",
]


def slot_of(time_us: int) -> int:
    """The journal slot a write at ``time_us`` (µs since the epoch) goes to: the start of its
    hour, in seconds."""
    seconds = time_us // 1_000_000
    return seconds - seconds % JOURNAL_SLOT_S


def shard_of(bucket: str, parent: str) -> int:
    """The slot's partition a directory's row goes to: CRC-32 of ``bucket + "\\0" + parent``
    (UTF-8) modulo ``JOURNAL_SHARDS``. Only spreads the rows: any shard is read."""
    return zlib.crc32((bucket + "\0" + parent).encode("utf-8")) % JOURNAL_SHARDS


def ttl_for(slot: int, now_us: int) -> float:
    """The TTL of a row of ``slot`` written at ``now_us``: it lives ``JOURNAL_TTL_S`` after
    its slot ends (longer than the full night's week), however early or late it is written."""
    return max(1.0, slot + JOURNAL_SLOT_S + JOURNAL_TTL_S - now_us / 1_000_000)


def journal_entries(bucket: str, keys: Iterable[str], now_us: int) -> list[JournalEntry]:
    """One request's deleted ``keys``, merged: a row per parent directory, counting its keys
    (pure)."""
    slot = slot_of(now_us)
    per_parent = Counter(split_key(key)[0] for key in keys)
    return [
        JournalEntry(slot, shard_of(bucket, parent), bucket, parent, count)
        for parent, count in sorted(per_parent.items())
    ]


def record_deletes(
    store: Store, bucket: str, keys: Sequence[str], *, now_us: int | None = None
) -> int:
    """Journal the parents of one request's deleted ``keys`` (after the deletes): one upsert
    per parent, each with its TTL. Returns the rows written."""
    validate_bucket(bucket)
    now = time.time_ns() // 1000 if now_us is None else now_us
    entries = journal_entries(bucket, keys, now)
    if entries:
        store.journal_write(entries, ttl_for(entries[0].slot, now))
    return len(entries)
