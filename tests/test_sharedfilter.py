"""A loaded filter crosses process boundaries by reference, and a process loads it once."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from dircleaner.job import sharedfilter
from dircleaner.job.sharedfilter import SharedFilter
from dircleaner.paths import filter_key
from dircleaner.pipeline.build import BuildConfig, build_filter
from dircleaner.store import open_store
from dircleaner.store.base import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as opened:
        opened.put_objects("b", ["a/b/x", "c/y"], 1)
        yield opened
    sharedfilter._loaded.clear()


def test_the_reference_travels_without_the_filter(store: Store) -> None:
    generation = build_filter(store, BuildConfig()).generation
    here = SharedFilter(generation, None)
    filt = here.get(store)
    assert all(filt.contains_many([filter_key("b", "a/b/"), filter_key("b", "c/")]))
    there = pickle.loads(pickle.dumps(here))
    assert (there.generation, there.bucket) == (generation, None)
    assert there._filt is None  # not shipped: loaded where it is used
    assert len(pickle.dumps(here)) < 1000


def test_a_process_loads_a_generation_once_and_keeps_only_the_last(store: Store) -> None:
    first = build_filter(store, BuildConfig()).generation
    loaded = SharedFilter(first, None).get(store)
    assert SharedFilter(first, None).get(store) is loaded  # another task, the same copy
    second = build_filter(store, BuildConfig()).generation
    newer = SharedFilter(second, None).get(store)
    assert newer is not loaded
    assert list(sharedfilter._loaded) == [(store.url, second, None)]


def test_a_filter_given_is_used_as_is(store: Store) -> None:
    in_memory = build_filter(store, BuildConfig(persist=False)).in_memory
    assert in_memory is not None
    _header, filt = in_memory
    assert SharedFilter("not-stored", None, filt).get(store) is filt
