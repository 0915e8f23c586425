"""The embedded SQLite store: the conformance suite on a real file, plus SQLite-only behaviour."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from dircleaner.errors import SchemaError, StoreNotFound, StoreNotOurs, StoreUrlError
from dircleaner.model import FolderRow, PartitionKey, Shard
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.records import TombstoneCharge, murmur_token
from dircleaner.store.sqlite import SqliteStore, path_from_url
from tests.store_contract import T0, StoreContract, folder_rows


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


class TestSqlite(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SqliteStore]:
        store = SqliteStore.open(url_of(tmp_path / "meta.db"), create=True)
        try:
            yield store
        finally:
            store.close()


# -- URLs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///meta.db", Path("meta.db")),
        ("sqlite:///rel/dir/meta.db", Path("rel/dir/meta.db")),
        ("sqlite:////abs/meta.db", Path("/abs/meta.db")),
    ],
)
def test_path_from_url(url: str, path: Path) -> None:
    assert path_from_url(url) == path


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://host/meta.db",
        "sqlite:///",
        "sqlite:///dir/",
        "sqlite:///meta.db?mode=ro",
        "sqlite:///meta.db#x",
        "sqlite://",
    ],
)
def test_malformed_sqlite_url(url: str) -> None:
    with pytest.raises(StoreUrlError) as info:
        path_from_url(url)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("url", ["sqlite:meta.db", "cassandra:h/ks", "nosuch:///x", ""])
def test_malformed_url_through_the_registry(url: str) -> None:
    with pytest.raises(StoreUrlError):
        open_store(url)


def test_open_store_dispatches_by_scheme(tmp_path: Path) -> None:
    with open_store(url_of(tmp_path / "m.db"), create=True) as store:
        assert isinstance(store, SqliteStore)
        assert store.scope_id() == "sqlite:objects,folders"


# -- opening ---------------------------------------------------------------------------------------


def test_missing_file_is_not_created_without_create(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    with pytest.raises(StoreNotFound, match="no metastore at"):
        SqliteStore.open(url_of(path))
    assert not path.exists()


def test_create_makes_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "meta.db"
    SqliteStore.open(url_of(path), create=True).close()
    assert path.is_file()


def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE something (x)")
    conn.close()
    with pytest.raises(StoreNotOurs, match=r"holds tables of its own \(something\), not a"):
        SqliteStore.open(url_of(path))


def test_non_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreNotFound, match="not a usable SQLite database"):
        SqliteStore.open(url_of(path))


def test_data_persists_across_reopen(tmp_path: Path) -> None:
    url = url_of(tmp_path / "meta.db")
    with SqliteStore.open(url, create=True) as store:
        store.put_objects("b", ["a/b/c"], T0)
        store.put_state("k", "v")
    with SqliteStore.open(url) as store:
        assert len(folder_rows(store)) == 2
        assert store.get_state("k") == "v"


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


def test_tokens_are_murmur_of_the_partition_key(tmp_path: Path) -> None:
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        store.put_objects("b", ["a/b/c"], T0)
        (key,) = [k for batch in store.scan_object_partitions(Shard()) for k in batch]
        assert key.token == murmur_token("b", "a/b/")


# -- the tombstone ledger --------------------------------------------------------------------------


def test_tombstone_ledger_counts_rows_and_partitions(tmp_path: Path) -> None:
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


def test_a_ledger_keyed_by_parent_is_rekeyed_by_token_with_its_charges(tmp_path: Path) -> None:
    """Files written before the ledger was keyed by partition token (for sequential inserts)
    keep every live charge when opened: a lost charge would loosen the budget."""
    path = tmp_path / "m.db"
    SqliteStore.open(url_of(path), create=True).close()
    conn = sqlite3.connect(path)
    conn.executescript(
        "DROP TABLE ledger;"
        "CREATE TABLE ledger (bucket TEXT NOT NULL, parent TEXT NOT NULL,"
        " generation TEXT NOT NULL, charge TEXT NOT NULL, cost INTEGER NOT NULL,"
        " expires_us INTEGER NOT NULL, PRIMARY KEY (bucket, parent, generation, charge))"
        " WITHOUT ROWID;"
    )
    far = 2**62
    conn.executemany(
        "INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?)",
        [
            ("b", "p/", "g", "r.0", 3, far),
            ("b", "p/", "g", "r.1", 2, far),
            ("b", "q/", "g", "r.0", 7, far),
        ],
    )
    conn.commit()
    conn.close()
    with SqliteStore.open(url_of(path)) as store:
        assert store.tombstones_charged([("b", "p/"), ("b", "q/"), ("b", "r/")]) == {
            ("b", "p/"): 5,
            ("b", "q/"): 7,
        }
        store.charge_tombstones([TombstoneCharge("b", "p/", "g", "s.0", 1)], 3600)
        assert store.tombstones_charged([("b", "p/")]) == {("b", "p/"): 6}
    conn = sqlite3.connect(path)
    assert {r[1] for r in conn.execute("PRAGMA table_info(ledger)")} >= {"token"}
    assert conn.execute("SELECT count(*) FROM ledger").fetchone() == (4,)
    conn.close()


#: the previous release's own tables, which the key-value table replaced
OLD_TABLES = """
CREATE TABLE filters (generation TEXT NOT NULL, shard INTEGER NOT NULL, seq INTEGER NOT NULL,
    data BLOB NOT NULL, PRIMARY KEY (generation, shard, seq)) WITHOUT ROWID;
CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_us INTEGER NOT NULL)
    WITHOUT ROWID;
"""


def _file_of_the_previous_release(path: Path) -> None:
    """A metastore as the previous release left it: filters, state and leases tables, no
    key-value table; a filter part, two state values and a lease held far into the future."""
    SqliteStore.open(url_of(path), create=True).close()
    conn = sqlite3.connect(path)
    conn.executescript("DROP TABLE kv;" + OLD_TABLES)
    conn.executemany(
        "INSERT INTO filters VALUES (?, ?, ?, ?)", [("g", 0, -1, b"header"), ("g", 0, 0, b"x")]
    )
    conn.executemany("INSERT INTO state VALUES (?, ?)", [("k", "v"), ("run|x", '{"a": 1}')])
    conn.execute("INSERT INTO leases VALUES ('run|sqlite:objects,folders', 'old run', ?)", (2**62,))
    conn.commit()
    conn.close()


def test_a_file_of_the_previous_release_opens_keeps_its_state_and_ignores_its_filters(
    tmp_path: Path,
) -> None:
    """Its run state is carried into the key-value table; its filters are not (the next run
    builds a new one) and neither is its lease (a run of the previous release)."""
    path = tmp_path / "old.db"
    _file_of_the_previous_release(path)
    with SqliteStore.open(url_of(path)) as store:
        assert store.get_state("k") == "v"
        assert store.get_state("run|x") == '{"a": 1}'
        assert store.list_filter_parts() == []
        assert store.lease_holder("run|sqlite:objects,folders") is None
        store.put_state("k", "new")
    with SqliteStore.open(url_of(path)) as store:  # carried over once, not again
        assert store.get_state("k") == "new"
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM filters").fetchone() == (2,)  # left alone
    conn.close()


def test_a_file_of_the_previous_release_opened_for_reading_lists_no_filters_and_stays_as_it_was(
    tmp_path: Path,
) -> None:
    """A command that only reads neither creates the key-value table nor carries state over."""
    path = tmp_path / "old.db"
    _file_of_the_previous_release(path)
    before = path.read_bytes()
    with SqliteStore.open(url_of(path), read_only=True) as store:
        assert store.list_filter_parts() == []
        assert store.get_state("k") is None
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]


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


def test_a_folders_row_whose_token_is_not_its_partitions_stops_the_packed_scan(
    tmp_path: Path,
) -> None:
    """The packed scan finds each row's partition key by its token: a row with a foreign token
    is refused (nothing is swept, so nothing is deleted) rather than put in another partition."""
    from dircleaner.filter import bloom
    from dircleaner.store.packed import FolderKeys

    assert bloom.load_kernels()
    with open_store(f"sqlite:///{tmp_path / 'm.db'}", create=True) as store:
        store.put_objects("b", ["a/b/c", "a/d/e"], 1)
        assert sum(map(len, store.scan_folder_keys(Shard()))) == 3
        assert isinstance(store, SqliteStore)
        with store.db.conn:
            store.db.conn.execute("UPDATE folders SET token = token + 1 WHERE name = 'd'")
        with pytest.raises(SchemaError, match="token"):
            list(store.scan_folder_keys(Shard()))
        # The rows themselves still read, as they are.
        assert [len(FolderKeys.of_rows(b)) for b in store.scan_folder_rows(Shard())] == [3]
