"""The SQLite store's index writes: the S3 front-end's (``IndexWriter``) and the generator's
bulk inserts of pre-tokenised rows (``BulkLoader``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from dircleaner.store.records import murmur_token
from dircleaner.store.sqlite.database import Database
from dircleaner.store.sqlite.journal import SqliteJournal
from dircleaner.store.sqlite.schema import CACHE_KIB
from dircleaner.timeutil import now_us


class IndexWrites:
    """``write_object_rows``, ``write_folder_rows``, ``delete_object_rows``, ``bulk_insert`` and
    ``bulk_loading``."""

    def __init__(self, db: Database, journal: SqliteJournal) -> None:
        self._db = db
        self._journal = journal

    def write_object_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        self._upsert("objects", rows, timestamp_us)

    def write_folder_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        self._upsert("folders", rows, timestamp_us)

    def _upsert(self, table: str, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        # The newer write wins, as in Cassandra; an older write never rolls a row's time back.
        sql = (
            f"INSERT INTO {table} (token, bucket, parent, name, ts) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT DO UPDATE SET ts = max(ts, excluded.ts)"
        )
        with self._db.transaction() as conn:
            conn.executemany(sql, [(murmur_token(b, p), b, p, n, timestamp_us) for b, p, n in rows])

    def delete_object_rows(
        self, rows: Sequence[tuple[str, str, str]], timestamp_us: int
    ) -> int | None:
        keyed = [(murmur_token(b, p), b, p, n) for b, p, n in rows]
        with self._db.transaction() as conn:
            cursor = conn.executemany(
                "DELETE FROM objects WHERE token = ? AND bucket = ? AND parent = ? AND name = ?"
                " AND ts <= ?",
                [(*key, timestamp_us) for key in keyed],
            )
            removed = max(cursor.rowcount, 0)
            # A tombstone per row, as Cassandra writes one whether the row existed or not.
            self._journal.create_tables(conn)
            written = now_us()
            conn.executemany(
                "INSERT OR REPLACE INTO object_tombstones (token, bucket, parent, name, written_us)"
                " VALUES (?, ?, ?, ?, ?)",
                [(*key, written) for key in keyed],
            )
            return removed

    def bulk_insert(self, table: str, rows: Sequence[tuple[int, str, str, str, int]]) -> None:
        """Insert pre-tokenised ``(token, bucket, parent, name, ts)`` rows (generator fast path)."""
        if table not in ("objects", "folders"):
            raise ValueError(f"unknown table {table!r}")
        with self._db.transaction() as conn:
            conn.executemany(
                f"INSERT OR IGNORE INTO {table} (token, bucket, parent, name, ts)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )

    @contextlib.contextmanager
    def bulk_loading(self) -> Iterator[None]:
        """Trade durability for speed while a generator fills the store; restores WAL after.

        No journal and no fsync: a crash mid-load leaves a corrupt file (regenerate it). Needs the
        only connection to the file (leaving WAL mode checkpoints it).
        """
        conn = self._db.conn
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-262144")
        try:
            yield
        finally:
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA journal_mode=WAL")
