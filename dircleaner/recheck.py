"""The pre-delete re-check, batched: which candidate directories hold an object after all.

``Store.nonempty_object_partitions`` asks one ``LIMIT 1`` query per directory, which in SQLite
costs a Python round trip per candidate (millions at scale). Here the SQLite store answers the
whole set with one set-based query per chunk: the keys go into a temporary table and an
``EXISTS`` probe per key runs inside SQLite, stopping at the first object row of a partition.
Stores that override ``nonempty_object_partitions`` themselves are used as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from dircleaner.store.base import Store, murmur_token
from dircleaner.store.sqlite import SqliteStore

#: keys probed per SQLite statement (bounds the temporary table)
RECHECK_CHUNK = 100_000

_PROBE = (
    "SELECT bucket, parent FROM temp.dircleaner_recheck AS r WHERE EXISTS"
    " (SELECT 1 FROM objects AS o"
    "  WHERE o.token = r.token AND o.bucket = r.bucket AND o.parent = r.parent)"
)


def nonempty_object_partitions(
    store: Store, keys: Sequence[tuple[str, str]]
) -> set[tuple[str, str]]:
    """The subset of ``(bucket, parent)`` whose objects partition holds a live row."""
    overridden = type(store).nonempty_object_partitions is not Store.nonempty_object_partitions
    if overridden or not isinstance(store, SqliteStore):
        return store.nonempty_object_partitions(keys)
    conn = store._conn  # the batched form belongs in SqliteStore; see the module docstring
    found: set[tuple[str, str]] = set()
    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS dircleaner_recheck"
        " (token INTEGER NOT NULL, bucket TEXT NOT NULL, parent TEXT NOT NULL)"
    )
    try:
        for start in range(0, len(keys), RECHECK_CHUNK):
            chunk = keys[start : start + RECHECK_CHUNK]
            conn.execute("BEGIN")
            try:
                conn.execute("DELETE FROM temp.dircleaner_recheck")
                rows = [(murmur_token(bucket, parent), bucket, parent) for bucket, parent in chunk]
                rows.sort()  # token order: the probes walk the objects B-tree left to right
                conn.executemany("INSERT INTO temp.dircleaner_recheck VALUES (?, ?, ?)", rows)
                found.update((str(b), str(p)) for b, p in conn.execute(_PROBE))
            finally:
                conn.execute("COMMIT")
    finally:
        conn.execute("DROP TABLE IF EXISTS temp.dircleaner_recheck")
    return found
