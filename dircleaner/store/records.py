"""The values the store protocol passes: tombstone charges, counts, the walk's reads, the
deleter's requests, and what a store can do (``StoreTraits``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import mmh3

from dircleaner.model import FolderRow
from dircleaner.scanrate import ScanRate


class TombstoneCharge(NamedTuple):
    """One entry of the tombstone ledger: what a run charged one live folders partition.

    Written before the deletes it pays for and kept for the folders table's grace period (the
    time Cassandra keeps a tombstone), so every run of that window, resumed or on another host,
    sees what the partition already holds.
    """

    bucket: str
    parent: str
    generation: str
    #: unique per write (run, slice, window): two charges never overwrite each other
    charge_id: str
    #: tombstones charged: 1 per row delete, 2 per range delete
    cost: int


@dataclass(frozen=True, slots=True)
class DirCountEstimate:
    """How many directories the folder index holds, and how we know."""

    count: int
    method: str
    #: an exact count (cheap in SQLite) rather than an estimate
    exact: bool = False
    #: the exact number of folder rows, when it was counted (the sizing may scale it)
    folder_rows: int | None = None


@dataclass(frozen=True, slots=True)
class DirectoryReads:
    """The prefix walk's two reads of a wave of directories ``(bucket, parent)``."""

    #: the directories whose objects partition holds a row (as ``nonempty_object_partitions``)
    with_objects: set[tuple[str, str]]
    #: each directory's folders partition whole, in clustering order (its subdirectories); a
    #: directory without any is absent
    folder_rows: dict[tuple[str, str], list[FolderRow]]


#: one delete request's outcome: an error, or None, per action it deletes, in its order
DeleteOutcome = Sequence[BaseException | None]


@dataclass(frozen=True, slots=True)
class DeleteRequest:
    """One request of the deleter's window: what it deletes, and how to send it."""

    #: the indexes, among the actions ``Store.delete_requests`` was given, of those it deletes
    members: tuple[int, ...]
    #: sends the request; the callback gets its outcome exactly once, on any thread, possibly
    #: before ``send`` returns (a store whose deletes are synchronous)
    send: Callable[[Callable[[DeleteOutcome], None]], None]


def murmur_token(bucket: str, parent: str) -> int:
    """The embedded store's partition token: signed 64-bit MurmurHash3 of the partition key."""
    return int(mmh3.hash64((bucket + "\0" + parent).encode("utf-8"), 0, signed=True)[0])


@dataclass(frozen=True, slots=True)
class StoreTraits:
    """What a store can do and how the job should drive it: one value per store, set when it is
    built (the Cassandra store's depend on its config)."""

    #: URL scheme this backend is registered under
    scheme: str = ""
    #: whether estimate_directory_count is an exact count cheap enough to run every build
    cheap_exact_count: bool = False
    #: whether a deletion plan interleaves its row deletes across partitions (replicas share the
    #: load, no partition takes a burst); False runs them in key order instead
    spread_deletes: bool = True
    #: whether the sweep's reads see every row written before they began: a range delete
    #: removes any row between its bounds, seen or not, so the plan only uses ranges where this
    #: holds (a row delete spares what the sweep did not see)
    sweep_sees_every_write: bool = True
    #: whether the build's scan sees every object written before it began; where it may not
    #: (a Cassandra build read below a quorum), only the verify re-check keeps a directory whose
    #: objects it missed, so a clean needs the re-check and a sweep that sees every write
    build_sees_every_write: bool = True
    #: partition deletes the store sends in one request (Cassandra: one ``DELETE … parent IN``
    #: of one ring range's partitions); the deleter hands it ``concurrency`` times this many
    deletes_per_request: int = 1
    #: how fast the scans read when the job does not say (a Cassandra config file's
    #: ``scan_rate`` and ``scan_slow_page_s``)
    scan_defaults: ScanRate = field(default_factory=ScanRate)
    #: opened read-only (an embedded store on a read-only mount): it can be inspected and
    #: swept, and every write fails
    read_only: bool = False


#: the journal's time slots: an hour each, named by their start (Unix seconds)
JOURNAL_SLOT_S = 3600
#: the partitions each slot of the journal is spread over (a writer picks any of them; a night
#: reads them all, in one request per slot): at 1B directories and 1% of them dirty a day,
#: about 26,000 rows a partition
JOURNAL_SHARDS = 16
#: how long a journal row lives after its slot: longer than the full night's period (a week),
#: so that a row no churn night read is still there for the full night's week to pass
JOURNAL_TTL_S = 8 * 86_400


class JournalEntry(NamedTuple):
    """One row of the journal of dirty directories: ``(bucket, parent)`` lost an object in
    time slot ``slot``, as one request (or a night deferring it) wrote it.

    A hint, never a verdict: the night that reads it checks the directory itself.
    """

    #: the slot's start, Unix seconds (a multiple of ``JOURNAL_SLOT_S``)
    slot: int
    #: which of the slot's ``JOURNAL_SHARDS`` partitions holds the row
    shard: int
    bucket: str
    #: the directory whose objects partition lost a row (``""``: the bucket's root)
    parent: str
    #: how many keys the request that wrote the row deleted under ``parent`` (the last write
    #: of a row wins; 0 when unknown): what the objects partition may hold in tombstones
    deleted: int = 0


@dataclass(frozen=True, slots=True)
class ObjectProbe:
    """What the churn night's probe of objects partitions found."""

    #: the partitions holding a live row
    nonempty: set[tuple[str, str]]
    #: of the others, those whose read met (or would meet) more tombstones than asked: a
    #: partition just emptied by many deletes, left for a later night
    tombstone_heavy: set[tuple[str, str]] = field(default_factory=set)
