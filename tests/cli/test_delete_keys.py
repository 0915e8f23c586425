"""``delete-keys``: lazy deletes of object rows, each parent journaled, only the keys that existed
counted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dircleaner.journal import JOURNAL_SLOT_S, slot_of
from dircleaner.store import open_store
from tests.helpers import invoke


@pytest.fixture()
def url(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path}/meta.db"
    keys = "a/b/x\na/b/y\na/c/z\ntop\n"
    assert invoke(store, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(store, "import-keys", "-", "--bucket", "photos", input="2026/q\n").exit_code == 0
    return store


def journaled(url: str) -> list[tuple[str, str, int]]:
    """Every journal row of the last two slots: (bucket, parent, keys deleted)."""
    now = slot_of(time.time_ns() // 1000)
    with open_store(url) as store:
        rows = [e for s in (now - JOURNAL_SLOT_S, now) for b in store.journal_read(s) for e in b]
    return sorted((e.bucket, e.parent, e.deleted) for e in rows)


@pytest.fixture()
def two_buckets(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path}/meta.db"
    assert invoke(store, "import-keys", "-", input="a/b/x\na/c/y\n").exit_code == 0
    assert invoke(store, "import-keys", "-", "--bucket", "photos", input="p/q\n").exit_code == 0
    return store


def test_delete_keys_journals_each_parent_once_per_batch(url: str) -> None:
    result = invoke(url, "delete-keys", "-", input="a/b/x\na/b/y\ntop\na/nope/k\n")
    assert result.exit_code == 0, result.output
    # Every key sent, found or not: a parent that did not lose an object costs one read.
    assert journaled(url) == [("default", "", 1), ("default", "a/b/", 2), ("default", "a/nope/", 1)]


def test_delete_keys_counts_only_keys_that_existed(two_buckets: str) -> None:
    result = invoke(two_buckets, "delete-keys", "-", input="a/c/y\na/c/nope\nzzz\n")
    assert (result.exit_code, result.stdout) == (
        0,
        "deleted 1 key in bucket 'default' (2 did not exist); rejected 0 lines\n",
    )
