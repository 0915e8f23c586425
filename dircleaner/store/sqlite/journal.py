"""The journal of dirty directories in the SQLite store, and the tables it comes with.

The ``journal`` and ``object_tombstones`` tables came after the others: a file made before them
gets them at its first write that needs them (a journal row, an object delete), never on
opening, so a command that only reads leaves an older file as it was.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence

from dircleaner.store.records import JournalEntry
from dircleaner.store.sqlite.database import Database
from dircleaner.store.sqlite.schema import JOURNAL_SCHEMA, JOURNAL_TABLES
from dircleaner.timeutil import now_us


class SqliteJournal:
    """``journal_write``, ``journal_read``, and whether the journal's tables exist yet."""

    def __init__(self, db: Database) -> None:
        self._db = db
        #: the journal's tables are known to exist (an older file gets them at its first
        #: write that needs them)
        self._tables = False

    def write(self, entries: Sequence[JournalEntry], ttl_s: float) -> None:
        expires = now_us() + int(ttl_s * 1_000_000)
        with self._db.transaction() as conn:
            self.create_tables(conn)
            conn.executemany(
                "INSERT OR REPLACE INTO journal (slot, shard, bucket, parent, deleted, expires_us)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(*entry, expires) for entry in entries],
            )

    def read(self, slot: int, bucket: str | None = None) -> Iterator[list[JournalEntry]]:
        if not self.tables_exist():
            return
        sql = (
            "SELECT slot, shard, bucket, parent, deleted FROM journal"
            " WHERE slot = ? AND expires_us > ?"
        )
        params: list[object] = [slot, now_us()]
        if bucket is not None:
            sql += " AND bucket = ?"
            params.append(bucket)
        for batch in self._db.stream(sql + " ORDER BY shard, bucket, parent", params):
            yield [JournalEntry(*row) for row in batch]  # type: ignore[arg-type]

    def tables_exist(self) -> bool:
        if not self._tables:
            have = {
                str(name)
                for (name,) in self._db.conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                )
            }
            self._tables = set(JOURNAL_TABLES) <= have
        return self._tables

    def create_tables(self, conn: sqlite3.Connection) -> None:
        """Within a write transaction: the journal's tables, in an older file that lacks them."""
        if not self.tables_exist():
            for statement in JOURNAL_SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            self._tables = True

    def purge_expired(self, conn: sqlite3.Connection, now: int, grace_s: float) -> None:
        """Within the caller's transaction: journal rows past their TTL, and object tombstones
        older than the grace period (what compaction purges on Cassandra)."""
        if self.tables_exist():
            conn.execute("DELETE FROM journal WHERE expires_us <= ?", (now,))
            conn.execute(
                "DELETE FROM object_tombstones WHERE written_us < ?",
                (now - int(grace_s * 1_000_000),),
            )
