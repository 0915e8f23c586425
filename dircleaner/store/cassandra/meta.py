"""The job's own tables: filter cells, the run lease and small state, the tombstone ledger.

The filters table holds each filter part's cells; the state table holds small state and the
run lease (a row taken with a lightweight transaction and kept alive by a TTL); the ledger holds
the tombstones charged to each folders partition, each charge expiring with a TTL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from cassandra import ConsistencyLevel
from cassandra.query import PreparedStatement

from dircleaner.store.base import TombstoneCharge
from dircleaner.store.cassandra.mapping import _q, padded_in
from dircleaner.store.cassandra.requests import CassandraRequests, InStatements, Params
from dircleaner.store.cassandra.session import _ttl

MAX_FILTER_CELL_BYTES = 1 << 20
#: filter cells are up to 1 MiB each: page them a few at a time, not fetch_size at a time
FILTER_FETCH_SIZE = 4
#: partitions per read of the tombstone ledger (one request per chunk, not per partition)
LEDGER_READ_KEYS = 64


class CassandraMeta:
    """The filters, state and ledger tables, each statement prepared here."""

    def __init__(self, requests: CassandraRequests) -> None:
        self.requests = requests
        cfg = requests.config
        ks = _q(cfg.keyspace)
        filters = f"{ks}.{_q(cfg.tables.filters)}"
        state = f"{ks}.{_q(cfg.tables.state)}"
        ledger = f"{ks}.{_q(cfg.tables.ledger)}"
        p = self.requests.prepare
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
        self._lease_replace = p(
            f'UPDATE {state} USING TTL ? SET "value" = ? WHERE "key" = ? IF "value" = ?'
        )
        self._lease_drop = p(f'DELETE FROM {state} WHERE "key" = ? IF "value" = ?')
        self._ledger_put = p(
            f"INSERT INTO {ledger} (bucket, parent, generation, charge, cost)"
            " VALUES (?, ?, ?, ?, ?) USING TTL ?"
        )
        self._ledger_read = InStatements(
            p,
            f"SELECT parent, generation, charge, cost FROM {ledger}"
            " WHERE bucket = ? AND parent IN (",
            ")",
        )
        self._get_state = p(f'SELECT "value" FROM {state} WHERE "key" = ?')

    # -- filters table ----------------------------------------------------------------------------
    def put_filter_cell(self, generation: str, shard: int, seq: int, data: bytes) -> None:
        if len(data) > MAX_FILTER_CELL_BYTES:
            raise ValueError(f"filter cell of {len(data)} bytes exceeds 1 MiB")
        self.requests.execute(self._put_cell, (generation, shard, seq, data), "meta")

    def get_filter_cells(
        self, generation: str, shard: int, *, meta_only: bool = False
    ) -> dict[int, bytes]:
        stmt = self._get_meta_cells if meta_only else self._get_cells
        cells: dict[int, bytes] = {}
        for page in self.requests.pages(stmt, (generation, shard), "meta", FILTER_FETCH_SIZE):
            cells.update((int(seq), bytes(data)) for seq, data in page)
        return cells

    def list_filter_parts(self) -> list[tuple[str, int]]:
        parts = {
            (str(gen), int(shard))
            for page in self.requests.pages(
                self._list_parts, (), "meta", self.requests.config.fetch_size
            )
            for gen, shard in page
        }
        return sorted(parts)

    def delete_filter_generation(self, generation: str) -> None:
        shards = [shard for gen, shard in self.list_filter_parts() if gen == generation]
        for shard in shards:
            self.requests.execute(self._delete_part, (generation, shard), "meta")

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
        rows = self.requests.execute(bound, None, "lease").current_rows
        return None if not rows else cast(str | None, rows[0][0])

    def _lease(self, stmt: PreparedStatement, params: Params) -> tuple[Any, ...]:
        rows = self.requests.execute(stmt, params, "lease").current_rows
        return tuple(rows[0])

    # -- the tombstone ledger ---------------------------------------------------------------------
    def charge_tombstones(self, charges: Sequence[TombstoneCharge], ttl_s: float) -> None:
        ttl = _ttl(ttl_s)
        params = [(*charge, ttl) for charge in charges]
        self.requests.raise_first(
            self.requests.run_many(self._ledger_put, params, "meta", retry=True)
        )

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
        results = self.requests.run_statements(items, "meta", retry=True)
        self.requests.raise_first(results)
        charges: dict[tuple[str, str, str, str], int] = {}
        for (_stmt, params), result in zip(items, results, strict=True):
            for parent, generation, charge, cost in result:  # every page
                charges[(str(params[0]), parent, generation, charge)] = int(cost)
        out: dict[tuple[str, str], int] = {}
        for (bucket, parent, _generation, _charge), cost in charges.items():
            out[(bucket, parent)] = out.get((bucket, parent), 0) + cost
        return {key: total for key, total in out.items() if total}

    # -- small state ------------------------------------------------------------------------------
    def put_state(self, key: str, value: str) -> None:
        self.requests.execute(self._put_state, (key, value), "meta")

    def get_state(self, key: str) -> str | None:
        rows = self.requests.execute(self._get_state, (key,), "meta").current_rows
        return None if not rows else cast(str | None, rows[0][0])
