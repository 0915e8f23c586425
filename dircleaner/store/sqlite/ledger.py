"""The tombstone ledger of the SQLite store: what each run charged each folders partition.

A table keyed by partition (token, bucket, parent), then generation and charge, each charge with
its expiry; read a chunk of partitions per statement, summed in SQL (``store.base`` says why the
ledger is a primitive of its own rather than key-value bookkeeping).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from dircleaner.store.records import TombstoneCharge, murmur_token
from dircleaner.store.sqlite.database import Database
from dircleaner.store.sqlite.reading import ReadingConnection
from dircleaner.timeutil import now_us

#: ledger lookups per statement
LEDGER_CHUNK = 500


class SqliteLedger:
    """``charge_tombstones`` and ``tombstones_charged`` on the table ``ledger``."""

    def __init__(self, db: Database, reading: ReadingConnection | None) -> None:
        self._db = db
        #: opened for a command that only reads: what the file's ledger looks like
        self._reading = reading

    def charge(self, charges: Sequence[TombstoneCharge], ttl_s: float) -> None:
        expires = now_us() + int(ttl_s * 1_000_000)
        with self._db.transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO ledger"
                " (token, bucket, parent, generation, charge, cost, expires_us)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(murmur_token(c.bucket, c.parent), *c, expires) for c in charges],
            )

    def charged(self, partitions: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        now = now_us()
        # Opened for reading, a file of an earlier release keeps its ledger as it was: none yet,
        # or one not keyed by token (a command that writes brings it up to date).
        columns = None if self._reading is None else self._reading.ledger_columns
        keyed = columns is None or "token" in columns
        if not (keyed or columns):
            return out
        for start in range(0, len(partitions), LEDGER_CHUNK):
            chunk = partitions[start : start + LEDGER_CHUNK]
            key = (
                "token = ? AND bucket = ? AND parent = ?" if keyed else "bucket = ? AND parent = ?"
            )
            where = " OR ".join(f"({key})" for _ in chunk)
            params: list[object] = [
                v
                for bucket, parent in chunk
                for v in ((murmur_token(bucket, parent),) if keyed else ()) + (bucket, parent)
            ]
            rows = self._db.conn.execute(
                f"SELECT bucket, parent, sum(cost) FROM ledger WHERE ({where})"
                " AND expires_us > ? GROUP BY bucket, parent",
                [*params, now],
            )
            out.update(((str(b), str(p)), int(c)) for b, p, c in rows)
        return out

    @staticmethod
    def purge_expired(conn: sqlite3.Connection, now: int) -> None:
        """Within the caller's transaction: the charges past their TTL."""
        conn.execute("DELETE FROM ledger WHERE expires_us <= ?", (now,))
