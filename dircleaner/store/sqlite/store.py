"""The embedded SQLite metastore: zero set-up, real SQL file, WAL, Cassandra's delete semantics.

Rows carry their write timestamp in µs and are ordered by a partition token, as Cassandra orders
them; a delete "at T" removes only rows written at or before T, and is recorded as a tombstone in
a ledger so tests can count tombstones per partition the way Cassandra's tracing does. The file,
its schema and opening it are in ``schema.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sqlite3
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dircleaner.errors import SchemaError, StoreUrlError
from dircleaner.model import FolderRange, FolderRow, PartitionKey, Shard
from dircleaner.paths import dir_of_row, folder_row_of
from dircleaner.scanrate import ScanThrottle, paced
from dircleaner.store.base import DEFAULT_GRACE_S, PARTITION_PAGE_ROWS, Store
from dircleaner.store.kv import ANY, Entry, Expect
from dircleaner.store.records import (
    DirCountEstimate,
    JournalEntry,
    ObjectProbe,
    StoreTraits,
    TombstoneCharge,
    murmur_token,
)
from dircleaner.store.sqlite.kv import SqliteKV
from dircleaner.store.sqlite.reading import ReadingConnection, open_for_reading
from dircleaner.store.sqlite.schema import (
    CACHE_KIB,
    JOURNAL_SCHEMA,
    JOURNAL_TABLES,
    SCAN_CACHE_KIB,
    open_database,
    path_from_url,
)
from dircleaner.timeutil import now_us

if TYPE_CHECKING:  # numpy is imported only by the commands that build or sweep
    from dircleaner.store.packed import FolderKeys, ObjectKeys

log = logging.getLogger(__name__)


SCAN_BATCH = 10_000
#: candidate directories re-checked per SQLite statement (bounds the temporary table)
RECHECK_CHUNK = 100_000
_RECHECK_PROBE = (
    "SELECT bucket, parent FROM temp.dircleaner_recheck AS r WHERE EXISTS"
    " (SELECT 1 FROM objects AS o"
    "  WHERE o.token = r.token AND o.bucket = r.bucket AND o.parent = r.parent)"
)

_WALK_READ = (
    "SELECT f.token, f.bucket, f.parent, f.name FROM temp.dircleaner_walk AS w"
    " CROSS JOIN folders AS f"
    " ON f.token = w.token AND f.bucket = w.bucket AND f.parent = w.parent"
    " ORDER BY w.rowid, f.name"
)

#: ledger lookups per statement
LEDGER_CHUNK = 500


class SqliteStore(Store):
    """Metastore in one SQLite file; an ``IndexWriter``, ``BulkLoader`` and
    ``TombstoneCounter`` too."""

    # One writer and no replicas: spreading buys nothing, and deletes in key order dirty each
    # B-tree page once instead of once per round-robin pass (2.5x faster at 30M directories).
    traits = StoreTraits(scheme="sqlite", cheap_exact_count=True, spread_deletes=False)

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        #: how long a tombstone counts against its partition (no gc_grace_seconds to read here)
        self.grace_s = DEFAULT_GRACE_S
        self.rows_removed: int | None = 0
        self._encoding: str | None = None
        self._kv = SqliteKV(path, conn, read_only=False)
        #: reads open through ``_read_once`` (a scan generator may be left open across others)
        self._read_depth = 0
        #: opened for a command that only reads: how (None: opening brought the file up to date)
        self.reading: ReadingConnection | None = None
        #: the journal's tables are known to exist (an older file gets them at its first
        #: write that needs them)
        self._journal_tables = False

    @classmethod
    def open(
        cls,
        url: str,
        *,
        config_path: Path | None = None,
        create: bool = False,
        force: bool = False,
        read_only: bool = False,
    ) -> SqliteStore:
        path = path_from_url(url)
        if read_only and not create:
            return cls._for_reading(path, url, config_path)
        conn, created = open_database(path, create=create, force=force)
        store = cls(path, conn)
        store.url, store.config_path = url, config_path
        store.created = tuple(created)
        return store

    @classmethod
    def _for_reading(cls, path: Path, url: str, config_path: Path | None) -> SqliteStore:
        """Opened for a command that only reads: nothing is written, no file is left beside
        it, and every write fails (``reading.open_for_reading`` says how)."""
        opened = open_for_reading(path)
        store = cls(path, opened.conn)
        store.url, store.config_path = url, config_path
        store.traits = dataclasses.replace(store.traits, read_only=True)
        store._kv.read_only = True
        store.reading = opened
        return store

    @classmethod
    def shown(cls, url: str) -> str:
        """The URL of the file's absolute path: which file, wherever the command ran."""
        try:
            return f"sqlite:///{path_from_url(url).resolve()}"
        except (StoreUrlError, OSError):
            return super().shown(url)

    def location_id(self) -> str:
        return str(self.path.resolve())

    def close(self) -> None:
        if self.reading is not None:
            self.reading.close()
        else:
            self._conn.close()

    # -- scans ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _read_once(self) -> Iterator[None]:
        """Through a small page cache, as the sizing count: for reads that visit each page once
        (the slice scans, the re-check's probes in key order). Shrinking the cache also lets go
        of the pages an earlier read left in it; the big one is back after the last of the reads
        open on the connection ends (they interleave: a scan's generator may be left open while
        another read starts and ends), so the outermost shrinks it and the outermost restores it."""
        if self._read_depth == 0:
            self._conn.execute(f"PRAGMA cache_size=-{SCAN_CACHE_KIB}")
        self._read_depth += 1
        try:
            yield
        finally:
            self._read_depth -= 1
            if self._read_depth == 0:
                # A stream abandoned by an error may be finalised after the store was closed.
                with contextlib.suppress(sqlite3.ProgrammingError):
                    self._conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")

    def _stream(self, sql: str, params: Sequence[object]) -> Iterator[list[tuple[object, ...]]]:
        with self._read_once():
            cursor = self._conn.execute(sql, params)
            try:
                while batch := cursor.fetchmany(SCAN_BATCH):
                    yield batch
            finally:
                with contextlib.suppress(sqlite3.ProgrammingError):
                    cursor.close()

    def _scan_slice(
        self, select: str, order: str, shard: Shard, bucket: str | None, group: bool = False
    ) -> Iterator[list[tuple[object, ...]]]:
        lo, hi = shard.token_range()
        sql = f"{select} WHERE token BETWEEN ? AND ?"
        params: list[object] = [lo, hi]
        if bucket is not None:
            sql += " AND bucket = ?"
            params.append(bucket)
        if group:
            sql += f" GROUP BY {order}"
        return self._stream(f"{sql} ORDER BY {order}", params)

    def _utf8(self) -> bool:
        """Whether the file stores text as UTF-8 (then a BLOB cast of text is its UTF-8)."""
        if self._encoding is None:
            (self._encoding,) = self._conn.execute("PRAGMA encoding").fetchone()
        return self._encoding == "UTF-8"

    def scan_object_partitions(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[list[PartitionKey]]:
        select = "SELECT DISTINCT token, bucket, parent FROM objects"
        scan = self._scan_slice(select, "token, bucket, parent", shard, bucket)
        for batch in paced(scan, throttle):
            yield [PartitionKey(*row) for row in batch]  # type: ignore[arg-type]

    def scan_folder_rows(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[list[FolderRow]]:
        select = "SELECT token, bucket, parent, name FROM folders"
        scan = self._scan_slice(select, "token, bucket, parent, name", shard, bucket)
        for batch in paced(scan, throttle):
            yield [FolderRow(*row) for row in batch]  # type: ignore[arg-type]

    def scan_object_keys(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[ObjectKeys]:
        if not self._utf8():
            yield from super().scan_object_keys(shard, bucket, throttle)
            return
        from dircleaner.store.packed import ObjectKeys

        # SQLite lays out each key (one BLOB per partition): no string per row in Python.
        select = "SELECT CAST(bucket || char(0) || parent AS BLOB) FROM objects"
        scan = self._scan_slice(select, "token, bucket, parent", shard, bucket, True)
        for batch in paced(scan, throttle):
            yield ObjectKeys.of_keys([key for (key,) in batch])  # type: ignore[misc]

    def scan_folder_keys(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[FolderKeys]:
        if not self._utf8():
            yield from super().scan_folder_keys(shard, bucket, throttle)
            return
        from dircleaner.filter.bloom import compiled
        from dircleaner.store.packed import FolderKeys

        # Each row's filter key laid out by SQLite; where its partition's key ends in it, from
        # its token (that key's hash) by the kernels, else from the name's length in bytes.
        kernels = compiled()
        key = "CAST(bucket || char(0) || parent || name || '/' AS BLOB)"
        names = "" if kernels else ", length(CAST(name AS BLOB))"
        select = f"SELECT token, {key}{names} FROM folders"
        scan = self._scan_slice(select, "token, bucket, parent, name", shard, bucket)
        for batch in paced(scan, throttle):
            columns = zip(*batch, strict=True)
            if kernels is None:
                yield FolderKeys.of_columns(*columns)
            elif (packed := FolderKeys.of_tokens(kernels.token_prefix_ends, *columns)) is None:
                raise SchemaError(f"{self.path}: a folders row's token is not its partition's")
            else:
                yield packed

    def estimate_directory_count(self, bucket: str | None = None) -> DirCountEstimate:
        # Through the small cache: the count reads every page of the table once, and a full
        # cache would be dropped anyway at this connection's next read after the workers write.
        with self._read_once():
            if bucket is None:
                (count,) = self._conn.execute("SELECT count(*) FROM folders").fetchone()
            else:
                (count,) = self._conn.execute(
                    "SELECT count(*) FROM folders WHERE bucket = ?", (bucket,)
                ).fetchone()
        return DirCountEstimate(
            int(count), "exact count of folder rows", exact=True, folder_rows=int(count)
        )

    # -- one folders partition ----------------------------------------------------------------
    def folder_partition_pages(
        self, bucket: str, parent: str, page_rows: int = PARTITION_PAGE_ROWS
    ) -> Iterator[list[FolderRow]]:
        """Keyset paging: each page starts after the last name of the one before."""
        if page_rows < 1:
            raise ValueError("page_rows must be >= 1")
        token = murmur_token(bucket, parent)
        after: str | None = None
        while True:
            if after is None:
                sql = "SELECT name FROM folders WHERE token = ? AND bucket = ? AND parent = ?"
                params: tuple[object, ...] = (token, bucket, parent, page_rows)
            else:
                sql = (
                    "SELECT name FROM folders WHERE token = ? AND bucket = ? AND parent = ?"
                    " AND name > ?"
                )
                params = (token, bucket, parent, after, page_rows)
            names = [
                str(row[0]) for row in self._conn.execute(f"{sql} ORDER BY name LIMIT ?", params)
            ]
            if not names:
                return
            yield [FolderRow(token, bucket, parent, name) for name in names]
            if len(names) < page_rows:
                return
            after = names[-1]

    def folder_partitions(
        self, keys: Sequence[tuple[str, str]]
    ) -> Iterator[tuple[tuple[str, str], list[FolderRow]]]:
        """One set-based query per chunk of keys instead of a Python round trip per partition.

        The keys go into a temporary table in token order, which drives the join (``CROSS JOIN``
        keeps SQLite from scanning the folders table instead), so the reads walk the B-tree in
        key order.
        """
        conn = self._conn
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS dircleaner_walk"
            " (token INTEGER NOT NULL, bucket TEXT NOT NULL, parent TEXT NOT NULL)"
        )
        try:
            for start in range(0, len(keys), RECHECK_CHUNK):
                chunk = keys[start : start + RECHECK_CHUNK]
                probe = sorted(
                    (murmur_token(bucket, parent), bucket, parent) for bucket, parent in chunk
                )
                found: dict[tuple[str, str], list[FolderRow]] = {}
                conn.execute("BEGIN")  # deferred: only the temp table is written
                try:
                    conn.execute("DELETE FROM temp.dircleaner_walk")
                    conn.executemany("INSERT INTO temp.dircleaner_walk VALUES (?, ?, ?)", probe)
                    for token, bucket, parent, name in conn.execute(_WALK_READ):
                        found.setdefault((bucket, parent), []).append(
                            FolderRow(token, bucket, parent, name)
                        )
                finally:
                    conn.execute("COMMIT")
                for key in chunk:
                    yield key, found.pop(key, [])
        finally:
            conn.execute("DROP TABLE IF EXISTS temp.dircleaner_walk")

    def has_folder_row(self, bucket: str, directory: str) -> bool:
        parent, name = folder_row_of(directory)
        row = self._conn.execute(
            "SELECT 1 FROM folders WHERE token = ? AND bucket = ? AND parent = ? AND name = ?",
            (murmur_token(bucket, parent), bucket, parent, name),
        ).fetchone()
        return row is not None

    def bucket_names(self, within_s: float | None = None) -> tuple[list[str], bool]:
        rows = self._conn.execute(
            "SELECT bucket FROM objects UNION SELECT bucket FROM folders ORDER BY bucket"
        )
        return [str(bucket) for (bucket,) in rows], True

    # -- emptiness re-check --------------------------------------------------------------------
    def nonempty_object_partitions(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """One set-based query per chunk instead of a Python round trip per directory.

        The keys go into a temporary table in token order and an ``EXISTS`` probe per key runs
        inside SQLite, stopping at the first object row of each partition.
        """
        conn = self._conn
        found: set[tuple[str, str]] = set()
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS dircleaner_recheck"
            " (token INTEGER NOT NULL, bucket TEXT NOT NULL, parent TEXT NOT NULL)"
        )
        try:
            with self._read_once():
                for start in range(0, len(keys), RECHECK_CHUNK):
                    rows = sorted(
                        (murmur_token(bucket, parent), bucket, parent)
                        for bucket, parent in keys[start : start + RECHECK_CHUNK]
                    )
                    # A deferred transaction: only the temp table is written, so the metastore's
                    # writers are never locked out by a re-check.
                    conn.execute("BEGIN")
                    try:
                        conn.execute("DELETE FROM temp.dircleaner_recheck")
                        conn.executemany(
                            "INSERT INTO temp.dircleaner_recheck VALUES (?, ?, ?)", rows
                        )
                        found.update((str(b), str(p)) for b, p in conn.execute(_RECHECK_PROBE))
                    finally:
                        conn.execute("COMMIT")
        finally:
            conn.execute("DROP TABLE IF EXISTS temp.dircleaner_recheck")
        return found

    def probe_object_partitions(
        self, keys: Sequence[tuple[str, str]], tombstone_limit: int
    ) -> ObjectProbe:
        """One set-based query per chunk: each partition's first object row, and for one
        without any, its tombstones younger than the grace period, counted up to one past the
        limit (a read of it would scan every one of them)."""
        unique = list(dict.fromkeys(keys))
        if not self._journal_tables_exist():
            return ObjectProbe(self.nonempty_object_partitions(unique))
        sql = (
            "SELECT k.bucket, k.parent, EXISTS (SELECT 1 FROM objects AS o WHERE o.token ="
            " k.token AND o.bucket = k.bucket AND o.parent = k.parent) AS live,"
            " (SELECT count(*) FROM (SELECT 1 FROM object_tombstones AS t WHERE t.token ="
            " k.token AND t.bucket = k.bucket AND t.parent = k.parent AND t.written_us >= ?"
            " LIMIT ?)) FROM temp.dircleaner_keys AS k"
        )
        nonempty: set[tuple[str, str]] = set()
        heavy: set[tuple[str, str]] = set()
        params = (self._grace_cutoff_us(), tombstone_limit + 1)
        rows = [(murmur_token(b, p), b, p, "") for b, p in unique]
        for bucket, parent, live, tombstones in self._keyed_query(rows, sql, params):
            if live:
                nonempty.add((str(bucket), str(parent)))
            elif tombstones > tombstone_limit:
                heavy.add((str(bucket), str(parent)))
        return ObjectProbe(nonempty, heavy)

    def folder_partition_heads(
        self, keys: Sequence[tuple[str, str]], rows: int
    ) -> dict[tuple[str, str], list[FolderRow]]:
        """One set-based query per chunk: per partition, its first ``rows`` names in name order
        (a correlated ``LIMIT``, so a wide partition is read no further), joined by NUL, which
        no key holds."""
        if rows < 1:
            raise ValueError("rows must be >= 1")
        sql = (
            "SELECT k.token, k.bucket, k.parent, (SELECT group_concat(name, char(0)) FROM"
            " (SELECT f.name FROM folders AS f WHERE f.token = k.token AND f.bucket = k.bucket"
            " AND f.parent = k.parent ORDER BY f.name LIMIT ?)) FROM temp.dircleaner_keys AS k"
        )
        keyed = [(murmur_token(b, p), b, p, "") for b, p in dict.fromkeys(keys)]
        out: dict[tuple[str, str], list[FolderRow]] = {}
        for token, bucket, parent, names in self._keyed_query(keyed, sql, (rows,)):
            if names is not None:
                out[(bucket, parent)] = [
                    FolderRow(token, bucket, parent, name) for name in names.split("\0")
                ]
        return out

    def rows_listing(self, dirs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], FolderRow]:
        """One set-based query per chunk: the rows that exist among those listing ``dirs``."""
        keyed = []
        for bucket, directory in dict.fromkeys(dirs):
            parent, name = folder_row_of(directory)
            keyed.append((murmur_token(bucket, parent), bucket, parent, name))
        sql = (
            "SELECT k.token, k.bucket, k.parent, k.name FROM temp.dircleaner_keys AS k WHERE"
            " EXISTS (SELECT 1 FROM folders AS f WHERE f.token = k.token AND f.bucket ="
            " k.bucket AND f.parent = k.parent AND f.name = k.name)"
        )
        return {
            (bucket, dir_of_row(parent, name)): FolderRow(token, bucket, parent, name)
            for token, bucket, parent, name in self._keyed_query(keyed, sql, ())
        }

    def _keyed_query(
        self, keys: list[tuple[int, str, str, str]], sql: str, params: Sequence[object]
    ) -> Iterator[tuple[Any, ...]]:
        """``sql``'s rows over ``keys`` (token, bucket, parent, name), loaded a chunk at a time
        in key order into ``temp.dircleaner_keys``, in a deferred transaction (only the temp
        table is written: the metastore's writers are never locked out)."""
        conn = self._conn
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS dircleaner_keys (token INTEGER NOT NULL,"
            " bucket TEXT NOT NULL, parent TEXT NOT NULL, name TEXT NOT NULL)"
        )
        try:
            with self._read_once():
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

    # -- deletes at a timestamp ---------------------------------------------------------------
    def delete_folder_rows(
        self, rows: Sequence[FolderRow], timestamp_us: int
    ) -> list[BaseException | None]:
        with self._transaction() as conn:
            removed = conn.executemany(
                "DELETE FROM folders WHERE token = ? AND bucket = ? AND parent = ? AND name = ?"
                " AND ts <= ?",
                [(*row, timestamp_us) for row in rows],
            )
            self._count_removed(removed.rowcount)
            conn.executemany(
                "INSERT INTO tombstones (token, bucket, parent, name, ts, written_us)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(*row, timestamp_us, now_us()) for row in rows],
            )
        return [None] * len(rows)

    def delete_folder_ranges(
        self, ranges: Sequence[FolderRange], timestamp_us: int
    ) -> list[BaseException | None]:
        """Each range removes its rows written at or before the timestamp; the ledger gets one
        tombstone per bound, as Cassandra counts a range tombstone's two markers."""
        with self._transaction() as conn:
            removed = conn.executemany(
                "DELETE FROM folders WHERE token = ? AND bucket = ? AND parent = ?"
                " AND name >= ? AND name <= ? AND ts <= ?",
                [(r.token, r.bucket, r.parent, r.low, r.high, timestamp_us) for r in ranges],
            )
            self._count_removed(removed.rowcount)
            conn.executemany(
                "INSERT INTO tombstones (token, bucket, parent, name, ts, written_us)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (r.token, r.bucket, r.parent, bound, timestamp_us, now_us())
                    for r in ranges
                    for bound in (r.low, r.high)
                ],
            )
        return [None] * len(ranges)

    def delete_folder_partitions(
        self, partitions: Sequence[PartitionKey], timestamp_us: int
    ) -> list[BaseException | None]:
        with self._transaction() as conn:
            removed = conn.executemany(
                "DELETE FROM folders WHERE token = ? AND bucket = ? AND parent = ? AND ts <= ?",
                [(*key, timestamp_us) for key in partitions],
            )
            self._count_removed(removed.rowcount)
            conn.executemany(
                "INSERT INTO tombstones (token, bucket, parent, name, ts, written_us)"
                " VALUES (?, ?, ?, NULL, ?, ?)",
                [(*key, timestamp_us, now_us()) for key in partitions],
            )
        return [None] * len(partitions)

    def rewrite_folder_partition(
        self, partition: PartitionKey, keep_out: Collection[str], timestamp_us: int
    ) -> int:
        """Moves each kept row's write time up to ``timestamp_us`` (a newer one stays): the
        embedded store's rows have no other columns to copy."""
        token, bucket, parent = partition
        with self._transaction() as conn:
            names = [
                str(name)
                for (name,) in conn.execute(
                    "SELECT name FROM folders WHERE token = ? AND bucket = ? AND parent = ?",
                    (token, bucket, parent),
                )
            ]
            drop = set(keep_out)
            kept = [(timestamp_us, token, bucket, parent, n) for n in names if n not in drop]
            conn.executemany(
                "UPDATE folders SET ts = max(ts, ?)"
                " WHERE token = ? AND bucket = ? AND parent = ? AND name = ?",
                kept,
            )
        return len(kept)

    def _count_removed(self, rowcount: int) -> None:
        if self.rows_removed is not None:
            self.rows_removed += max(rowcount, 0)

    def tombstones_in_partition(self, bucket: str, parent: str) -> int:
        """How many tombstone cells a read of one folders partition meets, as Cassandra counts
        them: one per row delete, two per range delete (its bounds), none for a partition
        delete (a partition-level deletion is no cell). Tombstones older than the grace period
        are purged, as compaction would."""
        (count,) = self._conn.execute(
            "SELECT count(*) FROM tombstones WHERE token = ? AND bucket = ? AND parent = ?"
            " AND name IS NOT NULL AND (written_us IS NULL OR written_us >= ?)",
            (murmur_token(bucket, parent), bucket, parent, self._grace_cutoff_us()),
        ).fetchone()
        return int(count)

    def _grace_cutoff_us(self) -> int:
        return now_us() - int(self.grace_s * 1_000_000)

    # -- the key-value table ------------------------------------------------------------------
    def kv_read(self, space: str, prefix: str = "", *, fresh: bool = False) -> list[Entry]:
        return self._kv.read(space, prefix, fresh=fresh)

    def kv_write(
        self,
        space: str,
        key: str,
        value: bytes | None,
        *,
        ttl_s: float | None = None,
        expect: Expect = ANY,
    ) -> bool:
        return self._kv.write(space, key, value, ttl_s=ttl_s, expect=expect)

    def kv_clear(self, space: str) -> None:
        self._kv.clear(space)

    # -- the tombstone ledger ---------------------------------------------------------------------
    def purge_expired(self, grace_s: float) -> None:
        """Ledger entries and key-value rows past their TTL, and tombstones older than the
        grace period from the tombstones table (what compaction purges on Cassandra). Once per
        clean: all are full scans."""
        now = now_us()
        with self._transaction() as conn:
            conn.execute("DELETE FROM ledger WHERE expires_us <= ?", (now,))
            self._kv.purge_expired(conn)
            conn.execute(
                "DELETE FROM tombstones WHERE written_us < ?", (now - int(grace_s * 1_000_000),)
            )
            if self._journal_tables_exist():
                conn.execute("DELETE FROM journal WHERE expires_us <= ?", (now,))
                conn.execute(
                    "DELETE FROM object_tombstones WHERE written_us < ?",
                    (now - int(grace_s * 1_000_000),),
                )

    def charge_tombstones(self, charges: Sequence[TombstoneCharge], ttl_s: float) -> None:
        expires = now_us() + int(ttl_s * 1_000_000)
        with self._transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO ledger"
                " (token, bucket, parent, generation, charge, cost, expires_us)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(murmur_token(c.bucket, c.parent), *c, expires) for c in charges],
            )

    def tombstones_charged(
        self, partitions: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        now = now_us()
        # Opened for reading, a file of an earlier release keeps its ledger as it was: none yet,
        # or one not keyed by token (a command that writes brings it up to date).
        columns = None if self.reading is None else self.reading.ledger_columns
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
            rows = self._conn.execute(
                f"SELECT bucket, parent, sum(cost) FROM ledger WHERE ({where})"
                " AND expires_us > ? GROUP BY bucket, parent",
                [*params, now],
            )
            out.update(((str(b), str(p)), int(c)) for b, p, c in rows)
        return out

    # -- the journal of dirty directories ---------------------------------------------------------
    def journal_write(self, entries: Sequence[JournalEntry], ttl_s: float) -> None:
        expires = now_us() + int(ttl_s * 1_000_000)
        with self._transaction() as conn:
            self._create_journal_tables(conn)
            conn.executemany(
                "INSERT OR REPLACE INTO journal (slot, shard, bucket, parent, deleted, expires_us)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(*entry, expires) for entry in entries],
            )

    def journal_read(self, slot: int, bucket: str | None = None) -> Iterator[list[JournalEntry]]:
        if not self._journal_tables_exist():
            return
        sql = (
            "SELECT slot, shard, bucket, parent, deleted FROM journal"
            " WHERE slot = ? AND expires_us > ?"
        )
        params: list[object] = [slot, now_us()]
        if bucket is not None:
            sql += " AND bucket = ?"
            params.append(bucket)
        for batch in self._stream(sql + " ORDER BY shard, bucket, parent", params):
            yield [JournalEntry(*row) for row in batch]  # type: ignore[arg-type]

    def _journal_tables_exist(self) -> bool:
        if not self._journal_tables:
            have = {
                str(name)
                for (name,) in self._conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                )
            }
            self._journal_tables = set(JOURNAL_TABLES) <= have
        return self._journal_tables

    def _create_journal_tables(self, conn: sqlite3.Connection) -> None:
        """Within a write transaction: the journal's tables, in an older file that lacks them."""
        if not self._journal_tables_exist():
            for statement in JOURNAL_SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            self._journal_tables = True

    def folders_grace_seconds(self) -> tuple[float, str]:
        return self.grace_s, "default" if self.grace_s == DEFAULT_GRACE_S else "configured"

    # -- the S3 front-end's writes ----------------------------------------------------------------
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
        with self._transaction() as conn:
            conn.executemany(sql, [(murmur_token(b, p), b, p, n, timestamp_us) for b, p, n in rows])

    def delete_object_rows(
        self, rows: Sequence[tuple[str, str, str]], timestamp_us: int
    ) -> int | None:
        keyed = [(murmur_token(b, p), b, p, n) for b, p, n in rows]
        with self._transaction() as conn:
            cursor = conn.executemany(
                "DELETE FROM objects WHERE token = ? AND bucket = ? AND parent = ? AND name = ?"
                " AND ts <= ?",
                [(*key, timestamp_us) for key in keyed],
            )
            removed = max(cursor.rowcount, 0)
            # A tombstone per row, as Cassandra writes one whether the row existed or not.
            self._create_journal_tables(conn)
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
        with self._transaction() as conn:
            conn.executemany(
                f"INSERT OR IGNORE INTO {table} (token, bucket, parent, name, ts)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn)

    @contextlib.contextmanager
    def bulk_loading(self) -> Iterator[None]:
        """Trade durability for speed while a generator fills the store; restores WAL after.

        No journal and no fsync: a crash mid-load leaves a corrupt file (regenerate it). Needs the
        only connection to the file (leaving WAL mode checkpoints it).
        """
        conn = self._conn
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-262144")
        try:
            yield
        finally:
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA journal_mode=WAL")


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT, rolled back on error."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self._conn.execute("BEGIN IMMEDIATE")
        return self._conn

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
