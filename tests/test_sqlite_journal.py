"""The SQLite store's journal (``store/sqlite/journal.py``): a file made before the journal
gets its tables at its first write that needs them, never on opening or reading; expired rows
are invisible, then purged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from dircleaner.store.records import JournalEntry
from dircleaner.store.sqlite import SqliteStore
from tests.store_contract import T0


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def _file_before_the_journal(path: Path) -> None:
    SqliteStore.open(url_of(path), create=True).close()
    conn = sqlite3.connect(path)
    conn.executescript("DROP TABLE journal; DROP TABLE object_tombstones;")
    conn.close()


def _tables(store: SqliteStore) -> set[str]:
    return {str(n) for (n,) in store.db.conn.execute("SELECT name FROM sqlite_master")}


def test_an_older_file_gets_the_journals_tables_at_its_first_journal_write(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    _file_before_the_journal(path)
    with SqliteStore.open(url_of(path)) as store:
        assert list(store.journal_read(7)) == []
        store.purge_expired(0)
        assert not {"journal", "object_tombstones"} & _tables(store)
        entry = JournalEntry(7, 1, "b", "a/", T0)
        store.journal_write([entry], 3600)
        assert {"journal", "object_tombstones"} <= _tables(store)
        assert [e for batch in store.journal_read(7) for e in batch] == [entry]


def test_an_older_file_gets_them_at_its_first_object_delete(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    _file_before_the_journal(path)
    with SqliteStore.open(url_of(path)) as store:
        store.put_objects("b", ["a/x"], T0)
        assert "object_tombstones" not in _tables(store)
        assert store.delete_objects("b", ["a/x", "a/never"], T0) == 1
        tombstones = store.db.conn.execute("SELECT name FROM object_tombstones ORDER BY name")
        assert tombstones.fetchall() == [("never",), ("x",)]  # one per key, as Cassandra writes


def test_an_expired_journal_row_is_not_read_and_is_purged(tmp_path: Path) -> None:
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        live, gone = JournalEntry(7, 0, "b", "a/", T0), JournalEntry(7, 0, "b", "z/", T0)
        store.journal_write([live], 3600)
        store.journal_write([gone], -1)
        assert [e for batch in store.journal_read(7) for e in batch] == [live]
        store.purge_expired(864_000)
        rows = store.db.conn.execute("SELECT parent FROM journal").fetchall()
        assert rows == [("a/",)]
