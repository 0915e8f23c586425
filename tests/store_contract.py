"""The store conformance suite, written once, run against every backend.

A backend's test class subclasses ``StoreContract`` and provides a ``store`` fixture: a fresh,
empty store per test. Tests write at ``self.t0`` plus at most a few thousand µs; a backend that
empties its store by deleting at a timestamp (rather than truncating) sets ``self.t0`` past it.
Backends without a bucket column set ``OTHER_BUCKET = None`` and fix ``BUCKET`` to their single
bucket; the tests that need two buckets (marked ``two_buckets``) are then not collected for
them (see ``pytest_collection_modifyitems`` in conftest.py), so no run reports them skipped.
"""

from __future__ import annotations

import itertools
import multiprocessing
import queue
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dircleaner.errors import BucketNotFound
from dircleaner.model import FolderRange, FolderRow, PartitionKey, Shard
from dircleaner.paths import dir_of_row, directories_of, folder_row_of, split_key
from dircleaner.store import open_store
from dircleaner.store.base import (
    HEADER_SEQ,
    MARKER_SEQ,
    Store,
    missing_bucket,
    require_bucket,
)
from dircleaner.store.capabilities import IndexWriter, TombstoneCounter
from dircleaner.store.kv import MAX_VALUE_BYTES
from dircleaner.store.records import (
    JOURNAL_SHARDS,
    JOURNAL_SLOT_S,
    JournalEntry,
    StoreTraits,
    TombstoneCharge,
)

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

    from dircleaner.store.packed import FolderKeys

T0 = 1_000_000


WHOLE_RING = Shard()


def partitions(
    store: Store, shard: Shard = WHOLE_RING, bucket: str | None = None
) -> list[PartitionKey]:
    """Every object partition of ``shard``, checking that batches are non-empty lists."""
    out: list[PartitionKey] = []
    for batch in store.scan_object_partitions(shard, bucket):
        assert isinstance(batch, list) and batch
        out.extend(batch)
    return out


def folder_rows(
    store: Store, shard: Shard = WHOLE_RING, bucket: str | None = None
) -> list[FolderRow]:
    """Every folder row of ``shard``, checking that batches are non-empty lists."""
    out: list[FolderRow] = []
    for batch in store.scan_folder_rows(shard, bucket):
        assert isinstance(batch, list) and batch
        out.extend(batch)
    return out


def expected_folder_rows(bucket: str, keys: Iterable[str]) -> set[tuple[str, str, str]]:
    return {(bucket, *folder_row_of(d)) for key in keys for d in directories_of(key)}


def expected_partitions(bucket: str, keys: Iterable[str]) -> set[tuple[str, str]]:
    return {(bucket, split_key(key)[0]) for key in keys}


def row_keys(rows: Iterable[FolderRow]) -> set[tuple[str, str, str]]:
    return {(r.bucket, r.parent, r.name) for r in rows}


def partition_keys(keys: Iterable[PartitionKey]) -> set[tuple[str, str]]:
    return {(k.bucket, k.parent) for k in keys}


def _folder_fields(batch: FolderKeys) -> tuple[list[int], bytes, list[int], list[int]]:
    return (
        batch.tokens.tolist(),
        batch.buf.tobytes(),
        batch.offsets.tolist(),
        batch.prefix_ends.tolist(),
    )


def spread_keys(count: int) -> list[str]:
    """Keys in ``count`` distinct directories, two objects each, plus some nesting."""
    keys = []
    for i in range(count):
        keys.append(f"d{i % 7}/sub{i}/obj-a")
        keys.append(f"d{i % 7}/sub{i}/obj-b")
    return keys


ODD_KEYS = [
    pytest.param(["a//b"], id="empty-segment"),
    pytest.param(["//x", "/lead/slash"], id="leading-slashes"),
    pytest.param(["unicodé/日本語/ファイル", "emoji/🙂/🚀.bin"], id="unicode"),
    pytest.param(['quotes/it\'s "q"/x', "sql/'; DROP TABLE folders; --/y"], id="quotes"),
    pytest.param(["back\\slash/dir\\name/y", "tab\tand\nnewline/z"], id="control-and-backslash"),
    pytest.param(["p/" + "n" * 1022], id="1024-byte-name"),
    pytest.param(["k/" * 511 + "xy"], id="1024-byte-key-511-levels"),
    pytest.param(["long/" + "ж" * 508 + "/x"], id="1024-byte-multibyte-dir"),
]


def _race(
    url: str,
    config_path: Path | None,
    space: str,
    keys: list[str],
    name: str,
    start: Event,
    results: Queue[tuple[str, tuple[list[str], list[str]]]],
) -> None:
    """One racer of the concurrent compare-and-set test, in a process of its own: puts its
    name with the keys it inserted first, then the keys it replaced first (each from whichever
    value it finds)."""
    with open_store(url, config_path=config_path) as store:
        start.wait(60)
        inserted = [k for k in keys if store.kv_write(space, k, name.encode(), expect=None)]
        replaced = []
        for key in keys:
            current = [e.value for e in store.kv_read(space, key, fresh=True) if e.key == key]
            if current in ([b"left"], [b"right"]) and store.kv_write(
                space, key, f"{name}2".encode(), expect=current[0]
            ):
                replaced.append(key)
    results.put((name, (inserted, replaced)))


class StoreContract:
    """Semantics every Store backend must honour."""

    BUCKET = "b1"
    OTHER_BUCKET: str | None = "b2"
    #: the first write timestamp (µs) of a test; a backend's ``store`` fixture may move it on
    t0 = T0

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        raise NotImplementedError("a backend's test class provides a fresh, empty store")

    def need_two_buckets(self) -> str:
        """The second bucket of a ``two_buckets`` test (never collected without one)."""
        assert self.OTHER_BUCKET is not None, "a two_buckets test was collected for one bucket"
        return self.OTHER_BUCKET

    # -- an empty store ----------------------------------------------------------------------------
    def test_empty_store(self, store: Store) -> None:
        assert partitions(store) == []
        assert folder_rows(store) == []
        assert store.estimate_directory_count().count >= 0
        assert store.list_filter_parts() == []
        assert store.get_state("nothing") is None
        assert not store.objects_partition_nonempty(self.BUCKET, "a/")
        assert store.scope_id() == store.scope_id() != ""
        assert store.scope_id().startswith(f"{store.traits.scheme}:")
        assert isinstance(store.traits, StoreTraits) and isinstance(store, IndexWriter)

    # -- puts and the folder index -----------------------------------------------------------------
    def test_put_creates_object_row_and_every_ancestor(self, store: Store) -> None:
        store.put_objects(self.BUCKET, ["a/b/c.txt"], self.t0)
        assert partition_keys(partitions(store)) == {(self.BUCKET, "a/b/")}
        assert row_keys(folder_rows(store)) == {(self.BUCKET, "", "a"), (self.BUCKET, "a/", "b")}
        assert store.objects_partition_nonempty(self.BUCKET, "a/b/")
        assert not store.objects_partition_nonempty(self.BUCKET, "a/")

    def test_marker_key_is_stored_in_its_own_directory(self, store: Store) -> None:
        store.put_objects(self.BUCKET, ["a/b/"], self.t0)
        assert partition_keys(partitions(store)) == {(self.BUCKET, "a/b/")}
        assert row_keys(folder_rows(store)) == {(self.BUCKET, "", "a"), (self.BUCKET, "a/", "b")}
        assert store.objects_partition_nonempty(self.BUCKET, "a/b/")

    def test_root_level_key_and_root_round_trip(self, store: Store) -> None:
        store.put_objects(self.BUCKET, ["top.txt"], self.t0)
        assert [(k.bucket, k.parent) for k in partitions(store)] == [(self.BUCKET, "")]
        assert folder_rows(store) == []
        assert store.objects_partition_nonempty(self.BUCKET, "")
        store.write_folder_rows([(self.BUCKET, "", "x")], self.t0)
        (row,) = folder_rows(store)
        assert (row.bucket, row.parent, row.name) == (self.BUCKET, "", "x")
        assert store.delete_folder_rows([row], self.t0) == [None]
        assert folder_rows(store) == []

    @pytest.mark.parametrize("keys", ODD_KEYS)
    def test_odd_keys_round_trip(self, store: Store, keys: list[str]) -> None:
        store.put_objects(self.BUCKET, keys, self.t0)
        assert partition_keys(partitions(store)) == expected_partitions(self.BUCKET, keys)
        assert row_keys(folder_rows(store)) == expected_folder_rows(self.BUCKET, keys)
        for key in keys:
            assert store.objects_partition_nonempty(self.BUCKET, split_key(key)[0])
        store.delete_objects(self.BUCKET, keys, self.t0)
        assert partitions(store) == []

    def test_put_objects_is_idempotent(self, store: Store) -> None:
        store.put_objects(self.BUCKET, ["a/b/c", "a/b/d"], self.t0)
        store.put_objects(self.BUCKET, ["a/b/c"], self.t0 + 1)
        assert len(partitions(store)) == 1
        assert len(folder_rows(store)) == 2

    def test_delete_objects_leaves_the_folder_index_alone(self, store: Store) -> None:
        keys = ["a/b/c.txt", "a/b/d.txt", "a/e/f.txt"]
        store.put_objects(self.BUCKET, keys, self.t0)
        before = row_keys(folder_rows(store))
        store.delete_objects(self.BUCKET, ["a/b/c.txt", "a/b/d.txt"], self.t0 + 1)
        assert partition_keys(partitions(store)) == {(self.BUCKET, "a/e/")}
        assert row_keys(folder_rows(store)) == before
        assert not store.objects_partition_nonempty(self.BUCKET, "a/b/")

    def test_object_delete_at_t_spares_later_writes(self, store: Store) -> None:
        store.write_object_rows([(self.BUCKET, "a/", "old")], self.t0)
        store.write_object_rows([(self.BUCKET, "a/", "new")], self.t0 + 200)
        both = [(self.BUCKET, "a/", "old"), (self.BUCKET, "a/", "new")]
        store.delete_object_rows(both, self.t0 + 100)
        assert store.objects_partition_nonempty(self.BUCKET, "a/")
        store.delete_object_rows([(self.BUCKET, "a/", "new")], self.t0 + 200)
        assert not store.objects_partition_nonempty(self.BUCKET, "a/")

    # -- scans -------------------------------------------------------------------------------------
    def test_object_partitions_are_distinct_and_in_token_order(self, store: Store) -> None:
        keys = spread_keys(150)
        store.put_objects(self.BUCKET, keys, self.t0)
        found = partitions(store)
        assert len(found) == len({(k.bucket, k.parent) for k in found})
        assert partition_keys(found) == expected_partitions(self.BUCKET, keys)
        tokens = [k.token for k in found]
        assert tokens == sorted(tokens)

    @pytest.mark.parametrize("count", [2, 4, 7])
    def test_object_partition_shards_cover_the_ring_once(self, store: Store, count: int) -> None:
        store.put_objects(self.BUCKET, spread_keys(120), self.t0)
        whole = partitions(store)
        pieces: list[PartitionKey] = []
        for index in range(count):
            shard = Shard(index, count)
            lo, hi = shard.token_range()
            part = partitions(store, shard)
            assert all(lo <= k.token <= hi for k in part)
            pieces.extend(part)
        assert sorted(pieces) == sorted(whole)
        assert len(set(pieces)) == len(pieces)

    def test_tokens_agree_between_tables(self, store: Store) -> None:
        keys = spread_keys(20)
        store.put_objects(self.BUCKET, keys, self.t0)
        # A directory whose objects partition exists is listed in its own folders partition too
        # (its marker-less children): write one folder row into each objects partition's key.
        store.write_folder_rows([(k.bucket, k.parent, "child") for k in partitions(store)], self.t0)
        object_tokens = {(k.bucket, k.parent): k.token for k in partitions(store)}
        folder_tokens = {(r.bucket, r.parent): r.token for r in folder_rows(store)}
        for key, token in object_tokens.items():
            assert folder_tokens[key] == token

    def test_folder_rows_are_contiguous_per_partition_in_clustering_order(
        self, store: Store
    ) -> None:
        names = ["zeta", "Alpha", "alpha", "ä", "日", "a b", "a", "", "ab", "~", "0"]
        rows = [(self.BUCKET, f"p{i}/", name) for i in range(40) for name in names]
        store.write_folder_rows(rows, self.t0)
        found = folder_rows(store)
        assert row_keys(found) == set(rows)
        runs = [key for key, _ in itertools.groupby(found, key=lambda r: (r.bucket, r.parent))]
        assert len(runs) == len(set(runs)) == 40
        tokens = [r.token for r in found]
        assert tokens == sorted(tokens)
        for _, group in itertools.groupby(found, key=lambda r: (r.bucket, r.parent)):
            got = [r.name for r in group]
            assert got == sorted(names, key=lambda n: n.encode("utf-8"))

    @pytest.mark.parametrize("count", [3, 4])
    def test_folder_row_shards_are_disjoint_and_complete(self, store: Store, count: int) -> None:
        store.put_objects(self.BUCKET, spread_keys(100), self.t0)
        whole = folder_rows(store)
        pieces = [row for i in range(count) for row in folder_rows(store, Shard(i, count))]
        assert pieces == whole  # shards in order concatenate to the whole scan
        assert len(set(pieces)) == len(pieces)

    @pytest.mark.two_buckets
    def test_bucket_filter_on_scans(self, store: Store) -> None:
        other = self.need_two_buckets()
        store.put_objects(self.BUCKET, ["a/b/c", "x/y"], self.t0)
        store.put_objects(other, ["a/b/c", "q/r"], self.t0)
        assert partition_keys(partitions(store, bucket=self.BUCKET)) == {
            (self.BUCKET, "a/b/"),
            (self.BUCKET, "x/"),
        }
        assert partition_keys(partitions(store, bucket=other)) == {(other, "a/b/"), (other, "q/")}
        assert partition_keys(partitions(store, bucket="nobody")) == set()
        assert row_keys(folder_rows(store, bucket=other)) == expected_folder_rows(
            other, ["a/b/c", "q/r"]
        )
        assert len(folder_rows(store)) == 6
        store.delete_objects(other, ["a/b/c"], self.t0 + 1)
        assert store.objects_partition_nonempty(self.BUCKET, "a/b/")
        assert not store.objects_partition_nonempty(other, "a/b/")

    def test_bucket_filter_matching_nothing(self, store: Store) -> None:
        store.put_objects(self.BUCKET, ["a/b/c"], self.t0)
        assert partitions(store, bucket="nobody") == []
        assert folder_rows(store, bucket="nobody") == []

    @pytest.mark.two_buckets
    def test_which_buckets_exist(self, store: Store) -> None:
        other = self.need_two_buckets()
        assert not store.bucket_exists(self.BUCKET) and store.bucket_names() == ([], True)
        store.put_objects(self.BUCKET, ["top-level-object"], self.t0)
        # A bucket whose objects are gone but whose folder index still lists directories.
        store.put_objects(other, ["a/b/c"], self.t0)
        store.delete_objects(other, ["a/b/c"], self.t0 + 1)
        assert store.bucket_exists(self.BUCKET) and store.bucket_exists(other)
        assert not store.bucket_exists(self.BUCKET.upper())
        assert store.bucket_names() == (sorted([self.BUCKET, other]), True)
        assert Store.bucket_names(store) == (sorted([self.BUCKET, other]), True)  # the scan
        assert missing_bucket(store, None) is None
        assert missing_bucket(store, other) is None
        assert missing_bucket(store, "nosuch") == (
            f"bucket 'nosuch' does not exist in this store (buckets: {self.BUCKET!r},"
            f" {other!r}); is --bucket right?"
        )
        with pytest.raises(BucketNotFound):
            require_bucket(store, "nosuch")

    def test_iter_folder_rows(self, store: Store) -> None:
        store.put_objects(self.BUCKET, ["a/b/c"], self.t0)
        assert list(store.iter_folder_rows()) == folder_rows(store)

    @pytest.mark.parametrize("compiled", [True, False], ids=["kernels", "no-kernels"])
    @pytest.mark.parametrize("bucket", [None, "b1"])
    def test_packed_scans_are_the_row_scans_packed(
        self, store: Store, bucket: str | None, compiled: bool, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The build's and the sweep's packed scans carry the row scans' keys, byte for byte:
        non-ASCII, a NUL and a backslash in names, the root partition, every batch; with the
        compiled kernels and without."""
        from dircleaner.filter import bloom
        from dircleaner.store.packed import FolderKeys, ObjectKeys

        if compiled:
            assert bloom.load_kernels()
        else:
            monkeypatch.setattr(bloom, "compiled", lambda: None)
        keys = ["a/b/c", "日本/é x/f", "a/n\0ul/g", "top", "a/b\\c/d", *spread_keys(30)]
        store.put_objects(self.BUCKET, keys, self.t0)
        # Rows no put writes: a "/" in a name (its partition key is not up to its last "/").
        store.write_folder_rows([(self.BUCKET, "a/", "s/l/"), (self.BUCKET, "", "x/y")], self.t0)
        for shard in (WHOLE_RING, Shard(1, 3)):
            folders = list(store.scan_folder_keys(shard, bucket))
            rows = [FolderKeys.of_rows(b) for b in store.scan_folder_rows(shard, bucket)]
            assert [_folder_fields(b) for b in folders] == [_folder_fields(b) for b in rows]
            flat = [row for batch in store.scan_folder_rows(shard, bucket) for row in batch]
            decoded = [
                (int(b.tokens[i]), *b.prefix(i), b.name(i)) for b in folders for i in range(len(b))
            ]
            assert decoded == [tuple(row) for row in flat]
            objects = list(store.scan_object_keys(shard, bucket))
            parts = [
                ObjectKeys.of_partitions(b) for b in store.scan_object_partitions(shard, bucket)
            ]
            assert [(b.buf.tobytes(), b.offsets.tolist()) for b in objects] == [
                (b.buf.tobytes(), b.offsets.tolist()) for b in parts
            ]
        scanned = sum(map(len, store.scan_object_keys(WHOLE_RING, bucket)))
        assert scanned == len(partitions(store, bucket=bucket))

    # -- one folders partition (the prefix walk) --------------------------------------------------
    def test_folder_partition_pages_are_the_scan_of_that_partition_in_pages(
        self, store: Store
    ) -> None:
        names = [f"n{i:03d}" for i in range(23)] + ["ä", "日", ""]
        store.write_folder_rows([(self.BUCKET, "wide/", n) for n in names], self.t0)
        store.write_folder_rows([(self.BUCKET, "wide/x/", "y"), (self.BUCKET, "", "z")], self.t0)
        scanned = [r for r in folder_rows(store) if r.parent == "wide/"]
        pages = list(store.folder_partition_pages(self.BUCKET, "wide/", page_rows=5))
        assert all(0 < len(page) <= 5 for page in pages)
        assert len(pages) >= 6  # 26 rows, 5 a page: paged, not read at once
        assert [row for page in pages for row in page] == scanned
        assert len(scanned) == len(names)
        root = [row for page in store.folder_partition_pages(self.BUCKET, "") for row in page]
        assert [(r.parent, r.name) for r in root] == [("", "z")]

    def test_folder_partition_pages_of_an_absent_or_emptied_partition(self, store: Store) -> None:
        store.write_folder_rows([(self.BUCKET, "p/", "a"), (self.BUCKET, "p/", "b")], self.t0)
        assert list(store.folder_partition_pages(self.BUCKET, "nothing/")) == []
        (key,) = {PartitionKey(r.token, r.bucket, r.parent) for r in folder_rows(store)}
        assert store.delete_folder_partitions([key], self.t0 + 1) == [None]
        assert list(store.folder_partition_pages(self.BUCKET, "p/")) == []

    @pytest.mark.two_buckets
    def test_folder_partition_pages_stay_in_their_bucket(self, store: Store) -> None:
        other = self.need_two_buckets()
        store.write_folder_rows([(self.BUCKET, "p/", "mine"), (other, "p/", "theirs")], self.t0)
        rows = [row for page in store.folder_partition_pages(other, "p/") for row in page]
        assert [(r.bucket, r.parent, r.name) for r in rows] == [(other, "p/", "theirs")]

    def test_folder_partitions_in_the_order_asked(self, store: Store) -> None:
        keys = spread_keys(60)
        store.put_objects(self.BUCKET, keys, self.t0)
        by_partition: dict[tuple[str, str], list[FolderRow]] = {}
        for row in folder_rows(store):
            by_partition.setdefault((row.bucket, row.parent), []).append(row)
        asked = [*sorted(by_partition, reverse=True), (self.BUCKET, "missing/")]
        got = list(store.folder_partitions(asked))
        assert [key for key, _ in got] == asked
        assert {key: rows for key, rows in got} == {**by_partition, (self.BUCKET, "missing/"): []}

    def test_read_directories_answers_as_the_probe_and_the_folders_read(self, store: Store) -> None:
        keys = spread_keys(60)
        store.put_objects(self.BUCKET, [*keys, "a/b/c", "m/", "gone/x"], self.t0)
        store.delete_objects(self.BUCKET, ["gone/x"], self.t0)
        by_partition: dict[tuple[str, str], list[FolderRow]] = {}
        for row in folder_rows(store):
            by_partition.setdefault((row.bucket, row.parent), []).append(row)
        asked = [
            *sorted(by_partition, reverse=True),
            *sorted(expected_partitions(self.BUCKET, keys)),
            (self.BUCKET, "a/b/"),
            (self.BUCKET, "m/"),
            (self.BUCKET, "gone/"),
            (self.BUCKET, "missing/"),
        ]
        asked = list(dict.fromkeys(asked))
        read = store.read_directories(asked)
        assert read.folder_rows == by_partition
        assert read.with_objects == {
            *expected_partitions(self.BUCKET, keys),
            (self.BUCKET, "a/b/"),
            (self.BUCKET, "m/"),
        }
        assert (self.BUCKET, "gone/") not in read.with_objects
        assert read.with_objects == store.nonempty_object_partitions(asked)
        empty = store.read_directories([])
        assert (empty.with_objects, empty.folder_rows) == (set(), {})

    def test_has_folder_row(self, store: Store) -> None:
        store.put_objects(self.BUCKET, ["a/b/c", "top/"], self.t0)
        assert store.has_folder_row(self.BUCKET, "a/")
        assert store.has_folder_row(self.BUCKET, "a/b/")
        assert store.has_folder_row(self.BUCKET, "top/")
        assert not store.has_folder_row(self.BUCKET, "a/b/c/")
        assert not store.has_folder_row(self.BUCKET, "b/")
        assert not store.has_folder_row(self.BUCKET, "a/x/")
        if self.OTHER_BUCKET is not None:
            assert not store.has_folder_row(self.OTHER_BUCKET, "a/")

    # -- the emptiness re-check -------------------------------------------------------------------
    def test_nonempty_object_partitions(self, store: Store) -> None:
        store.put_objects(self.BUCKET, ["a/b/c", "top", "m/"], self.t0)
        store.put_objects(self.BUCKET, ["gone/x"], self.t0)
        store.delete_objects(self.BUCKET, ["gone/x"], self.t0)
        asked = [
            (self.BUCKET, "a/b/"),
            (self.BUCKET, "a/"),
            (self.BUCKET, ""),
            (self.BUCKET, "m/"),
            (self.BUCKET, "gone/"),
            (self.BUCKET, "never/"),
            (self.BUCKET, "a/b/"),
        ]
        assert store.nonempty_object_partitions(asked) == {
            (self.BUCKET, "a/b/"),
            (self.BUCKET, ""),
            (self.BUCKET, "m/"),
        }
        assert store.nonempty_object_partitions([]) == set()

    def test_nonempty_object_partitions_many(self, store: Store) -> None:
        keys = spread_keys(200)
        store.put_objects(self.BUCKET, keys, self.t0)
        parents = sorted(expected_partitions(self.BUCKET, keys))
        missing = [(self.BUCKET, f"missing{i}/") for i in range(100)]
        assert store.nonempty_object_partitions(parents + missing) == set(parents)

    # -- the churn night's checks -----------------------------------------------------------------
    def test_probe_object_partitions_tells_live_empty_and_tombstone_heavy(
        self, store: Store
    ) -> None:
        b = self.BUCKET
        # Past Cassandra's default tombstone_warn_threshold (1000), the one it tells a read of.
        heavy = [f"heavy/o{i:04d}" for i in range(1100)]
        store.put_objects(b, [*heavy, "light/o1", "light/o2", "live/o", "mixed/keep"], self.t0)
        store.put_objects(b, [f"mixed/o{i:04d}" for i in range(1100)], self.t0)
        store.delete_objects(b, [*heavy, "light/o1", "light/o2"], self.t0 + 10)
        store.delete_objects(b, [f"mixed/o{i:04d}" for i in range(1100)], self.t0 + 10)
        asked = [(b, p) for p in ("heavy/", "light/", "live/", "mixed/", "never/", "heavy/")]
        probe = store.probe_object_partitions(asked, 500)
        assert probe.nonempty == {(b, "live/"), (b, "mixed/")}
        assert probe.tombstone_heavy == {(b, "heavy/")}
        # The verdict on a live row does not change with the tombstones in front of it.
        assert store.nonempty_object_partitions(asked) == probe.nonempty
        assert store.probe_object_partitions([], 500).nonempty == set()

    def test_folder_partition_heads_are_each_partitions_first_rows(self, store: Store) -> None:
        b = self.BUCKET
        store.put_objects(b, [f"w/{i:02d}/o" for i in range(12)] + ["one/x/o", "top"], self.t0)
        asked = [(b, "w/"), (b, "one/"), (b, "one/x/"), (b, "never/"), (b, "")]
        heads = store.folder_partition_heads(asked, 3)
        assert {key: [r.name for r in rows] for key, rows in heads.items()} == {
            (b, "w/"): ["00", "01", "02"],
            (b, "one/"): ["x"],
            (b, ""): ["one", "w"],
        }
        scanned = {(r.bucket, r.parent, r.name): r.token for r in folder_rows(store)}
        assert all(
            scanned[(r.bucket, r.parent, r.name)] == r.token for rs in heads.values() for r in rs
        )
        assert [r.name for r in store.folder_partition_heads([(b, "w/")], 100)[(b, "w/")]] == [
            f"{i:02d}" for i in range(12)
        ]
        with pytest.raises(ValueError):
            store.folder_partition_heads(asked, 0)

    def test_rows_listing(self, store: Store) -> None:
        b = self.BUCKET
        store.put_objects(b, ["a/b/c", "top"], self.t0)
        asked = [(b, "a/"), (b, "a/b/"), (b, "a/b/c/"), (b, "x/"), (b, "a/")]
        scanned = {(r.bucket, dir_of_row(r.parent, r.name)): r for r in folder_rows(store)}
        assert store.rows_listing(asked) == {key: scanned[key] for key in [(b, "a/"), (b, "a/b/")]}
        assert store.rows_listing([]) == {}
        # Rows read together, partitions and names in two lists: a same-named row of another
        # partition (x/b/, not asked) is not one of them.
        store.put_objects(b, ["x/b/1", "x/q/1"], self.t0)
        many = [(b, "a/b/"), (b, "x/q/"), *((b, f"none{i}/b/") for i in range(100))]
        assert set(store.rows_listing(many)) == {(b, "a/b/"), (b, "x/q/")}

    # -- deletes at a timestamp -------------------------------------------------------------------
    def test_delete_rows_at_t_removes_rows_written_at_or_before_t(self, store: Store) -> None:
        store.write_folder_rows([(self.BUCKET, "p/", "old")], self.t0)
        store.write_folder_rows([(self.BUCKET, "p/", "exact")], self.t0 + 100)
        store.write_folder_rows([(self.BUCKET, "p/", "new")], self.t0 + 200)
        store.write_folder_rows([(self.BUCKET, "q/", "other")], self.t0)
        rows = [r for r in folder_rows(store) if r.parent == "p/"]
        assert len(rows) == 3
        assert store.delete_folder_rows(rows, self.t0 + 100) == [None, None, None]
        assert row_keys(folder_rows(store)) == {
            (self.BUCKET, "p/", "new"),
            (self.BUCKET, "q/", "other"),
        }

    def test_rewritten_row_survives_an_older_delete(self, store: Store) -> None:
        store.write_folder_rows([(self.BUCKET, "p/", "d")], self.t0)
        store.write_folder_rows([(self.BUCKET, "p/", "d")], self.t0 + 300)
        # An older write does not roll the row's timestamp back.
        store.write_folder_rows([(self.BUCKET, "p/", "d")], self.t0 + 100)
        (row,) = folder_rows(store)
        assert store.delete_folder_rows([row], self.t0 + 200) == [None]
        assert row_keys(folder_rows(store)) == {(self.BUCKET, "p/", "d")}
        assert store.delete_folder_rows([row], self.t0 + 300) == [None]
        assert folder_rows(store) == []

    def test_delete_partitions_at_t(self, store: Store) -> None:
        store.write_folder_rows([(self.BUCKET, "p/", n) for n in ("a", "b", "c")], self.t0)
        store.write_folder_rows([(self.BUCKET, "p/", "late")], self.t0 + 500)
        store.write_folder_rows([(self.BUCKET, "q/", "kept")], self.t0)
        store.write_folder_rows([(self.BUCKET, "", "rootdir")], self.t0)
        keys = {(k.bucket, k.parent): k for k in self._folder_partitions(store)}
        results = store.delete_folder_partitions(
            [keys[(self.BUCKET, "p/")], keys[(self.BUCKET, "")]], self.t0 + 100
        )
        assert results == [None, None]
        assert row_keys(folder_rows(store)) == {
            (self.BUCKET, "p/", "late"),
            (self.BUCKET, "q/", "kept"),
        }

    def test_delete_many_partitions_at_t(self, store: Store) -> None:
        # More partitions than one request carries (Cassandra groups them per ring range):
        # every asked partition goes, each one's row written after T survives, nothing else is
        # touched, and the results come back one per partition, in order.
        parents = [f"many{i}/" for i in range(150)]
        store.write_folder_rows([(self.BUCKET, p, n) for p in parents for n in ("a", "b")], self.t0)
        store.write_folder_rows([(self.BUCKET, p, "late") for p in parents[::3]], self.t0 + 500)
        store.write_folder_rows([(self.BUCKET, "untouched/", "x")], self.t0)
        keys = {(k.bucket, k.parent): k for k in self._folder_partitions(store)}
        asked = [keys[(self.BUCKET, p)] for p in reversed(parents)]
        assert store.delete_folder_partitions(asked, self.t0 + 100) == [None] * len(asked)
        assert row_keys(folder_rows(store)) == {
            *((self.BUCKET, p, "late") for p in parents[::3]),
            (self.BUCKET, "untouched/", "x"),
        }

    @pytest.mark.two_buckets
    def test_delete_partitions_of_two_buckets_asked_twice(self, store: Store) -> None:
        # Cassandra sends one request per bucket and ring range: the same parent in two
        # buckets is two partitions, and a partition asked twice gets a result at both places.
        other = self.need_two_buckets()
        parents = [f"pair{i}/" for i in range(40)]
        for bucket in (self.BUCKET, other):
            store.write_folder_rows([(bucket, p, "x") for p in parents], self.t0)
        keys = {(k.bucket, k.parent): k for k in self._folder_partitions(store)}
        asked = [keys[(b, p)] for p in parents[:30] for b in (self.BUCKET, other)]
        asked.append(keys[(other, parents[0])])
        assert store.delete_folder_partitions(asked, self.t0 + 1) == [None] * len(asked)
        assert row_keys(folder_rows(store)) == {
            (b, p, "x") for p in parents[30:] for b in (self.BUCKET, other)
        }

    def test_delete_of_absent_rows_and_partitions_is_harmless(self, store: Store) -> None:
        ghost = FolderRow(0, self.BUCKET, "nowhere/", "x")
        assert store.delete_folder_rows([ghost], self.t0) == [None]
        nowhere = PartitionKey(0, self.BUCKET, "nowhere/")
        assert store.delete_folder_partitions([nowhere], self.t0) == [None]
        assert store.delete_folder_rows([], self.t0) == []
        assert store.delete_folder_partitions([], self.t0) == []

    def test_delete_results_one_per_item(self, store: Store) -> None:
        store.put_objects(self.BUCKET, spread_keys(30), self.t0)
        rows = folder_rows(store)
        assert store.delete_folder_rows(rows, self.t0) == [None] * len(rows)
        assert folder_rows(store) == []

    # -- range deletes at a timestamp --------------------------------------------------------
    @staticmethod
    def _range(store: Store, bucket: str, parent: str, first: str, last: str) -> FolderRange:
        (token,) = {r.token for r in folder_rows(store) if (r.bucket, r.parent) == (bucket, parent)}
        return FolderRange(token, bucket, parent, first, last)

    def test_delete_range_at_t_removes_rows_between_the_bounds_written_at_or_before_t(
        self, store: Store
    ) -> None:
        b = self.BUCKET
        store.write_folder_rows([(b, "p/", n) for n in "abcdefgh"], self.t0)
        store.write_folder_rows([(b, "p/", "d")], self.t0 + 300)  # rewritten after T: survives
        store.write_folder_rows([(b, "p/", "c2")], self.t0 + 200)  # a new sibling after T
        store.write_folder_rows([(b, "p/", "e2")], self.t0 + 100)  # written exactly at T
        store.write_folder_rows([(b, "q/", n) for n in "bcdef"], self.t0)  # another partition
        store.write_folder_rows([(b, "", n) for n in "bcdef"], self.t0)  # the root partition
        bounds = self._range(store, b, "p/", "b", "f")
        assert store.delete_folder_ranges([bounds], self.t0 + 100) == [None]
        assert row_keys(r for r in folder_rows(store) if r.parent == "p/") == {
            (b, "p/", n) for n in ("a", "c2", "d", "g", "h")
        }
        assert row_keys(r for r in folder_rows(store) if r.parent != "p/") == {
            (b, parent, n) for parent in ("q/", "") for n in "bcdef"
        }

    def test_delete_range_in_the_root_partition_and_with_bounds_given_high_to_low(
        self, store: Store
    ) -> None:
        b = self.BUCKET
        store.write_folder_rows([(b, "", n) for n in "abcdefg"], self.t0)
        # Bounds in a descending clustering order: first > last, the same rows go.
        descending = self._range(store, b, "", "e", "c")
        assert store.delete_folder_ranges([descending], self.t0) == [None]
        assert [r.name for r in folder_rows(store)] == ["a", "b", "f", "g"]

    def test_delete_range_bounds_compare_as_utf8_bytes_like_the_scan_order(
        self, store: Store
    ) -> None:
        b = self.BUCKET
        names = ["a", "z", "~", "é", "ÿ", "Ā", "日", "\uffff", "😀", "a b", "a\tb", "A"]
        store.write_folder_rows([(b, "u/", n) for n in names], self.t0)
        scanned = [r.name for r in folder_rows(store)]
        # The scan's clustering order is code point order (UTF-8 byte order), as Python sorts.
        assert scanned == sorted(names)
        lo, hi = scanned.index("z"), scanned.index("日")
        assert store.delete_folder_ranges([self._range(store, b, "u/", "z", "日")], self.t0) == [
            None
        ]
        assert [r.name for r in folder_rows(store)] == scanned[:lo] + scanned[hi + 1 :]

    @pytest.mark.two_buckets
    def test_delete_ranges_of_other_buckets_and_partitions_stay_apart(self, store: Store) -> None:
        other = self.need_two_buckets()
        for bucket in (self.BUCKET, other):
            store.write_folder_rows([(bucket, "p/", n) for n in "abcde"], self.t0)
        bounds = self._range(store, self.BUCKET, "p/", "a", "e")
        assert store.delete_folder_ranges([bounds], self.t0) == [None]
        assert row_keys(folder_rows(store)) == {(other, "p/", n) for n in "abcde"}

    def test_delete_ranges_one_result_per_range_and_harmless_when_empty(self, store: Store) -> None:
        b = self.BUCKET
        store.write_folder_rows([(b, p, n) for p in ("p/", "q/") for n in "abcdef"], self.t0)
        ranges = [
            self._range(store, b, "p/", "a", "b"),
            self._range(store, b, "p/", "d", "e"),
            self._range(store, b, "q/", "c", "f"),
            FolderRange(0, b, "nowhere/", "a", "z"),
        ]
        assert store.delete_folder_ranges(ranges, self.t0) == [None] * 4
        assert row_keys(folder_rows(store)) == {(b, "p/", "c"), (b, "p/", "f")} | {
            (b, "q/", n) for n in "ab"
        }
        assert store.delete_folder_ranges([], self.t0) == []

    def test_a_range_delete_counts_two_tombstones_in_its_partition(self, store: Store) -> None:
        """Cassandra stores a range tombstone as two bound markers and a read of the partition
        counts both (the planner charges a range 2 against the per-partition budget)."""
        b = self.BUCKET
        assert isinstance(store, TombstoneCounter)
        count = store.tombstones_in_partition
        store.write_folder_rows([(b, "t/", f"d{i:02d}") for i in range(30)], self.t0)
        store.write_folder_rows([(b, "", "t")], self.t0)
        assert count(b, "t/") == 0
        one = self._range(store, b, "t/", "d03", "d12")
        assert store.delete_folder_ranges([one], self.t0) == [None]
        assert count(b, "t/") == 2
        two = [self._range(store, b, "t/", "d15", "d17"), self._range(store, b, "t/", "d20", "d29")]
        assert store.delete_folder_ranges(two, self.t0) == [None, None]
        assert count(b, "t/") == 6
        # Next to a row tombstone, a range still counts its two markers.
        (d14,) = [r for r in folder_rows(store) if r.name == "d14"]
        assert store.delete_folder_rows([d14], self.t0) == [None]
        assert count(b, "t/") == 7
        assert [r.name for r in folder_rows(store) if r.parent == "t/"] == [
            "d00",
            "d01",
            "d02",
            "d13",
            "d18",
            "d19",
        ]
        assert count(b, "") == 0

    @staticmethod
    def _folder_partitions(store: Store) -> list[PartitionKey]:
        seen: dict[tuple[str, str], PartitionKey] = {}
        for r in folder_rows(store):
            seen.setdefault((r.bucket, r.parent), PartitionKey(r.token, r.bucket, r.parent))
        return list(seen.values())

    # -- sizing -----------------------------------------------------------------------------------
    def test_estimate_is_at_least_the_folder_count(self, store: Store) -> None:
        store.put_objects(self.BUCKET, [*spread_keys(60), "x/y/z/w"], self.t0)
        actual = len(folder_rows(store))
        estimate = store.estimate_directory_count()
        assert estimate.count >= actual
        assert estimate.method
        if estimate.exact:
            assert estimate.count == actual

    @pytest.mark.two_buckets
    def test_estimate_per_bucket(self, store: Store) -> None:
        other = self.need_two_buckets()
        store.put_objects(self.BUCKET, ["a/b/c"], self.t0)
        store.put_objects(other, spread_keys(10), self.t0)
        estimate = store.estimate_directory_count(self.BUCKET)
        assert estimate.count >= 2
        if estimate.exact:
            assert estimate.count == 2

    # -- the key-value primitive ----------------------------------------------------------------
    def test_kv_reads_a_space_by_key_prefix_in_key_order(self, store: Store) -> None:
        space, other = f"t|{uuid.uuid4().hex}", f"u|{uuid.uuid4().hex}"
        assert store.kv_read(space) == []
        keys = ["b", "a|2", "a", "a|10", "ab", "é", "日本", "a\U0010ffff", "\U0010ffff\U0010ffffz"]
        for i, key in enumerate(keys):
            assert store.kv_write(space, key, f"v{i}".encode())
        assert store.kv_write(other, "a", b"elsewhere")
        everything = store.kv_read(space)
        assert [e.key for e in everything] == sorted(keys, key=lambda k: k.encode("utf-8"))
        assert dict(everything) == {key: f"v{i}".encode() for i, key in enumerate(keys)}
        # UTF-8 byte order: "ab" before "a|…", U+10FFFF last
        under_a = ["a", "ab", "a|10", "a|2", "a\U0010ffff"]
        assert [e.key for e in store.kv_read(space, "a")] == under_a
        assert [e.key for e in store.kv_read(space, "a|")] == ["a|10", "a|2"]
        assert [e.key for e in store.kv_read(space, "a|2")] == ["a|2"]
        assert [e.key for e in store.kv_read(space, "\U0010ffff")] == ["\U0010ffff\U0010ffffz"]
        assert store.kv_read(space, "c") == []
        assert store.kv_read(space, "b", fresh=True) == [("b", b"v0")]
        assert store.kv_read(other) == [("a", b"elsewhere")]
        store.kv_clear(space)
        assert store.kv_read(space) == []
        assert store.kv_read(other) == [("a", b"elsewhere")]
        store.kv_clear(f"never|{uuid.uuid4().hex}")

    def test_kv_compare_and_set_wins_and_loses(self, store: Store) -> None:
        space = f"t|{uuid.uuid4().hex}"

        def value() -> bytes | None:
            found = [e.value for e in store.kv_read(space, "k", fresh=True) if e.key == "k"]
            return found[0] if found else None

        # insert-if-absent
        assert store.kv_write(space, "k", b"one", expect=None)
        assert not store.kv_write(space, "k", b"two", expect=None)
        assert value() == b"one"
        # replace-if-equal
        assert not store.kv_write(space, "k", b"three", expect=b"two")
        assert value() == b"one"
        assert store.kv_write(space, "k", b"three", expect=b"one")
        assert value() == b"three"
        # delete-if-equal
        assert not store.kv_write(space, "k", None, expect=b"one")
        assert value() == b"three"
        assert store.kv_write(space, "k", None, expect=b"three")
        assert value() is None
        assert not store.kv_write(space, "k", b"four", expect=b"three")  # absent: not equal
        assert not store.kv_write(space, "k", None, expect=b"three")
        assert value() is None
        # after a delete-if-equal the key can be inserted again; an empty value is a value
        assert store.kv_write(space, "k", b"", expect=None)
        assert value() == b""
        assert not store.kv_write(space, "k", b"x", expect=None)
        assert store.kv_write(space, "k", b"seven", expect=b"")
        assert value() == b"seven"
        # unconditional writes and deletes (of another key: a key is written one way only)
        assert store.kv_write(space, "u", b"five")
        assert store.kv_write(space, "u", b"six")
        assert store.kv_read(space, "u") == [("u", b"six")]
        assert store.kv_write(space, "u", None)
        assert store.kv_write(space, "u", None)  # deleting what is absent is no error
        assert store.kv_read(space) == [("k", b"seven")]

    def test_kv_entries_expire_after_their_ttl(self, store: Store) -> None:
        space = f"t|{uuid.uuid4().hex}"
        # A TTL the writes and the first read below finish well within, even on a loaded CI
        # machine where a compare-and-set on Cassandra can take most of a second.
        ttl = 5
        assert store.kv_write(space, "rewritten", b"r", ttl_s=ttl)
        assert store.kv_write(space, "taken", b"t", ttl_s=ttl, expect=None)
        assert store.kv_write(space, "renewed", b"n", ttl_s=ttl, expect=None)
        assert store.kv_write(space, "expiring", b"e", ttl_s=ttl)
        assert store.kv_write(space, "kept", b"k")
        assert store.kv_write(space, "rewritten", b"r2")  # a rewrite without a TTL: none
        assert store.kv_write(space, "renewed", b"n2", ttl_s=3600, expect=b"n")
        assert [e.key for e in store.kv_read(space)] == [
            "expiring",
            "kept",
            "renewed",
            "rewritten",
            "taken",
        ]
        deadline = time.monotonic() + 30
        while any(e.key == "expiring" for e in store.kv_read(space)):
            assert time.monotonic() < deadline, "the entry never expired"
            time.sleep(0.2)
        # "taken" was written before "expiring", with the same TTL: gone too, everywhere
        assert dict(store.kv_read(space)) == {"kept": b"k", "renewed": b"n2", "rewritten": b"r2"}
        assert store.kv_read(space, "taken", fresh=True) == []
        assert not store.kv_write(space, "taken", b"x", expect=b"t")  # expired: not equal
        assert not store.kv_write(space, "taken", None, expect=b"t")
        assert store.kv_write(space, "taken", b"again", expect=None)  # expired: absent
        assert store.kv_read(space, "taken") == [("taken", b"again")]

    def test_kv_values_of_up_to_one_mebibyte(self, store: Store) -> None:
        space = f"t|{uuid.uuid4().hex}"
        data = bytes(i % 251 for i in range(MAX_VALUE_BYTES))
        for i in range(6):  # more than one page of a paged read
            assert store.kv_write(space, f"k{i}", data)
        assert [e.value == data for e in store.kv_read(space)] == [True] * 6
        with pytest.raises(ValueError, match="1 MiB"):
            store.kv_write(space, "big", data + b"x")
        with pytest.raises(ValueError, match="1 MiB"):
            store.put_filter_cell("big", 0, 0, data + b"x")
        assert store.list_filter_parts() == []
        with pytest.raises(ValueError):
            store.kv_write("", "k", b"v")
        with pytest.raises(ValueError):
            store.kv_write(space, "", b"v")
        assert len(store.kv_read(space)) == 6

    def test_kv_compare_and_set_from_two_processes_has_one_winner(self, store: Store) -> None:
        """Two processes, each with its own connection, race to insert the same keys and then
        to replace them: every key is won by exactly one of them, and holds the winner's value."""
        space, keys = f"t|{uuid.uuid4().hex}", [f"k{i:03d}" for i in range(60)]
        context = multiprocessing.get_context("spawn")
        start, results = context.Event(), context.Queue()
        racers = [
            context.Process(
                target=_race,
                args=(store.url, store.config_path, space, keys, name, start, results),
            )
            for name in ("left", "right")
        ]
        for racer in racers:
            racer.start()
        start.set()
        won: dict[str, tuple[list[str], list[str]]] = {}
        deadline = time.monotonic() + 300
        while len(won) < len(racers):
            assert time.monotonic() < deadline, "the racers never finished"
            try:
                name, result = results.get(timeout=0.5)
            except queue.Empty:
                failed = [r.exitcode for r in racers if r.exitcode not in (None, 0)]
                assert not failed, f"a racer failed (exit code {failed[0]})"
                continue
            won[name] = result
        for racer in racers:
            racer.join(timeout=60)
        left, right = won["left"], won["right"]
        for round_ in range(2):  # insert-if-absent, then replace-if-equal
            won_left, won_right = set(left[round_]), set(right[round_])
            assert not won_left & won_right, "a key was won twice"
            assert won_left | won_right == set(keys), "a key was won by nobody"
        final = dict(store.kv_read(space, fresh=True))
        assert final == {key: b"left2" if key in left[1] else b"right2" for key in keys}

    # -- filter cells (on the key-value primitive) -------------------------------------------
    def test_filter_cells(self, store: Store) -> None:
        blob = bytes(range(256)) * 4
        store.put_filter_cell("g1", 0, HEADER_SEQ, b"header")
        store.put_filter_cell("g1", 0, 0, blob)
        store.put_filter_cell("g1", 0, 1, b"")
        store.put_filter_cell("g1", 0, MARKER_SEQ, b"done")
        store.put_filter_cell("g1", 1, 0, b"shard1")
        store.put_filter_cell("g2", 0, 0, b"other")
        assert store.get_filter_cells("g1", 0) == {
            HEADER_SEQ: b"header",
            MARKER_SEQ: b"done",
            0: blob,
            1: b"",
        }
        assert store.get_filter_cells("g1", 0, meta_only=True) == {
            HEADER_SEQ: b"header",
            MARKER_SEQ: b"done",
        }
        assert store.get_filter_cells("g1", 7) == {}
        assert store.list_filter_parts() == [("g1", 0), ("g1", 1), ("g2", 0)]
        store.put_filter_cell("g1", 0, 0, b"overwritten")
        assert store.get_filter_cells("g1", 0)[0] == b"overwritten"
        store.delete_filter_generation("g1")
        assert store.list_filter_parts() == [("g2", 0)]
        assert store.get_filter_cells("g1", 0) == {}
        store.delete_filter_generation("never")
        assert store.get_filter_cells("g2", 0) == {0: b"other"}

    def test_filter_cell_of_one_mebibyte(self, store: Store) -> None:
        data = bytes(i % 251 for i in range(1 << 20))
        for seq in range(3):
            store.put_filter_cell("big", 0, seq, data)
        cells = store.get_filter_cells("big", 0)
        assert sorted(cells) == [0, 1, 2]
        assert all(cell == data for cell in cells.values())

    # -- small state ------------------------------------------------------------------------------
    def test_state(self, store: Store) -> None:
        assert store.get_state("swept") is None
        store.put_state("swept", "41")
        store.put_state("swept", "42")
        store.put_state("other|key with spaces", "ü")
        assert store.get_state("swept") == "42"
        assert store.get_state("other|key with spaces") == "ü"

    # -- the run lease ----------------------------------------------------------------------------
    def test_lease_is_held_by_one_owner_at_a_time(self, store: Store) -> None:
        name = f"t|{uuid.uuid4().hex}"
        assert store.lease_holder(name) is None
        assert store.try_acquire_lease(name, "one", 30) is None
        assert store.try_acquire_lease(name, "two", 30) == "one"
        assert store.lease_holder(name) == "one"
        assert store.renew_lease(name, "one", 30)
        assert not store.renew_lease(name, "two", 30)
        store.release_lease(name, "two")  # not the holder: nothing happens
        assert store.lease_holder(name) == "one"
        store.release_lease(name, "one")
        assert store.lease_holder(name) is None
        assert store.try_acquire_lease(name, "two", 30) is None
        assert store.lease_holder(name) == "two"
        store.release_lease(name, "two")

    def test_a_lease_not_renewed_expires_by_itself(self, store: Store) -> None:
        name = f"t|{uuid.uuid4().hex}"
        assert store.try_acquire_lease(name, "killed", 1) is None
        deadline = time.monotonic() + 30
        while store.lease_holder(name) is not None:
            assert time.monotonic() < deadline, "the lease never expired"
            time.sleep(0.2)
        assert not store.renew_lease(name, "killed", 1)
        assert store.try_acquire_lease(name, "next", 30) is None
        assert store.lease_holder(name) == "next"
        store.release_lease(name, "next")

    # -- the tombstone ledger ---------------------------------------------------------------------
    def test_ledger_sums_charges_per_partition(self, store: Store) -> None:
        b, run = self.BUCKET, uuid.uuid4().hex
        p, q = f"p{run}/", f"q{run}/"
        assert store.tombstones_charged([(b, p), (b, q)]) == {}
        store.charge_tombstones(
            [
                TombstoneCharge(b, p, "g1", f"{run}.0", 3),
                TombstoneCharge(b, p, "g1", f"{run}.1", 2),
                TombstoneCharge(b, p, "g2", f"{run}.0", 5),
                TombstoneCharge(b, q, "g2", f"{run}.0", 1),
            ],
            3600,
        )
        # The same charge written twice (a retried write) counts once.
        store.charge_tombstones([TombstoneCharge(b, q, "g2", f"{run}.0", 1)], 3600)
        assert store.tombstones_charged([(b, p), (b, q), (b, "never/")]) == {(b, p): 10, (b, q): 1}
        keys = [(b, f"many{run}/{i}/") for i in range(1200)]
        store.charge_tombstones([TombstoneCharge(b, k[1], "g", run, 1) for k in keys[::3]], 3600)
        assert store.tombstones_charged(keys) == {k: 1 for k in keys[::3]}
        # More charges than one page of a read holds (the driver's default is 5,000 rows).
        wide = [(b, f"wide{run}/"), (b, f"wider{run}/")]
        store.charge_tombstones(
            [TombstoneCharge(b, k[1], "g", f"{run}.{i}", 1) for k in wide for i in range(2600)],
            3600,
        )
        assert store.tombstones_charged([*wide, *keys[:5]]) == {
            **dict.fromkeys(wide, 2600),
            keys[0]: 1,
            keys[3]: 1,
        }

    def test_ledger_charges_expire(self, store: Store) -> None:
        b, run = self.BUCKET, uuid.uuid4().hex
        store.charge_tombstones([TombstoneCharge(b, f"e{run}/", "g", run, 4)], 1)
        store.charge_tombstones([TombstoneCharge(b, f"e{run}/", "g", run + "x", 2)], 3600)
        deadline = time.monotonic() + 30
        while store.tombstones_charged([(b, f"e{run}/")]) != {(b, f"e{run}/"): 2}:
            assert time.monotonic() < deadline, "the charge never expired"
            time.sleep(0.2)

    # -- the journal of dirty directories ---------------------------------------------------------
    def _slots(self, count: int) -> list[int]:
        """Time slots no other test writes (a store the fixture empties keeps its journal)."""
        first = (self.t0 // 1000) * JOURNAL_SLOT_S
        return [first + i * JOURNAL_SLOT_S for i in range(count)]

    def test_journal_rows_are_read_by_slot_and_bucket(self, store: Store) -> None:
        b = self.BUCKET
        s1, s2 = self._slots(2)
        rows = [JournalEntry(s1, i % JOURNAL_SHARDS, b, f"d{i}/", i) for i in range(150)]
        rows += [JournalEntry(s1, 0, b, "", 1), JournalEntry(s2, 3, b, "later/", 2)]
        store.journal_write(rows, 3600)
        got = [entry for batch in store.journal_read(s1) for entry in batch]
        assert sorted(got) == sorted(r for r in rows if r.slot == s1)
        assert [e for batch in store.journal_read(s2, b) for e in batch] == [rows[-1]]
        assert list(store.journal_read(s1 + 7 * JOURNAL_SLOT_S)) in ([], [[]])
        # The last write of a row wins; the same parent in another shard is another row.
        store.journal_write([JournalEntry(s2, 3, b, "later/", 7)], 3600)
        store.journal_write([JournalEntry(s2, 4, b, "later/", 1)], 3600)
        assert sorted(e for batch in store.journal_read(s2) for e in batch) == [
            JournalEntry(s2, 3, b, "later/", 7),
            JournalEntry(s2, 4, b, "later/", 1),
        ]

    @pytest.mark.two_buckets
    def test_journal_reads_one_bucket(self, store: Store) -> None:
        b, other = self.BUCKET, self.need_two_buckets()
        (slot,) = self._slots(1)
        store.journal_write(
            [JournalEntry(slot, 1, b, "x/", 1), JournalEntry(slot, 1, other, "x/", 1)], 3600
        )
        assert [e.bucket for batch in store.journal_read(slot, other) for e in batch] == [other]
        assert len([e for batch in store.journal_read(slot) for e in batch]) == 2

    def test_journal_rows_expire(self, store: Store) -> None:
        (slot,) = self._slots(1)
        store.journal_write([JournalEntry(slot, 2, self.BUCKET, "gone/", 1)], 1)
        store.journal_write([JournalEntry(slot, 2, self.BUCKET, "kept/", 1)], 3600)
        deadline = time.monotonic() + 30
        while [e.parent for batch in store.journal_read(slot) for e in batch] != ["kept/"]:
            assert time.monotonic() < deadline, "the journal row never expired"
            time.sleep(0.2)

    def test_grace_period_is_known(self, store: Store) -> None:
        grace, source = store.folders_grace_seconds()
        assert grace >= 0 and source
        threshold = store.tombstone_warn_threshold()
        assert threshold is None or threshold[0] > 0

    # -- the partition rewrite --------------------------------------------------------------------
    def test_rewrite_then_partition_delete_removes_exactly_the_left_out_rows(
        self, store: Store
    ) -> None:
        b = self.BUCKET
        names = [f"d{i:02d}" for i in range(20)]
        store.write_folder_rows([(b, "w/", n) for n in names], self.t0)
        store.write_folder_rows([(b, "w/", "late")], self.t0 + 500)  # after T: survives anyway
        drop = set(names[::3])
        (key,) = [k for k in self._folder_partitions(store) if k.parent == "w/"]
        t = self.t0 + 100
        assert store.rewrite_folder_partition(key, drop, t + 1) == len(names) - len(drop) + 1
        # Between the two steps (a crash here), nothing is lost; repeating the copy is harmless.
        assert store.rewrite_folder_partition(key, drop, t + 1) == len(names) - len(drop) + 1
        assert {r.name for r in folder_rows(store)} == {*names, "late"}
        assert store.delete_folder_partitions([key], t) == [None]
        assert {r.name for r in folder_rows(store)} == ({*names} - drop) | {"late"}
        if isinstance(store, TombstoneCounter):
            # a partition-level deletion is no tombstone cell
            assert store.tombstones_in_partition(b, "w/") == 0
        # A second delete at T finds only rows written after it: the kept ones stay.
        assert store.delete_folder_partitions([key], t) == [None]
        assert {r.name for r in folder_rows(store)} == ({*names} - drop) | {"late"}

    # -- bigger picture ----------------------------------------------------------------------------
    def test_every_partition_appears_in_exactly_one_page_run(self, store: Store) -> None:
        keys = [f"w/{i:04d}/o" for i in range(300)]
        store.put_objects(self.BUCKET, keys, self.t0)
        counts = Counter((k.bucket, k.parent) for k in partitions(store))
        assert set(counts.values()) == {1}
        assert len(counts) == 300
