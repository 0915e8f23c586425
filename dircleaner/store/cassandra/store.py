"""The Cassandra metastore: token-range scans, timestamped deletes, bounded concurrency.

Every data value goes through a prepared statement. The only identifiers in CQL come from the
mapping (``CassandraConfig``), are validated as plain identifiers and are always double-quoted.

Scans split the ring along the cluster's own token ranges (``cluster.metadata.token_map``), cut
each range into ``splits_per_range`` splits and clip them to the requested ``Shard``. Up to
``concurrency`` splits are read at once, each paged with an explicit ``fetch_size`` and routed to a
replica of its range (see ``RangeAwarePolicy``), while pages are yielded strictly in token order.
"""

from __future__ import annotations

import bisect
import logging
import math
import queue
import random
import re
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

from cassandra import (
    ConsistencyLevel,
)
from cassandra.cluster import (
    Session,
)
from cassandra.concurrent import execute_concurrent
from cassandra.query import (
    UNSET_VALUE,
    BatchStatement,
    BatchType,
    PreparedStatement,
)

from dircleaner.errors import (
    RewriteUnsupported,
    SchemaError,
    UsageError,
)
from dircleaner.model import FolderRange, FolderRow, PartitionKey, Shard
from dircleaner.paths import folder_row_of
from dircleaner.store.base import PARTITION_PAGE_ROWS, DirCountEstimate, Store, TombstoneCharge
from dircleaner.store.cassandra.config import (
    CassandraConfig,
    load_cassandra_config,
    parse_cassandra_url,
)
from dircleaner.store.cassandra.mapping import (
    _q,
    in_size,
    model_parent,
    partition_token,
    stored_parent,
)
from dircleaner.store.cassandra.ring import cql_token_bounds, ring_splits
from dircleaner.store.cassandra.schema import _check_schema, _create_schema, init_schema
from dircleaner.store.cassandra.session import (
    TRANSIENT_ERRORS,
    _backoff,
    _connect,
    _one_line,
    _ttl,
    map_error,
)

__all__ = ["CassandraStore"]

log = logging.getLogger(__name__)

MAX_FILTER_CELL_BYTES = 1 << 20
#: filter cells are up to 1 MiB each: page them a few at a time, not fetch_size at a time
FILTER_FETCH_SIZE = 4
#: pages each running split may read ahead of the consumer
PAGES_AHEAD = 2
#: attempts per page / per verify or generator request before giving up
REQUEST_ATTEMPTS = 4
#: below this many estimated rows the folder index is counted instead
SMALL_TABLE_ROWS = 1_000_000
#: a count stops and extrapolates past this many rows
COUNT_LIMIT = 1_000_000
#: a lower bound of the serialized size of a folders row beyond its name: flags, clustering
#: header, name length, row size, previous row size, timestamp delta (1 byte each at least)
ROW_OVERHEAD_BYTES = 6
#: verify re-check: IN reads bound and run at a time (bounds the bound statements held at once)
VERIFY_WAVE_READS = 1000
#: generator batches: one partition per UNLOGGED batch, kept under batch_size_warn_threshold
BATCH_MAX_ROWS = 64
BATCH_MAX_BYTES = 4000
#: partition deletes per request: one UNLOGGED batch of partitions of one ring range
PARTITION_DELETES_PER_BATCH = 32


_TRACE_COUNTS = re.compile(r"Read (\d+) live (?:rows )?and (\d+) tombstone cells")

T = TypeVar("T")
Params = tuple[object, ...]


# -- the store ---------------------------------------------------------------------------------


class _Done:
    """End of one split's pages."""


class _Failed:
    """A split's worker failed; the consumer re-raises."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_DONE = _Done()


#: sweep consistency levels under which range deletes are used
QUORUM_READS = frozenset({"QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL", "SERIAL", "LOCAL_SERIAL"})


class CassandraStore(Store):
    """Metastore in a Cassandra cluster, mapped by a CassandraConfig."""

    scheme = "cassandra"
    deletes_per_request = PARTITION_DELETES_PER_BATCH

    def __init__(self, cfg: CassandraConfig, cluster: Any, session: Session) -> None:
        self.config = cfg
        # Only a quorum read is sure to see every write acknowledged at a quorum; below that, a
        # replica missing a row would let a range delete take it unseen.
        self.sweep_sees_every_write = cfg.consistency.sweep in QUORUM_READS
        self._cluster = cluster
        self._session = session
        self._key_columns = (
            *((cfg.columns.bucket,) if cfg.columns.bucket else ()),
            cfg.columns.parent,
        )
        #: the partition rewrite's read and write, prepared from the table metadata on first use
        self._rewrite_statements: tuple[PreparedStatement, PreparedStatement, int] | None = None
        #: the verify re-check's IN reads by number of bind markers, prepared when first needed
        self._in_probes: dict[int, PreparedStatement] = {}
        #: the prefix walk's IN reads of folders partitions, likewise
        self._in_folder_reads: dict[int, PreparedStatement] = {}
        self._in_probes_lock = threading.Lock()
        self._prepare_all()

    @classmethod
    def init_schema(cls, url: str, *, config_path: Path | None = None) -> list[str]:
        return init_schema(url, config_path=config_path)

    @classmethod
    def open(
        cls, url: str, *, config_path: Path | None = None, create: bool = False
    ) -> CassandraStore:
        cfg = load_cassandra_config(parse_cassandra_url(url), config_path)
        store = cls.from_config(cfg, create=create)
        store.url, store.config_path = url, config_path
        return store

    @classmethod
    def from_config(cls, cfg: CassandraConfig, *, create: bool = False) -> CassandraStore:
        """Connect and check the mapping; with ``create``, first create what is missing."""
        cluster, session = _connect(cfg)
        try:
            if create:
                _create_schema(cluster, session, cfg)
            else:
                _check_schema(cluster.metadata, cfg)
            return cls(cfg, cluster, session)
        except BaseException:
            cluster.shutdown()
            raise

    def scope_id(self) -> str:
        cfg = self.config
        return f"cassandra:{cfg.keyspace}.{cfg.tables.objects},{cfg.tables.folders}"

    def close(self) -> None:
        self._cluster.shutdown()

    # -- statements -----------------------------------------------------------------------------
    def _prepare_all(self) -> None:
        cfg = self.config
        ks = _q(cfg.keyspace)
        objects = f"{ks}.{_q(cfg.tables.objects)}"
        folders = f"{ks}.{_q(cfg.tables.folders)}"
        filters = f"{ks}.{_q(cfg.tables.filters)}"
        state = f"{ks}.{_q(cfg.tables.state)}"
        key = ", ".join(_q(c) for c in self._key_columns)
        name = _q(cfg.columns.name)
        token = f"token({key})"
        in_range = f"{token} > ? AND {token} <= ?"
        key_eq = " AND ".join(f"{_q(c)} = ?" for c in self._key_columns)
        row_eq = f"{key_eq} AND {name} = ?"
        # Bounds by value (min, max), which Cassandra applies in the column's own order: the
        # same slice whether the table clusters ascending or DESC (the bind sorts the bounds).
        range_eq = f"{key_eq} AND {name} >= ? AND {name} <= ?"
        marks = ", ".join("?" for _ in (*self._key_columns, name))
        p = self._prepare
        self._scan_objects = p(f"SELECT DISTINCT {token}, {key} FROM {objects} WHERE {in_range}")
        self._scan_folders = p(f"SELECT {token}, {key}, {name} FROM {folders} WHERE {in_range}")
        self._object_probe = p(f"SELECT {name} FROM {objects} WHERE {key_eq} LIMIT 1")
        self._folder_partition = p(f"SELECT {name} FROM {folders} WHERE {key_eq}")
        self._folder_partition_rows = p(f"SELECT {token}, {name} FROM {folders} WHERE {key_eq}")
        self._folder_row = p(f"SELECT {name} FROM {folders} WHERE {row_eq}")
        self._delete_folder_row = p(f"DELETE FROM {folders} USING TIMESTAMP ? WHERE {row_eq}")
        self._delete_folder_range = p(f"DELETE FROM {folders} USING TIMESTAMP ? WHERE {range_eq}")
        self._delete_folder_part = p(f"DELETE FROM {folders} USING TIMESTAMP ? WHERE {key_eq}")
        self._delete_object_row = p(f"DELETE FROM {objects} USING TIMESTAMP ? WHERE {row_eq}")
        self._insert = {
            table: p(f"INSERT INTO {ref} ({key}, {name}) VALUES ({marks}) USING TIMESTAMP ?")
            for table, ref in (("objects", objects), ("folders", folders))
        }
        self._put_cell = p(
            f"INSERT INTO {filters} (generation, shard, seq, data) VALUES (?, ?, ?, ?)"
        )
        self._get_cells = p(f"SELECT seq, data FROM {filters} WHERE generation = ? AND shard = ?")
        self._get_meta_cells = p(
            f"SELECT seq, data FROM {filters} WHERE generation = ? AND shard = ? AND seq < 0"
        )
        self._list_parts = p(f"SELECT DISTINCT generation, shard FROM {filters}")
        self._delete_part = p(f"DELETE FROM {filters} WHERE generation = ? AND shard = ?")
        self._put_state = p(f'INSERT INTO {state} ("key", "value") VALUES (?, ?)')
        self._lease_take = p(
            f'INSERT INTO {state} ("key", "value") VALUES (?, ?) IF NOT EXISTS USING TTL ?'
        )
        self._lease_renew = p(
            f'UPDATE {state} USING TTL ? SET "value" = ? WHERE "key" = ? IF "value" = ?'
        )
        self._lease_drop = p(f'DELETE FROM {state} WHERE "key" = ? IF "value" = ?')
        ledger = f"{ks}.{_q(cfg.tables.ledger)}"
        self._ledger_put = p(
            f"INSERT INTO {ledger} (bucket, parent, generation, charge, cost)"
            " VALUES (?, ?, ?, ?, ?) USING TTL ?"
        )
        self._ledger_get = p(f"SELECT cost FROM {ledger} WHERE bucket = ? AND parent = ?")
        self._grace = p(
            "SELECT gc_grace_seconds FROM system_schema.tables"
            " WHERE keyspace_name = ? AND table_name = ?"
        )
        self._get_state = p(f'SELECT "value" FROM {state} WHERE "key" = ?')
        self._size_estimates = p(
            "SELECT range_start, range_end, partitions_count, mean_partition_size"
            " FROM system.size_estimates WHERE keyspace_name = ? AND table_name = ?"
        )

    def _prepare(self, cql: str) -> PreparedStatement:
        stmt = self._session.prepare(cql)
        # Every write we make carries an explicit timestamp or is an overwrite: replaying
        # it is harmless, so the driver may retry it on another host.
        stmt.is_idempotent = True
        return stmt

    # -- the parent and bucket mapping -----------------------------------------------------------
    def _key_values(self, bucket: str, parent: str) -> Params:
        """Bind values of a partition key ``(bucket, parent)`` in the mapped columns' order."""
        stored = stored_parent(self.config, parent)
        if self.config.columns.bucket is None:
            if bucket != self.config.bucket_name:
                raise UsageError(
                    f"this metastore has no bucket column; its only bucket is"
                    f" {self.config.bucket_name!r}, not {bucket!r}"
                )
            return (stored,)
        return (bucket, stored)

    def _bucket_of(self, row: Sequence[Any]) -> tuple[str, str]:
        """(bucket, model parent) from a row whose columns after the token are the key."""
        if self.config.columns.bucket is None:
            return self.config.bucket_name, model_parent(self.config, row[1])
        return row[1], model_parent(self.config, row[2])

    def _scans_bucket(self, bucket: str | None) -> bool:
        """False when a bucket filter cannot match anything in this metastore."""
        return (
            bucket is None
            or self.config.columns.bucket is not None
            or bucket == self.config.bucket_name
        )

    # -- paging and ordered concurrency ---------------------------------------------------------
    def _execute(
        self,
        stmt: Any,
        params: Params | None,
        profile: str,
        *,
        paging_state: bytes | None = None,
        fetch_size: int | None = None,
        routing_token: int | None = None,
    ) -> Any:
        """One request with bounded retries of transient failures (then TransientStoreError)."""
        bound = stmt.bind(params) if params is not None else stmt
        if fetch_size is not None:
            bound.fetch_size = fetch_size
        if routing_token is not None:
            bound.routing_token = routing_token
        for attempt in range(REQUEST_ATTEMPTS):
            try:
                return self._session.execute(
                    bound, execution_profile=profile, paging_state=paging_state
                )
            except TRANSIENT_ERRORS as exc:
                if attempt == REQUEST_ATTEMPTS - 1:
                    raise map_error(exc) from exc
                log.debug("retrying after %s", _one_line(exc))
                _backoff(attempt)
        raise AssertionError("unreachable")

    def _pages(
        self,
        stmt: Any,
        params: Params,
        profile: str,
        fetch_size: int,
        routing_token: int | None = None,
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Every page of one query; a failed page is retried from its paging state."""
        paging_state: bytes | None = None
        while True:
            result = self._execute(
                stmt,
                params,
                profile,
                paging_state=paging_state,
                fetch_size=fetch_size,
                routing_token=routing_token,
            )
            rows = result.current_rows
            if rows:
                yield list(rows)
            paging_state = result.paging_state
            if not paging_state:
                return

    def _ordered(self, jobs: Sequence[Callable[[], Iterator[T]]]) -> Iterator[T]:
        """Run jobs ``concurrency`` at a time; yield their items in job order.

        Each job gets a small bounded queue, so a split that runs ahead holds at most
        PAGES_AHEAD pages. The pool starts jobs in submission order, so the job the consumer
        waits on is always running or about to run: no deadlock.
        """
        if not jobs:
            return
        stop = threading.Event()
        queues: list[queue.Queue[T | _Done | _Failed]] = [
            queue.Queue(maxsize=PAGES_AHEAD) for _ in jobs
        ]

        def put(q: queue.Queue[T | _Done | _Failed], item: T | _Done | _Failed) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def run(index: int) -> None:
            if stop.is_set():
                return
            q = queues[index]
            try:
                for item in jobs[index]():
                    if not put(q, item):
                        return
            except Exception as exc:  # handed to the consumer, which re-raises it
                put(q, _Failed(exc))
                return
            put(q, _DONE)

        workers = min(self.config.concurrency, len(jobs))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dircleaner-scan")
        try:
            for index in range(len(jobs)):
                pool.submit(run, index)
            for q in queues:
                while True:
                    item = q.get()
                    if isinstance(item, _Done):
                        break
                    if isinstance(item, _Failed):
                        raise item.exc
                    yield item
        finally:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)

    def _splits(self, shard: Shard) -> list[tuple[int, int]]:
        token_map = self._cluster.metadata.token_map
        ring = [int(t.value) for t in token_map.ring] if token_map is not None else []
        lo, hi = shard.token_range()
        return ring_splits(ring, self.config.splits_per_range, lo, hi)

    def _range_scan(self, stmt: Any, shard: Shard, profile: str) -> Iterator[list[tuple[Any, ...]]]:
        def job(a: int, b: int) -> Callable[[], Iterator[list[tuple[Any, ...]]]]:
            return lambda: self._pages(stmt, (a, b), profile, self.config.fetch_size, b)

        jobs = [
            job(*bounds)
            for lo, hi in self._splits(shard)
            if (bounds := cql_token_bounds(lo, hi)) is not None
        ]
        return self._ordered(jobs)

    # -- scans ------------------------------------------------------------------------------------
    def scan_object_partitions(
        self, shard: Shard, bucket: str | None = None
    ) -> Iterator[list[PartitionKey]]:
        if not self._scans_bucket(bucket):
            return
        for page in self._range_scan(self._scan_objects, shard, "build"):
            batch = [PartitionKey(int(row[0]), *self._bucket_of(row)) for row in page]
            if bucket is not None:
                batch = [key for key in batch if key.bucket == bucket]
            if batch:
                yield batch

    def scan_folder_rows(
        self, shard: Shard, bucket: str | None = None
    ) -> Iterator[list[FolderRow]]:
        if not self._scans_bucket(bucket):
            return
        for page in self._range_scan(self._scan_folders, shard, "sweep"):
            batch = [FolderRow(int(row[0]), *self._bucket_of(row), row[-1]) for row in page]
            if bucket is not None:
                batch = [row for row in batch if row.bucket == bucket]
            if batch:
                yield batch

    def estimate_directory_count(self, bucket: str | None = None) -> DirCountEstimate:
        """Directories in the folder index, from ``system.size_estimates`` or counted.

        ``system.size_estimates`` is node-local: each node lists its primary token ranges
        with ``partitions_count`` and ``mean_partition_size`` (bytes) of the folders table,
        refreshed every few minutes from SSTables only (memtables are not counted). We read it
        from every live node and sum over distinct ranges. It counts partitions (parent
        directories), not rows (directories), so::

            rows ≈ Σ partitions_count × mean_partition_size / row_bytes
            row_bytes = mean UTF-8 length of sampled names + ROW_OVERHEAD_BYTES

        ROW_OVERHEAD_BYTES is a lower bound of a row's serialized overhead and the partition's
        own header is not subtracted, so this errs high, the safe side for sizing a filter. It
        covers every bucket (the estimates cannot tell them apart).

        When the estimate is missing, zero or under SMALL_TABLE_ROWS (a fresh or small table,
        where the estimate is least reliable), the rows are counted by a token-range scan
        instead (``exact=True``). That count is bounded: splits are visited in a spread-out
        order and once COUNT_LIMIT rows are counted the rest is extrapolated by the share of
        the ring covered (Murmur3 spreads partitions evenly), with ``exact=False``, so that a
        caller holding the previous run's exact count prefers it. ``method`` says which.
        """
        estimated = self._size_estimate()
        if estimated is not None:
            partitions, data_bytes, ranges, hosts = estimated
            row_bytes = self._sampled_row_bytes()
            rows = math.ceil(data_bytes / row_bytes)
            if rows >= SMALL_TABLE_ROWS:
                return DirCountEstimate(
                    rows,
                    f"system.size_estimates over {ranges} ranges from {hosts} nodes:"
                    f" {partitions} partitions, {data_bytes} bytes / ~{row_bytes:.1f} bytes per"
                    " row (all buckets; SSTables only, errs high)",
                )
        why = "no size estimates yet" if estimated is None else "small table"
        return self._count_folder_rows(bucket, why)

    def _count_folder_rows(self, bucket: str | None, why: str) -> DirCountEstimate:
        """Count folder rows split by split, extrapolating past COUNT_LIMIT rows."""
        if not self._scans_bucket(bucket):
            return DirCountEstimate(0, f"no rows can match bucket {bucket!r}", exact=True)
        splits = [
            (lo, hi, bounds)
            for lo, hi in self._splits(Shard())
            if (bounds := cql_token_bounds(lo, hi)) is not None
        ]
        # A fixed shuffle: the first splits counted are spread over the whole ring.
        random.Random(0).shuffle(splits)

        by_bucket = bucket is not None and self.config.columns.bucket is not None

        def job(bounds: tuple[int, int], width: int) -> Callable[[], Iterator[tuple[int, int]]]:
            def count() -> Iterator[tuple[int, int]]:
                rows = 0
                for page in self._pages(
                    self._scan_folders, bounds, "sweep", self.config.fetch_size, bounds[1]
                ):
                    # Row layout: token, [bucket,] parent, name.
                    rows += sum(row[1] == bucket for row in page) if by_bucket else len(page)
                yield rows, width

            return count

        counted = covered = done = 0
        for rows, width in self._ordered([job(b, hi - lo + 1) for lo, hi, b in splits]):
            counted, covered, done = counted + rows, covered + width, done + 1
            if counted >= COUNT_LIMIT and done < len(splits):
                share = covered / 2**64
                return DirCountEstimate(
                    math.ceil(counted / share),
                    f"{counted} folder rows counted in {done} of {len(splits)} token splits"
                    f" ({share:.1%} of the ring), extrapolated ({why})",
                )
        return DirCountEstimate(
            counted, f"exact count of folder rows by token-range scan ({why})", exact=True
        )

    def _size_estimate(self) -> tuple[int, int, int, int] | None:
        """(partitions, bytes, ranges, nodes) summed over the live nodes' primary ranges."""
        cfg = self.config
        per_range: dict[tuple[str, str], tuple[int, int]] = {}
        hosts = 0
        for host in self._cluster.metadata.all_hosts():
            if not host.is_up:
                continue
            try:
                result = self._session.execute(
                    self._size_estimates.bind((cfg.keyspace, cfg.tables.folders)),
                    execution_profile="trace",
                    host=host,
                )
            except TRANSIENT_ERRORS as exc:
                log.debug("no size estimates from %s: %s", host, _one_line(exc))
                continue
            hosts += 1
            for start, end, count, mean_size in result:
                count, mean_size = int(count or 0), int(mean_size or 0)
                old = per_range.get((start, end), (0, 0))
                per_range[(start, end)] = max(old, (count, count * mean_size))
        partitions = sum(count for count, _ in per_range.values())
        if partitions <= 0:
            return None
        data_bytes = sum(size for _, size in per_range.values())
        return partitions, data_bytes, len(per_range), hosts

    def _sampled_row_bytes(self, samples: int = 8, rows_per_sample: int = 500) -> float:
        """Mean name length of a few hundred folder rows from splits spread over the ring."""
        splits = self._splits(Shard())
        step = max(1, len(splits) // samples)
        total = count = 0
        for lo, hi in splits[::step][:samples]:
            bounds = cql_token_bounds(lo, hi)
            if bounds is None:
                continue
            result = self._execute(self._scan_folders, bounds, "sweep", fetch_size=rows_per_sample)
            for row in result.current_rows:
                total += len(str(row[-1]).encode("utf-8"))
                count += 1
        mean_name = total / count if count else 0.0
        return mean_name + ROW_OVERHEAD_BYTES

    # -- one folders partition ----------------------------------------------------------------
    def folder_partition_pages(
        self, bucket: str, parent: str, page_rows: int = PARTITION_PAGE_ROWS
    ) -> Iterator[list[FolderRow]]:
        """Paged by the driver (``fetch_size``), at the sweep consistency, routed to a replica."""
        values = self._key_values(bucket, parent)
        token = partition_token(cast(tuple[str, ...], values))
        for page in self._pages(self._folder_partition_rows, values, "sweep", page_rows, token):
            yield [FolderRow(int(row[0]), bucket, parent, row[1]) for row in page]

    def folder_partitions(
        self, keys: Sequence[tuple[str, str]]
    ) -> Iterator[tuple[tuple[str, str], list[FolderRow]]]:
        """The partitions read ``verify_batch`` at a time, ``concurrency`` reads in flight::

            SELECT token(bucket, parent), bucket, parent, name FROM folders
            WHERE bucket = ? AND parent IN (?, …)

        chunked, routed and padded exactly as the re-check's reads are (see
        ``nonempty_object_partitions``), at the sweep consistency, and paged by ``fetch_size``:
        a wide partition takes as many pages as it needs. Cassandra returns each partition's rows
        together and in clustering order. Yielded in ``keys`` order once all are read.
        """
        unique = list(dict.fromkeys(keys))
        if not unique:
            return
        asked = set(unique)

        def job(bucket: str, chunk: list[tuple[int, str]]) -> Callable[[], Iterator[Any]]:
            size = in_size(len(chunk), self.config.verify_batch)
            parents = [stored for _, stored in chunk]
            parents += [parents[-1]] * (size - len(parents))  # IN reads a repeated key once
            values = (bucket, *parents) if self.config.columns.bucket else tuple(parents)
            stmt = self._in_folder_read(size)
            fetch = self.config.fetch_size
            return lambda: self._pages(stmt, values, "sweep", fetch, chunk[0][0])

        found: dict[tuple[str, str], list[FolderRow]] = {}
        jobs = [job(bucket, chunk) for bucket, chunk in self._verify_chunks(unique)]
        for page in self._ordered(jobs):
            for row in page:
                key = self._bucket_of(row)
                if key not in asked:
                    raise SchemaError(
                        f"the walk's read returned partition {key!r}, a key it did not ask for;"
                        " check the [cassandra] mapping"
                    )
                found.setdefault(key, []).append(FolderRow(int(row[0]), *key, row[-1]))
        for key in keys:
            yield key, found.get(key, [])

    def _in_folder_read(self, size: int) -> PreparedStatement:
        """``SELECT token, key, name FROM folders WHERE … parent IN (size markers)``."""
        with self._in_probes_lock:
            stmt = self._in_folder_reads.get(size)
            if stmt is None:
                cfg = self.config
                folders = f"{_q(cfg.keyspace)}.{_q(cfg.tables.folders)}"
                key = ", ".join(_q(c) for c in self._key_columns)
                bucket_eq = f"{_q(cfg.columns.bucket)} = ? AND " if cfg.columns.bucket else ""
                marks = ", ".join("?" * size)
                stmt = self._in_folder_reads[size] = self._prepare(
                    f"SELECT token({key}), {key}, {_q(cfg.columns.name)} FROM {folders}"
                    f" WHERE {bucket_eq}{_q(cfg.columns.parent)} IN ({marks})"
                )
            return stmt

    def has_folder_row(self, bucket: str, directory: str) -> bool:
        parent, name = folder_row_of(directory)
        result = self._execute(self._folder_row, (*self._key_values(bucket, parent), name), "sweep")
        return bool(result.current_rows)

    # -- emptiness re-check --------------------------------------------------------------------
    def objects_partition_nonempty(self, bucket: str, parent: str) -> bool:
        result = self._execute(self._object_probe, self._key_values(bucket, parent), "verify")
        return bool(result.current_rows)

    def nonempty_object_partitions(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """The keys whose objects partition holds a row, read ``verify_batch`` partitions at once.

        One read per chunk, ``concurrency`` chunks in flight, at the verify consistency::

            SELECT bucket, parent FROM objects
            WHERE bucket = ? AND parent IN (?, …) PER PARTITION LIMIT 1

        (without ``bucket = ?`` when the mapping has no bucket column). Each partition is read
        as the single-key probe reads it (``LIMIT 1``), so the answers are the same; a partition
        holding only static cells counts as non-empty in both. The keys are grouped by bucket and
        by the ring range their token (computed here, see ``partition_token``) falls in, sorted
        by token and cut into chunks; each chunk carries the token of its first key as its
        ``routing_token``, so ``RangeAwarePolicy`` sends it to a replica of that range, which
        reads every partition of the chunk locally. Chunks of different ranges are interleaved,
        so the requests in flight spread over the replicas. Reads are bound and run
        VERIFY_WAVE_READS at a time, so memory does not grow with the bound statements.

        A short chunk (the last of a group) is padded, by repeating its last key, to the next
        power of two (or ``verify_batch``): at most ⌈log2 verify_batch⌉ + 1 statements are
        prepared, and a padded chunk carries at most twice its keys. Cassandra reads a key
        repeated in ``IN`` once (tests check this on the node); the answer would be the same if
        it did not. Responses are not paged: a chunk returns at most one row per key.

        Guardrails: Cassandra 5.0's ``partition_keys_in_select_warn_threshold`` and
        ``partition_keys_in_select_fail_threshold`` are off (-1) by default. Where an operator
        sets them, keep ``verify_batch`` at or below the fail threshold (every chunk would be
        refused with InvalidRequest, and the job would stop) and below the warn threshold (one
        server warning per chunk otherwise). A chunk's reads share one request timeout: lower
        ``verify_batch`` if partitions full of tombstones make chunks time out.

        A chunk that keeps failing after REQUEST_ATTEMPTS attempts raises TransientStoreError
        (any other error is raised as it is), never a partial answer: an unverified directory
        must not be treated as empty, and silently treating it as non-empty would hide an
        outage.
        """
        unique = list(dict.fromkeys(keys))
        if not unique:
            return set()
        asked = set(unique)
        cfg = self.config
        chunks = self._verify_chunks(unique)
        out: set[tuple[str, str]] = set()
        for start in range(0, len(chunks), VERIFY_WAVE_READS):
            results = self._run_statements(
                [
                    (self._bind_in_probe(*chunk), ())
                    for chunk in chunks[start : start + VERIFY_WAVE_READS]
                ],
                "verify",
                retries=REQUEST_ATTEMPTS - 1,
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise map_error(result) from result
                if result.has_more_pages:
                    raise RuntimeError("an unpaged verify read returned a paged answer")
                for row in result.current_rows:
                    bucket, stored = (
                        (row[0], row[1]) if cfg.columns.bucket else (cfg.bucket_name, row[0])
                    )
                    key = (bucket, model_parent(cfg, stored))
                    if key not in asked:
                        raise SchemaError(
                            f"the verify read returned partition {(bucket, stored)!r}, which maps"
                            f" to {key!r}, a key it did not ask for; check the [cassandra] mapping"
                        )
                    out.add(key)
        return out

    def _verify_chunks(
        self, keys: Sequence[tuple[str, str]]
    ) -> list[tuple[str, list[tuple[int, str]]]]:
        """``keys`` (distinct) as (bucket, [(token, stored parent)]) chunks, one range each.

        Chunks hold at most ``verify_batch`` keys of one bucket and one ring range, in token
        order; the n-th chunks of every (bucket, range) come before the (n+1)-th, so neighbours
        go to different replicas.
        """
        token_map = self._cluster.metadata.token_map
        ring = sorted(int(t.value) for t in token_map.ring) if token_map is not None else []
        # (bucket, ring range) → its keys. Range i is (ring[i-1], ring[i]]; tokens past the last
        # ring token wrap around to range 0.
        groups: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for bucket, parent in keys:
            values = cast(tuple[str, ...], self._key_values(bucket, parent))
            token = partition_token(values)
            where = bisect.bisect_left(ring, token) % len(ring) if ring else 0
            groups.setdefault((bucket, where), []).append((token, values[-1]))
        batch = self.config.verify_batch
        chunks: list[tuple[int, int, str, list[tuple[int, str]]]] = []
        for order, ((bucket, _), members) in enumerate(sorted(groups.items())):
            members.sort()
            for index, start in enumerate(range(0, len(members), batch)):
                chunks.append((index, order, bucket, members[start : start + batch]))
        chunks.sort(key=lambda chunk: chunk[:2])
        return [(bucket, members) for _, _, bucket, members in chunks]

    def _bind_in_probe(self, bucket: str, chunk: Sequence[tuple[int, str]]) -> Any:
        """The IN read of one chunk of (token, stored parent), routed to its first token."""
        size = in_size(len(chunk), self.config.verify_batch)
        parents = [stored for _, stored in chunk]
        parents += [parents[-1]] * (size - len(parents))  # IN reads a repeated key once
        values = (bucket, *parents) if self.config.columns.bucket else tuple(parents)
        bound = self._in_probe(size).bind(values)
        bound.routing_token = chunk[0][0]
        bound.fetch_size = None  # at most one row per key: one unpaged response
        return bound

    def _in_probe(self, size: int) -> PreparedStatement:
        """``SELECT key FROM objects WHERE … parent IN (size markers) PER PARTITION LIMIT 1``."""
        with self._in_probes_lock:
            stmt = self._in_probes.get(size)
            if stmt is None:
                cfg = self.config
                objects = f"{_q(cfg.keyspace)}.{_q(cfg.tables.objects)}"
                key = ", ".join(_q(c) for c in self._key_columns)
                bucket_eq = f"{_q(cfg.columns.bucket)} = ? AND " if cfg.columns.bucket else ""
                marks = ", ".join("?" * size)
                stmt = self._in_probes[size] = self._prepare(
                    f"SELECT {key} FROM {objects}"
                    f" WHERE {bucket_eq}{_q(cfg.columns.parent)} IN ({marks})"
                    " PER PARTITION LIMIT 1"
                )
            return stmt

    def _run_many(
        self, stmt: Any, params: Sequence[Params], profile: str, *, retries: int = 0
    ) -> list[Any]:
        """Run one statement per params, ``concurrency`` in flight; a result or the exception.

        Transient failures are retried ``retries`` times, with backoff, before being returned.
        """
        return self._run_statements([(stmt, p) for p in params], profile, retries=retries)

    def _run_statements(
        self, items: Sequence[tuple[Any, Params]], profile: str, *, retries: int = 0
    ) -> list[Any]:
        results: list[Any] = [None] * len(items)
        pending = list(range(len(items)))
        for attempt in range(retries + 1):
            if not pending:
                break
            if attempt:
                _backoff(attempt)
            outcome = execute_concurrent(
                self._session,
                [items[i] for i in pending],
                concurrency=self.config.concurrency,
                raise_on_first_error=False,
                execution_profile=profile,
            )
            retry: list[int] = []
            for index, (ok, value) in zip(pending, outcome, strict=True):
                results[index] = value
                if not ok and isinstance(value, TRANSIENT_ERRORS):
                    retry.append(index)
            pending = retry
        return results

    # -- deletes at a timestamp ---------------------------------------------------------------
    def delete_folder_rows(
        self, rows: Sequence[FolderRow], timestamp_us: int
    ) -> list[BaseException | None]:
        params = [(timestamp_us, *self._key_values(r.bucket, r.parent), r.name) for r in rows]
        return self._outcomes(self._run_many(self._delete_folder_row, params, "delete"))

    def delete_folder_ranges(
        self, ranges: Sequence[FolderRange], timestamp_us: int
    ) -> list[BaseException | None]:
        params = [
            (timestamp_us, *self._key_values(r.bucket, r.parent), r.low, r.high) for r in ranges
        ]
        return self._outcomes(self._run_many(self._delete_folder_range, params, "delete"))

    def delete_folder_partitions(
        self, partitions: Sequence[PartitionKey], timestamp_us: int
    ) -> list[BaseException | None]:
        """One request per up to PARTITION_DELETES_PER_BATCH partitions of one ring range.

        Each request is an UNLOGGED batch of ``DELETE … USING TIMESTAMP T`` statements, routed
        to a replica of the range (``routing_token``), which applies every deletion locally: a
        partition deletion costs one request's share instead of a request of its own. Kept under
        BATCH_MAX_BYTES (the batch size warning). An unlogged batch may be applied in part; a
        failed batch reports every partition of it failed, and the deleter retries them (a
        deletion at T is idempotent).
        """
        token_map = self._cluster.metadata.token_map
        ring = sorted(int(t.value) for t in token_map.ring) if token_map is not None else []
        # ring range → its partitions as (token, index in ``partitions``, key values)
        groups: dict[int, list[tuple[int, int, Params]]] = {}
        for index, key in enumerate(partitions):
            values = self._key_values(key.bucket, key.parent)
            token = partition_token(cast(tuple[str, ...], values))
            where = bisect.bisect_left(ring, token) % len(ring) if ring else 0
            groups.setdefault(where, []).append((token, index, values))
        items: list[tuple[Any, Params]] = []
        members: list[list[int]] = []
        for _, entries in sorted(groups.items()):
            start = 0
            while start < len(entries):
                batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                batch.routing_token = entries[start][0]
                taken: list[int] = []
                size = 0
                for _, index, values in entries[start : start + PARTITION_DELETES_PER_BATCH]:
                    weight = sum(len(str(v).encode("utf-8")) for v in values) + 16
                    if taken and size + weight > BATCH_MAX_BYTES:
                        break
                    batch.add(self._delete_folder_part, (timestamp_us, *values))
                    taken.append(index)
                    size += weight
                start += len(taken)
                items.append((batch, ()))
                members.append(taken)
        results: list[BaseException | None] = [None] * len(partitions)
        for taken, outcome in zip(members, self._run_statements(items, "delete"), strict=True):
            error = map_error(outcome) if isinstance(outcome, BaseException) else None
            for index in taken:
                results[index] = error
        return results

    def rewrite_folder_partition(
        self, partition: PartitionKey, keep_out: Collection[str], timestamp_us: int
    ) -> int:
        """Reads the partition at the sweep's consistency with every regular column, and writes
        each kept row back whole at ``timestamp_us`` (null columns left unset, so the copy adds
        no tombstone cell)."""
        read, write, regular = self._rewrite_statements or self._prepare_rewrite()
        key = self._key_values(partition.bucket, partition.parent)
        drop = set(keep_out)
        params: list[Params] = []
        for page in self._pages(read, key, "sweep", self.config.fetch_size):
            for row in page:
                if row[0] in drop:
                    continue
                values = row[1 : 1 + regular]
                ttls = row[1 + regular :]
                if any(ttl is not None for ttl in ttls):
                    raise RewriteUnsupported(
                        f"folders row {partition.parent!r}/{row[0]!r} has a TTL, which a rewrite"
                        " cannot keep; not rewriting its partition"
                    )
                cells = tuple(UNSET_VALUE if v is None else v for v in values)
                params.append((*key, row[0], *cells, timestamp_us))
        self._raise_first(self._run_many(write, params, "delete", retries=3))
        return len(params)

    def _prepare_rewrite(self) -> tuple[PreparedStatement, PreparedStatement, int]:
        """The rewrite's statements, or RewriteUnsupported naming the column it cannot copy."""
        cfg = self.config
        self._cluster.refresh_table_metadata(cfg.keyspace, cfg.tables.folders)
        table = self._cluster.metadata.keyspaces[cfg.keyspace].tables[cfg.tables.folders]
        keys = {c.name for c in (*table.partition_key, *table.clustering_key)}
        regular = [c for name, c in table.columns.items() if name not in keys]
        where = f"{cfg.keyspace}.{cfg.tables.folders}"
        for column in regular:
            kind = str(column.cql_type)
            if column.is_static:
                why = "a static column"
            elif kind == "counter":
                why = "a counter"
            elif kind.split("<", 1)[0] in ("list", "set", "map") or (
                not kind.startswith("frozen<") and "." in kind
            ):
                why = f"a non-frozen {kind} (writing it whole adds a tombstone)"
            else:
                continue
            raise RewriteUnsupported(
                f"column {where}.{column.name} is {why}: a partition rewrite cannot copy it;"
                " run with --max-rewrite-rows 0"
            )
        names = [_q(c.name) for c in regular]
        key = ", ".join(_q(c) for c in self._key_columns)
        key_eq = " AND ".join(f"{_q(c)} = ?" for c in self._key_columns)
        name = _q(cfg.columns.name)
        ref = f"{_q(cfg.keyspace)}.{_q(cfg.tables.folders)}"
        selected = ", ".join([name, *names, *(f"TTL({n})" for n in names)])
        read = self._prepare(f"SELECT {selected} FROM {ref} WHERE {key_eq}")
        columns = ", ".join([key, name, *names])
        marks = ", ".join("?" for _ in range(len(self._key_columns) + 1 + len(names)))
        write = self._prepare(f"INSERT INTO {ref} ({columns}) VALUES ({marks}) USING TIMESTAMP ?")
        self._rewrite_statements = (read, write, len(names))
        return self._rewrite_statements

    @staticmethod
    def _outcomes(results: Sequence[Any]) -> list[BaseException | None]:
        return [map_error(r) if isinstance(r, BaseException) else None for r in results]

    def tombstones_in_partition(self, bucket: str, parent: str) -> int:
        """Tombstones a read of one folders partition scans, as Cassandra counts them (tests).

        A traced read at ONE; the count is the largest ``Read N live rows and M tombstone
        cells`` M among the replicas' trace events. Each deleted row counts 1, each range
        deletion 2 (its start and end markers, however many rows it shadows). A partition
        deletion counts 0: Cassandra reports (and counts against tombstone_warn_threshold) only
        the row tombstones and range markers it iterates over, not the partition-level deletion.
        """
        bound = self._folder_partition.bind(self._key_values(bucket, parent))
        bound.fetch_size = 100_000
        result = self._session.execute(bound, execution_profile="trace", trace=True)
        trace = result.get_query_trace(max_wait_sec=10.0)
        counts = [
            int(match.group(2))
            for event in trace.events
            if (match := _TRACE_COUNTS.search(str(event.description)))
        ]
        if not counts:
            raise RuntimeError("the read's trace reports no tombstone count")
        return max(counts)

    # -- filters table ----------------------------------------------------------------------------
    def put_filter_cell(self, generation: str, shard: int, seq: int, data: bytes) -> None:
        if len(data) > MAX_FILTER_CELL_BYTES:
            raise ValueError(f"filter cell of {len(data)} bytes exceeds 1 MiB")
        self._execute(self._put_cell, (generation, shard, seq, data), "meta")

    def get_filter_cells(
        self, generation: str, shard: int, *, meta_only: bool = False
    ) -> dict[int, bytes]:
        stmt = self._get_meta_cells if meta_only else self._get_cells
        cells: dict[int, bytes] = {}
        for page in self._pages(stmt, (generation, shard), "meta", FILTER_FETCH_SIZE):
            cells.update((int(seq), bytes(data)) for seq, data in page)
        return cells

    def list_filter_parts(self) -> list[tuple[str, int]]:
        parts = {
            (str(gen), int(shard))
            for page in self._pages(self._list_parts, (), "meta", self.config.fetch_size)
            for gen, shard in page
        }
        return sorted(parts)

    def delete_filter_generation(self, generation: str) -> None:
        shards = [shard for gen, shard in self.list_filter_parts() if gen == generation]
        for shard in shards:
            self._execute(self._delete_part, (generation, shard), "meta")

    # -- the run lease ----------------------------------------------------------------------------
    # A row of the state table, taken with a lightweight transaction and kept alive by a TTL.

    def try_acquire_lease(self, name: str, owner: str, ttl_s: float) -> str | None:
        row = self._lease(self._lease_take, (f"lease|{name}", owner, _ttl(ttl_s)))
        if row[0]:
            return None
        return str(row[2]) if len(row) > 2 and row[2] is not None else "unknown"

    def renew_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        row = self._lease(self._lease_renew, (_ttl(ttl_s), owner, f"lease|{name}", owner))
        return bool(row[0])

    def release_lease(self, name: str, owner: str) -> None:
        self._lease(self._lease_drop, (f"lease|{name}", owner))

    def lease_holder(self, name: str) -> str | None:
        bound = self._get_state.bind((f"lease|{name}",))
        bound.consistency_level = ConsistencyLevel.SERIAL  # a Paxos read: no stale answer
        rows = self._execute(bound, None, "lease").current_rows
        return None if not rows else cast(str | None, rows[0][0])

    def _lease(self, stmt: PreparedStatement, params: Params) -> tuple[Any, ...]:
        rows = self._execute(stmt, params, "lease").current_rows
        return tuple(rows[0])

    # -- the tombstone ledger ---------------------------------------------------------------------
    def charge_tombstones(self, charges: Sequence[TombstoneCharge], ttl_s: float) -> None:
        ttl = _ttl(ttl_s)
        params = [(*charge, ttl) for charge in charges]
        self._raise_first(self._run_many(self._ledger_put, params, "meta", retries=3))

    def tombstones_charged(
        self, partitions: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        results = self._run_many(self._ledger_get, list(partitions), "meta", retries=3)
        self._raise_first(results)
        out: dict[tuple[str, str], int] = {}
        for key, result in zip(partitions, results, strict=True):
            total = sum(int(cost) for (cost,) in result.current_rows)
            if total:
                out[key] = total
        return out

    def folders_grace_seconds(self) -> tuple[float, str]:
        cfg = self.config
        rows = self._execute(self._grace, (cfg.keyspace, cfg.tables.folders), "meta").current_rows
        if not rows:
            raise SchemaError(f"no table {cfg.keyspace}.{cfg.tables.folders} in system_schema")
        return float(rows[0][0]), "gc_grace_seconds"

    def tombstone_warn_threshold(self) -> tuple[int, str] | None:
        try:
            rows = self._session.execute(
                "SELECT value FROM system_views.settings WHERE name = 'tombstone_warn_threshold'",
                execution_profile="meta",
            ).current_rows
            return (int(rows[0][0]), "system_views.settings") if rows else None
        except Exception:  # a node without virtual tables: the caller's default
            log.debug("system_views.settings unreadable", exc_info=True)
            return None

    # -- small state ------------------------------------------------------------------------------
    def put_state(self, key: str, value: str) -> None:
        self._execute(self._put_state, (key, value), "meta")

    def get_state(self, key: str) -> str | None:
        rows = self._execute(self._get_state, (key,), "meta").current_rows
        return None if not rows else cast(str | None, rows[0][0])

    # -- the S3 front-end's writes ----------------------------------------------------------------
    def write_object_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        self._write("objects", [(b, p, n, timestamp_us) for b, p, n in rows])

    def write_folder_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        self._write("folders", [(b, p, n, timestamp_us) for b, p, n in rows])

    def delete_object_rows(
        self, rows: Sequence[tuple[str, str, str]], timestamp_us: int
    ) -> int | None:
        params = [(timestamp_us, *self._key_values(b, p), n) for b, p, n in rows]
        self._raise_first(self._run_many(self._delete_object_row, params, "write", retries=3))
        return None  # a blind delete: Cassandra does not say whether the row existed

    def bulk_insert(self, table: str, rows: Sequence[tuple[int, str, str, str, int]]) -> None:
        """Insert ``(token_ignored, bucket, parent, name, ts)`` rows (generator fast path)."""
        if table not in self._insert:
            raise ValueError(f"unknown table {table!r}")
        self._write(table, [(b, p, n, ts) for _, b, p, n, ts in rows])

    def _write(self, table: str, rows: Sequence[tuple[str, str, str, int]]) -> None:
        """Upsert rows, one UNLOGGED batch per run of rows in the same partition.

        Single-partition batches are applied as one mutation on one replica set; they stay
        under BATCH_MAX_ROWS/BATCH_MAX_BYTES so Cassandra's batch size warning stays quiet.
        """
        stmt = self._insert[table]
        items: list[tuple[Any, Params]] = []
        batch: Any = None
        batch_key: Params | None = None
        batch_rows = batch_bytes = 0
        for bucket, parent, name, ts in rows:
            key = self._key_values(bucket, parent)
            size = sum(len(str(v).encode("utf-8")) for v in (*key, name)) + 16
            if (
                batch is None
                or key != batch_key
                or batch_rows >= BATCH_MAX_ROWS
                or batch_bytes + size > BATCH_MAX_BYTES
            ):
                batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                batch_key, batch_rows, batch_bytes = key, 0, 0
                items.append((batch, ()))
            batch.add(stmt, (*key, name, ts))
            batch_rows += 1
            batch_bytes += size
        self._raise_first(self._run_statements(items, "write", retries=3))

    @staticmethod
    def _raise_first(results: Sequence[Any]) -> None:
        for result in results:
            if isinstance(result, BaseException):
                raise map_error(result) from result
