"""Deletes at a timestamp on the folders index: rows, ranges, whole partitions.

Deletes carry the run's timestamp T (``USING TIMESTAMP``), so a row written after T survives
them. Each kind is built as requests (``row_deletes``, ``range_deletes``, ``partition_deletes``:
bound statements or a statement and its values) apart from sending them (``send``), so a caller
may send them its own way. The budget's inputs from the cluster (``gc_grace_seconds``,
``tombstone_warn_threshold``) are read here too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from dircleaner.errors import SchemaError
from dircleaner.model import DeleteAction, FolderRange, FolderRow, PartitionKey
from dircleaner.store.cassandra import window
from dircleaner.store.cassandra.requests import CassandraRequests, InStatements, Params
from dircleaner.store.records import DeleteRequest

log = logging.getLogger(__name__)

#: partition deletes per request: one ``DELETE … WHERE parent IN (…)`` of partitions of one
#: bucket and ring range (not a batch: Cassandra's batch warnings do not apply)
PARTITION_DELETES_PER_REQUEST = 32

#: one request: a prepared statement and its values, or a bound statement and ``()``
Request = tuple[Any, Params]


#: the settings that make Cassandra warn about tombstones in one partition, as
#: ``system_views.settings`` names them
TOMBSTONE_WARN_SETTINGS = ("partition_tombstones_warn_threshold", "tombstone_warn_threshold")


def lowest_warn_threshold(settings: Mapping[str, object]) -> tuple[int, str] | None:
    """The lowest of the tombstone warnings that are on (a value above 0), and its name.

    ``partition_tombstones_warn_threshold`` is a guardrail (-1: off) that warns when a
    partition holds that many tombstones; ``tombstone_warn_threshold`` warns when a read scans
    that many. Either is a warning the operator sees because of our tombstones: the budget
    follows the first one the cluster would raise.
    """
    on: list[tuple[int, str]] = []
    for name in TOMBSTONE_WARN_SETTINGS:
        try:
            value = int(str(settings[name]))
        except (KeyError, ValueError):
            continue
        if value > 0:
            on.append((value, name))
    return min(on) if on else None


class FolderDeletes:
    """Row, range and partition deletes of the folders table at a timestamp."""

    def __init__(self, requests: CassandraRequests) -> None:
        self.requests = requests
        c = requests.cql
        p = requests.prepare
        head = f"DELETE FROM {c.folders} USING TIMESTAMP ? WHERE"
        self.row_delete = p(f"{head} {c.row_eq}")
        # Bounds by value (min, max), which Cassandra applies in the column's own order: the
        # same slice whether the table clusters ascending or DESC (the bind sorts the bounds).
        self.range_delete = p(f"{head} {c.key_eq} AND {c.name} >= ? AND {c.name} <= ?")
        #: partition deletes, ``DELETE … USING TIMESTAMP ? WHERE … parent IN (…)``
        self.partition_delete = InStatements(p, f"{head} {c.parent_in}", ")")
        self.grace_stmt = p(
            "SELECT gc_grace_seconds FROM system_schema.tables"
            " WHERE keyspace_name = ? AND table_name = ?"
        )

    # -- deletes at a timestamp ---------------------------------------------------------------
    def row_deletes(self, rows: Sequence[FolderRow], timestamp_us: int) -> list[Request]:
        """One request per row: ``DELETE … USING TIMESTAMP ? WHERE … AND name = ?``."""
        key = self.requests.key_values
        return [(self.row_delete, (timestamp_us, *key(r.bucket, r.parent), r.name)) for r in rows]

    def range_deletes(self, ranges: Sequence[FolderRange], timestamp_us: int) -> list[Request]:
        """One request per range: ``… AND name >= ? AND name <= ?`` (bounds by value)."""
        key = self.requests.key_values
        return [
            (self.range_delete, (timestamp_us, *key(r.bucket, r.parent), r.low, r.high))
            for r in ranges
        ]

    def delete_folder_rows(
        self, rows: Sequence[FolderRow], timestamp_us: int
    ) -> list[BaseException | None]:
        return self.send(self.row_deletes(rows, timestamp_us))

    def delete_folder_ranges(
        self, ranges: Sequence[FolderRange], timestamp_us: int
    ) -> list[BaseException | None]:
        return self.send(self.range_deletes(ranges, timestamp_us))

    def send(self, requests: Sequence[Request]) -> list[BaseException | None]:
        """Run delete requests ``concurrency`` at a time; one outcome each (the deleter retries
        what failed: a delete at T is idempotent)."""
        return self.requests.outcomes(self.requests.run_statements(requests, "delete"))

    def delete_folder_partitions(
        self, partitions: Sequence[PartitionKey], timestamp_us: int
    ) -> list[BaseException | None]:
        """One request per up to PARTITION_DELETES_PER_REQUEST partitions of one bucket and one
        ring range::

            DELETE FROM folders USING TIMESTAMP ? WHERE bucket = ? AND parent IN (?, …)

        routed to a replica of the range (``routing_token``), which applies every partition
        deletion of it: a partition deletion costs a share of a request instead of a request.
        The ``IN`` list is padded to a power of two by repeating its last key (a partition
        deleted twice at T is deleted once), so few statements are prepared. Each partition's
        deletion is applied on its own, as in an unlogged batch (no batch log, and none of the
        batch warnings: a single statement is not a batch). A failed request reports every
        partition of it failed, and the deleter retries them (a deletion at T is idempotent).
        """
        items, members = self.partition_deletes(partitions, timestamp_us)
        results: list[BaseException | None] = [None] * len(partitions)
        for taken, outcome in zip(members, self.send(items), strict=True):
            for index in taken:
                results[index] = outcome
        return results

    def partition_deletes(
        self, partitions: Sequence[PartitionKey], timestamp_us: int
    ) -> tuple[list[Request], list[list[int]]]:
        """The ``IN`` requests of ``delete_folder_partitions``, each with the indexes (into
        ``partitions``) of the partitions it deletes."""
        at: dict[tuple[str, str], list[int]] = {}
        for index, key in enumerate(partitions):
            at.setdefault((key.bucket, key.parent), []).append(index)
        items: list[Request] = []
        members: list[list[int]] = []
        per = PARTITION_DELETES_PER_REQUEST
        for bucket, chunk in self.requests.range_chunks(list(at), per):
            keys, size = self.requests.in_keys(bucket, chunk, per)
            bound = self.partition_delete(size).bind((timestamp_us, *keys))
            bound.routing_token = chunk[0][0]
            items.append((bound, ()))
            members.append([i for _, _, parent in chunk for i in at[(bucket, parent)]])
        return items, members

    def delete_requests(
        self, actions: Sequence[DeleteAction], timestamp_us: int
    ) -> list[DeleteRequest]:
        """One asynchronous request per row or range delete, and one per ``IN`` request of
        partition deletions (as ``delete_folder_partitions`` groups them), the partition
        deletions first; the deleter keeps them in flight in a window of its own."""
        return window.delete_requests(
            self.requests.session,
            actions,
            timestamp_us,
            partition_deletes=self._bound_partition_deletes,
            row_delete=self.row_delete,
            range_delete=self.range_delete,
            key_values=self.requests.key_values,
        )

    def _bound_partition_deletes(
        self, partitions: Sequence[PartitionKey], timestamp_us: int
    ) -> list[tuple[Any, tuple[int, ...]]]:
        items, members = self.partition_deletes(partitions, timestamp_us)
        return [(bound, tuple(taken)) for (bound, _), taken in zip(items, members, strict=True)]

    def folders_grace_seconds(self) -> tuple[float, str]:
        cfg = self.requests.config
        rows = self.requests.execute(
            self.grace_stmt, (cfg.keyspace, cfg.tables.folders), "meta"
        ).current_rows
        if not rows:
            raise SchemaError(f"no table {cfg.keyspace}.{cfg.tables.folders} in system_schema")
        return float(rows[0][0]), "gc_grace_seconds"

    def tombstone_warn_threshold(self) -> tuple[int, str] | None:
        """The lowest tombstone warning the cluster has set: Cassandra 5.0's guardrail
        ``partition_tombstones_warn_threshold`` (off at -1 by default) or the read-time
        ``tombstone_warn_threshold``, from ``system_views.settings`` (Cassandra 4.0+)."""
        try:
            names = ", ".join(f"'{name}'" for name in TOMBSTONE_WARN_SETTINGS)
            query = self.requests.session.prepare(
                f"SELECT name, value FROM system_views.settings WHERE name IN ({names})"
            )
            rows = self.requests.session.execute(query, execution_profile="meta").current_rows
        except Exception:  # a node without virtual tables: the caller's default
            log.debug("system_views.settings unreadable", exc_info=True)
            return None
        found = lowest_warn_threshold({str(name): value for name, value in rows})
        return None if found is None else (found[0], f"{found[1]} in system_views.settings")
