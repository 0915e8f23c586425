"""The build's ancestor walk: every ancestor of every partition key reaches the filter."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dircleaner.model import PartitionKey
from dircleaner.paths import ancestors_inclusive, filter_key
from dircleaner.pipeline.build import BuildConfig, build_filter, packed_ancestors
from dircleaner.store import open_store
from dircleaner.store.packed import ObjectKeys


def _packed_keys(rows: list[PartitionKey]) -> list[bytes]:
    buf, starts, ends = packed_ancestors(ObjectKeys.of_partitions(rows))
    raw = buf.tobytes()
    return [raw[lo:hi] for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True)]


odd_segment = st.sampled_from(["a", "é", "日本", "x y", "\0", "%2F", "b\\c"])
odd_directory = st.lists(odd_segment, min_size=1, max_size=6).map(lambda p: "/".join(p) + "/")


@settings(max_examples=300, deadline=None)
@given(
    keys=st.lists(
        st.tuples(
            st.sampled_from(["b1", "b2", "bü", "with/slash"]),
            odd_directory | st.just("") | st.just("no-trailing/slash"),
        ),
        max_size=40,
        unique=True,
    ),
    one_bucket=st.booleans(),
)
def test_packed_ancestors_are_exactly_every_ancestor(
    keys: list[tuple[str, str]], one_bucket: bool
) -> None:
    if one_bucket:
        keys = [("b1", parent) for _, parent in keys]
    rows = [PartitionKey(i, bucket, parent) for i, (bucket, parent) in enumerate(keys)]
    got = _packed_keys(rows)
    expected = {filter_key(b, d) for b, p in keys for d in ancestors_inclusive(p)}
    expected |= {filter_key(b, p) for b, p in keys if p}  # the key itself, "/" or not
    assert set(got) == expected


def test_packed_ancestors_repeat_shared_ancestors_once_per_partition() -> None:
    rows = [PartitionKey(i, "b", f"top/mid/leaf{i}/") for i in range(100)]
    got = _packed_keys([*rows, PartitionKey(100, "b", "")])
    assert got.count(filter_key("b", "top/")) == 100
    assert len(got) == 300
    assert len(_packed_keys([PartitionKey(0, "b", "")])) == 0


KEYS = {
    "b1": ["top/mid/leaf/x", "top/other/y", "dé/日本/x y/z", "root-object", "a/b/c/d/e/f"],
    "b2": ["top/mid/leaf/x", "only/here/k"],
}


def test_the_built_filter_holds_every_ancestor_of_every_object(tmp_path: Path) -> None:
    """What the build inserts, through a store's own packed scan: every directory that holds an
    object, directly or below it, is in the filter (a missing one could be deleted)."""
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        for bucket, keys in KEYS.items():
            store.put_objects(bucket, keys, 1)
        result = build_filter(store, BuildConfig(salt=7, persist=False, expected_dirs=100))
    assert result.in_memory is not None
    _header, filt = result.in_memory
    dirs = {
        filter_key(bucket, d)
        for bucket, keys in KEYS.items()
        for key in keys
        for d in ancestors_inclusive(key.rpartition("/")[0] + "/" if "/" in key else "")
    }
    assert all(filt.contains_many(sorted(dirs)))
    # One insert per ancestor of each partition, shared ones again per partition below them.
    per_partition = {(b, k.rpartition("/")[0]) for b, keys in KEYS.items() for k in keys}
    assert result.keys_inserted == sum(p.count("/") + 1 for _, p in per_partition if p)


@pytest.mark.parametrize("bucket", ["b1", "b2"])
def test_a_bucket_build_holds_only_that_buckets_ancestors(tmp_path: Path, bucket: str) -> None:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        for name, keys in KEYS.items():
            store.put_objects(name, keys, 1)
        result = build_filter(store, BuildConfig(bucket=bucket, salt=7, persist=False))
    assert result.in_memory is not None
    filt = result.in_memory[1]
    other = "b2" if bucket == "b1" else "b1"
    mine = [filter_key(bucket, k.rpartition("/")[0] + "/") for k in KEYS[bucket] if "/" in k]
    assert all(filt.contains_many(mine))
    assert not any(filt.contains_many([filter_key(other, "only/"), filter_key(other, "a/b/")]))
