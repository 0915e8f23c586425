"""The SQLite metastore's file: its URL, its schema, and opening it for a command that writes."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

from dircleaner.errors import StoreNotFound, StoreNotOurs, StoreReadOnly, StoreUrlError
from dircleaner.store.bookkeeping import STATE_SPACE
from dircleaner.store.records import murmur_token

log = logging.getLogger(__name__)


def read_only_here(url: str) -> bool:
    """Whether the metastore at ``url`` exists and this process can read but not write it
    (what a write through its read-only connection then failed on)."""
    try:
        path = path_from_url(url)
        return path.is_file() and not_writable_because(path) is not None
    except (StoreUrlError, OSError):
        return False


def not_writable_because(path: Path) -> str | None:
    """Why this process cannot write the database at ``path`` (None: it can)."""
    if bool(os.statvfs(path).f_flag & os.ST_RDONLY):
        return "a read-only mount"
    if not os.access(path, os.W_OK):
        return "no write permission on the file"
    if not os.access(path.parent, os.W_OK):
        return "no write permission on its directory"
    for other in (beside(path, "-wal"), beside(path, "-shm")):
        # What a reader with plain mode=ro (an earlier release) left: SQLite gave it the
        # database's mode then, and a writer can use neither file now.
        if other.exists() and not os.access(other, os.W_OK):
            remedy = f"give it {path.name}'s owner and mode"
            return f"no write permission on {other.name} beside it: {remedy}"
    return None


def beside(path: Path, suffix: str) -> Path:
    """The file SQLite keeps beside the database (``-wal``, ``-shm``, ``-journal``)."""
    return path.with_name(path.name + suffix)


SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    token  INTEGER NOT NULL,
    bucket TEXT    NOT NULL,
    parent TEXT    NOT NULL,
    name   TEXT    NOT NULL,
    ts     INTEGER NOT NULL,
    PRIMARY KEY (token, bucket, parent, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS folders (
    token  INTEGER NOT NULL,
    bucket TEXT    NOT NULL,
    parent TEXT    NOT NULL,
    name   TEXT    NOT NULL,
    ts     INTEGER NOT NULL,
    PRIMARY KEY (token, bucket, parent, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tombstones (
    token  INTEGER NOT NULL,
    bucket TEXT    NOT NULL,
    parent TEXT    NOT NULL,
    name   TEXT,              -- NULL for a partition tombstone
    ts     INTEGER NOT NULL,
    written_us INTEGER        -- when it was written (its grace period runs from then)
);
CREATE INDEX IF NOT EXISTS tombstones_by_partition ON tombstones (token, bucket, parent);
"""

# The ledger is keyed by partition token first, like the folders table: a slice's deletes go
# in token order, so each batch's charges land on one or two B-tree pages instead of one page
# per partition (a WAL commit costs the pages it writes: ~1 ms a batch at 1M directories,
# keyed by bucket and parent, against ~0.1 ms keyed by token).
LEDGER_TABLE = """
CREATE TABLE IF NOT EXISTS ledger (
    token      INTEGER NOT NULL,
    bucket     TEXT    NOT NULL,
    parent     TEXT    NOT NULL,
    generation TEXT    NOT NULL,
    charge     TEXT    NOT NULL,
    cost       INTEGER NOT NULL,
    expires_us INTEGER NOT NULL,
    PRIMARY KEY (token, bucket, parent, generation, charge)
) WITHOUT ROWID
"""

# The key-value table: filter cells (up to 1 MiB each, so a rowid table, which keeps them off
# the key's B-tree), the run lease and run state. It replaced the first release's filters, state
# and leases tables, which an older file keeps and this release ignores.
KV_TABLE = """
CREATE TABLE IF NOT EXISTS kv (
    space      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      BLOB    NOT NULL,
    expires_us INTEGER,           -- NULL: never expires
    PRIMARY KEY (space, key)
)
"""

# The journal of dirty directories: one row per (slot, shard, bucket, parent), the last write
# wins, each row expiring on its own (purged by the clean, as Cassandra's TTL does it).
JOURNAL_TABLE = """
CREATE TABLE IF NOT EXISTS journal (
    slot       INTEGER NOT NULL,
    shard      INTEGER NOT NULL,
    bucket     TEXT    NOT NULL,
    parent     TEXT    NOT NULL,
    deleted    INTEGER NOT NULL,
    expires_us INTEGER NOT NULL,
    PRIMARY KEY (slot, shard, bucket, parent)
) WITHOUT ROWID
"""

# The tombstones of deleted object rows, one per row as Cassandra keeps one (a second delete of
# a row replaces it), so that the churn night can tell a partition a read would have to scan
# many of; purged after the grace period, as compaction would.
OBJECT_TOMBSTONES_TABLE = """
CREATE TABLE IF NOT EXISTS object_tombstones (
    token      INTEGER NOT NULL,
    bucket     TEXT    NOT NULL,
    parent     TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    written_us INTEGER NOT NULL,
    PRIMARY KEY (token, bucket, parent, name)
) WITHOUT ROWID
"""

#: tables added after the first release: created on open, so older files keep working
LATER_SCHEMA = LEDGER_TABLE + ";\n" + KV_TABLE + ";\n"
#: the churn night's tables: created with a new file, and in an older file by the first write
#: that needs them (a command that only reads never adds them)
JOURNAL_SCHEMA = JOURNAL_TABLE + ";\n" + OBJECT_TOMBSTONES_TABLE + ";\n"
JOURNAL_TABLES = ("journal", "object_tombstones")

REQUIRED_TABLES = ("objects", "folders", "tombstones")
#: tables an older release created and this one no longer uses (kept in the file, ignored)
RETIRED_TABLES = ("filters", "state", "leases")
#: every table of a metastore: a file holding any other has tables of its own
OUR_TABLES = (*REQUIRED_TABLES, "ledger", "kv", *JOURNAL_TABLES, *RETIRED_TABLES)


def path_from_url(url: str) -> Path:
    """``sqlite:///rel/meta.db`` → ``rel/meta.db``; ``sqlite:////abs/m.db`` → ``/abs/m.db``."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc or parts.query or parts.fragment:
        raise StoreUrlError(f"malformed SQLite URL {url!r} (expected sqlite:///path/meta.db)")
    raw = parts.path[1:] if parts.path.startswith("/") else ""
    if not raw or raw.endswith("/"):
        raise StoreUrlError(f"malformed SQLite URL {url!r}: no database file named")
    return Path(raw)


#: each connection's page cache (KiB). The deletes, the cache's main user in a job, go through
#: the folders table in key order: 128 MiB only filled with pages they never read again, beside
#: the candidates and the plan at the job's peak (at 1M, deletes' CPU 0.83-0.92 s with 128 MiB,
#: 0.81-0.97 s with 32)
CACHE_KIB = 32768
#: the cache the reads that visit each page once go through (the sizing count, the slice scans
#: of the build and the sweep, the re-check): a full cache would only cost fresh memory to fill
#: and time to drop when another process writes (at 2M: the count 0.048-0.13 -> 0.035-0.038 s,
#: and 0.043 s saved on the next write), and through it the job's one process held it full of
#: pages it never read again until its deletes
SCAN_CACHE_KIB = 2048


def open_database(
    path: Path, *, create: bool, force: bool = False
) -> tuple[sqlite3.Connection, list[str]]:
    """A connection to the metastore at ``path`` for a command that writes to it, and what
    opening it created (for a person: the new file, or our tables in a file that had none of
    them).

    With ``create``, the file and its tables are created; tables added since the first release
    are created in older files. A file that holds tables of its own gets ours only with
    ``force`` (StoreNotOurs otherwise), and without ``create`` nothing in a file that is not a
    metastore is changed. A file this process cannot write is refused (StoreReadOnly) before
    anything is read or written: commands that only read open it with ``open_for_reading``.
    """
    refuse_directory(path)
    if not create:
        require_file(path)
    if path.is_file():
        _refuse_read_only(path)
    new_file = create and not path.exists()
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    created: list[str] = []
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
        have = _tables(conn)
        if not create:
            check_tables(path, conn, have)  # before any write: a stranger's file stays as it is
        elif not set(REQUIRED_TABLES) <= have:
            foreign = sorted(have - set(OUR_TABLES))
            if foreign and not force:
                conn.close()
                raise StoreNotOurs(
                    f"{path} holds tables of its own ({', '.join(foreign)}); dircleaner adds its"
                    " tables next to them only with --force (or name a file of its own)"
                )
            created.append(
                f"SQLite metastore {path.resolve()}"
                if new_file
                else f"dircleaner's tables in {path.resolve()}"
                + (f" (next to its own: {', '.join(foreign)})" if foreign else "")
            )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        # Checkpoint (and fsync) every ~40 MiB of WAL rather than every ~4 MiB: deletes
        # scattered over the folders table dirty a page each, and the default checkpointed
        # after almost every batch of them.
        conn.execute("PRAGMA wal_autocheckpoint=10000")
        conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        conn.execute("PRAGMA temp_store=MEMORY")
        if created:
            conn.executescript(SCHEMA + JOURNAL_SCHEMA)
            have = _tables(conn)
        if not {"kv", "ledger"} <= have:
            conn.executescript(LATER_SCHEMA)
            if "state" in have and "kv" not in have:
                _carry_state_over(conn)
        if "ledger" in have:
            _key_ledger_by_token(conn)
        columns = {r[1] for r in conn.execute("PRAGMA table_info(tombstones)")}
        if "written_us" not in columns:
            conn.execute("ALTER TABLE tombstones ADD COLUMN written_us INTEGER")
    except sqlite3.OperationalError as exc:
        with contextlib.suppress(NameError):
            conn.close()
        if path.is_file():
            _refuse_read_only(path)  # it became read-only meanwhile
        raise StoreNotFound(f"{path} is not a usable SQLite database: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        raise StoreNotFound(f"{path} is not a usable SQLite database: {exc}") from exc
    return conn, created


def refuse_directory(path: Path) -> None:
    """StoreUrlError when ``path`` names a directory, not the database file in it."""
    if path.is_dir():
        raise StoreUrlError(
            f"{path} is a directory, not an SQLite file: name the file, e.g."
            f" --store {path / 'meta.db'}"
        )


def require_file(path: Path) -> None:
    """StoreNotFound unless there is a file at ``path`` (a command that reads never creates one);
    StoreUrlError when ``path`` is a directory."""
    refuse_directory(path)
    if not path.is_file():
        raise StoreNotFound(
            f"no metastore at {path} (create one with 'dircleaner gen' or 'import-keys')"
        )


def _refuse_read_only(path: Path) -> None:
    """StoreReadOnly, saying why, if this process cannot write the file at ``path``."""
    why = not_writable_because(path)
    if why is not None:
        raise StoreReadOnly(
            f"{path} is read-only here ({why}): this command writes to it; list-dirs,"
            " filters list|show, sweep and dry runs only read it"
        )


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _key_ledger_by_token(conn: sqlite3.Connection) -> None:
    """A ledger written before it was keyed by token gets the token column, its rows kept."""
    if "token" in _columns(conn, "ledger"):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if "token" in _columns(conn, "ledger"):  # another process did it meanwhile
            conn.execute("ROLLBACK")
            return
        rows = conn.execute(
            "SELECT bucket, parent, generation, charge, cost, expires_us FROM ledger"
        ).fetchall()
        conn.execute("DROP TABLE ledger")
        conn.execute(LEDGER_TABLE)
        conn.executemany(
            "INSERT INTO ledger (token, bucket, parent, generation, charge, cost, expires_us)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(murmur_token(row[0], row[1]), *row) for row in rows],
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    log.info("tombstone ledger keyed by partition token (%d charges kept)", len(rows))


def _carry_state_over(conn: sqlite3.Connection) -> None:
    """An older file's run state (resume checkpoints, sizing, slice times) is copied into the
    key-value table once, when that table is created; its filters are not (the next build
    makes a new one) and its lease is not (a run of the older release holds no lease here)."""
    conn.execute(
        "INSERT OR IGNORE INTO kv (space, key, value, expires_us)"
        " SELECT ?, key, CAST(value AS BLOB), NULL FROM state",
        (STATE_SPACE,),
    )


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}


def check_tables(path: Path, conn: sqlite3.Connection, have: set[str] | None = None) -> None:
    """The connection closed, and StoreNotOurs (a file of someone else's: tables of its own)
    or StoreNotFound (no tables), unless every required table is there."""
    have = _tables(conn) if have is None else have
    missing = [t for t in REQUIRED_TABLES if t not in have]
    if missing:
        conn.close()
        foreign = sorted(have - set(OUR_TABLES))
        if foreign:
            raise StoreNotOurs(
                f"{path} holds tables of its own ({', '.join(foreign)}), not a dircleaner"
                " metastore: name the metastore's file (gen, import-keys and init-schema add"
                " dircleaner's tables to this one only with --force)"
            )
        raise StoreNotFound(f"{path} is not a dircleaner metastore (missing table {missing[0]})")
