"""The index scans of the SQLite store, a slice of the ring at a time, and the directory count.

Each scan streams its rows in token order through the small page cache (``Database.stream``);
on a UTF-8 file the key scans have SQLite lay out the filter keys, so no string per row is made
in Python.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from dircleaner.errors import SchemaError
from dircleaner.model import FolderRow, PartitionKey, Shard
from dircleaner.scanrate import ScanThrottle, paced
from dircleaner.store.records import DirCountEstimate
from dircleaner.store.sqlite.database import Database

if TYPE_CHECKING:  # numpy is imported only by the commands that build or sweep
    from dircleaner.store.packed import FolderKeys, ObjectKeys


class IndexScans:
    """``scan_object_partitions``, ``scan_folder_rows``, their packed-key forms (on a UTF-8
    file) and ``estimate_directory_count``."""

    def __init__(self, db: Database) -> None:
        self._db = db

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
        return self._db.stream(f"{sql} ORDER BY {order}", params)

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
        """On a UTF-8 file only (``Database.utf8``): the store derives them otherwise."""
        from dircleaner.store.packed import ObjectKeys

        # SQLite lays out each key (one BLOB per partition): no string per row in Python.
        select = "SELECT CAST(bucket || char(0) || parent AS BLOB) FROM objects"
        scan = self._scan_slice(select, "token, bucket, parent", shard, bucket, True)
        for batch in paced(scan, throttle):
            yield ObjectKeys.of_keys([key for (key,) in batch])  # type: ignore[misc]

    def scan_folder_keys(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[FolderKeys]:
        """On a UTF-8 file only (``Database.utf8``): the store derives them otherwise."""
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
                raise SchemaError(f"{self._db.path}: a folders row's token is not its partition's")
            else:
                yield packed

    def estimate_directory_count(self, bucket: str | None = None) -> DirCountEstimate:
        # Through the small cache: the count reads every page of the table once, and a full
        # cache would be dropped anyway at this connection's next read after the workers write.
        conn = self._db.conn
        with self._db.read_once():
            if bucket is None:
                (count,) = conn.execute("SELECT count(*) FROM folders").fetchone()
            else:
                (count,) = conn.execute(
                    "SELECT count(*) FROM folders WHERE bucket = ?", (bucket,)
                ).fetchone()
        return DirCountEstimate(
            int(count), "exact count of folder rows", exact=True, folder_rows=int(count)
        )
