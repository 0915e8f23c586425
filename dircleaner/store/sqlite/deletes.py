"""The SQLite store's deletes at a timestamp, the partition rewrite, and their tombstones.

A delete "at T" removes only rows written at or before T, and is recorded in the ``tombstones``
table so tests count tombstones per partition the way Cassandra's tracing does: one per row
delete, one per bound of a range delete, a partition delete with no name.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence

from dircleaner.model import FolderRange, FolderRow, PartitionKey
from dircleaner.store.records import murmur_token
from dircleaner.store.sqlite.database import Database
from dircleaner.timeutil import now_us


class FolderDeletes:
    """``delete_folder_rows``, ``…_ranges``, ``…_partitions``, ``rewrite_folder_partition`` and
    ``tombstones_in_partition``; counts the folder rows its deletes removed."""

    def __init__(self, db: Database) -> None:
        self._db = db
        #: folder rows these deletes removed (the store's ``rows_removed``)
        self.rows_removed = 0

    def delete_folder_rows(
        self, rows: Sequence[FolderRow], timestamp_us: int
    ) -> list[BaseException | None]:
        with self._db.transaction() as conn:
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
        with self._db.transaction() as conn:
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
        with self._db.transaction() as conn:
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
        with self._db.transaction() as conn:
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
        self.rows_removed += max(rowcount, 0)

    def tombstones_in_partition(self, bucket: str, parent: str) -> int:
        """How many tombstone cells a read of one folders partition meets, as Cassandra counts
        them: one per row delete, two per range delete (its bounds), none for a partition
        delete (a partition-level deletion is no cell). Tombstones older than the grace period
        are purged, as compaction would."""
        (count,) = self._db.conn.execute(
            "SELECT count(*) FROM tombstones WHERE token = ? AND bucket = ? AND parent = ?"
            " AND name IS NOT NULL AND (written_us IS NULL OR written_us >= ?)",
            (murmur_token(bucket, parent), bucket, parent, self._db.grace_cutoff_us()),
        ).fetchone()
        return int(count)

    @staticmethod
    def purge_expired(conn: sqlite3.Connection, now: int, grace_s: float) -> None:
        """Within the caller's transaction: tombstones older than the grace period (what
        compaction purges on Cassandra)."""
        conn.execute(
            "DELETE FROM tombstones WHERE written_us < ?", (now - int(grace_s * 1_000_000),)
        )
