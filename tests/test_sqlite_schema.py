"""The SQLite metastore's file (``store/sqlite/schema.py``): its URL, opening it (missing, created,
someone else's, not SQLite), and a file of the previous release's tables opened to write and to
read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dircleaner.errors import StoreNotFound, StoreNotOurs, StoreUrlError
from dircleaner.store.sqlite import SqliteStore, path_from_url
from tests.test_sqlite_store import url_of


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///meta.db", Path("meta.db")),
        ("sqlite:///rel/dir/meta.db", Path("rel/dir/meta.db")),
        ("sqlite:////abs/meta.db", Path("/abs/meta.db")),
    ],
)
def test_path_from_url(url: str, path: Path) -> None:
    assert path_from_url(url) == path


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://host/meta.db",
        "sqlite:///",
        "sqlite:///dir/",
        "sqlite:///meta.db?mode=ro",
        "sqlite:///meta.db#x",
        "sqlite://",
    ],
)
def test_malformed_sqlite_url(url: str) -> None:
    with pytest.raises(StoreUrlError) as info:
        path_from_url(url)
    assert "\n" not in str(info.value)


def test_missing_file_is_not_created_without_create(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    with pytest.raises(StoreNotFound, match="no metastore at"):
        SqliteStore.open(url_of(path))
    assert not path.exists()


def test_create_makes_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "meta.db"
    SqliteStore.open(url_of(path), create=True).close()
    assert path.is_file()


def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE something (x)")
    conn.close()
    with pytest.raises(StoreNotOurs, match=r"holds tables of its own \(something\), not a"):
        SqliteStore.open(url_of(path))


def test_non_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreNotFound, match="not a usable SQLite database"):
        SqliteStore.open(url_of(path))


#: the previous release's own tables, which the key-value table replaced
OLD_TABLES = """
CREATE TABLE filters (generation TEXT NOT NULL, shard INTEGER NOT NULL, seq INTEGER NOT NULL,
    data BLOB NOT NULL, PRIMARY KEY (generation, shard, seq)) WITHOUT ROWID;
CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_us INTEGER NOT NULL)
    WITHOUT ROWID;
"""


def _file_of_the_previous_release(path: Path) -> None:
    """A metastore as the previous release left it: filters, state and leases tables, no
    key-value table; a filter part, two state values and a lease held far into the future."""
    SqliteStore.open(url_of(path), create=True).close()
    conn = sqlite3.connect(path)
    conn.executescript("DROP TABLE kv;" + OLD_TABLES)
    conn.executemany(
        "INSERT INTO filters VALUES (?, ?, ?, ?)", [("g", 0, -1, b"header"), ("g", 0, 0, b"x")]
    )
    conn.executemany("INSERT INTO state VALUES (?, ?)", [("k", "v"), ("run|x", '{"a": 1}')])
    conn.execute("INSERT INTO leases VALUES ('run|sqlite:objects,folders', 'old run', ?)", (2**62,))
    conn.commit()
    conn.close()


def test_a_file_of_the_previous_release_opens_keeps_its_state_and_ignores_its_filters(
    tmp_path: Path,
) -> None:
    """Its run state is carried into the key-value table; its filters are not (the next run
    builds a new one) and neither is its lease (a run of the previous release)."""
    path = tmp_path / "old.db"
    _file_of_the_previous_release(path)
    with SqliteStore.open(url_of(path)) as store:
        assert store.get_state("k") == "v"
        assert store.get_state("run|x") == '{"a": 1}'
        assert store.list_filter_parts() == []
        assert store.lease_holder("run|sqlite:objects,folders") is None
        store.put_state("k", "new")
    with SqliteStore.open(url_of(path)) as store:  # carried over once, not again
        assert store.get_state("k") == "new"
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM filters").fetchone() == (2,)  # left alone
    conn.close()


def test_a_file_of_the_previous_release_opened_for_reading_lists_no_filters_and_stays_as_it_was(
    tmp_path: Path,
) -> None:
    """A command that only reads neither creates the key-value table nor carries state over."""
    path = tmp_path / "old.db"
    _file_of_the_previous_release(path)
    before = path.read_bytes()
    with SqliteStore.open(url_of(path), read_only=True) as store:
        assert store.list_filter_parts() == []
        assert store.get_state("k") is None
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]
