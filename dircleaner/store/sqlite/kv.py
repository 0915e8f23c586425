"""The key–value table of the SQLite metastore: an expiry column, compare-and-set in one
``BEGIN IMMEDIATE`` transaction, expired rows invisible (and purged once per clean)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from dircleaner.errors import StoreReadOnly
from dircleaner.store.kv import ANY, Entry, Expect, check_write, prefix_end
from dircleaner.timeutil import now_us

_LIVE = "(expires_us IS NULL OR expires_us > ?)"


class SqliteKV:
    """``kv_read``, ``kv_write`` and ``kv_clear`` on the table ``kv``.

    Each call has a connection of its own, closed after it: the lease's heartbeat thread must
    never meet the job's open transaction on the store's shared one. A store opened for reading
    reads through its shared connection, and refuses every write (StoreReadOnly).
    """

    def __init__(self, path: Path, shared: sqlite3.Connection, *, read_only: bool) -> None:
        self._path, self._shared, self.read_only = path, shared, read_only

    @contextlib.contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            yield self._shared
            return
        conn = sqlite3.connect(self._path, isolation_level=None, timeout=60)
        try:
            conn.execute("PRAGMA busy_timeout=60000")
            yield conn
        finally:
            conn.close()

    def read(self, space: str, prefix: str = "", *, fresh: bool = False) -> list[Entry]:
        # Every read is fresh here: one file, every write committed before it returns. A value
        # of another SQLite type (written by hand or another tool) is read as its bytes.
        sql = f"SELECT key, CAST(value AS BLOB) FROM kv WHERE space = ? AND {_LIVE}"
        params: list[object] = [space, now_us()]
        if prefix:
            sql += " AND key >= ?"
            params.append(prefix)
            end = prefix_end(prefix)
            if end is not None:
                sql += " AND key < ?"
                params.append(end)
        with self._conn() as conn:
            try:
                rows = conn.execute(f"{sql} ORDER BY key", params).fetchall()
            except sqlite3.OperationalError:
                if self.read_only and not _has_kv(conn):
                    return []  # an older file opened for reading: nothing stored here yet
                raise
        return [
            Entry(str(key), bytes(value or b""))
            for key, value in rows
            if str(key).startswith(prefix)
        ]

    def write(
        self,
        space: str,
        key: str,
        value: bytes | None,
        *,
        ttl_s: float | None = None,
        expect: Expect = ANY,
    ) -> bool:
        check_write(space, key, value, expect)
        self._refuse_if_read_only()
        with self._conn() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                now = now_us()
                if expect is not ANY:
                    row = conn.execute(
                        "SELECT CAST(value AS BLOB) FROM kv"
                        f" WHERE space = ? AND key = ? AND {_LIVE}",
                        (space, key, now),
                    ).fetchone()
                    current = None if row is None else bytes(row[0] or b"")
                    if current != expect:
                        conn.execute("ROLLBACK")
                        return False
                if value is None:
                    conn.execute("DELETE FROM kv WHERE space = ? AND key = ?", (space, key))
                else:
                    expires = None if ttl_s is None else now + int(ttl_s * 1_000_000)
                    conn.execute(
                        "INSERT OR REPLACE INTO kv (space, key, value, expires_us)"
                        " VALUES (?, ?, ?, ?)",
                        (space, key, value, expires),
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return True

    def clear(self, space: str) -> None:
        if not space:
            raise ValueError("a key-value space cannot be empty")
        self._refuse_if_read_only()
        with self._conn() as conn:
            conn.execute("DELETE FROM kv WHERE space = ?", (space,))

    def _refuse_if_read_only(self) -> None:
        if self.read_only:
            raise StoreReadOnly(f"{self._path} is opened for reading only: a write was refused")

    def purge_expired(self, conn: sqlite3.Connection) -> None:
        """Drop expired rows (they are invisible already), inside the caller's transaction."""
        conn.execute("DELETE FROM kv WHERE expires_us <= ?", (now_us(),))


def _has_kv(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'kv'")
    return row.fetchone() is not None
