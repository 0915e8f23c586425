"""The bulk loader's Java side (``store/cassandra/bulkjava.py``) when something is missing: without
Cassandra's jars, or without Java, one line says what to get, and nothing is touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from dircleaner.store.cassandra import bulkjava
from dircleaner.store.cassandra.bulkjava import BulkLoaderUnavailable, find_cassandra_lib
from tests.helpers import invoke


def test_without_cassandras_jars_one_line_says_where_to_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(BulkLoaderUnavailable, match="holds no cassandra-all"):
        find_cassandra_lib({"DIRCLEANER_CASSANDRA_LIB": str(tmp_path)})
    monkeypatch.setattr(bulkjava, "_CHECKOUT_LIB", tmp_path / "no-checkout")
    with pytest.raises(BulkLoaderUnavailable, match=r"needs Cassandra's jars .* scripts/cassandra"):
        find_cassandra_lib({"CASSANDRA_HOME": str(tmp_path)})


def test_gen_bulk_without_java_is_one_line_and_touches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "cassandra-all-5.0.9.jar").write_bytes(b"")
    monkeypatch.setenv("DIRCLEANER_CASSANDRA_LIB", str(lib))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    # port 1: were the store opened first, the error would be a connection failure
    result = invoke("cassandra://127.0.0.1:1/nowhere", "gen", "--dirs", "100", "--bulk")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "Error: the bulk loader needs Java 11 or 17 (java not found: install a JDK or set"
        " JAVA_HOME)"
    ]
