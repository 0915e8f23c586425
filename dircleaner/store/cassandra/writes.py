"""The store's writes: deletes at a timestamp, the partition rewrite, the index writes.

Deletes carry the run's timestamp T (``USING TIMESTAMP``), so a row written after T survives
them. Besides the folders index this module reads the budget's inputs (``gc_grace_seconds``,
``tombstone_warn_threshold``) and holds the writes an S3 front-end or the generator makes. The
job's own tables (filter cells, lease, state, ledger) are in ``meta.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from cassandra.query import UNSET_VALUE, BatchStatement, BatchType, PreparedStatement

from dircleaner.errors import RewriteUnsupported, SchemaError
from dircleaner.model import DeleteAction, FolderRange, FolderRow, PartitionKey
from dircleaner.store.base import DeleteRequest
from dircleaner.store.cassandra import window
from dircleaner.store.cassandra.mapping import _q
from dircleaner.store.cassandra.requests import CassandraRequests, InStatements, Params
from dircleaner.store.cassandra.session import map_error

log = logging.getLogger(__name__)

#: generator batches: one partition per UNLOGGED batch, kept under batch_size_warn_threshold
BATCH_MAX_ROWS = 64
BATCH_MAX_BYTES = 4000
#: partition deletes per request: one ``DELETE … WHERE parent IN (…)`` of partitions of one
#: bucket and ring range (not a batch: Cassandra's batch warnings do not apply)
PARTITION_DELETES_PER_REQUEST = 32


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


class CassandraWrites(CassandraRequests):
    """The writes of the ``Store`` protocol on the index tables."""

    _delete_folder_row: PreparedStatement
    _delete_folder_range: PreparedStatement
    #: partition deletes, ``DELETE … USING TIMESTAMP ? WHERE … parent IN (…)``
    _partition_delete: InStatements
    _delete_object_row: PreparedStatement
    _insert: dict[str, PreparedStatement]
    _grace: PreparedStatement
    #: the partition rewrite's read and write, prepared from the table metadata on first use
    _rewrite_statements: tuple[PreparedStatement, PreparedStatement, int] | None

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
        statements = self._partition_deletes(partitions, timestamp_us)
        items: list[tuple[Any, Params]] = [(bound, ()) for bound, _ in statements]
        results: list[BaseException | None] = [None] * len(partitions)
        for (_, taken), outcome in zip(
            statements, self._run_statements(items, "delete"), strict=True
        ):
            error = map_error(outcome) if isinstance(outcome, BaseException) else None
            for index in taken:
                results[index] = error
        return results

    def _partition_deletes(
        self, partitions: Sequence[PartitionKey], timestamp_us: int
    ) -> list[tuple[Any, tuple[int, ...]]]:
        """The bound ``DELETE … parent IN (…)`` requests of ``partitions``, each with the
        indexes of the partitions it deletes."""
        at: dict[tuple[str, str], list[int]] = {}
        for index, key in enumerate(partitions):
            at.setdefault((key.bucket, key.parent), []).append(index)
        statements: list[tuple[Any, tuple[int, ...]]] = []
        for bucket, chunk in self._range_chunks(list(at), PARTITION_DELETES_PER_REQUEST):
            keys, size = self._in_keys(bucket, chunk, PARTITION_DELETES_PER_REQUEST)
            bound = self._partition_delete(size).bind((timestamp_us, *keys))
            bound.routing_token = chunk[0][0]
            taken = tuple(i for _, _, parent in chunk for i in at[(bucket, parent)])
            statements.append((bound, taken))
        return statements

    def delete_requests(
        self, actions: Sequence[DeleteAction], timestamp_us: int
    ) -> list[DeleteRequest]:
        """One asynchronous request per row or range delete, and one per ``IN`` request of
        partition deletions (as ``delete_folder_partitions`` groups them), the partition
        deletions first; the deleter keeps them in flight in a window of its own."""
        return window.delete_requests(
            self._session,
            actions,
            timestamp_us,
            partition_deletes=self._partition_deletes,
            row_delete=self._delete_folder_row,
            range_delete=self._delete_folder_range,
            key_values=self._key_values,
        )

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
        self._raise_first(self._run_many(write, params, "delete", retry=True))
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

    def folders_grace_seconds(self) -> tuple[float, str]:
        cfg = self.config
        rows = self._execute(self._grace, (cfg.keyspace, cfg.tables.folders), "meta").current_rows
        if not rows:
            raise SchemaError(f"no table {cfg.keyspace}.{cfg.tables.folders} in system_schema")
        return float(rows[0][0]), "gc_grace_seconds"

    def tombstone_warn_threshold(self) -> tuple[int, str] | None:
        """The lowest tombstone warning the cluster has set: Cassandra 5.0's guardrail
        ``partition_tombstones_warn_threshold`` (off at -1 by default) or the read-time
        ``tombstone_warn_threshold``, from ``system_views.settings`` (Cassandra 4.0+)."""
        try:
            names = ", ".join(f"'{name}'" for name in TOMBSTONE_WARN_SETTINGS)
            query = self._session.prepare(
                f"SELECT name, value FROM system_views.settings WHERE name IN ({names})"
            )
            rows = self._session.execute(query, execution_profile="meta").current_rows
        except Exception:  # a node without virtual tables: the caller's default
            log.debug("system_views.settings unreadable", exc_info=True)
            return None
        found = lowest_warn_threshold({str(name): value for name, value in rows})
        return None if found is None else (found[0], f"{found[1]} in system_views.settings")

    # -- the S3 front-end's writes ----------------------------------------------------------------
    def write_object_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        self._write("objects", [(b, p, n, timestamp_us) for b, p, n in rows])

    def write_folder_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        self._write("folders", [(b, p, n, timestamp_us) for b, p, n in rows])

    def delete_object_rows(
        self, rows: Sequence[tuple[str, str, str]], timestamp_us: int
    ) -> int | None:
        params = [(timestamp_us, *self._key_values(b, p), n) for b, p, n in rows]
        self._raise_first(self._run_many(self._delete_object_row, params, "write", retry=True))
        return None  # a blind delete: Cassandra does not say whether the row existed

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
        self._raise_first(self._run_statements(items, "write", retry=True))
