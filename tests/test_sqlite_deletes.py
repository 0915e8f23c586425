"""The SQLite store's deletes at T (``store/sqlite/deletes.py``): the tombstones they record,
counted as Cassandra's reads meet them; the rows they removed, counted; rows written after T
kept; tombstones past the grace period purged."""

from __future__ import annotations

from pathlib import Path

from dircleaner.model import FolderRange, FolderRow, PartitionKey
from dircleaner.store.records import murmur_token
from dircleaner.store.sqlite import SqliteStore
from tests.store_contract import T0, folder_rows


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def test_the_tombstones_table_counts_rows_and_partitions_as_cassandra_reads(tmp_path: Path) -> None:
    store = SqliteStore.open(url_of(tmp_path / "m.db"), create=True)
    try:
        store.write_folder_rows([("b", "p/", f"d{i:02d}") for i in range(20)], T0)
        rows = [r for r in folder_rows(store) if r.parent == "p/"]
        assert store.delete_folder_rows(rows[:5], T0) == [None] * 5
        assert store.tombstones_in_partition("b", "p/") == 5
        assert len(folder_rows(store)) == 15
        token = murmur_token("b", "q/")
        store.write_folder_rows([("b", "q/", f"d{i}") for i in range(10)], T0)
        store.delete_folder_partitions([PartitionKey(token, "b", "q/")], T0)
        # A partition-level deletion is no tombstone cell on reads (as Cassandra counts).
        assert store.tombstones_in_partition("b", "q/") == 0
        assert store.tombstones_in_partition("b", "never/") == 0
        store.delete_folder_rows([FolderRow(token, "b", "q/", "x")], T0)
        assert store.tombstones_in_partition("b", "q/") == 1
    finally:
        store.close()


def test_rows_removed_counts_only_the_rows_written_by_t(tmp_path: Path) -> None:
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        assert store.rows_removed == 0
        store.write_folder_rows([("b", "p/", n) for n in ("a", "b", "c", "d")], T0)
        store.write_folder_rows([("b", "p/", "late")], T0 + 10)
        store.write_folder_rows([("b", "q/", n) for n in ("x", "y")], T0)
        token = murmur_token("b", "p/")
        store.delete_folder_rows([FolderRow(token, "b", "p/", "a")], T0)
        store.delete_folder_rows([FolderRow(token, "b", "p/", "nothing")], T0)  # absent
        store.delete_folder_ranges([FolderRange(token, "b", "p/", "b", "late")], T0)
        assert store.rows_removed == 4  # a, then b, c and d: "late" was written after T
        store.delete_folder_partitions([PartitionKey(murmur_token("b", "q/"), "b", "q/")], T0)
        assert store.rows_removed == 6
        assert [row.name for row in folder_rows(store)] == ["late"]
        # Cassandra counts the tombstones, whatever they removed: 1 + 1 + 2 bounds.
        assert store.tombstones_in_partition("b", "p/") == 4


def test_a_rewrite_keeps_its_rows_from_a_partition_delete_at_t(tmp_path: Path) -> None:
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        store.write_folder_rows([("b", "p/", n) for n in ("keep", "drop", "new")], T0)
        store.write_folder_rows([("b", "p/", "new")], T0 + 50)
        key = PartitionKey(murmur_token("b", "p/"), "b", "p/")
        assert store.rewrite_folder_partition(key, {"drop"}, T0 + 10) == 2
        store.delete_folder_partitions([key], T0 + 5)
        assert sorted(row.name for row in folder_rows(store)) == ["keep", "new"]
        assert store.rows_removed == 1


def test_tombstones_past_the_grace_period_are_purged_and_no_longer_counted(
    tmp_path: Path,
) -> None:
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        token = murmur_token("b", "p/")
        store.delete_folder_rows([FolderRow(token, "b", "p/", n) for n in ("a", "b")], T0)
        conn = store.db.conn
        old = int((store.db.grace_s + 60) * 1_000_000)
        with conn:
            conn.execute(
                "UPDATE tombstones SET written_us = written_us - ? WHERE name = 'a'", (old,)
            )
        assert store.tombstones_in_partition("b", "p/") == 1  # as compaction would have
        store.purge_expired(store.db.grace_s)
        assert conn.execute("SELECT name FROM tombstones").fetchall() == [("b",)]
        store.purge_expired(0)
        assert conn.execute("SELECT count(*) FROM tombstones").fetchone() == (0,)
