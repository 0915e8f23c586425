"""Opening the SQLite metastore for a command that only reads: which connection, what it
refuses, and what it says when the file changed under a read that took no locks.

(The CLI's commands on real read-only files, as root without CAP_DAC_OVERRIDE too, are in
``test_cli_read_only.py``.)
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dircleaner.errors import StoreNotFound, StoreReadOnly
from dircleaner.model import Shard
from dircleaner.store.sqlite import SqliteStore, reading
from dircleaner.store.sqlite.reading import ReadMode, Surroundings, reading_mode
from tests.helpers import EAGER, invoke


def surroundings(
    *,
    writable: bool = False,
    wal_mode: bool = True,
    log: bool = False,
    commits: bool = False,
    index: bool = False,
) -> Surroundings:
    return Surroundings(writable, wal_mode, log or commits, commits, index)


@pytest.mark.parametrize(
    ("seen", "mode"),
    [
        # Whatever is beside it: a file we could write is read as any reader reads it.
        (surroundings(writable=True), ReadMode.GUARDED),
        (surroundings(writable=True, commits=True), ReadMode.GUARDED),
        (surroundings(writable=True, wal_mode=False), ReadMode.GUARDED),
        # A file we cannot write: a live (or killed) writer's log through its index ...
        (surroundings(commits=True, index=True), ReadMode.LOG_READ_ONLY),
        (surroundings(log=True, index=True), ReadMode.LOG_READ_ONLY),
        # ... no connection has it open: the file alone (an empty log holds nothing) ...
        (surroundings(), ReadMode.IMMUTABLE),
        (surroundings(log=True), ReadMode.IMMUTABLE),
        (surroundings(index=True), ReadMode.IMMUTABLE),
        # ... and a rollback-journal file locks itself, whatever is beside it.
        (surroundings(wal_mode=False), ReadMode.ROLLBACK_READ_ONLY),
        (surroundings(wal_mode=False, commits=True, index=True), ReadMode.ROLLBACK_READ_ONLY),
    ],
)
def test_reading_mode(seen: Surroundings, mode: ReadMode) -> None:
    assert reading_mode(seen) is mode


def test_a_log_with_commits_and_no_index_cannot_be_read_without_writing() -> None:
    with pytest.raises(reading.LogWithoutIndex):
        reading_mode(surroundings(commits=True))


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "store" / "meta.db"
    with SqliteStore.open(url_of(path), create=True) as store:
        store.put_objects("b", ["a/x", "c/d/y"], 1)
        store.put_state("k", "v")
    assert [p.name for p in path.parent.iterdir()] == ["meta.db"]
    return path


def test_a_writable_file_opened_for_reading_refuses_every_write_and_keeps_its_bytes(
    db: Path,
) -> None:
    before = digests(db.parent)
    with SqliteStore.open(url_of(db), read_only=True) as store:
        assert store.reading is not None and store.reading.mode is ReadMode.GUARDED
        assert store.traits.read_only
        # The reads that stage keys in temporary tables work.
        assert store.nonempty_object_partitions([("b", "a/"), ("b", "z/")]) == {("b", "a/")}
        assert [key for key, _ in store.folder_partitions([("b", ""), ("b", "c/")])] == [
            ("b", ""),
            ("b", "c/"),
        ]
        assert store.get_state("k") == "v"
        with pytest.raises(StoreReadOnly):
            store.put_state("k", "w")
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            store.put_objects("b", ["new/k"], 2)
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            store.delete_folder_rows(list(store.iter_folder_rows("b")), 10)
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            store.db.conn.execute("PRAGMA journal_mode=DELETE")
        assert sum(len(rows) for rows in store.scan_folder_rows(Shard(), "b")) == 3
    assert digests(db.parent) == before


def cannot_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process is told it cannot write the file (as a read-only mount would say)."""
    monkeypatch.setattr(reading, "not_writable_because", lambda _path: "a test")


def test_a_file_no_connection_has_open_is_read_immutable_and_warns_if_written_meanwhile(
    db: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cannot_write(monkeypatch)
    with SqliteStore.open(url_of(db), read_only=True) as store:
        assert store.reading is not None and store.reading.mode is ReadMode.IMMUTABLE
        assert store.get_state("k") == "v"
    assert "written while" not in caplog.text
    assert [p.name for p in db.parent.iterdir()] == ["meta.db"]
    store = SqliteStore.open(url_of(db), read_only=True)
    assert store.reading is not None and store.reading.mode is ReadMode.IMMUTABLE
    writer = sqlite3.connect(db)
    writer.execute("UPDATE kv SET value = x'77' WHERE key = 'k'")
    writer.commit()
    with caplog.at_level(logging.WARNING, logger="dircleaner"):
        store.close()
    writer.close()
    assert f"{db} was written while this command read it without locks" in caplog.text


#: a writer in a process of its own (in one process SQLite shares the log's index between
#: connections): it commits to the log, says so, and holds the file open until told to go
_WRITER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute("UPDATE kv SET value = x'77' WHERE key = 'k'")
print("committed", flush=True)
sys.stdin.read()
"""


def test_a_writers_log_is_read_through_its_index_without_changing_either(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as writer:
        assert writer.stdout is not None and writer.stdin is not None
        assert writer.stdout.readline() == b"committed\n"
        cannot_write(monkeypatch)
        before = digests(db.parent)
        with SqliteStore.open(url_of(db), read_only=True) as store:
            assert store.reading is not None and store.reading.mode is ReadMode.LOG_READ_ONLY
            assert store.get_state("k") == "w"  # committed to the log, not to the file
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                store.put_objects("b", ["new/k"], 2)
        assert digests(db.parent) == before
        writer.stdin.close()
    assert writer.returncode == 0


def test_a_log_with_commits_but_no_index_is_refused_in_one_line(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("UPDATE kv SET value = x'77' WHERE key = 'k'")
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("meta.db", "meta.db-wal"):  # the index not copied
        shutil.copy(db.parent / name, copy / name)
    writer.close()
    cannot_write(monkeypatch)
    with pytest.raises(StoreNotFound) as raised:
        SqliteStore.open(url_of(copy / "meta.db"), read_only=True)
    assert str(raised.value) == (
        f"{copy / 'meta.db'} has a write-ahead log holding commits (meta.db-wal) but no index"
        " (meta.db-shm), and this process cannot create one: run a command that writes to it"
        " once, as a user who may, then retry"
    )
    assert sorted(p.name for p in copy.iterdir()) == ["meta.db", "meta.db-wal"]


def test_a_rollback_journal_file_is_read_with_its_own_locks(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    cannot_write(monkeypatch)
    before = digests(db.parent)
    with SqliteStore.open(url_of(db), read_only=True) as store:
        assert store.reading is not None and store.reading.mode is ReadMode.ROLLBACK_READ_ONLY
        assert store.get_state("k") == "v"
    assert digests(db.parent) == before


#: the ledger of an earlier release: keyed by bucket and parent, no token column
_UNKEYED_LEDGER = """
DROP TABLE ledger;
CREATE TABLE ledger (bucket TEXT NOT NULL, parent TEXT NOT NULL, generation TEXT NOT NULL,
    charge TEXT NOT NULL, cost INTEGER NOT NULL, expires_us INTEGER NOT NULL,
    PRIMARY KEY (bucket, parent, generation, charge)) WITHOUT ROWID;
INSERT INTO ledger VALUES ('b', 'a/', 'g', 'row', 7, 9223372036854775807);
"""


@pytest.mark.parametrize("ledger", ["none yet", "not keyed by token"])
def test_a_dry_run_reads_the_ledger_of_an_earlier_release_as_it_is(db: Path, ledger: str) -> None:
    """Opening for reading brings nothing up to date: the file's ledger is read as it is."""
    emptied = invoke(url_of(db), "delete-keys", "-", "--bucket", "b", input="c/d/y\n")
    assert emptied.exit_code == 0, emptied.output
    conn = sqlite3.connect(db)
    conn.executescript(
        "DROP TABLE kv;" + ("DROP TABLE ledger;" if ledger == "none yet" else _UNKEYED_LEDGER)
    )
    conn.close()
    before = digests(db.parent)
    with SqliteStore.open(url_of(db), read_only=True) as store:
        charged = store.tombstones_charged([("b", "a/"), ("b", "c/")])
    assert charged == ({} if ledger == "none yet" else {("b", "a/"): 7})
    assert digests(db.parent) == before
    planned = invoke(url_of(db), "run", "-n", *EAGER, "--json")
    assert planned.exit_code == 0, planned.output
    assert json.loads(planned.stdout)["clean"]["plan"]["directories"] == 2  # c/ and c/d/
    assert digests(db.parent) == before
