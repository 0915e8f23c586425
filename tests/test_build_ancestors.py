"""The build's ancestor walk: every ancestor of every partition key reaches the filter."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dircleaner import build
from dircleaner.build import ancestor_keys
from dircleaner.paths import ancestors_inclusive, filter_key
from dircleaner.store.base import PartitionKey

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
