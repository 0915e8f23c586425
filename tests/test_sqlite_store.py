"""The embedded SQLite store: the conformance suite on a real file, plus SQLite-only behaviour (its
file: the URL, opening, an older release's file, in ``test_sqlite_schema.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dircleaner.errors import StoreUrlError
from dircleaner.store import open_store
from dircleaner.store.sqlite import SqliteStore
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


@pytest.mark.parametrize("url", ["sqlite:meta.db", "cassandra:h/ks", "nosuch:///x", ""])
def test_malformed_url_through_the_registry(url: str) -> None:
    with pytest.raises(StoreUrlError):
        open_store(url)


def test_open_store_dispatches_by_scheme(tmp_path: Path) -> None:
    with open_store(url_of(tmp_path / "m.db"), create=True) as store:
        assert isinstance(store, SqliteStore)
        assert store.scope_id() == "sqlite:objects,folders"


# -- opening ---------------------------------------------------------------------------------------


def test_data_persists_across_reopen(tmp_path: Path) -> None:
    url = url_of(tmp_path / "meta.db")
    with SqliteStore.open(url, create=True) as store:
        store.put_objects("b", ["a/b/c"], T0)
        store.put_state("k", "v")
    with SqliteStore.open(url) as store:
        assert len(folder_rows(store)) == 2
        assert store.get_state("k") == "v"
