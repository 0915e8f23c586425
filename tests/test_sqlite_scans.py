"""The SQLite store's index scans (``store/sqlite/scans.py``): rows in token order, keyed by
the partition's MurmurHash3 token; the packed key scans laid out by SQLite on a UTF-8 file,
derived from the rows on any other, the same keys either way; a row with a foreign token
refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from dircleaner.errors import SchemaError
from dircleaner.model import Shard
from dircleaner.store import open_store
from dircleaner.store.records import murmur_token
from dircleaner.store.sqlite import SqliteStore
from tests.store_contract import T0

KEYS = ["a/b/c", "a/d/é", "ü/x/y", "top", "a/b/"]


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def test_tokens_are_murmur_of_the_partition_key(tmp_path: Path) -> None:
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        store.put_objects("b", ["a/b/c"], T0)
        (key,) = [k for batch in store.scan_object_partitions(Shard()) for k in batch]
        assert key.token == murmur_token("b", "a/b/")


def _utf16_file(path: Path) -> None:
    """An empty database whose text is UTF-16 (fixed when its first table is made)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA encoding='UTF-16le'")
    conn.execute("CREATE TABLE x (a)")
    conn.execute("DROP TABLE x")
    conn.commit()
    conn.close()


def _packed(store: SqliteStore) -> list[list[np.ndarray]]:
    """Every array of every batch of both key scans."""
    out = []
    for batch in store.scan_object_keys(Shard()):
        out.append([batch.buf, batch.offsets])
    for folders in store.scan_folder_keys(Shard()):
        out.append([folders.tokens, folders.buf, folders.offsets, folders.prefix_ends])
    return out


def test_a_utf16_file_scans_the_same_packed_keys_as_a_utf8_one(tmp_path: Path) -> None:
    """A BLOB cast of UTF-16 text is not its UTF-8: on such a file the keys come from the rows."""
    _utf16_file(tmp_path / "u16.db")
    with (
        SqliteStore.open(url_of(tmp_path / "u8.db"), create=True) as utf8,
        SqliteStore.open(url_of(tmp_path / "u16.db"), create=True, force=True) as utf16,
    ):
        assert utf8.db.utf8() and not utf16.db.utf8()
        for store in (utf8, utf16):
            store.put_objects("b", KEYS, T0)
        expected, got = _packed(utf8), _packed(utf16)
        assert len(got) == len(expected) == 2
        for got_arrays, expected_arrays in zip(got, expected, strict=True):
            for g, e in zip(got_arrays, expected_arrays, strict=True):
                assert np.array_equal(g, e)
        keys = utf16.scan_object_keys(Shard())
        (objects,) = list(keys)
        assert "b\0ü/x/".encode() in objects.buf.tobytes()  # UTF-8, not the file's UTF-16


def test_a_folders_row_whose_token_is_not_its_partitions_stops_the_packed_scan(
    tmp_path: Path,
) -> None:
    """The packed scan finds each row's partition key by its token: a row with a foreign token
    is refused (nothing is swept, so nothing is deleted) rather than put in another partition."""
    from dircleaner.filter import bloom
    from dircleaner.store.packed import FolderKeys

    assert bloom.load_kernels()
    with open_store(f"sqlite:///{tmp_path / 'm.db'}", create=True) as store:
        store.put_objects("b", ["a/b/c", "a/d/e"], 1)
        assert sum(map(len, store.scan_folder_keys(Shard()))) == 3
        assert isinstance(store, SqliteStore)
        with store.db.conn:
            store.db.conn.execute("UPDATE folders SET token = token + 1 WHERE name = 'd'")
        with pytest.raises(SchemaError, match="token"):
            list(store.scan_folder_keys(Shard()))
        # The rows themselves still read, as they are.
        assert [len(FolderKeys.of_rows(b)) for b in store.scan_folder_rows(Shard())] == [3]
