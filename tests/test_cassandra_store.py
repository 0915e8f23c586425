"""The Cassandra store on a real node: the conformance suite, plus Cassandra-only behaviour.

Every test here needs a node (``scripts/cassandra start``); what runs anywhere (URL and config
parsing, the parent mapping, error mapping, token splitting and routing, an unreachable node) is
in ``test_cassandra_config.py``, ``test_cassandra_session.py``, ``test_cassandra_mapping.py`` and
``test_cassandra_ring.py``. The keyspaces are created once
per session; tests get a clean store by truncating its tables.
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
import random
import time
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cassandra import ConsistencyLevel, InvalidRequest, OperationTimedOut
from cassandra.cluster import NoHostAvailable
from cassandra.concurrent import execute_concurrent as real_execute_concurrent
from cassandra.metadata import Murmur3Token

import dircleaner.store.cassandra.reads as cassandra_reads
import dircleaner.store.cassandra.requests as cassandra_requests
import dircleaner.store.cassandra.scans as cassandra_scans
from dircleaner.errors import SchemaError, TransientStoreError, UsageError
from dircleaner.gcpause import cyclic_gc_paused
from dircleaner.model import ActionKind, FolderRange, FolderRow, PartitionKey, Shard
from dircleaner.paths import split_key
from dircleaner.pipeline.delete import ThrottleConfig, execute_plan
from dircleaner.pipeline.plan import plan_deletions
from dircleaner.pipeline.sweep import sweep
from dircleaner.retry import RetryPolicy
from dircleaner.store import open_store
from dircleaner.store.cassandra.config import load_cassandra_config, parse_cassandra_url
from dircleaner.store.cassandra.mapping import partition_token, stored_parent
from dircleaner.store.cassandra.schema import init_schema, schema_cql
from dircleaner.store.cassandra.store import CassandraStore
from tests.helpers import write_toml
from tests.store_contract import (
    T0,
    StoreContract,
    expected_partitions,
    folder_rows,
    partitions,
    spread_keys,
)
from tests.test_pipeline_sweep import SetFilter, dir_key

CUSTOM_TOML = """
[cassandra]
keyspace = "{keyspace}"
bucket_name = "only"
root_parent = "/"
parent_prefix = "/"
fetch_size = 7
splits_per_range = 3
concurrency = 4

[cassandra.tables]
objects = "s3_objs"
folders = "s3_dirs"
kv = "cleaner_kv"

[cassandra.columns]
bucket = false
parent = "dir"
name = "entry"

[cassandra.consistency]
build = "one"
sweep = "LOCAL_ONE"
"""


def keyspace_url(base: str, keyspace: str) -> str:
    """``base`` with its keyspace replaced."""
    parts = parse_cassandra_url(base)
    return f"cassandra://{','.join(parts.hosts)}:{parts.port}/{keyspace}"


#: tests write at t0 plus at most this many µs (see StoreContract)
TEST_SPAN_US = 100_000


def now_us() -> int:
    return time.time_ns() // 1000


def empty_store(store: CassandraStore) -> int:
    """Delete every live row of the store's tables; return a t0 later than every delete.

    TRUNCATE would be simpler but costs ~0.5 s per table (flush and snapshot) and needs every
    node up. Deleting at a timestamp past anything a previous test wrote, and starting the next
    test's writes after it, gives each test an empty store in a few tens of ms.
    """
    cfg = store.config
    session = store.requests.session
    cutoff = now_us() + TEST_SPAN_US
    key_cols = [c for c in (cfg.columns.bucket, cfg.columns.parent) if c]
    where = " AND ".join(f'"{c}" = ?' for c in key_cols)
    delete_objects = session.prepare(
        f'DELETE FROM "{cfg.keyspace}"."{cfg.tables.objects}" USING TIMESTAMP ? WHERE {where}'
    )
    object_keys = [k for batch in store.scan_object_partitions(Shard()) for k in batch]
    args = [(cutoff, *store.requests.key_values(k.bucket, k.parent)) for k in object_keys]
    assert all(
        r is None
        for r in store.requests.outcomes(store.requests.run_many(delete_objects, args, "write"))
    )
    folder_keys = {
        (r.bucket, r.parent): PartitionKey(r.token, r.bucket, r.parent)
        for batch in store.scan_folder_rows(Shard())
        for r in batch
    }
    results = store.delete_folder_partitions(list(folder_keys.values()), cutoff)
    assert all(r is None for r in results)
    kv = f'"{cfg.keyspace}"."{cfg.tables.kv}"'
    delete_space = session.prepare(f'DELETE FROM {kv} WHERE "space" = ?')
    for (space,) in session.execute(f'SELECT DISTINCT "space" FROM {kv}'):
        session.execute(delete_space, (space,))
    return cutoff + 1


# -- the conformance suite ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def cassandra_store(cassandra_url: str) -> Iterator[CassandraStore]:
    """One connection to the test keyspace, with the reference schema, for the whole session."""
    store = CassandraStore.open(cassandra_url, create=True)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.cassandra
class TestCassandra(StoreContract):
    @pytest.fixture
    def store(self, cassandra_store: CassandraStore) -> CassandraStore:
        self.t0 = empty_store(cassandra_store)
        return cassandra_store


@pytest.fixture(scope="session")
def custom_toml(tmp_path_factory: pytest.TempPathFactory, cassandra_url: str) -> Path:
    keyspace = parse_cassandra_url(cassandra_url).keyspace or "dircleaner_test"
    text = CUSTOM_TOML.format(keyspace=f"{keyspace}_custom")
    return write_toml(tmp_path_factory.mktemp("cfg") / "custom.toml", text)


@pytest.fixture(scope="session")
def custom_store(cassandra_url: str, custom_toml: Path) -> Iterator[CassandraStore]:
    """A metastore with other table and column names, no bucket column, ``/a/b/`` parents."""
    url = keyspace_url(cassandra_url, "").rstrip("/")
    store = CassandraStore.open(url, config_path=custom_toml, create=True)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.cassandra
class TestCassandraCustomMapping(StoreContract):
    BUCKET = "only"
    OTHER_BUCKET = None

    @pytest.fixture
    def store(self, custom_store: CassandraStore) -> CassandraStore:
        self.t0 = empty_store(custom_store)
        return custom_store

    def test_the_mapping_is_what_cassandra_holds(self, store: CassandraStore) -> None:
        store.put_objects("only", ["a/b/c", "top"], self.t0)
        cfg = store.config
        rows = store.requests.session.execute(f'SELECT dir, entry FROM "{cfg.keyspace}".s3_dirs')
        assert sorted(tuple(r) for r in rows) == [("/", "a"), ("/a/", "b")]
        parents = store.requests.session.execute(
            f'SELECT DISTINCT dir FROM "{cfg.keyspace}".s3_objs'
        )
        assert sorted(r[0] for r in parents) == ["/", "/a/b/"]
        assert store.scope_id() == f"cassandra:{cfg.keyspace}.s3_objs,s3_dirs"

    def test_another_bucket_is_refused_on_write_and_empty_on_read(
        self, store: CassandraStore
    ) -> None:
        with pytest.raises(UsageError, match="no bucket column"):
            store.put_objects("other", ["a/b"], self.t0)
        store.put_objects("only", ["a/b"], self.t0)
        assert partitions(store, bucket="other") == []
        assert folder_rows(store, bucket="other") == []


# -- Cassandra-only, against the node -----------------------------------------------------------


@pytest.mark.cassandra
class TestCassandraNode:
    t0 = T0

    @pytest.fixture
    def store(self, cassandra_store: CassandraStore) -> CassandraStore:
        self.t0 = empty_store(cassandra_store)
        return cassandra_store

    def test_negotiates_protocol_v5_and_token_ring(self, store: CassandraStore) -> None:
        assert store.requests.cluster.protocol_version >= 5
        assert store.requests.cluster.metadata.token_map is not None

    def test_row_tombstones_are_reported_by_the_traced_read(self, store: CassandraStore) -> None:
        p = f"p{self.t0}/"
        store.write_folder_rows([("b", p, f"d{i:02d}") for i in range(20)], self.t0)
        rows = [r for r in folder_rows(store) if r.parent == p]
        assert store.delete_folder_rows(rows[:5], self.t0) == [None] * 5
        # Cassandra 5.0: "Read 15 live rows and 5 tombstone cells"
        assert store.tombstones_in_partition("b", p) == 5
        assert len(folder_rows(store)) == 15

    def test_a_partition_deletion_is_not_a_counted_tombstone(self, store: CassandraStore) -> None:
        q = f"q{self.t0}/"
        store.write_folder_rows([("b", q, f"d{i}") for i in range(10)], self.t0)
        (row, *_) = folder_rows(store)
        store.delete_folder_partitions([PartitionKey(row.token, "b", q)], self.t0)
        # Cassandra 5.0: "Read 0 live rows and 0 tombstone cells"; the partition-level deletion
        # is not iterated over, so it does not count against tombstone_warn_threshold.
        assert store.tombstones_in_partition("b", q) == 0
        assert folder_rows(store) == []

    def test_rows_shadowed_by_a_partition_deletion_count_nothing_either(
        self, store: CassandraStore
    ) -> None:
        r = f"r{self.t0}/"
        store.write_folder_rows([("b", r, f"d{i}") for i in range(10)], self.t0)
        rows = folder_rows(store)
        store.delete_folder_rows(rows[:3], self.t0)
        assert store.tombstones_in_partition("b", r) == 3
        store.delete_folder_partitions([PartitionKey(rows[0].token, "b", r)], self.t0 + 1)
        assert store.tombstones_in_partition("b", r) == 0

    def test_a_range_deletion_is_reported_as_two_tombstone_markers(
        self, store: CassandraStore
    ) -> None:
        r = f"g{self.t0}/"
        store.write_folder_rows([("b", r, f"d{i:02d}") for i in range(20)], self.t0)
        (row, *_) = folder_rows(store)
        span = FolderRange(row.token, "b", r, "d05", "d14")
        assert store.delete_folder_ranges([span], self.t0) == [None]
        # Cassandra 5.0: "Read 10 live rows and 2 tombstone cells": the range's start and end
        # markers, however many rows it shadows.
        assert store.tombstones_in_partition("b", r) == 2
        assert len(folder_rows(store)) == 10

    def test_the_deletes_are_requests_a_caller_may_send_itself(self, store: CassandraStore) -> None:
        # What a caller that sends the deletes its own way (a window) builds on: every
        # partition is in exactly one IN request, and sending them one by one deletes them.
        parents = [f"w{self.t0}-{i}/" for i in range(70)]
        store.write_folder_rows([("b", p, "d") for p in parents], self.t0)
        keys = [PartitionKey(row.token, row.bucket, row.parent) for row in folder_rows(store)]
        keys.append(keys[0])  # a partition asked twice is deleted by the one request
        items, members = store.deletes.partition_deletes(keys, self.t0)
        assert sorted(i for taken in members for i in taken) == list(range(len(keys)))
        assert 1 < len(items) < len(keys)  # grouped into IN requests
        assert all(store.deletes.send([item]) == [None] for item in items)
        assert folder_rows(store) == []
        later = self.t0 + 1  # past the partition deletes
        store.write_folder_rows([("b", parents[0], "d"), ("b", parents[0], "e")], later)
        (row, other) = folder_rows(store)
        (request,) = store.deletes.row_deletes([row], later)
        assert store.deletes.send([request]) == [None]
        assert folder_rows(store) == [other]

    def test_filter_cell_over_one_mebibyte_is_refused(self, store: CassandraStore) -> None:
        with pytest.raises(ValueError, match="1 MiB"):
            store.put_filter_cell("g", 0, 0, b"x" * ((1 << 20) + 1))
        assert store.list_filter_parts() == []

    def test_small_pages_many_splits_same_scan(
        self, store: CassandraStore, cassandra_url: str
    ) -> None:
        store.put_objects("b", spread_keys(80), self.t0)
        tiny = dataclasses.replace(store.config, fetch_size=3, splits_per_range=5, concurrency=3)
        with CassandraStore.from_config(tiny) as small:
            assert folder_rows(small) == folder_rows(store)
            assert partitions(small) == partitions(store)
            assert partitions(small, Shard(1, 3)) == partitions(store, Shard(1, 3))

    def test_walk_reads_in_small_chunks_and_pages_keep_partitions_whole(
        self, store: CassandraStore
    ) -> None:
        """The prefix walk's IN reads: partitions cut across chunks of 4 and pages of 3 rows,
        a wide one among them, come back whole, in clustering order, as the scan has them."""
        store.put_objects("b", spread_keys(80), self.t0)
        store.write_folder_rows([("b", "wide/", f"w{i:02d}") for i in range(25)], self.t0)
        by_partition: dict[tuple[str, str], list[FolderRow]] = {}
        for row in folder_rows(store):
            by_partition.setdefault((row.bucket, row.parent), []).append(row)
        asked = [*sorted(by_partition), ("b", "absent/"), ("c", "wide/")]
        tiny = dataclasses.replace(store.config, fetch_size=3, verify_batch=4, concurrency=3)
        with CassandraStore.from_config(tiny) as small:
            got = list(small.folder_partitions(asked))
        assert [key for key, _ in got] == asked
        assert dict(got) == {**by_partition, ("b", "absent/"): [], ("c", "wide/"): []}
        assert len(dict(got)[("b", "wide/")]) == 25

    def test_walk_reads_both_tables_in_small_chunks_and_pages(self, store: CassandraStore) -> None:
        """``read_directories``: probes and folders reads in one window, cut into chunks of 4
        and pages of 3 rows, answer as the single-partition reads do."""
        keys = spread_keys(80)
        store.put_objects("b", [*keys, "gone/x"], self.t0)
        store.delete_objects("b", ["gone/x"], self.t0)
        store.write_folder_rows([("b", "wide/", f"w{i:02d}") for i in range(25)], self.t0)
        by_partition: dict[tuple[str, str], list[FolderRow]] = {}
        for row in folder_rows(store):
            by_partition.setdefault((row.bucket, row.parent), []).append(row)
        asked = list(
            dict.fromkeys(
                [*sorted(by_partition), *sorted(expected_partitions("b", keys)), ("b", "gone/")]
            )
        )
        asked += [("b", "absent/"), ("c", "wide/")]
        tiny = dataclasses.replace(store.config, fetch_size=3, verify_batch=4, concurrency=3)
        with CassandraStore.from_config(tiny) as small:
            read = small.read_directories(asked)
        assert read.folder_rows == by_partition
        assert len(read.folder_rows[("b", "wide/")]) == 25
        assert read.with_objects == {k for k in asked if store.objects_partition_nonempty(*k)}
        assert ("b", "gone/") not in read.with_objects and read.with_objects

    def test_abandoning_a_scan_does_not_hang(self, store: CassandraStore) -> None:
        store.put_objects("b", spread_keys(200), self.t0)
        tiny = dataclasses.replace(store.config, fetch_size=2, concurrency=4)
        with CassandraStore.from_config(tiny) as small:
            started = time.monotonic()
            scan = small.scan_folder_rows(Shard())
            assert isinstance(scan, Generator)
            first = next(scan)
            scan.close()
            assert first
            assert time.monotonic() - started < 10

    def test_a_scan_with_the_cyclic_gc_paused_leaves_no_rows_behind(
        self, store: CassandraStore
    ) -> None:
        """The build and the sweep pause the cyclic GC: a page's rows must go by reference
        counting once consumed, not wait in the driver's response cycles for a collection."""
        store.put_objects("b", spread_keys(80), self.t0)
        tiny = dataclasses.replace(store.config, fetch_size=3, concurrency=3)
        with CassandraStore.from_config(tiny) as small:
            gc.collect()
            with cyclic_gc_paused():
                gc.set_debug(gc.DEBUG_SAVEALL)
                try:
                    rows = sum(len(batch) for batch in small.scan_folder_rows(Shard()))
                    gc.collect()
                    left = [o for o in gc.garbage if isinstance(o, tuple) and "b" in o]
                finally:
                    gc.set_debug(0)
                    gc.garbage.clear()
        assert rows > 80
        assert left == []

    def test_scans_are_safe_from_several_threads(self, store: CassandraStore) -> None:
        store.put_objects("b", spread_keys(60), self.t0)
        expected = folder_rows(store)
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: folder_rows(store), range(4)))
        assert all(result == expected for result in results)

    def test_estimate_of_a_small_table_is_an_exact_count(self, store: CassandraStore) -> None:
        store.put_objects("b", spread_keys(40), self.t0)
        estimate = store.estimate_directory_count()
        assert estimate.exact
        assert estimate.count == len(folder_rows(store))
        assert "exact count" in estimate.method

    def test_a_large_count_is_extrapolated(
        self, store: CassandraStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        rows = [("b", f"p{i}/", f"n{j}") for i in range(200) for j in range(5)]
        store.write_folder_rows(rows, self.t0)
        monkeypatch.setattr(cassandra_scans, "COUNT_LIMIT", 100)
        estimate = store.estimate_directory_count()
        assert not estimate.exact
        assert "extrapolated" in estimate.method
        assert 300 <= estimate.count <= 3000  # 1000 rows; ~10% of the ring sampled

    def test_estimate_from_size_estimates(
        self, store: CassandraStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store.write_folder_rows([("b", f"p{i}/", "n" * 20) for i in range(300)], self.t0)
        # 100k partitions of 2 KB each, names of 20 bytes: ≈ 2e8 / 26 rows.
        monkeypatch.setattr(store.scans, "size_estimate", lambda: (100_000, 200_000_000, 16, 1))
        estimate = store.estimate_directory_count()
        assert not estimate.exact
        assert estimate.count == -(-200_000_000 // 26)
        assert "size_estimates" in estimate.method

    def test_size_estimates_are_read_from_every_node(self, store: CassandraStore) -> None:
        # On a fresh table the recorder has nothing yet (or only zeros): None means "count".
        result = store.scans.size_estimate()
        assert result is None or result[0] > 0

    def test_open_without_create_checks_the_schema(self, cassandra_url: str) -> None:
        with CassandraStore.open(cassandra_url) as store:
            assert store.scope_id().startswith("cassandra:")

    def test_init_schema_is_idempotent(self, cassandra_url: str) -> None:
        assert init_schema(cassandra_url) == []

    def test_open_store_dispatches_to_cassandra(self, cassandra_url: str) -> None:
        with open_store(cassandra_url) as store:
            assert isinstance(store, CassandraStore)

    def test_missing_keyspace_is_named(self, cassandra_url: str) -> None:
        url = keyspace_url(cassandra_url, "dircleaner_no_such_keyspace")
        with pytest.raises(SchemaError, match="keyspace 'dircleaner_no_such_keyspace'"):
            CassandraStore.open(url)

    def test_missing_table_is_named(self, cassandra_url: str, tmp_path: Path) -> None:
        cfg = write_toml(tmp_path / "c.toml", '[cassandra.tables]\nfolders = "no_such_folders"\n')
        match = r"\.no_such_folders \(folders table\) does not exist"
        with pytest.raises(SchemaError, match=match):
            CassandraStore.open(cassandra_url, config_path=cfg)

    def test_missing_column_is_named(self, cassandra_url: str, tmp_path: Path) -> None:
        cfg = write_toml(tmp_path / "c.toml", '[cassandra.columns]\nparent = "parnt"\n')
        with pytest.raises(SchemaError, match="column 'parnt' does not exist"):
            CassandraStore.open(cassandra_url, config_path=cfg)

    def test_wrong_partition_key_is_named(self, cassandra_url: str, tmp_path: Path) -> None:
        cfg = write_toml(tmp_path / "c.toml", "[cassandra.columns]\nbucket = false\n")
        with pytest.raises(SchemaError, match=r"partitioned by \(bucket, parent\)"):
            CassandraStore.open(cassandra_url, config_path=cfg)

    def test_missing_kv_table_suggests_init_schema(
        self, cassandra_url: str, tmp_path: Path
    ) -> None:
        cfg = write_toml(tmp_path / "c.toml", '[cassandra.tables]\nkv = "nope"\n')
        with pytest.raises(SchemaError, match=r"nope \(kv table\) does not exist; .*init-schema"):
            CassandraStore.open(cassandra_url, config_path=cfg)

    def test_a_config_naming_the_retired_filters_and_state_tables_still_opens(
        self, cassandra_url: str, tmp_path: Path
    ) -> None:
        text = '[cassandra.tables]\nfilters = "old_filters"\nstate = "old_state"\n'
        cfg = write_toml(tmp_path / "c.toml", text)
        with CassandraStore.open(cassandra_url, config_path=cfg) as store:
            store.put_state("read back", "yes")
            assert store.get_state("read back") == "yes"

    def test_consistency_profiles_follow_the_config(
        self, cassandra_url: str, custom_store: CassandraStore
    ) -> None:
        profiles = custom_store.requests.cluster.profile_manager.profiles
        assert profiles["build"].consistency_level == ConsistencyLevel.ONE
        assert profiles["sweep"].consistency_level == ConsistencyLevel.LOCAL_ONE
        assert profiles["delete"].consistency_level == ConsistencyLevel.LOCAL_QUORUM


# -- the batched verify re-check, against the node ------------------------------------------------

#: odd keys whose parents need quoting, are not ASCII, or collide with the root's stored form
RECHECK_ODD_KEYS = [
    'quotes/it\'s "q"/x',
    "sql/'; DROP TABLE objects; --/y",
    "unicodé/日本語/ファイル",
    "emoji/🙂/🚀.bin",
    "/lead/slash",
    "//x",
    "a//b",
]


@dataclasses.dataclass
class RecheckCase:
    """A store holding a mix of non-empty, emptied and never-written objects partitions."""

    store: CassandraStore
    #: the keys to re-check: every kind, with duplicates, in no particular order
    asked: list[tuple[str, str]]
    #: the answer the single-key probe gives, key by key
    expected: set[tuple[str, str]]


def recheck_case(store: CassandraStore, buckets: list[str], t0: int, dirs: int) -> RecheckCase:
    """Write ``dirs`` non-empty, ``dirs`` emptied and some marker partitions per bucket."""
    nonempty: list[tuple[str, str]] = []
    for bucket in buckets:
        keys = [f"n{i}/f{i % 3}" for i in range(dirs)]
        keys += [f"m{i}/" for i in range(dirs // 5)]  # marker objects: name ""
        keys += ["top-level-object", *RECHECK_ODD_KEYS]  # the root parent ""
        store.put_objects(bucket, keys, t0)
        emptied = [f"e{i}/gone" for i in range(dirs)]
        store.put_objects(bucket, emptied, t0)
        store.delete_objects(bucket, emptied, t0 + 1)
        nonempty += sorted({(bucket, split_key(key)[0]) for key in keys})
    empty = [(b, f"e{i}/") for b in buckets for i in range(dirs)]
    empty += [(b, f"never{i}/") for b in buckets for i in range(dirs // 2)]
    # Ancestors that only hold directories have an empty objects partition too.
    empty += [(b, p) for b in buckets for p in ("quotes/", "unicodé/", "/", "a/")]
    asked = nonempty + empty + nonempty[::7] + empty[::11]  # with duplicates
    random.Random(t0).shuffle(asked)
    expected = {key for key in dict.fromkeys(asked) if store.objects_partition_nonempty(*key)}
    assert expected == set(nonempty)  # the case is what it says
    return RecheckCase(store, asked, expected)


def key_values(store: CassandraStore, bucket: str, parent: str) -> tuple[str, ...]:
    """The bound values of a partition key: ``(bucket, stored parent)`` or ``(stored parent,)``."""
    return tuple(str(v) for v in store.requests.key_values(bucket, parent))


def ring_range(store: CassandraStore, token: int) -> int:
    """Index of the token range (previous ring token, ring token] holding ``token``."""
    token_map = store.requests.cluster.metadata.token_map
    ring = sorted(int(t.value) for t in token_map.ring)
    return bisect.bisect_left(ring, token) % len(ring)


@pytest.fixture(scope="class", params=["reference", "custom"])
def case(
    request: pytest.FixtureRequest,
    cassandra_store: CassandraStore,
    custom_store: CassandraStore,
) -> RecheckCase:
    """Written once per mapping and class: its tests only read (and restore what they change)."""
    if request.param == "reference":
        store, buckets, dirs = cassandra_store, ["b1", "b2", "b3"], 130
    else:
        store, buckets, dirs = custom_store, ["only"], 410
    return recheck_case(store, buckets, empty_store(store), dirs)


@pytest.mark.cassandra
class TestCassandraRecheck:
    """``nonempty_object_partitions`` (IN reads) answers as ``objects_partition_nonempty``."""

    @pytest.fixture(autouse=True)
    def restore_config(self, case: RecheckCase, monkeypatch: pytest.MonkeyPatch) -> None:
        # Tests change verify_batch on the shared store; monkeypatch puts the config back.
        monkeypatch.setattr(case.store.requests, "config", case.store.config)

    @staticmethod
    def with_batch(store: CassandraStore, batch: int) -> None:
        store.requests.config = dataclasses.replace(store.config, verify_batch=batch)

    @pytest.mark.parametrize("batch", [1, 7, 100, 5000])
    def test_same_answers_as_the_single_key_probe(self, case: RecheckCase, batch: int) -> None:
        unique = list(dict.fromkeys(case.asked))
        assert len(unique) >= 900 and len(case.asked) > len(unique)
        assert len(unique) % 7 and len(unique) % 100  # the last chunks are short
        self.with_batch(case.store, batch)
        assert case.store.nonempty_object_partitions(case.asked) == case.expected
        assert case.store.nonempty_object_partitions([]) == set()

    def test_reads_run_in_waves(self, case: RecheckCase, monkeypatch: pytest.MonkeyPatch) -> None:
        calls = failing_execute_concurrent(monkeypatch, fail_first=0)
        monkeypatch.setattr(cassandra_reads, "VERIFY_WAVE_READS", 10)
        self.with_batch(case.store, 13)
        assert case.store.nonempty_object_partitions(case.asked) == case.expected
        assert len(calls) > 5 and set(calls[:-1]) == {10} and 1 <= calls[-1] <= 10

    def test_keys_span_the_ring_and_each_read_stays_in_one_range(self, case: RecheckCase) -> None:
        store = case.store
        self.with_batch(store, 16)
        unique = list(dict.fromkeys(case.asked))
        ranges = {ring_range(store, partition_token(key_values(store, *k))) for k in unique}
        assert len(ranges) == len(store.requests.cluster.metadata.token_map.ring)  # every range
        reads = [store.reads.bind_in_probe(*chunk) for chunk in store.reads.verify_chunks(unique)]
        covered: set[tuple[str, ...]] = set()
        for bound in reads:
            values = [bytes(v).decode("utf-8") for v in bound.values]
            bucket = values[0] if store.config.columns.bucket else None
            parents = values[1:] if bucket is not None else values
            assert len(parents) in (1, 2, 4, 8, 16)  # padded to a power of two or the batch
            keys = [(bucket, p) if bucket is not None else (p,) for p in parents]
            assert {ring_range(store, partition_token(k)) for k in keys} == {
                ring_range(store, bound.routing_token)
            }
            assert bound.fetch_size is None
            covered.update(keys)
        stored = {store.requests.key_values(*k) for k in unique}
        assert covered == stored
        # Neighbouring reads go to different ranges (interleaved), as far as there are several.
        first = [ring_range(store, b.routing_token) for b in reads[:8]]
        assert len(set(first)) == len(first)

    def test_client_tokens_are_the_nodes_tokens(self, case: RecheckCase) -> None:
        store = case.store
        scanned = [key for batch in store.scan_object_partitions(Shard()) for key in batch]
        assert len(scanned) > 400
        for key in scanned:
            assert partition_token(key_values(store, key.bucket, key.parent)) == key.token
        # ... and what the driver routes a bound single-key read by.
        for key in scanned[:50]:
            bound = store.reads.object_probe.bind(store.requests.key_values(key.bucket, key.parent))
            assert Murmur3Token.hash_fn(bound.routing_key) == key.token

    def test_a_key_repeated_in_in_is_read_once(self, case: RecheckCase) -> None:
        """Padding repeats a chunk's last key: Cassandra 5.0 reads it once, not each time."""
        store = case.store
        bucket, parent = next(iter(case.expected))
        other = next(
            k for k in dict.fromkeys(case.asked) if k not in case.expected and k[0] == bucket
        )
        stored = [stored_parent(store.config, p) for p in (parent, other[1])]
        values = (stored[0], stored[1], stored[1], stored[1])
        bound = store.reads.in_probe(4).bind(
            (bucket, *values) if store.config.columns.bucket else values
        )
        result = store.requests.session.execute(bound, execution_profile="trace", trace=True)
        assert len(result.current_rows) == 1
        events = result.get_query_trace(max_wait_sec=10.0).events
        reads = [e for e in events if "Executing single-partition query" in str(e.description)]
        assert len(reads) == 2

    def test_a_transient_failure_is_retried(
        self, case: RecheckCase, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        calls = failing_execute_concurrent(monkeypatch, fail_first=1)
        self.with_batch(case.store, 50)
        assert case.store.nonempty_object_partitions(case.asked) == case.expected
        assert len(calls) == 2 and calls[1] == 1  # every read, then the one that failed

    @pytest.mark.parametrize("exc", [OperationTimedOut("client timeout"), NoHostAvailable("x", {})])
    def test_a_chunk_that_keeps_failing_raises_never_a_partial_answer(
        self, case: RecheckCase, monkeypatch: pytest.MonkeyPatch, exc: Exception
    ) -> None:
        calls = failing_execute_concurrent(monkeypatch, fail_first=99, exc=exc)
        self.with_batch(case.store, 50)
        with pytest.raises(TransientStoreError, match=type(exc).__name__):
            case.store.nonempty_object_partitions(case.asked)
        # only that one again
        assert calls[1:] == [1] * (cassandra_requests.REQUEST_RETRY.attempts - 1)

    def test_other_errors_are_raised_at_once(
        self, case: RecheckCase, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        calls = failing_execute_concurrent(monkeypatch, fail_first=99, exc=InvalidRequest("no"))
        with pytest.raises(InvalidRequest):
            case.store.nonempty_object_partitions(case.asked)
        assert len(calls) == 1

    def test_no_keys_no_request(self, case: RecheckCase, monkeypatch: pytest.MonkeyPatch) -> None:
        calls = failing_execute_concurrent(monkeypatch, fail_first=99)
        assert case.store.nonempty_object_partitions([]) == set()
        assert calls == []


def failing_execute_concurrent(
    monkeypatch: pytest.MonkeyPatch, fail_first: int, exc: Exception | None = None
) -> list[int]:
    """Make the first read of each ``execute_concurrent`` call fail, ``fail_first`` times.

    Returns the statements per call, as the calls happen. Backoff is skipped.
    """
    real = real_execute_concurrent
    calls: list[int] = []
    failure = exc if exc is not None else OperationTimedOut("client timeout")

    def fake(session: object, items: list[tuple[object, object]], **kwargs: object) -> object:
        calls.append(len(items))
        results = list(real(session, items, **kwargs))
        if len(calls) <= fail_first:
            results[0] = (False, failure)
        return results

    monkeypatch.setattr(cassandra_requests, "execute_concurrent", fake)
    no_wait = RetryPolicy(cassandra_requests.REQUEST_RETRY.attempts, base_s=0.0, cap_s=0.0)
    monkeypatch.setattr(cassandra_requests.CassandraRequests, "retry_policy", no_wait)
    return calls


@pytest.mark.cassandra
def test_custom_mapping_refuses_a_foreign_bucket_as_the_single_probe_does(
    custom_store: CassandraStore,
) -> None:
    with pytest.raises(UsageError, match="no bucket column"):
        custom_store.nonempty_object_partitions([("only", "a/"), ("other", "a/")])
    with pytest.raises(UsageError, match="no bucket column"):
        custom_store.objects_partition_nonempty("other", "a/")


# -- a folders table clustered in descending order ---------------------------------------------


@pytest.fixture(scope="session")
def desc_store(cassandra_url: str) -> Iterator[CassandraStore]:
    """The reference schema, except that the folders table clusters its names DESC."""
    keyspace = (parse_cassandra_url(cassandra_url).keyspace or "dircleaner_test") + "_desc"
    url = keyspace_url(cassandra_url, keyspace)
    cfg = load_cassandra_config(parse_cassandra_url(url), None)
    with CassandraStore.open(cassandra_url) as admin:
        create_keyspace, _objects, folders, *_ = schema_cql(cfg)
        admin.requests.session.execute(create_keyspace)
        admin.requests.session.execute(f'{folders} WITH CLUSTERING ORDER BY ("name" DESC)')
    store = CassandraStore.open(url, create=True)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.cassandra
def test_a_descending_folders_table_sweeps_plans_and_range_deletes_the_same_rows(
    desc_store: CassandraStore,
) -> None:
    """The scan returns names high to low, so a run's first name is its highest: the store
    binds the bounds as (min, max), which Cassandra applies in the column's own order."""
    store = desc_store
    t0 = empty_store(store)
    store.write_folder_rows([("b", "w/", f"d{i:02d}") for i in range(20)], t0)
    store.write_folder_rows([("b", "", "w")], t0)
    table = store.requests.cluster.metadata.keyspaces[store.config.keyspace].tables["folders"]
    assert table.clustering_key[0].name == "name"
    assert "DESC" in table.export_as_string()
    rows = [r for r in folder_rows(store) if r.parent == "w/"]
    assert [r.name for r in rows] == [f"d{i:02d}" for i in reversed(range(20))]
    # d12..d15 and d03 empty, the rest present.
    keep = [i for i in range(20) if i not in (3, 12, 13, 14, 15)]
    filt = SetFilter([dir_key("b", "w/"), *(dir_key("b", f"w/d{i:02d}/") for i in keep)])
    facts = sweep(store.scan_folder_rows(Shard()), filt).facts
    plan = plan_deletions(facts, 10)
    assert [(a.kind, [r.name for r in a.rows]) for a in plan.actions] == [
        (ActionKind.RANGE, ["d15", "d14", "d13", "d12"]),
        (ActionKind.ROW, ["d03"]),
    ]
    stats = execute_plan(store, plan, t0, ThrottleConfig(rate=0))
    assert (stats.deletes.range, stats.deletes.row, stats.directories) == (1, 1, 5)
    left = [r.name for r in folder_rows(store) if r.parent == "w/"]
    assert left == [f"d{i:02d}" for i in reversed(keep)]
    assert store.tombstones_in_partition("b", "w/") == 3
