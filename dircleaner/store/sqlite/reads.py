"""The SQLite store's reads of given partitions: one folders partition in pages, the prefix
walk's partitions, the re-check, the churn night's exact checks, the buckets.

A read of many keys is one set-based query per chunk instead of a Python round trip per key:
the keys go into a temporary table in token order, which drives the join, so the reads walk the
B-tree in key order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from dircleaner.model import FolderRow
from dircleaner.paths import dir_of_row, folder_row_of
from dircleaner.store.base import PARTITION_PAGE_ROWS
from dircleaner.store.records import ObjectProbe, murmur_token
from dircleaner.store.sqlite.database import RECHECK_CHUNK, Database
from dircleaner.store.sqlite.journal import SqliteJournal

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


class PartitionReads:
    """``folder_partition_pages``, ``folder_partitions``, ``has_folder_row``,
    ``bucket_names``, ``nonempty_object_partitions``, ``probe_object_partitions``,
    ``folder_partition_heads`` and ``rows_listing``."""

    def __init__(self, db: Database, journal: SqliteJournal) -> None:
        self._db = db
        self._journal = journal

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
                str(row[0]) for row in self._db.conn.execute(f"{sql} ORDER BY name LIMIT ?", params)
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
        conn = self._db.conn
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
        row = self._db.conn.execute(
            "SELECT 1 FROM folders WHERE token = ? AND bucket = ? AND parent = ? AND name = ?",
            (murmur_token(bucket, parent), bucket, parent, name),
        ).fetchone()
        return row is not None

    def bucket_names(self) -> list[str]:
        rows = self._db.conn.execute(
            "SELECT bucket FROM objects UNION SELECT bucket FROM folders ORDER BY bucket"
        )
        return [str(bucket) for (bucket,) in rows]

    # -- emptiness re-check --------------------------------------------------------------------
    def nonempty_object_partitions(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """One set-based query per chunk instead of a Python round trip per directory.

        The keys go into a temporary table in token order and an ``EXISTS`` probe per key runs
        inside SQLite, stopping at the first object row of each partition.
        """
        conn = self._db.conn
        found: set[tuple[str, str]] = set()
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS dircleaner_recheck"
            " (token INTEGER NOT NULL, bucket TEXT NOT NULL, parent TEXT NOT NULL)"
        )
        try:
            with self._db.read_once():
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

    # -- the churn night's exact checks ---------------------------------------------------------
    def probe_object_partitions(
        self, keys: Sequence[tuple[str, str]], tombstone_limit: int
    ) -> ObjectProbe:
        """One set-based query per chunk: each partition's first object row, and for one
        without any, its tombstones younger than the grace period, counted up to one past the
        limit (a read of it would scan every one of them)."""
        unique = list(dict.fromkeys(keys))
        if not self._journal.tables_exist():
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
        params = (self._db.grace_cutoff_us(), tombstone_limit + 1)
        rows = [(murmur_token(b, p), b, p, "") for b, p in unique]
        for bucket, parent, live, tombstones in self._db.keyed_query(rows, sql, params):
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
        for token, bucket, parent, names in self._db.keyed_query(keyed, sql, (rows,)):
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
            for token, bucket, parent, name in self._db.keyed_query(keyed, sql, ())
        }
