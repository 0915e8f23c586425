"""The writes an S3 front-end makes (``IndexWriter``): object and folder rows upserted at a
timestamp, object rows deleted. The generator, ``put``/``delete``, restore and tests use them;
the job never does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cassandra.query import BatchStatement, BatchType

from dircleaner.store.cassandra.requests import CassandraRequests, Params

#: generator batches: one partition per UNLOGGED batch, kept under batch_size_warn_threshold
BATCH_MAX_ROWS = 64
BATCH_MAX_BYTES = 4000


class IndexWrites:
    """Upserts and deletes of index rows, as the S3 front-end writes them."""

    def __init__(self, requests: CassandraRequests) -> None:
        self.requests = requests
        c = requests.cql
        p = requests.prepare
        marks = ", ".join("?" for _ in (*requests.key_columns, c.name))
        self.insert = {
            table: p(f"INSERT INTO {ref} ({c.key}, {c.name}) VALUES ({marks}) USING TIMESTAMP ?")
            for table, ref in (("objects", c.objects), ("folders", c.folders))
        }
        self.delete_object_row = p(f"DELETE FROM {c.objects} USING TIMESTAMP ? WHERE {c.row_eq}")

    def write_object_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        self._write("objects", [(b, p, n, timestamp_us) for b, p, n in rows])

    def write_folder_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        self._write("folders", [(b, p, n, timestamp_us) for b, p, n in rows])

    def delete_object_rows(
        self, rows: Sequence[tuple[str, str, str]], timestamp_us: int
    ) -> int | None:
        params = [(timestamp_us, *self.requests.key_values(b, p), n) for b, p, n in rows]
        self.requests.raise_first(
            self.requests.run_many(self.delete_object_row, params, "write", retry=True)
        )
        return None  # a blind delete: Cassandra does not say whether the row existed

    def _write(self, table: str, rows: Sequence[tuple[str, str, str, int]]) -> None:
        """Upsert rows, one UNLOGGED batch per run of rows in the same partition.

        Single-partition batches are applied as one mutation on one replica set; they stay
        under BATCH_MAX_ROWS/BATCH_MAX_BYTES so Cassandra's batch size warning stays quiet.
        """
        stmt = self.insert[table]
        items: list[tuple[Any, Params]] = []
        batch: Any = None
        batch_key: Params | None = None
        batch_rows = batch_bytes = 0
        for bucket, parent, name, ts in rows:
            key = self.requests.key_values(bucket, parent)
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
        self.requests.raise_first(self.requests.run_statements(items, "write", retry=True))
