"""The embedded key-value table on its own: each call on a connection of its own (two objects
on one file behave as two processes do), and a read-only file from before the table existed
reads as empty rather than failing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dircleaner.store.sqlite.kv import SqliteKV
from dircleaner.store.sqlite.schema import KV_TABLE


def kv_file(tmp_path: Path, *, with_kv: bool = True) -> tuple[Path, sqlite3.Connection]:
    path = tmp_path / "meta.db"
    conn = sqlite3.connect(path, isolation_level=None)
    if with_kv:
        conn.execute(KV_TABLE)
    else:
        conn.execute("CREATE TABLE objects (token INTEGER)")
    return path, conn


def test_two_holders_of_one_file_see_each_others_compare_and_sets(tmp_path: Path) -> None:
    path, conn = kv_file(tmp_path)
    one, two = (SqliteKV(path, conn, read_only=False) for _ in range(2))
    assert one.write("lease", "run", b"one", ttl_s=60, expect=None)
    assert not two.write("lease", "run", b"two", ttl_s=60, expect=None)
    assert two.write("lease", "run", b"two", ttl_s=60, expect=b"one")
    assert [(e.key, e.value) for e in one.read("lease")] == [("run", b"two")]


def test_an_older_read_only_file_reads_as_empty_and_a_writable_one_fails(tmp_path: Path) -> None:
    path, conn = kv_file(tmp_path, with_kv=False)
    assert SqliteKV(path, conn, read_only=True).read("state") == []
    with pytest.raises(sqlite3.OperationalError):
        SqliteKV(path, conn, read_only=False).read("state")
