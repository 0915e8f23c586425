"""The store's reads: scans, size estimates, one folders partition, the emptiness re-check.

Scans split the ring along the cluster's own token ranges (``cluster.metadata.token_map``), cut
each range into ``splits_per_range`` splits and clip them to the requested ``Shard``. Up to
``concurrency`` splits are read at once, each paged with an explicit ``fetch_size`` and routed to a
replica of its range (see ``RangeAwarePolicy``), while pages are yielded strictly in token order.
"""

from __future__ import annotations

import logging
import math
import random
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

from cassandra.query import PreparedStatement

from dircleaner.errors import SchemaError
from dircleaner.model import FolderRow, PartitionKey, Shard
from dircleaner.paths import folder_row_of
from dircleaner.scanrate import ScanThrottle
from dircleaner.store.base import PARTITION_PAGE_ROWS, DirCountEstimate
from dircleaner.store.cassandra.mapping import model_parent, partition_token
from dircleaner.store.cassandra.requests import CassandraRequests, ChunkKey, InStatements
from dircleaner.store.cassandra.ring import cql_token_bounds
from dircleaner.store.cassandra.session import TRANSIENT_ERRORS, _one_line, map_error

log = logging.getLogger(__name__)

#: below this many estimated rows the folder index is counted instead
SMALL_TABLE_ROWS = 1_000_000
#: a count stops and extrapolates past this many rows
COUNT_LIMIT = 1_000_000
#: a lower bound of the serialized size of a folders row beyond its name: flags, clustering
#: header, name length, row size, previous row size, timestamp delta (1 byte each at least)
ROW_OVERHEAD_BYTES = 6
#: verify re-check: IN reads bound and run at a time (bounds the bound statements held at once)
VERIFY_WAVE_READS = 1000

_TRACE_COUNTS = re.compile(r"Read (\d+) live (?:rows )?and (\d+) tombstone cells")


class CassandraReads(CassandraRequests):
    """The reads of the ``Store`` protocol, and the re-check's batched IN reads."""

    _scan_objects: PreparedStatement
    _scan_folders: PreparedStatement
    _object_probe: PreparedStatement
    _folder_partition: PreparedStatement
    _folder_partition_rows: PreparedStatement
    _folder_row: PreparedStatement
    _size_estimates: PreparedStatement
    #: the verify re-check's IN reads (``… PER PARTITION LIMIT 1``)
    _in_probe: InStatements

    # -- scans ------------------------------------------------------------------------------------
    def scan_object_partitions(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[list[PartitionKey]]:
        if not self._scans_bucket(bucket):
            return
        for page in self._range_scan(self._scan_objects, shard, "build", throttle):
            batch = self._object_keys(page)
            if bucket is not None:
                batch = [key for key in batch if key.bucket == bucket]
            if batch:
                yield batch

    def scan_folder_rows(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[list[FolderRow]]:
        if not self._scans_bucket(bucket):
            return
        for page in self._range_scan(self._scan_folders, shard, "sweep", throttle):
            batch = self._folder_rows(page)
            if bucket is not None:
                batch = [row for row in batch if row.bucket == bucket]
            if batch:
                yield batch

    def _object_keys(self, page: Sequence[tuple[Any, ...]]) -> list[PartitionKey]:
        """A scanned page of (token, bucket, stored parent) as partition keys.

        Per row, so the mapping is inlined where it is the common one (a bucket column, no
        parent_prefix): the same answer as ``_bucket_of``, without two calls per row.
        """
        root = self.config.root_parent
        if self.config.columns.bucket is None or self.config.parent_prefix:
            return [PartitionKey(int(row[0]), *self._bucket_of(row)) for row in page]
        n = len(root)
        return [
            PartitionKey(t, b, "" if p == root else p[n:] if p.startswith(root) else p)
            for t, b, p in page
        ]

    def _folder_rows(self, page: Sequence[tuple[Any, ...]]) -> list[FolderRow]:
        """A scanned page of (token, bucket, stored parent, name) as folder rows (as above)."""
        root = self.config.root_parent
        if self.config.columns.bucket is None or self.config.parent_prefix:
            return [FolderRow(int(row[0]), *self._bucket_of(row), row[-1]) for row in page]
        n = len(root)
        return [
            FolderRow(t, b, "" if p == root else p[n:] if p.startswith(root) else p, name)
            for t, b, p, name in page
        ]

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

    def has_folder_row(self, bucket: str, directory: str) -> bool:
        parent, name = folder_row_of(directory)
        result = self._execute(self._folder_row, (*self._key_values(bucket, parent), name), "sweep")
        return bool(result.current_rows)

    # -- emptiness re-check --------------------------------------------------------------------
    def objects_partition_nonempty(self, bucket: str, parent: str) -> bool:
        """One ``LIMIT 1`` read (the benchmarks' naive check is one of these per directory)."""
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

        A chunk that keeps failing after ``retry_policy.attempts`` tries raises TransientStoreError
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
                retry=True,
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

    def _verify_chunks(self, keys: Sequence[tuple[str, str]]) -> list[tuple[str, list[ChunkKey]]]:
        """``keys`` (distinct) as the re-check's and the walk's IN chunks (``verify_batch``)."""
        return self._range_chunks(keys, self.config.verify_batch)

    def _bind_in_probe(self, bucket: str, chunk: Sequence[ChunkKey]) -> Any:
        """The IN read of one chunk of (token, stored parent), routed to its first token."""
        values, size = self._in_keys(bucket, chunk, self.config.verify_batch)
        bound = self._in_probe(size).bind(values)
        bound.routing_token = chunk[0][0]
        bound.fetch_size = None  # at most one row per key: one unpaged response
        return bound

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
