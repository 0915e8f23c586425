"""The SQLite store's reads of given partitions (``store/sqlite/reads.py``): the set-based
overrides answer as the protocol's derived helpers, over any number of chunks; the churn
night's probe on a file without the journal's tables."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dircleaner.store.base import Store
from dircleaner.store.sqlite import SqliteStore, reads
from tests.store_contract import T0


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def test_the_set_based_overrides_agree_with_the_protocol_helpers(tmp_path: Path) -> None:
    """SQLite reads partitions by a join and checks rows by a point read; the Store helpers
    built on ``folder_partition_pages`` (what a new backend gets) must say the same."""
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        store.put_objects("b", [f"a/{i:02d}/c/d" for i in range(30)] + ["a/x/", "z"], 1)
        keys = [("b", "a/"), ("b", "nothing/"), ("b", "a/07/"), ("b", ""), ("c", "a/")]
        assert list(store.folder_partitions(keys)) == list(Store.folder_partitions(store, keys))
        assert [rows for _, rows in store.folder_partitions(keys)][1::3] == [[], []]
        for directory in ("a/", "a/07/", "a/07/c/", "a/07/c/d/", "a/x/", "z/", "q/"):
            expected = Store.has_folder_row(store, "b", directory)
            assert store.has_folder_row("b", directory) is expected
        assert Store.has_folder_row(store, "b", "a/07/c/") and not store.has_folder_row("c", "a/")


def test_the_set_based_reads_answer_every_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "RECHECK_CHUNK", 4)
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        store.put_objects("b", [f"d{i:02d}/x" for i in range(0, 20, 2)], T0)
        store.write_folder_rows([("b", f"d{i:02d}/", "sub") for i in range(1, 20, 2)], T0)
        keys = [("b", f"d{i:02d}/") for i in range(20)]
        assert store.nonempty_object_partitions(keys) == set(keys[::2])
        walked = list(store.folder_partitions(keys))
        assert walked == list(Store.folder_partitions(store, keys))
        assert [key for key, _ in walked] == keys
        assert [len(rows) for _, rows in walked] == [0, 1] * 10


def test_the_probe_of_a_file_without_the_journals_tables_finds_no_heavy_partition(
    tmp_path: Path,
) -> None:
    """A file from before the journal has no object tombstones to count: its probe is the
    re-check alone, and it creates no table."""
    path = tmp_path / "m.db"
    with SqliteStore.open(url_of(path), create=True) as store:
        store.put_objects("b", ["a/x", "c/y"], T0)
        store.delete_objects("b", ["c/y"], T0)
    conn = sqlite3.connect(path)
    conn.executescript("DROP TABLE journal; DROP TABLE object_tombstones;")
    conn.close()
    with SqliteStore.open(url_of(path)) as store:
        probe = store.probe_object_partitions([("b", "a/"), ("b", "c/")], 0)
        assert (probe.nonempty, probe.tombstone_heavy) == ({("b", "a/")}, set())
        tables = {name for (name,) in store.db.conn.execute("SELECT name FROM sqlite_master")}
        assert "object_tombstones" not in tables
    with SqliteStore.open(url_of(tmp_path / "new.db"), create=True) as store:
        store.put_objects("b", ["a/x", "c/y"], T0)
        store.delete_objects("b", ["c/y"], T0)
        probe = store.probe_object_partitions([("b", "a/"), ("b", "c/")], 0)
        assert (probe.nonempty, probe.tombstone_heavy) == ({("b", "a/")}, {("b", "c/")})
