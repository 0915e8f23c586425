"""The SQLite store's shared connection (``store/sqlite/database.py``): reads through a small
page cache that nest and give the big one back, write transactions that roll back on error,
and the set-based reads' temporary key table a chunk at a time."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dircleaner.model import Shard
from dircleaner.store.records import murmur_token
from dircleaner.store.sqlite import SqliteStore, database
from tests.store_contract import T0, folder_rows


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.mark.parametrize("bucket", [None, "b"])
def test_the_sizing_count_reads_through_a_small_cache_and_gives_the_big_one_back(
    tmp_path: Path, bucket: str | None
) -> None:
    """A whole-table count visits each page once: filling the connection's cache with
    them only costs fresh memory, and dropping them when the workers write."""
    from dircleaner.store.sqlite.schema import CACHE_KIB, SCAN_CACHE_KIB

    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        store.put_objects("b", ["a/b/c", "x/y"], T0)
        store.put_objects("other", ["q/r"], T0)
        conn = store.db.conn
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            estimate = store.estimate_directory_count(bucket)
        finally:
            conn.set_trace_callback(None)
        expected = len([r for r in folder_rows(store) if bucket is None or r.bucket == bucket])
        assert estimate.count == expected and estimate.exact
        counts = [i for i, sql in enumerate(seen) if "count(*)" in sql]
        small = [i for i, sql in enumerate(seen) if f"cache_size=-{SCAN_CACHE_KIB}" in sql]
        restored = [i for i, sql in enumerate(seen) if f"cache_size=-{CACHE_KIB}" in sql]
        assert len(counts) == 1 and small and restored
        assert small[-1] < counts[0] < restored[0]
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -CACHE_KIB


def test_scans_and_the_recheck_read_through_a_small_cache_and_give_the_big_one_back(
    tmp_path: Path,
) -> None:
    """The slice scans and the re-check visit each page once: through the connection's cache,
    the job's one process held pages it never read again (a full cache beside the candidates at
    its peak). A scan abandoned half way gives the big cache back too."""
    from dircleaner.store.sqlite.schema import CACHE_KIB, SCAN_CACHE_KIB

    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        store.put_objects("b", ["a/b/c", "x/y"], T0)
        conn = store.db.conn

        def cache() -> int:
            return int(conn.execute("PRAGMA cache_size").fetchone()[0])

        for scan in (
            store.scan_object_partitions,
            store.scan_folder_rows,
            store.scan_object_keys,
            store.scan_folder_keys,
        ):
            batches = iter(scan(Shard()))
            next(batches)
            assert cache() == -SCAN_CACHE_KIB, scan.__name__
            assert list(batches) == []
            assert cache() == -CACHE_KIB, scan.__name__
        abandoned = iter(store.scan_folder_rows(Shard()))
        next(abandoned)
        abandoned.close()  # type: ignore[attr-defined]
        assert cache() == -CACHE_KIB
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            assert store.nonempty_object_partitions([("b", "a/b/"), ("b", "q/")]) == {("b", "a/b/")}
        finally:
            conn.set_trace_callback(None)
        probes = [i for i, sql in enumerate(seen) if "SELECT 1 FROM objects" in sql]
        small = [i for i, sql in enumerate(seen) if f"cache_size=-{SCAN_CACHE_KIB}" in sql]
        restored = [i for i, sql in enumerate(seen) if f"cache_size=-{CACHE_KIB}" in sql]
        assert probes and small and restored
        assert small[0] < probes[0] and probes[-1] < restored[-1]
        assert cache() == -CACHE_KIB


def test_interleaved_reads_keep_the_small_cache_until_the_last_one_ends(tmp_path: Path) -> None:
    """Reads on one connection nest or overlap (a scan's generator left open while another scan
    or the re-check runs): the first one to end must not give the big cache back under the
    others, whichever order they end in."""
    from dircleaner.store.sqlite.schema import CACHE_KIB, SCAN_CACHE_KIB

    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        store.put_objects("b", ["a/b/c", "x/y"], T0)
        conn = store.db.conn

        def cache() -> int:
            return int(conn.execute("PRAGMA cache_size").fetchone()[0])

        outer = iter(store.scan_folder_rows(Shard()))
        next(outer)
        inner = iter(store.scan_object_partitions(Shard()))
        next(inner)
        assert list(inner) == []  # the inner scan ends first
        assert cache() == -SCAN_CACHE_KIB
        assert store.nonempty_object_partitions([("b", "a/b/")]) == {("b", "a/b/")}
        assert cache() == -SCAN_CACHE_KIB
        assert store.estimate_directory_count().count == 3  # the sizing count, too
        assert cache() == -SCAN_CACHE_KIB
        assert list(outer) == []
        assert cache() == -CACHE_KIB

        first = iter(store.scan_folder_rows(Shard()))
        next(first)
        second = iter(store.scan_folder_rows(Shard()))
        next(second)
        first.close()  # type: ignore[attr-defined]  # the scan that started first ends first
        assert cache() == -SCAN_CACHE_KIB
        assert list(second) == []
        assert cache() == -CACHE_KIB


def test_a_transaction_commits_its_writes_or_rolls_all_of_them_back(tmp_path: Path) -> None:
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        with store.db.transaction() as conn:
            conn.execute("INSERT INTO folders VALUES (1, 'b', '', 'kept', 1)")
        with pytest.raises(sqlite3.IntegrityError), store.db.transaction() as conn:
            conn.execute("INSERT INTO folders VALUES (2, 'b', '', 'gone', 1)")
            conn.execute("INSERT INTO folders VALUES (1, 'b', '', 'kept', 1)")  # a duplicate key
        assert not store.db.conn.in_transaction
        assert [row.name for row in folder_rows(store)] == ["kept"]


def test_a_keyed_query_answers_every_chunk_in_key_order_and_drops_its_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys of more than one chunk are each answered once; the temporary table is gone after,
    even when the caller stops reading half way."""
    monkeypatch.setattr(database, "RECHECK_CHUNK", 3)
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        keys = [(murmur_token("b", f"{i}/"), "b", f"{i}/", "") for i in range(8)]
        sql = "SELECT k.parent FROM temp.dircleaner_keys AS k"
        got = [parent for (parent,) in store.db.keyed_query(keys, sql, ())]
        assert sorted(got) == sorted(parent for _, _, parent, _ in keys)
        assert len(got) == len(keys)
        first_chunk = sorted(keys[:3])
        assert got[:3] == [parent for _, _, parent, _ in first_chunk]  # each chunk in key order
        partial = store.db.keyed_query(keys, sql, ())
        next(partial)
        partial.close()  # type: ignore[attr-defined]
        temp = "SELECT name FROM sqlite_temp_master WHERE name = 'dircleaner_keys'"
        assert store.db.conn.execute(temp).fetchall() == []
