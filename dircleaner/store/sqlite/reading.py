"""Opening the SQLite metastore for a command that only reads: a connection that writes nothing
to the store and leaves no file beside it, whoever writes the store meanwhile.

Which connection (``reading_mode``) is a pure decision on what is found beside the file; the
reasons are in docs/development.md ("Commands that only read").
"""

from __future__ import annotations

import enum
import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from dircleaner.errors import StoreNotFound
from dircleaner.store.sqlite.schema import (
    CACHE_KIB,
    beside,
    check_tables,
    not_writable_because,
    require_file,
)

log = logging.getLogger(__name__)

#: the header bytes (file format write and read versions) that are 2 in a WAL database
_WAL_VERSION_BYTES = slice(18, 20)
#: a write-ahead log's header; a log no longer than it holds no transaction
WAL_HEADER_BYTES = 32


class ReadMode(enum.Enum):
    """How a command that only reads connects to the file."""

    #: a file this process could write: an ordinary connection under an authorizer that refuses
    #: every write; it locks and reads the log like any reader, and the last connection to
    #: close removes the -wal and -shm files, as always
    GUARDED = "guarded"
    #: a file it cannot write, in WAL mode, with a -wal and -shm beside it (a connection has it
    #: open, or one was killed): ``mode=ro&readonly_shm=1`` reads the log's commits through the
    #: existing index, under its locks, and creates or changes neither file
    LOG_READ_ONLY = "log read-only"
    #: a file it cannot write, in WAL mode, with no log (no connection has it open): the file
    #: alone holds every commit; ``immutable=1`` reads it without creating or locking anything
    IMMUTABLE = "immutable"
    #: a file it cannot write, not in WAL mode: ``mode=ro`` (a rollback-journal reader locks the
    #: file itself and creates nothing)
    ROLLBACK_READ_ONLY = "rollback read-only"


@dataclass(frozen=True)
class Surroundings:
    """What decides how to read the file: can we write it, and what is beside it."""

    #: the file, its directory (the -wal and -shm are created there) and the mount are writable
    writable: bool
    #: the file's header says WAL mode
    wal_mode: bool
    #: the -wal file exists; it is longer than its header (it holds transactions)
    log: bool
    log_has_commits: bool
    #: the -shm file (the log's index) exists
    log_index: bool


class LogWithoutIndex(StoreNotFound):
    """A -wal holding commits, no -shm to read it through, and no right to create one."""


def reading_mode(seen: Surroundings) -> ReadMode:
    """The connection that reads everything committed and leaves the file and its directory as
    they were (LogWithoutIndex when no such connection exists)."""
    if seen.writable:
        return ReadMode.GUARDED
    if not seen.wal_mode:
        return ReadMode.ROLLBACK_READ_ONLY
    if seen.log and seen.log_index:
        return ReadMode.LOG_READ_ONLY
    if seen.log_has_commits:
        raise LogWithoutIndex("a write-ahead log without its index")
    return ReadMode.IMMUTABLE


def surroundings(path: Path) -> Surroundings:
    """Look at ``path`` and the files SQLite keeps beside it."""
    with path.open("rb") as stream:
        header = stream.read(100)
    wal = beside(path, "-wal")
    log_size = wal.stat().st_size if wal.exists() else None
    return Surroundings(
        writable=not_writable_because(path) is None,
        wal_mode=header[_WAL_VERSION_BYTES] == b"\x02\x02",
        log=log_size is not None,
        log_has_commits=log_size is not None and log_size > WAL_HEADER_BYTES,
        log_index=beside(path, "-shm").exists(),
    )


@dataclass
class ReadingConnection:
    """A connection that cannot write the file, how it reads, and what it found."""

    path: Path
    conn: sqlite3.Connection
    mode: ReadMode
    #: the ledger's columns (none: no ledger yet): an earlier release's file is read as it is
    ledger_columns: frozenset[str]
    #: read without locks (``IMMUTABLE``): the file as it was when the read began
    unlocked_from: FileState | None

    def close(self) -> None:
        """Close it, warning when an unlocked read may have mixed before and after a write."""
        self.conn.close()
        if self.unlocked_from is not None and written_meanwhile(self.path, self.unlocked_from):
            log.warning(
                "%s was written while this command read it without locks (a file it cannot"
                " write, and no other connection had it open when it began): what it read"
                " may mix before and after; run it again",
                self.path,
            )


def open_for_reading(path: Path) -> ReadingConnection:
    """A connection to the metastore at ``path`` that cannot write it (``reading_mode``)."""
    require_file(path)
    before = FileState.of(path)
    conn, mode = _connect(path)
    try:
        conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        conn.execute("PRAGMA temp_store=MEMORY")
        check_tables(path, conn)
        ledger = conn.execute("PRAGMA table_info(ledger)").fetchall()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreNotFound(f"{path} is not a usable SQLite database: {exc}") from exc
    columns = frozenset(str(column[1]) for column in ledger)
    unlocked_from = before if mode is ReadMode.IMMUTABLE else None
    return ReadingConnection(path, conn, mode, columns, unlocked_from)


def _connect(path: Path) -> tuple[sqlite3.Connection, ReadMode]:
    try:
        mode = reading_mode(surroundings(path))
    except LogWithoutIndex:
        raise LogWithoutIndex(
            f"{path} has a write-ahead log holding commits ({beside(path, '-wal').name}) but"
            f" no index ({beside(path, '-shm').name}), and this process cannot create one: run"
            " a command that writes to it once, as a user who may, then retry"
        ) from None
    except OSError as exc:
        raise StoreNotFound(f"{path} cannot be read: {exc.strerror}") from exc
    if mode is ReadMode.GUARDED:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
        conn.set_authorizer(_reads_only)
    else:
        query = {
            ReadMode.LOG_READ_ONLY: "mode=ro&readonly_shm=1",
            ReadMode.IMMUTABLE: "mode=ro&immutable=1",
            ReadMode.ROLLBACK_READ_ONLY: "mode=ro",
        }[mode]
        uri = f"file:{quote(str(path.resolve()))}?{query}"
        conn = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=60
        )
    log.debug("%s opened for reading (%s)", path, mode.value)
    return conn, mode


#: what a statement may do to the database file (anything to ``temp`` is allowed: the re-check
#: and the walk stage their keys in temporary tables)
_READS = frozenset(
    {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        sqlite3.SQLITE_TRANSACTION,
        sqlite3.SQLITE_RECURSIVE,
    }
)
#: the pragmas a reading connection runs: its own settings and the schema's description (not
#: journal_mode, which may rewrite the header, nor wal_checkpoint, which writes the file)
_READING_PRAGMAS = frozenset({"cache_size", "temp_store", "busy_timeout", "encoding", "table_info"})


def _reads_only(action: int, arg1: str | None, _arg2: str | None, db: str | None, _: object) -> int:
    """The authorizer of a guarded connection: nothing but reads of the database file."""
    if action in _READS or db == "temp":
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1 is not None and arg1.lower() in _READING_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


@dataclass(frozen=True)
class FileState:
    """What changes when someone writes the file: its size, times and inode, and its log."""

    stat: tuple[int, int, int, int]
    log: bool

    @classmethod
    def of(cls, path: Path) -> FileState:
        st = path.stat()
        return cls(
            (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), beside(path, "-wal").exists()
        )


def written_meanwhile(path: Path, before: FileState) -> bool:
    """Whether the file changed, or a log appeared beside it, since ``before``: an immutable
    read (no locks) may then have mixed pages from before and after."""
    try:
        return FileState.of(path) != before
    except OSError:
        return True
