"""``clean``, the store-wide clean with the stored filter: what a bad filter makes it refuse (a
filter cell of another SQLite type too)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from tests.helpers import invoke, one_line_error, said, small_store


@pytest.fixture()
def store(tmp_path: Path) -> str:
    return small_store(tmp_path)


def dirs(url: str) -> list[str]:
    return sorted(invoke(url, "list-dirs", "--bucket", "default").output.splitlines())


def _corrupt_one_chunk(url: str, offset: int) -> None:
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        (data,) = conn.execute(
            "SELECT value FROM kv WHERE space LIKE 'filter|%' AND key = 'c0'"
        ).fetchone()
        flipped = bytearray(data)
        flipped[offset] ^= 0xFF
        conn.execute(
            "UPDATE kv SET value = ? WHERE space LIKE 'filter|%' AND key = 'c0'", (bytes(flipped),)
        )


def test_stale_filter_is_refused(store: str) -> None:
    assert invoke(store, "build").exit_code == 0
    result = invoke(store, "clean", "--max-filter-age", "0s", "--max-delete-fraction", "1")
    assert result.exit_code == 3
    assert "over --max-filter-age" in one_line_error(result.stderr)


def test_clean_without_any_filter_says_to_build(store: str) -> None:
    result = invoke(store, "clean")
    assert result.exit_code == 1
    assert "run 'dircleaner build'" in one_line_error(result.stderr)


def test_corrupted_filter_is_refused_naming_the_checksum(store: str) -> None:
    assert invoke(store, "build").exit_code == 0
    _corrupt_one_chunk(store, 10)
    before = dirs(store)
    result = invoke(store, "clean", "--min-age", "0", "--max-delete-fraction", "1")
    assert result.exit_code == 3
    assert "checksum" in one_line_error(result.stderr)
    assert dirs(store) == before


def test_truncated_filter_is_refused(store: str) -> None:
    assert invoke(store, "build").exit_code == 0
    path = store.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE kv SET value = substr(value, 1, 100) WHERE space LIKE 'filter|%' AND key = 'c0'"
        )
    result = invoke(store, "clean", "--min-age", "0", "--max-delete-fraction", "1")
    assert result.exit_code == 3
    assert "checksum" in one_line_error(result.stderr) or "truncated" in result.stderr


def test_a_build_without_its_completion_marker_is_never_used(store: str) -> None:
    assert invoke(store, "build").exit_code == 0
    path = store.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM kv WHERE space LIKE 'filter|%' AND key = 'm-2'")
    result = invoke(store, "clean", "--min-age", "0", "--max-delete-fraction", "1")
    assert result.exit_code == 3
    assert "no completion marker" in one_line_error(result.stderr)


def test_a_filter_of_another_bucket_is_refused(store: str) -> None:
    result = invoke(store, "build", "--bucket", "other", "--json")
    assert result.exit_code == 0, result.output
    assert said(result) == (
        "warning: bucket 'other' does not exist in this store (buckets: 'default');"
        " is --bucket right?\n"
    )
    generation = json.loads(result.stdout)["generation"]
    result = invoke(store, "clean", "--generation", generation, "--bucket", "default")
    assert result.exit_code == 3
    assert "was built for" in one_line_error(result.stderr)
    # Without naming it, the other bucket's filter is simply not a candidate.
    result = invoke(store, "clean", "--bucket", "default")
    assert result.exit_code == 1
    assert "no filter has been built" in result.stderr


@pytest.fixture()
def url(tmp_path: Path) -> str:
    """A store of 10 directories, 3 of them emptied (over the default --max-delete-fraction)."""
    store = f"sqlite:///{tmp_path}/src/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(10))
    assert invoke(store, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(store, "delete-keys", "-", input="d/1/x\nd/2/x\nd/3/x\n").exit_code == 0
    return store


@pytest.mark.parametrize("seq", [-1, -2, 0], ids=["header", "marker", "body"])
@pytest.mark.parametrize(
    "value",
    ["text", b"\xff\xfe not UTF-8", 1.5],
    ids=["text", "text-not-utf8", "real"],
)
def test_a_filter_cell_of_another_type_is_a_corrupt_filter(
    url: str, tmp_path: Path, seq: int, value: object
) -> None:
    assert invoke(url, "build").exit_code == 0
    with sqlite3.connect(tmp_path / "src" / "meta.db") as conn:
        cast = "CAST(? AS TEXT)" if isinstance(value, bytes) else "?"
        key = f"{'m' if seq < 0 else 'c'}{seq}"
        conn.execute(
            f"UPDATE kv SET value = {cast} WHERE space LIKE 'filter|%' AND key = ?", (value, key)
        )
    result = invoke(url, "clean", "-n")
    assert result.exit_code == 3, result.output
    assert re.fullmatch(r"Error: filter \S+ (is corrupt|shard 0: )[^\n]*\n", result.stderr)
    assert "free space" not in result.output
    listed = invoke(url, "filters", "list", "--json")
    assert listed.exit_code == 0, listed.output
