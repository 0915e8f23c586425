"""The one connection every part of the SQLite store shares, and what it knows of the file.

Write transactions (``BEGIN IMMEDIATE``), reads through a small page cache, batched streams, the
temporary key table the set-based reads join on, the file's text encoding, and the grace period
a tombstone counts for (no ``gc_grace_seconds`` to read here). The parts of the store (``scans``,
``reads``, ``deletes``, ``ledger``, ``journal``, ``writes``) each hold their own SQL and send it
through this one object, as the Cassandra store's parts send theirs through ``requests``.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dircleaner.store.base import DEFAULT_GRACE_S
from dircleaner.store.sqlite.schema import CACHE_KIB, SCAN_CACHE_KIB
from dircleaner.timeutil import now_us

#: rows per batch of a stream (a scan, the journal's slot)
SCAN_BATCH = 10_000
#: keys per statement of a set-based read (bounds the temporary table)
RECHECK_CHUNK = 100_000


class Database:
    """The store's connection to the file at ``path``."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn
        #: how long a tombstone counts against its partition (no gc_grace_seconds to read here)
        self.grace_s = DEFAULT_GRACE_S
        self._encoding: str | None = None
        #: reads open through ``read_once`` (a scan generator may be left open across others)
        self._read_depth = 0

    def transaction(self) -> Transaction:
        """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on error."""
        return Transaction(self.conn)

    def grace_cutoff_us(self) -> int:
        """The write time before which a tombstone no longer counts (compaction purged it)."""
        return now_us() - int(self.grace_s * 1_000_000)

    def utf8(self) -> bool:
        """Whether the file stores text as UTF-8 (then a BLOB cast of text is its UTF-8)."""
        if self._encoding is None:
            (self._encoding,) = self.conn.execute("PRAGMA encoding").fetchone()
        return self._encoding == "UTF-8"

    @contextlib.contextmanager
    def read_once(self) -> Iterator[None]:
        """Through a small page cache, as the sizing count: for reads that visit each page once
        (the slice scans, the re-check's probes in key order). Shrinking the cache also lets go
        of the pages an earlier read left in it; the big one is back after the last of the reads
        open on the connection ends (they interleave: a scan's generator may be left open while
        another read starts and ends), so the outermost shrinks it and the outermost restores it."""
        if self._read_depth == 0:
            self.conn.execute(f"PRAGMA cache_size=-{SCAN_CACHE_KIB}")
        self._read_depth += 1
        try:
            yield
        finally:
            self._read_depth -= 1
            if self._read_depth == 0:
                # A stream abandoned by an error may be finalised after the store was closed.
                with contextlib.suppress(sqlite3.ProgrammingError):
                    self.conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")

    def stream(self, sql: str, params: Sequence[object]) -> Iterator[list[tuple[object, ...]]]:
        """``sql``'s rows in batches of ``SCAN_BATCH``, through the small cache."""
        with self.read_once():
            cursor = self.conn.execute(sql, params)
            try:
                while batch := cursor.fetchmany(SCAN_BATCH):
                    yield batch
            finally:
                with contextlib.suppress(sqlite3.ProgrammingError):
                    cursor.close()

    def keyed_query(
        self, keys: list[tuple[int, str, str, str]], sql: str, params: Sequence[object]
    ) -> Iterator[tuple[Any, ...]]:
        """``sql``'s rows over ``keys`` (token, bucket, parent, name), loaded a chunk at a time
        in key order into ``temp.dircleaner_keys``, in a deferred transaction (only the temp
        table is written: the metastore's writers are never locked out)."""
        conn = self.conn
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS dircleaner_keys (token INTEGER NOT NULL,"
            " bucket TEXT NOT NULL, parent TEXT NOT NULL, name TEXT NOT NULL)"
        )
        try:
            with self.read_once():
                for start in range(0, len(keys), RECHECK_CHUNK):
                    chunk = sorted(keys[start : start + RECHECK_CHUNK])
                    conn.execute("BEGIN")
                    try:
                        conn.execute("DELETE FROM temp.dircleaner_keys")
                        conn.executemany(
                            "INSERT INTO temp.dircleaner_keys VALUES (?, ?, ?, ?)", chunk
                        )
                        found = conn.execute(sql, params).fetchall()
                    finally:
                        conn.execute("COMMIT")
                    yield from found
        finally:
            conn.execute("DROP TABLE IF EXISTS temp.dircleaner_keys")


class Transaction:
    """BEGIN IMMEDIATE … COMMIT, rolled back on error."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self._conn.execute("BEGIN IMMEDIATE")
        return self._conn

    def __exit__(self, *exc_info: object) -> None:
        self._conn.execute("COMMIT" if exc_info[0] is None else "ROLLBACK")
