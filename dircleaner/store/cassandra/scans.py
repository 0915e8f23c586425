"""The index scans and the directory count: token-range scans of both tables, and the folder
index's size from ``system.size_estimates`` or counted.

Scans split the ring along the cluster's own token ranges (``cluster.metadata.token_map``), cut
each range into ``splits_per_range`` splits and clip them to the requested ``Shard``. Up to
``concurrency`` splits are read at once, each paged with an explicit ``fetch_size`` and routed to a
replica of its range (see ``RangeAwarePolicy``), while pages are yielded strictly in token order.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dircleaner.model import FolderRow, PartitionKey, Shard
from dircleaner.scanrate import ScanThrottle
from dircleaner.store.cassandra.requests import CassandraRequests
from dircleaner.store.cassandra.ring import cql_token_bounds
from dircleaner.store.cassandra.session import TRANSIENT_ERRORS, _one_line
from dircleaner.store.records import DirCountEstimate

log = logging.getLogger(__name__)

#: below this many estimated rows the folder index is counted instead
SMALL_TABLE_ROWS = 1_000_000
#: a count stops and extrapolates past this many rows
COUNT_LIMIT = 1_000_000
#: a lower bound of the serialized size of a folders row beyond its name: flags, clustering
#: header, name length, row size, previous row size, timestamp delta (1 byte each at least)
ROW_OVERHEAD_BYTES = 6


class IndexScans:
    """Token-range scans of the objects and folders tables, and the directory count."""

    def __init__(self, requests: CassandraRequests) -> None:
        self.requests = requests
        c = requests.cql
        in_range = f"{c.token} > ? AND {c.token} <= ?"
        p = requests.prepare
        self.scan_objects_stmt = p(
            f"SELECT DISTINCT {c.token}, {c.key} FROM {c.objects} WHERE {in_range}"
        )
        self.scan_folders_stmt = p(
            f"SELECT {c.token}, {c.key}, {c.name} FROM {c.folders} WHERE {in_range}"
        )
        self.size_estimates_stmt = p(
            "SELECT range_start, range_end, partitions_count, mean_partition_size"
            " FROM system.size_estimates WHERE keyspace_name = ? AND table_name = ?"
        )

    # -- scans ------------------------------------------------------------------------------------
    def scan_object_partitions(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[list[PartitionKey]]:
        if not self.requests.scans_bucket(bucket):
            return
        for page in self.requests.range_scan(self.scan_objects_stmt, shard, "build", throttle):
            batch = self._object_keys(page)
            if bucket is not None:
                batch = [key for key in batch if key.bucket == bucket]
            if batch:
                yield batch

    def scan_folder_rows(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[list[FolderRow]]:
        if not self.requests.scans_bucket(bucket):
            return
        for page in self.requests.range_scan(self.scan_folders_stmt, shard, "sweep", throttle):
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
        root = self.requests.config.root_parent
        if self.requests.config.columns.bucket is None or self.requests.config.parent_prefix:
            return [PartitionKey(int(row[0]), *self.requests.bucket_of(row)) for row in page]
        n = len(root)
        return [
            PartitionKey(t, b, "" if p == root else p[n:] if p.startswith(root) else p)
            for t, b, p in page
        ]

    def _folder_rows(self, page: Sequence[tuple[Any, ...]]) -> list[FolderRow]:
        """A scanned page of (token, bucket, stored parent, name) as folder rows (as above)."""
        root = self.requests.config.root_parent
        if self.requests.config.columns.bucket is None or self.requests.config.parent_prefix:
            return [FolderRow(int(row[0]), *self.requests.bucket_of(row), row[-1]) for row in page]
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
        estimated = self.size_estimate()
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
        if not self.requests.scans_bucket(bucket):
            return DirCountEstimate(0, f"no rows can match bucket {bucket!r}", exact=True)
        splits = [
            (lo, hi, bounds)
            for lo, hi in self.requests.splits(Shard())
            if (bounds := cql_token_bounds(lo, hi)) is not None
        ]
        # A fixed shuffle: the first splits counted are spread over the whole ring.
        random.Random(0).shuffle(splits)

        by_bucket = bucket is not None and self.requests.config.columns.bucket is not None

        def job(bounds: tuple[int, int], width: int) -> Callable[[], Iterator[tuple[int, int]]]:
            def count() -> Iterator[tuple[int, int]]:
                rows = 0
                for page in self.requests.pages(
                    self.scan_folders_stmt,
                    bounds,
                    "sweep",
                    self.requests.config.fetch_size,
                    bounds[1],
                ):
                    # Row layout: token, [bucket,] parent, name.
                    rows += sum(row[1] == bucket for row in page) if by_bucket else len(page)
                yield rows, width

            return count

        counted = covered = done = 0
        for rows, width in self.requests.ordered([job(b, hi - lo + 1) for lo, hi, b in splits]):
            counted, covered, done = counted + rows, covered + width, done + 1
            if counted >= COUNT_LIMIT and done < len(splits):
                share = covered / 2**64
                return DirCountEstimate(
                    math.ceil(counted / share),
                    f"{counted:,} folder rows counted in {done:,} of {len(splits):,} token splits"
                    f" ({share:.1%} of the ring), extrapolated ({why})",
                )
        return DirCountEstimate(
            counted, f"exact count of folder rows by token-range scan ({why})", exact=True
        )

    def size_estimate(self) -> tuple[int, int, int, int] | None:
        """(partitions, bytes, ranges, nodes) summed over the live nodes' primary ranges."""
        cfg = self.requests.config
        per_range: dict[tuple[str, str], tuple[int, int]] = {}
        hosts = 0
        for host in self.requests.cluster.metadata.all_hosts():
            if not host.is_up:
                continue
            try:
                result = self.requests.session.execute(
                    self.size_estimates_stmt.bind((cfg.keyspace, cfg.tables.folders)),
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
        splits = self.requests.splits(Shard())
        step = max(1, len(splits) // samples)
        total = count = 0
        for lo, hi in splits[::step][:samples]:
            bounds = cql_token_bounds(lo, hi)
            if bounds is None:
                continue
            result = self.requests.execute(
                self.scan_folders_stmt, bounds, "sweep", fetch_size=rows_per_sample
            )
            for row in result.current_rows:
                total += len(str(row[-1]).encode("utf-8"))
                count += 1
        mean_name = total / count if count else 0.0
        return mean_name + ROW_OVERHEAD_BYTES
