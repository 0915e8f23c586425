"""The build's ancestor walk: every ancestor of every partition key reaches the filter."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dircleaner.model import PartitionKey
from dircleaner.paths import ancestors_inclusive, filter_key
from dircleaner.pipeline import build
from dircleaner.pipeline.build import ancestor_keys

segment = st.sampled_from(["a", "b", "c", "dé", "x y"])
directory = st.lists(segment, min_size=1, max_size=5).map(lambda parts: "/".join(parts) + "/")
partition = st.tuples(st.sampled_from(["b1", "b2"]), directory | st.just(""))


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(partition, max_size=60, unique=True),
    batch=st.integers(min_value=1, max_value=7),
    cache=st.sampled_from([0, 1, 3, 1 << 20]),
)
def test_every_ancestor_of_every_key_is_yielded(
    keys: list[tuple[str, str]], batch: int, cache: int
) -> None:
    rows = [PartitionKey(i, bucket, parent) for i, (bucket, parent) in enumerate(keys)]
    batches = [rows[i : i + batch] for i in range(0, len(rows), batch)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build, "ANCESTOR_CACHE", cache)
        yielded = list(ancestor_keys(batches))
    assert [n for n, _ in yielded] == [len(b) for b in batches]
    got = [key for _, ks in yielded for key in ks]
    expected = {filter_key(b, d) for b, p in keys for d in ancestors_inclusive(p)}
    # No false negatives (a missing ancestor would let its directory be deleted), no strays.
    assert set(got) == expected


def test_a_shared_ancestor_is_hashed_once_while_cached() -> None:
    rows = [PartitionKey(i, "b", f"top/mid/leaf{i}/") for i in range(100)]
    got = [key for _, ks in ancestor_keys([rows]) for key in ks]
    assert got.count(filter_key("b", "top/")) == 1
    assert got.count(filter_key("b", "top/mid/")) == 1
    assert len(got) == 102


def _packed_keys(rows: list[PartitionKey]) -> list[bytes]:
    buf, starts, ends = build.packed_ancestors(rows)
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
