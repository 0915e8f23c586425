"""A store's optional capabilities: which backends take index writes, and what a store that
takes none says when asked for them."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.capabilities import IndexWriter, index_writer


def test_a_store_without_index_writes_refuses_puts() -> None:
    not_a_writer = cast(Store, object())
    with pytest.raises(TypeError, match="takes no index writes"):
        index_writer(not_a_writer)
    with pytest.raises(TypeError, match="takes no index writes"):
        Store.put_objects(not_a_writer, "b", ["a/b"], 1)


def test_both_backends_take_index_writes(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as sqlite_store:
        assert isinstance(sqlite_store, IndexWriter)
    from dircleaner.store.cassandra.store import CassandraStore

    assert all(
        callable(getattr(CassandraStore, name, None))
        for name in ("write_object_rows", "write_folder_rows", "delete_object_rows")
    )
