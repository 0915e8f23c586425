"""The store protocol: a handful of primitives every metastore backend implements.

Everything else (filter storage, sizing, the job itself) is built on these, as fsspec builds
``walk`` on ``ls``. Where there is a batch and a single-item form, the batch is the primitive
and the single item derives from it; backends override the derived helpers only where they can
do them faster. What a store can do and how the job drives it is one frozen ``StoreTraits``
(``store.traits``); optional capabilities are small protocols of their own (``IndexWriter``,
``TombstoneCounter``, ``BulkLoader``: ``dircleaner.store.capabilities``), checked with
``isinstance``.

The job's bookkeeping (the lease, run state, filter cells) is built once on the key-value
primitive (``bookkeeping``). The tombstone ledger is not, by a measured choice: a slice's plan
reads the charges of every partition it may put tombstones in (thousands), and each group of
deletes charges the partitions it touches (about a thousand) before it is sent. On the
key-value primitive each partition's charges would be a space (one space for all would be one
Cassandra partition holding every expired charge as a tombstone), and ``kv_read`` reads one
space per request, one request at a time. For 5,000 partitions on a local Cassandra node the
ledger's reads took 79 requests (``IN`` reads of 64 partitions, 16 in flight) and 44 ms; a
``kv_read`` per partition took 5,000 requests and 2.3 s (53 times as long), and its charges
1.8 s against 0.73 s. Across a network every request costs a round trip more.
"""

from __future__ import annotations

import abc
import re
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dircleaner.errors import BucketNotFound
from dircleaner.model import ActionKind, DeleteAction, FolderRange, FolderRow, PartitionKey, Shard
from dircleaner.paths import directories_of, folder_row_of, split_key
from dircleaner.scanrate import ScanThrottle
from dircleaner.store import bookkeeping
from dircleaner.store.capabilities import index_writer
from dircleaner.store.kv import ANY, Entry, Expect
from dircleaner.store.records import (
    DeleteOutcome,
    DeleteRequest,
    DirCountEstimate,
    DirectoryReads,
    JournalEntry,
    ObjectProbe,
    StoreTraits,
    TombstoneCharge,
)

if TYPE_CHECKING:  # numpy is imported only by the commands that build or sweep
    from dircleaner.store.packed import FolderKeys, ObjectKeys

#: rows per page when a store reads one folders partition (a wide one takes several pages)
PARTITION_PAGE_ROWS = 5_000

#: buckets a "no such bucket" message names at most
MAX_BUCKETS_NAMED = 20
#: how long a "no such bucket" message may scan for the names of the buckets there are
BUCKET_SCAN_SECONDS = 10.0

#: gc_grace_seconds' default: how long a tombstone is kept when the store cannot tell
DEFAULT_GRACE_S = 864_000.0

# Filter cells are addressed (generation, shard, seq): chunks are seq 0..n-1, the header and the
# completion marker live at these negative seqs so one range read fetches both.
HEADER_SEQ = -1
MARKER_SEQ = -2


class Store(abc.ABC):
    """A metastore holding ``objects`` and ``folders`` index tables, and our key-value table
    (filter cells, the lease, run state) and tombstone ledger.

    A backend writes the abstract primitives: the two index scans, one folders partition in
    pages, the objects probe of a batch of partitions, the four deletes at a timestamp (rows,
    ranges, partitions, the partition rewrite), the key-value primitive (``kv_read``,
    ``kv_write``) and the tombstone ledger. Every other method
    derives from them; a backend overrides one only to do it faster (an ``IN`` read, a
    ``COUNT``), and declares what it can do in ``traits``.
    """

    #: what this store can do (``StoreTraits``); a backend sets its own, per instance if need be
    traits: StoreTraits = StoreTraits()
    #: the index tables' names, objects then folders, as ``scope_id`` names them
    index_tables: tuple[str, str] = ("objects", "folders")
    #: how this store was opened, so worker processes can open their own connection
    url: str = ""
    config_path: Path | None = None

    #: what opening this store created, one name each for a person ("SQLite metastore
    #: /srv/meta.db", "table ks.folders"): empty unless opened with ``create``
    created: tuple[str, ...] = ()

    @classmethod
    def open(
        cls,
        url: str,
        *,
        config_path: Path | None = None,
        create: bool = False,
        force: bool = False,
        read_only: bool = False,
    ) -> Store:
        """Connect to the store at ``url``; raise StoreNotFound rather than create unless asked.

        ``force`` lets ``create`` add our tables to an SQLite file that holds tables of its own
        (StoreNotOurs otherwise); a keyspace's other tables never stop it. ``read_only``: for a
        command that only reads, which writes nothing (not on opening either; ``traits`` then
        says ``read_only`` and the key-value primitive refuses writes); without it, a store
        this process cannot write is refused (StoreReadOnly). Every backend registered under a
        scheme overrides it.
        """
        raise NotImplementedError(f"{cls.__name__} cannot be opened by URL")

    @classmethod
    def shown(cls, url: str) -> str:
        """``url`` as an operator should see it: what it points at, never a credential."""
        return re.sub(r"(?<=://)[^/@]*@", "", url)

    # -- identity -------------------------------------------------------------------------------
    @classmethod
    def init_schema(
        cls, url: str, *, config_path: Path | None = None, force: bool = False
    ) -> list[str]:
        """Create whatever tables are missing; the names of those created."""
        with cls.open(url, config_path=config_path, create=True, force=force) as store:
            return list(store.created)

    def scope_id(self) -> str:
        """A stable name of the tables this store reads (filters from other scopes are refused):
        its scheme and its ``index_tables``."""
        objects, folders = self.index_tables
        return f"{self.traits.scheme}:{objects},{folders}"

    def location_id(self) -> str:
        """Where the tables live (a database file, a cluster): with ``scope_id``, it tells apart
        two stores whose tables are named alike (the audit log records both)."""
        return self.url

    def close(self) -> None:
        """Release connections (none here)."""
        return None

    @property
    def rows_removed(self) -> int | None:
        """Folder rows this connection's deletes actually removed, where the store can tell
        (the embedded store); None where a delete is a blind tombstone (Cassandra)."""
        return None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- scans ------------------------------------------------------------------------------------
    @abc.abstractmethod
    def scan_object_partitions(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[list[PartitionKey]]:
        """Batches of distinct objects-table partition keys in ``shard``, in token order.

        With ``throttle``, read at its pace: each page (or batch) reported with its rows and
        latency, and the cluster's timeouts and overload as strain (``dircleaner.scanrate``).
        """

    @abc.abstractmethod
    def scan_folder_rows(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[list[FolderRow]]:
        """Batches of folders-index rows in ``shard``: token order, then clustering order
        (at ``throttle``'s pace, as ``scan_object_partitions``)."""

    def scan_object_keys(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[ObjectKeys]:
        """``scan_object_partitions``, each batch as its partitions' filter keys, packed (what
        the build hashes); backends that can lay the keys out themselves override it."""
        from dircleaner.store.packed import ObjectKeys

        for batch in self.scan_object_partitions(shard, bucket, throttle):
            yield ObjectKeys.of_partitions(batch)

    def scan_folder_keys(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[FolderKeys]:
        """``scan_folder_rows``, each batch as its rows' filter keys, packed, with their tokens
        and partition keys (what the sweep tests); backends that can lay the keys out
        themselves override it."""
        from dircleaner.store.packed import FolderKeys

        for batch in self.scan_folder_rows(shard, bucket, throttle):
            yield FolderKeys.of_rows(batch)

    def estimate_directory_count(self, bucket: str | None = None) -> DirCountEstimate:
        """An upper bound on the number of directories, for sizing the filter.

        Counted here by a scan of the folder index (exact, and as slow as a sweep); backends
        override it with a cheaper count or an estimate.
        """
        rows = sum(len(batch) for batch in self.scan_folder_rows(Shard(), bucket))
        return DirCountEstimate(rows, "exact count of folder rows by scan", exact=True)

    # -- one folders partition (the prefix walk) ------------------------------------------------
    @abc.abstractmethod
    def folder_partition_pages(
        self, bucket: str, parent: str, page_rows: int = PARTITION_PAGE_ROWS
    ) -> Iterator[list[FolderRow]]:
        """The folder rows of partition ``(bucket, parent)``, in clustering order, a page of at
        most ``page_rows`` at a time (non-empty pages; none for an absent partition)."""

    def folder_partitions(
        self, keys: Sequence[tuple[str, str]]
    ) -> Iterator[tuple[tuple[str, str], list[FolderRow]]]:
        """Each partition of ``keys`` (distinct) whole, as ``(key, rows)``, in ``keys`` order.

        Read one after the other here; a backend that can overlaps the reads.
        """
        for bucket, parent in keys:
            rows = [row for page in self.folder_partition_pages(bucket, parent) for row in page]
            yield (bucket, parent), rows

    def read_directories(self, keys: Sequence[tuple[str, str]]) -> DirectoryReads:
        """Both reads the prefix walk makes of each directory of ``keys`` (distinct): is its
        objects partition non-empty, and its folders partition's rows.

        Derived here from ``nonempty_object_partitions`` and ``folder_partitions``, one after
        the other; a backend that can overlaps the two.
        """
        with_objects = self.nonempty_object_partitions(keys)
        rows = {key: found for key, found in self.folder_partitions(keys) if found}
        return DirectoryReads(with_objects, rows)

    def has_folder_row(self, bucket: str, directory: str) -> bool:
        """Whether the folder index lists ``directory`` (a row in its parent's partition).

        Reads the parent's partition here; backends override it with a point read.
        """
        parent, name = folder_row_of(directory)
        return any(
            row.name == name for page in self.folder_partition_pages(bucket, parent) for row in page
        )

    # -- emptiness re-check --------------------------------------------------------------------
    @abc.abstractmethod
    def nonempty_object_partitions(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """The subset of ``(bucket, parent)`` whose objects partition holds a live row.

        The re-check's primitive: the job asks in batches, and a backend answers a batch in
        few requests (one set-based query, ``IN`` reads), stopping at each partition's first row.
        """

    def objects_partition_nonempty(self, bucket: str, parent: str) -> bool:
        """Whether the objects partition ``(bucket, parent)`` holds a live row (LIMIT 1).

        A batch of one here; a backend may override it with a point read.
        """
        return (bucket, parent) in self.nonempty_object_partitions([(bucket, parent)])

    # -- the churn night's exact checks, derived ------------------------------------------------
    def probe_object_partitions(
        self, keys: Sequence[tuple[str, str]], tombstone_limit: int
    ) -> ObjectProbe:
        """``nonempty_object_partitions``, and of the partitions without a live row those whose
        read meets more than ``tombstone_limit`` tombstones (the objects just deleted), where
        the store can tell: none here. A backend that can tell reads them as little as it can
        (SQLite counts them first; Cassandra learns it from the read's warning)."""
        return ObjectProbe(self.nonempty_object_partitions(keys))

    def folder_partition_heads(
        self, keys: Sequence[tuple[str, str]], rows: int
    ) -> dict[tuple[str, str], list[FolderRow]]:
        """The first ``rows`` rows (clustering order) of each folders partition of ``keys``
        (distinct); a partition without rows is absent. What the churn night reads to know
        whether a directory has a subdirectory other than those it found empty.

        Derived here from ``folder_partition_pages`` (its first page each); a backend that can
        reads many partitions in one request, at the re-check's consistency.
        """
        if rows < 1:
            raise ValueError("rows must be >= 1")
        out: dict[tuple[str, str], list[FolderRow]] = {}
        for bucket, parent in keys:
            page = next(iter(self.folder_partition_pages(bucket, parent, page_rows=rows)), [])
            if page:
                out[(bucket, parent)] = page[:rows]
        return out

    def rows_listing(self, dirs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], FolderRow]:
        """The folder row listing each ``(bucket, directory)`` of ``dirs`` (in its parent's
        partition), for those the folder index lists. Derived here from a read of each
        parent's partition; a backend reads the rows themselves, at the re-check's consistency.
        """
        out: dict[tuple[str, str], FolderRow] = {}
        for bucket, directory in dict.fromkeys(dirs):
            parent, name = folder_row_of(directory)
            for page in self.folder_partition_pages(bucket, parent):
                row = next((r for r in page if r.name == name), None)
                if row is not None:
                    out[(bucket, directory)] = row
                    break
        return out

    # -- deletes at a timestamp ---------------------------------------------------------------
    @abc.abstractmethod
    def delete_folder_rows(
        self, rows: Sequence[FolderRow], timestamp_us: int
    ) -> list[BaseException | None]:
        """Delete rows as of ``timestamp_us``: rows written later survive. One result per row."""

    @abc.abstractmethod
    def delete_folder_ranges(
        self, ranges: Sequence[FolderRange], timestamp_us: int
    ) -> list[BaseException | None]:
        """Delete every row of each range as of ``timestamp_us`` (rows written later survive).

        One result per range. A range tombstone counts as two tombstones (its two bound markers)
        when a read of the partition scans it.
        """

    @abc.abstractmethod
    def delete_folder_partitions(
        self, partitions: Sequence[PartitionKey], timestamp_us: int
    ) -> list[BaseException | None]:
        """Delete whole folders partitions as of ``timestamp_us``. One result per partition."""

    def delete_requests(
        self, actions: Sequence[DeleteAction], timestamp_us: int
    ) -> list[DeleteRequest]:
        """The requests that delete ``actions`` as of ``timestamp_us``, for the deleter to send.

        A REWRITE action goes as the partition deletion it ends with (its rows were copied
        first). Here one synchronous call per kind (``delete_folder_partitions``, ``…_rows``,
        ``…_ranges``, in that order); a backend with asynchronous requests returns one per
        request it sends, so the deleter can keep a window of them in flight.
        """
        kinds = (
            (self.delete_folder_partitions, (ActionKind.PARTITION, ActionKind.REWRITE)),
            (self.delete_folder_rows, (ActionKind.ROW,)),
            (self.delete_folder_ranges, (ActionKind.RANGE,)),
        )
        requests = []
        for call, of in kinds:
            members = tuple(i for i, a in enumerate(actions) if a.kind in of)
            if members:
                items = [_delete_item(actions[i]) for i in members]
                requests.append(DeleteRequest(members, _synchronous(call, items, timestamp_us)))
        return requests

    @abc.abstractmethod
    def rewrite_folder_partition(
        self, partition: PartitionKey, keep_out: Collection[str], timestamp_us: int
    ) -> int:
        """Write every row of ``partition`` whose name is not in ``keep_out`` back at
        ``timestamp_us`` (all its columns, as read at the sweep's consistency); how many.

        The first half of a partition rewrite: once it returns, a partition delete at any time
        before ``timestamp_us`` removes exactly the ``keep_out`` rows written by then. A row
        already newer than ``timestamp_us`` keeps its newer write. Raises RewriteUnsupported
        when a column cannot be copied faithfully.
        """

    # -- the key-value primitive (the job's own bookkeeping is built on it) ---------------------
    @abc.abstractmethod
    def kv_read(self, space: str, prefix: str = "", *, fresh: bool = False) -> list[Entry]:
        """The live entries of ``space`` whose key starts with ``prefix``, in key order.

        Expired entries are never returned. ``fresh`` asks for a linearizable read, one that
        sees every compare-and-set applied before it (Cassandra: a SERIAL read); without it a
        read may miss a write still on its way to a quorum. Values may be up to
        ``MAX_VALUE_BYTES`` each: a backend pages a space a few values at a time.
        """

    @abc.abstractmethod
    def kv_write(
        self,
        space: str,
        key: str,
        value: bytes | None,
        *,
        ttl_s: float | None = None,
        expect: Expect = ANY,
    ) -> bool:
        """Set ``key`` of ``space`` to ``value`` (None: delete it); whether the write applied.

        ``ttl_s``: the entry expires that many seconds after this write (None: never; a
        rewrite sets its TTL anew). ``expect`` makes it a compare-and-set, atomic against every
        other compare-and-set of the key: ``ANY`` writes unconditionally (always True),
        ``None`` only if the key is absent (or expired), bytes only if the current value
        equals them. ValueError for an empty space or key, a value over ``MAX_VALUE_BYTES``
        or a delete that expects the key absent.

        A key is written either always with a compare-and-set or always without: Cassandra
        orders a lightweight transaction's write (timed by the server) and a plain write (timed
        by the client) by clocks that may disagree by a millisecond, so mixing them on one key
        may lose a write. The lease uses only compare-and-sets; state and filter cells none.
        """

    def kv_clear(self, space: str) -> None:
        """Delete every entry of ``space``, a space written without compare-and-sets.

        Derived: each entry read, then deleted; both backends override it with one partition
        delete (Cassandra) or one statement (SQLite)."""
        for entry in self.kv_read(space):
            self.kv_write(space, entry.key, None)

    # -- filter cells, on the primitive -----------------------------------------------------------
    def put_filter_cell(self, generation: str, shard: int, seq: int, data: bytes) -> None:
        """Write one cell of a stored filter (at most ``MAX_VALUE_BYTES``: ValueError)."""
        bookkeeping.put_filter_cell(self, generation, shard, seq, data)

    def get_filter_cells(
        self, generation: str, shard: int, *, meta_only: bool = False
    ) -> dict[int, bytes]:
        """Cells of one stored filter part by seq; only the negative (meta) seqs if asked."""
        return bookkeeping.get_filter_cells(self, generation, shard, meta_only=meta_only)

    def list_filter_parts(self) -> list[tuple[str, int]]:
        """Every (generation, shard) that has had a cell written and not deleted, sorted."""
        return bookkeeping.list_filter_parts(self)

    def delete_filter_generation(self, generation: str) -> None:
        """Remove every cell of a generation."""
        bookkeeping.delete_filter_generation(self, generation)

    # -- the run lease (one run at a time), on the primitive -----------------------------------
    def try_acquire_lease(self, name: str, owner: str, ttl_s: float) -> str | None:
        """Take lease ``name`` for ``owner`` for ``ttl_s`` if nobody holds it (atomically).

        None when taken, else the current holder's owner string. A lease not renewed within its
        TTL expires by itself.
        """
        return bookkeeping.try_acquire_lease(self, name, owner, ttl_s)

    def replace_lease(self, name: str, holder: str, owner: str, ttl_s: float) -> bool:
        """Give ``name`` to ``owner`` for ``ttl_s`` if ``holder`` holds it now (atomically: a
        compare-and-set on the holder); False, and nothing changed, if it does not."""
        return bookkeeping.replace_lease(self, name, holder, owner, ttl_s)

    def renew_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        """Extend ``owner``'s hold on ``name`` by ``ttl_s``; False if it no longer holds it."""
        return self.replace_lease(name, owner, owner, ttl_s)

    def release_lease(self, name: str, owner: str) -> None:
        """Give ``name`` up if ``owner`` holds it (a lease held by someone else is left alone)."""
        bookkeeping.release_lease(self, name, owner)

    def lease_holder(self, name: str) -> str | None:
        """The owner string holding ``name`` now (a linearizable read), or None."""
        return bookkeeping.lease_holder(self, name)

    # -- the tombstone ledger (a primitive of its own) ----------------------------------------
    # Not built on the key-value primitive (the module's docstring has the figures): the clean
    # reads it on its hot path, the charges of thousands of partitions per slice, which a
    # backend answers in few requests (Cassandra: ``IN`` reads of many partitions; SQLite: one
    # query per chunk, summed in SQL), where a key-value read would cost one request per
    # partition.
    @abc.abstractmethod
    def charge_tombstones(self, charges: Sequence[TombstoneCharge], ttl_s: float) -> None:
        """Record charges that expire after ``ttl_s`` (call before issuing the deletes).

        A primitive, not key-value bookkeeping: see ``tombstones_charged``."""

    @abc.abstractmethod
    def tombstones_charged(
        self, partitions: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        """The unexpired charges of each ``(bucket, parent)``, summed (absent: none).

        A primitive of each backend because it is on the clean's hot path: many partitions per
        call, read together (Cassandra: ``IN`` reads, ``LEDGER_READ_KEYS`` partitions each).
        """

    # -- the journal of dirty directories (a primitive of its own) -----------------------------
    # Not on the key-value primitive: a metastore's delete path writes it, one row per parent
    # of a deleted object, so on Cassandra it is a table of its own (time-window compaction,
    # every row with a TTL), read a whole time slot at a time by the churn night.
    @abc.abstractmethod
    def journal_write(self, entries: Sequence[JournalEntry], ttl_s: float) -> None:
        """Upsert journal rows (a row is its slot, shard, bucket and parent; the last write of
        a row wins), each expiring ``ttl_s`` seconds after this write."""

    @abc.abstractmethod
    def journal_read(self, slot: int, bucket: str | None = None) -> Iterator[list[JournalEntry]]:
        """Every live row of time slot ``slot`` (all its shards; only ``bucket``'s when
        given), in batches; a directory journaled in several shards comes once per shard."""

    def purge_expired(self, grace_s: float) -> None:
        """Drop ledger entries and tombstone records past the grace period, where the store
        does not expire them itself (Cassandra's TTL and compaction do)."""
        return None

    def folders_grace_seconds(self) -> tuple[float, str]:
        """How long the store keeps a folders tombstone, and where that figure came from."""
        return DEFAULT_GRACE_S, "default"

    def tombstone_warn_threshold(self) -> tuple[int, str] | None:
        """The lowest tombstone warning the cluster has set (Cassandra: the guardrail
        ``partition_tombstones_warn_threshold`` or ``tombstone_warn_threshold``) and which
        setting it is, where, if it can say."""
        return None

    # -- small state (previous run's counts, checkpoints), on the primitive ---------------------
    def put_state(self, key: str, value: str) -> None:
        """Remember a small value across runs."""
        bookkeeping.put_state(self, key, value)

    def get_state(self, key: str) -> str | None:
        """A value remembered by put_state, or None."""
        return bookkeeping.get_state(self, key)

    # -- the S3 front-end's writes (generator and tests), where the store takes them -------
    def put_objects(self, bucket: str, keys: Sequence[str], timestamp_us: int) -> None:
        """An S3 put: upsert each object row and a folder row for every ancestor directory."""
        objects = [(bucket, *split_key(key)) for key in keys]
        folders = {
            (bucket, *folder_row_of(directory)) for key in keys for directory in directories_of(key)
        }
        writer = index_writer(self)
        # Folder rows first: a reader that sees the object also sees its directories.
        writer.write_folder_rows(sorted(folders), timestamp_us)
        writer.write_object_rows(objects, timestamp_us)

    def delete_objects(self, bucket: str, keys: Sequence[str], timestamp_us: int) -> int | None:
        """An S3 delete: remove only the object rows (lazy; directories are left behind).

        Returns how many of the keys existed, or None where the store cannot tell."""
        rows = [(bucket, *split_key(key)) for key in keys]
        return index_writer(self).delete_object_rows(rows, timestamp_us)

    # -- buckets ----------------------------------------------------------------------------
    def bucket_exists(self, bucket: str) -> bool:
        """Whether the store holds anything of ``bucket``: a row in its root objects or folders
        partition, where every key of the bucket leaves one (an object at the root, or the
        folder row of its top directory). Two point reads."""
        if self.nonempty_object_partitions([(bucket, "")]):
            return True
        return any(self.folder_partition_pages(bucket, "", page_rows=1))

    def bucket_names(self, within_s: float | None = None) -> tuple[list[str], bool]:
        """The buckets the objects or folders table holds a row of, sorted, and whether that
        is all of them: the scan stops after ``within_s`` seconds, if given.

        Scans partition keys, then folder rows here, in token order (so the buckets with most
        rows turn up first): meant for naming the buckets there are once ``bucket_exists``
        said no; a backend that can list them cheaper overrides it."""
        deadline = None if within_s is None else time.monotonic() + within_s
        names: set[str] = set()
        scans = (
            ((key.bucket for key in batch) for batch in self.scan_object_partitions(Shard())),
            ((row.bucket for row in batch) for batch in self.scan_folder_rows(Shard())),
        )
        for scan in scans:
            for buckets in scan:
                names.update(buckets)
                if deadline is not None and time.monotonic() > deadline:
                    return sorted(names), False
        return sorted(names), True

    def iter_folder_rows(self, bucket: str | None = None) -> Iterator[FolderRow]:
        """Every folder row of the whole ring, one at a time."""
        for batch in self.scan_folder_rows(Shard(), bucket):
            yield from batch


def missing_bucket(store: Store, bucket: str | None) -> str | None:
    """None when ``bucket`` is None (every bucket) or the store holds it; else one line saying
    it holds nothing of it and naming the buckets it does hold (those found within
    ``BUCKET_SCAN_SECONDS`` where listing them takes a scan)."""
    if bucket is None or store.bucket_exists(bucket):
        return None
    names, complete = store.bucket_names(within_s=BUCKET_SCAN_SECONDS)
    shown = ", ".join(repr(name) for name in names[:MAX_BUCKETS_NAMED]) or "none"
    if len(names) > MAX_BUCKETS_NAMED:
        shown += f" and {len(names) - MAX_BUCKETS_NAMED:,} more"
    if not complete:
        shown += f", maybe more: {BUCKET_SCAN_SECONDS:g}s of scanning found these"
    return f"bucket {bucket!r} does not exist in this store (buckets: {shown}); is --bucket right?"


def require_bucket(store: Store, bucket: str | None) -> None:
    """Raise BucketNotFound unless ``bucket`` is None (every bucket) or the store holds it:
    what a command that deletes calls before anything else."""
    problem = missing_bucket(store, bucket)
    if problem is not None:
        raise BucketNotFound(problem)


def _delete_item(action: DeleteAction) -> PartitionKey | FolderRow | FolderRange:
    """What a delete call of the action's kind takes."""
    if action.kind is ActionKind.ROW:
        return action.rows[0]
    if action.kind is ActionKind.RANGE:
        return action.folder_range()
    return action.partition


def _synchronous(
    call: Callable[[Any, int], list[BaseException | None]], items: list[Any], timestamp_us: int
) -> Callable[[Callable[[DeleteOutcome], None]], None]:
    """A request's ``send`` that makes the call and hands over its outcome before returning."""

    def send(done: Callable[[DeleteOutcome], None]) -> None:
        done(call(items, timestamp_us))

    return send
