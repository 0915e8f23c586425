"""The store protocol itself: its primitives, its traits, the derived defaults a backend may
leave alone (each checked on the embedded store, the one backend these tests need)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.records import StoreTraits
from dircleaner.store.sqlite import SqliteStore

#: the index primitives every backend writes
INDEX_PRIMITIVES = {
    "scan_object_partitions",
    "scan_folder_rows",
    "folder_partition_pages",
    "nonempty_object_partitions",
    "delete_folder_rows",
    "delete_folder_ranges",
    "delete_folder_partitions",
    "rewrite_folder_partition",
}
#: the key-value primitive the job's bookkeeping is built on, and the tombstone ledger (its
#: reads are IN reads of many partitions on the clean's hot path, so it stays a primitive)
BOOKKEEPING_PRIMITIVES = {"kv_read", "kv_write", "charge_tombstones", "tombstones_charged"}
#: the journal of dirty directories: a table of its own that a metastore's delete path writes
JOURNAL_PRIMITIVES = {"journal_write", "journal_read"}
#: what a backend may override but need not write
DERIVED = {
    "kv_clear",
    "put_filter_cell",
    "get_filter_cells",
    "list_filter_parts",
    "delete_filter_generation",
    "try_acquire_lease",
    "replace_lease",
    "renew_lease",
    "release_lease",
    "lease_holder",
    "put_state",
    "get_state",
    "open",
    "close",
    "scope_id",
    "estimate_directory_count",
    "folder_partitions",
    "read_directories",
    "has_folder_row",
    "objects_partition_nonempty",
    "bucket_exists",
    "bucket_names",
    "probe_object_partitions",
    "folder_partition_heads",
    "rows_listing",
}


def test_the_index_primitives_are_abstract_and_the_helpers_derived() -> None:
    abstract = set(Store.__abstractmethods__)
    assert abstract == INDEX_PRIMITIVES | BOOKKEEPING_PRIMITIVES | JOURNAL_PRIMITIVES
    assert len(abstract) <= 14
    assert not DERIVED & abstract
    public = {n for n in dir(Store) if not n.startswith("_") and callable(getattr(Store, n))}
    assert public >= DERIVED and len(public - abstract) > len(abstract)
    # The S3 front-end's writes are a protocol of their own, not part of every store.
    assert not {"write_object_rows", "write_folder_rows", "delete_object_rows"} & set(dir(Store))


def test_traits_are_one_frozen_value() -> None:
    traits = StoreTraits()
    with pytest.raises(dataclasses.FrozenInstanceError):
        traits.spread_deletes = False  # type: ignore[misc]
    assert SqliteStore.traits == StoreTraits(
        scheme="sqlite", cheap_exact_count=True, spread_deletes=False
    )


@pytest.fixture()
def sqlite_store(tmp_path: Path) -> Any:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        store.put_objects("b", ["a/b/c", "a/d", "e/f/g/h", "top"], 1_000)
        yield store


def test_the_derived_count_is_the_scan_count(sqlite_store: SqliteStore) -> None:
    # SQLite overrides the count with one SQL statement; the derived one scans, and both agree.
    derived = Store.estimate_directory_count(sqlite_store)
    assert derived.exact and derived.count == 5  # a/ a/b/ e/ e/f/ e/f/g/
    assert sqlite_store.estimate_directory_count().count == derived.count
    assert Store.estimate_directory_count(sqlite_store, "nothing").count == 0


def test_scope_id_is_derived_from_the_scheme_and_the_tables(sqlite_store: SqliteStore) -> None:
    assert sqlite_store.scope_id() == "sqlite:objects,folders"


def test_the_derived_churn_checks_answer_as_the_primitives(sqlite_store: SqliteStore) -> None:
    # SQLite keeps the derived heads and listing; they answer from the primitives they wrap.
    heads = Store.folder_partition_heads(sqlite_store, [("b", "a/"), ("b", "x/"), ("b", "")], 1)
    assert {key: [r.name for r in rows] for key, rows in heads.items()} == {
        ("b", "a/"): ["b"],
        ("b", ""): ["a"],
    }
    listed = Store.rows_listing(sqlite_store, [("b", "a/b/"), ("b", "a/c/"), ("b", "e/f/")])
    assert listed == sqlite_store.rows_listing([("b", "a/b/"), ("b", "e/f/")])
    assert [(row.parent, row.name) for row in listed.values()] == [("a/", "b"), ("e/", "f")]
    probe = Store.probe_object_partitions(sqlite_store, [("b", "a/b/"), ("b", "e/")], 0)
    assert probe.nonempty == {("b", "a/b/")} and probe.tombstone_heavy == set()
