"""Where the churn nights are in the journal: which time slots are done, which to read next,
and the directories put back in it for a later night.

A slot is read once it is closed and settled (its hour over, and ``--settle`` more for late
writers); ``--settle 0s`` also reads the slot still open, without marking it done. Once a
slot's directories are checked and deleted, the slot is marked done in the key-value table
(space ``journal``, key ``done|<bucket or *>``: the done slots whose rows are still alive, one
value rewritten by each batch under the night's lease), so a night killed halfway reads again
only the slots it had not finished. A night with ``--bucket``
marks only that bucket's part of a slot done; a night of every bucket, all of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dircleaner.journal import JOURNAL_SLOT_S, JOURNAL_TTL_S, shard_of, slot_of, ttl_for
from dircleaner.model import BucketDir
from dircleaner.store.base import Store
from dircleaner.store.records import JournalEntry

#: the key-value space of the churn nights' progress
JOURNAL_SPACE = "journal"
#: the scope of a night of every bucket
EVERY_BUCKET = "*"
#: the key prefix of a scope's done slots: ``done|<scope>``
DONE_PREFIX = "done|"


@dataclass(frozen=True)
class SlotsToRead:
    """The slots a night reads, oldest first, and of them those it marks done when finished."""

    read: list[int]
    closing: list[int]
    #: the slot still open, read by ``--settle 0s`` and left undone (None: not read)
    open_slot: int | None = None


def slots_to_read(done: Iterable[int], now_us: int, settle_s: float) -> SlotsToRead:
    """The slots not done yet whose rows are still alive and settled at ``now_us`` (pure).

    A slot is settled once its hour is over and ``settle_s`` more have passed; with
    ``settle_s`` 0 the slot still open is read too, but not marked done (its hour goes on)."""
    now_s = now_us / 1_000_000
    finished = set(done)
    first = slot_of(now_us - JOURNAL_TTL_S * 1_000_000)
    current = slot_of(now_us)
    slots = range(first, current + JOURNAL_SLOT_S, JOURNAL_SLOT_S)
    settled = [s for s in slots if s + JOURNAL_SLOT_S + settle_s <= now_s and s not in finished]
    open_slot = current if settle_s == 0 and current not in finished else None
    read = settled + ([open_slot] if open_slot is not None else [])
    return SlotsToRead(read, settled, open_slot)


def done_slots(store: Store, bucket: str | None) -> set[int]:
    """The slots marked done for ``bucket``'s nights (a night of every bucket counts too)."""
    out: set[int] = set()
    for scope in dict.fromkeys((EVERY_BUCKET, _scope(bucket))):
        out |= _read_done(store, scope)
    return out


def mark_done(store: Store, bucket: str | None, slots: Sequence[int], now_us: int) -> None:
    """Record that ``slots`` were read, checked and deleted by a night of ``bucket`` (one
    write; the slots whose rows have expired are dropped from the record)."""
    if not slots:
        return
    scope = _scope(bucket)
    oldest = slot_of(now_us - JOURNAL_TTL_S * 1_000_000) - JOURNAL_SLOT_S
    done = sorted(slot for slot in _read_done(store, scope) | set(slots) if slot >= oldest)
    value = ",".join(map(str, done)).encode("ascii")
    store.kv_write(JOURNAL_SPACE, DONE_PREFIX + scope, value)


def _read_done(store: Store, scope: str) -> set[int]:
    key = DONE_PREFIX + scope
    for entry in store.kv_read(JOURNAL_SPACE, key):
        if entry.key == key:
            return {int(slot) for slot in entry.value.decode("ascii").split(",") if slot}
    return set()


def deferral_entries(dirs: Iterable[BucketDir], now_us: int, delay_s: float) -> list[JournalEntry]:
    """Journal rows that bring ``dirs`` back ``delay_s`` from now (pure): in the slot of that
    time, counting no deleted object (their tombstones will have gone by then)."""
    slot = slot_of(now_us + int(delay_s * 1_000_000))
    return [
        JournalEntry(slot, shard_of(bucket, directory), bucket, directory, 0)
        for bucket, directory in sorted(set(dirs))
    ]


def defer(store: Store, dirs: Iterable[BucketDir], now_us: int, delay_s: float) -> int:
    """Put ``dirs`` back in the journal for a night ``delay_s`` from now; how many."""
    entries = deferral_entries(dirs, now_us, delay_s)
    if entries:
        store.journal_write(entries, ttl_for(entries[0].slot, now_us))
    return len(entries)


def _scope(bucket: str | None) -> str:
    return EVERY_BUCKET if bucket is None else bucket
