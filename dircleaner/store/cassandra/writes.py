"""The store's writes: deletes at a timestamp, the partition rewrite, the bookkeeping tables.

Deletes carry the run's timestamp T (``USING TIMESTAMP``), so a row written after T survives
them. Besides the folders index this module writes the filters table (filter cells), the state
table (the run lease, small state) and the tombstone ledger, reads the budget's inputs
(``gc_grace_seconds``, ``tombstone_warn_threshold``), and holds the writes an S3 front-end or
the generator makes.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

from cassandra import ConsistencyLevel
from cassandra.query import UNSET_VALUE, BatchStatement, BatchType, PreparedStatement

from dircleaner.errors import RewriteUnsupported, SchemaError
from dircleaner.model import FolderRange, FolderRow, PartitionKey
from dircleaner.store.base import TombstoneCharge
from dircleaner.store.cassandra.mapping import _q, padded_in
from dircleaner.store.cassandra.requests import CassandraRequests, InStatements, Params
from dircleaner.store.cassandra.session import _ttl, map_error

log = logging.getLogger(__name__)

MAX_FILTER_CELL_BYTES = 1 << 20
#: filter cells are up to 1 MiB each: page them a few at a time, not fetch_size at a time
FILTER_FETCH_SIZE = 4
#: generator batches: one partition per UNLOGGED batch, kept under batch_size_warn_threshold
BATCH_MAX_ROWS = 64
BATCH_MAX_BYTES = 4000
#: partition deletes per request: one ``DELETE … WHERE parent IN (…)`` of partitions of one
#: bucket and ring range (not a batch: Cassandra's batch warnings do not apply)
PARTITION_DELETES_PER_REQUEST = 32
#: partitions per read of the tombstone ledger (one request per chunk, not per partition)
LEDGER_READ_KEYS = 64


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
    """The writes of the ``Store`` protocol and the tables the job keeps its own state in."""

    _delete_folder_row: PreparedStatement
    _delete_folder_range: PreparedStatement
    #: partition deletes, ``DELETE … USING TIMESTAMP ? WHERE … parent IN (…)``
    _partition_delete: InStatements
    _delete_object_row: PreparedStatement
    _insert: dict[str, PreparedStatement]
    _put_cell: PreparedStatement
    _get_cells: PreparedStatement
    _get_meta_cells: PreparedStatement
    _list_parts: PreparedStatement
    _delete_part: PreparedStatement
    _put_state: PreparedStatement
    _get_state: PreparedStatement
    _lease_take: PreparedStatement
    _lease_replace: PreparedStatement
    _lease_drop: PreparedStatement
    _ledger_put: PreparedStatement
    #: the ledger's IN reads of many partitions' charges
    _ledger_read: InStatements
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
        at: dict[tuple[str, str], list[int]] = {}
        for index, key in enumerate(partitions):
            at.setdefault((key.bucket, key.parent), []).append(index)
        items: list[tuple[Any, Params]] = []
        members: list[list[int]] = []
        for bucket, chunk in self._range_chunks(list(at), PARTITION_DELETES_PER_REQUEST):
            keys, size = self._in_keys(bucket, chunk, PARTITION_DELETES_PER_REQUEST)
            bound = self._partition_delete(size).bind((timestamp_us, *keys))
            bound.routing_token = chunk[0][0]
            items.append((bound, ()))
            members.append([i for _, _, parent in chunk for i in at[(bucket, parent)]])
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

    def replace_lease(self, name: str, holder: str, owner: str, ttl_s: float) -> bool:
        # A compare-and-set on the holder's id (renewing: on our own).
        row = self._lease(self._lease_replace, (_ttl(ttl_s), owner, f"lease|{name}", holder))
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
        self._raise_first(self._run_many(self._ledger_put, params, "meta", retry=True))

    def tombstones_charged(
        self, partitions: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        """The ledger's live charges of ``partitions``, LEDGER_READ_KEYS partitions per read.

        One read per chunk of one bucket's partitions, ``concurrency`` in flight::

            SELECT parent, generation, charge, cost FROM ledger WHERE bucket = ? AND parent IN (…)

        (a short chunk padded to a power of two by repeating its last key, as the re-check
        pads). Each charge is counted once by its key, so a repeated partition cannot count
        twice; a chunk's answer is read to its last page.
        """
        parents_of: dict[str, list[str]] = {}
        for bucket, parent in dict.fromkeys(partitions):
            parents_of.setdefault(bucket, []).append(parent)
        items: list[tuple[Any, Params]] = []
        for bucket, parents in parents_of.items():
            for start in range(0, len(parents), LEDGER_READ_KEYS):
                padded = padded_in(parents[start : start + LEDGER_READ_KEYS], LEDGER_READ_KEYS)
                items.append((self._ledger_read(len(padded)), (bucket, *padded)))
        results = self._run_statements(items, "meta", retry=True)
        self._raise_first(results)
        charges: dict[tuple[str, str, str, str], int] = {}
        for (_stmt, params), result in zip(items, results, strict=True):
            for parent, generation, charge, cost in result:  # every page
                charges[(str(params[0]), parent, generation, charge)] = int(cost)
        out: dict[tuple[str, str], int] = {}
        for (bucket, parent, _generation, _charge), cost in charges.items():
            out[(bucket, parent)] = out.get((bucket, parent), 0) + cost
        return {key: total for key, total in out.items() if total}

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
