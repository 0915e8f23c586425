"""The SQLite store's index writes (``store/sqlite/writes.py``): the newer write wins, bulk
inserts only into the two index tables, and bulk loading gives the file its write-ahead log
back however the load ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from dircleaner.model import Shard
from dircleaner.store.records import murmur_token
from dircleaner.store.sqlite import SqliteStore
from tests.store_contract import T0, folder_rows


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def test_an_older_write_never_rolls_a_rows_time_back(tmp_path: Path) -> None:
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        store.write_folder_rows([("b", "", "a")], T0 + 10)
        store.write_folder_rows([("b", "", "a")], T0)
        store.write_object_rows([("b", "a/", "x")], T0 + 10)
        store.write_object_rows([("b", "a/", "x")], T0)
        times = store.db.conn.execute("SELECT ts FROM folders UNION ALL SELECT ts FROM objects")
        assert times.fetchall() == [(T0 + 10,), (T0 + 10,)]


def test_bulk_inserts_keep_the_first_row_of_a_key_and_only_go_to_the_index_tables(
    tmp_path: Path,
) -> None:
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        token = murmur_token("b", "p/")
        with store.bulk_loading():
            store.bulk_insert("folders", [(token, "b", "p/", "d", T0), (token, "b", "p/", "d", 9)])
            store.bulk_insert("objects", [(token, "b", "p/", "o", T0)])
        assert [(r.name, r.parent) for r in folder_rows(store)] == [("d", "p/")]
        assert store.db.conn.execute("SELECT ts FROM folders").fetchall() == [(T0,)]
        assert [len(b) for b in store.scan_object_partitions(Shard())] == [1]
        with pytest.raises(ValueError, match="unknown table 'kv'"):
            store.bulk_insert("kv", [(token, "b", "p/", "d", T0)])


def test_bulk_loading_gives_the_write_ahead_log_back_after_a_failed_load(tmp_path: Path) -> None:
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        conn = store.db.conn
        with pytest.raises(RuntimeError), store.bulk_loading():
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("off",)
            raise RuntimeError("the generator failed")
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
