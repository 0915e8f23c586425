"""A damaged filter header or completion marker: corrupt (exit 3), never a silent fallback."""

from __future__ import annotations

import json
import sqlite3
import struct
import zlib
from pathlib import Path

import pytest

from tests.helpers import invoke, said

HEADER, MARKER = -1, -2


@pytest.fixture()
def url(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path}/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(30))
    assert invoke(store, "import-keys", "-", input=keys).exit_code == 0
    return store


def build(url: str) -> str:
    result = invoke(url, "build", "--json")
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["generation"])


def cell(generation: str, seq: int) -> tuple[str, str]:
    """The key-value table's (space pattern, key) of cell ``seq`` of each part of ``generation``."""
    return f"filter|{generation}|%", f"{'m' if seq < 0 else 'c'}{seq}"


def poke(tmp_path: Path, generation: str, seq: int, offset: int) -> None:
    with sqlite3.connect(tmp_path / "meta.db") as conn:
        (data,) = conn.execute(
            "SELECT value FROM kv WHERE space LIKE ? AND key = ?", cell(generation, seq)
        ).fetchone()
        data = bytearray(data)
        data[offset] ^= 0x5A
        conn.execute(
            "UPDATE kv SET value = ? WHERE space LIKE ? AND key = ?",
            (bytes(data), *cell(generation, seq)),
        )


@pytest.mark.parametrize(
    ("seq", "offset", "problem"),
    [
        (HEADER, 0, "corrupt header: bad magic"),
        (HEADER, 30, "corrupt header: header checksum mismatch"),
        (MARKER, 20, "corrupt: completion marker checksum mismatch"),
    ],
)
def test_the_newest_filter_damaged_is_corrupt_not_missing_nor_an_older_one(
    url: str, tmp_path: Path, seq: int, offset: int, problem: str
) -> None:
    older = build(url)
    newest = build(url)
    poke(tmp_path, newest, seq, offset)
    result = invoke(url, "clean", "--dry-run")
    assert result.exit_code == 3
    assert said(result) == (
        f"Error: filter {newest} is corrupt (shard 0: {problem}); not falling back to the older"
        f" {older} silently: rebuild ('dircleaner build'), or pass --force or --generation"
        f" {older} to use it\n"
    )
    forced = invoke(url, "clean", "--dry-run", "--force", "--json")
    assert forced.exit_code == 0
    assert json.loads(forced.stdout)["sweep"]["generation"] == older


def test_a_damaged_filter_alone_is_corrupt(url: str, tmp_path: Path) -> None:
    only = build(url)
    poke(tmp_path, only, MARKER, 20)
    result = invoke(url, "sweep")
    assert (result.exit_code, result.output) == (
        3,
        f"Error: filter {only} is corrupt (shard 0: corrupt: completion marker checksum"
        " mismatch); rebuild it with 'dircleaner build'\n",
    )
    listed = invoke(url, "filters", "list", "--json")
    assert json.loads(listed.stdout)[0]["fill"] is None  # not a fill of 1.9e13


def test_a_version_1_marker_is_still_read(url: str, tmp_path: Path) -> None:
    generation = build(url)
    with sqlite3.connect(tmp_path / "meta.db") as conn:
        (data,) = conn.execute(
            "SELECT value FROM kv WHERE space LIKE ? AND key = ?", cell(generation, MARKER)
        ).fetchone()
        _magic, chunks, body_crc, set_bits = struct.unpack_from("<8sIIQ", data)
        old = struct.pack("<8sIIQ", b"DCDONE\x00\x00", chunks, body_crc, set_bits)
        conn.execute(
            "UPDATE kv SET value = ? WHERE space LIKE ? AND key = ?",
            (old, *cell(generation, MARKER)),
        )
    assert zlib.crc32(old) != 0
    result = invoke(url, "sweep", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["generation"] == generation


@pytest.mark.parametrize(("seq", "offset"), [(HEADER, 0), (MARKER, 20)])
def test_filters_list_says_corrupt(url: str, tmp_path: Path, seq: int, offset: int) -> None:
    """Not 'INCOMPLETE' (a build still running, or crashed) and no Python None in a table."""
    good = build(url)
    bad = build(url)
    poke(tmp_path, bad, seq, offset)
    lines = invoke(url, "filters", "list").stdout.splitlines()
    assert lines[0].startswith(f"{good}  complete    for every bucket  shards 1/1  age ")
    assert lines[1].startswith(f"{bad}  CORRUPT     ")
    assert "shards 0/" in lines[1]
    assert "None" not in lines[1]
    listed = json.loads(invoke(url, "filters", "list", "--json").stdout)
    # The good one's body was not read: not known sound, so not "corrupt": false.
    assert [g["corrupt"] for g in listed] == [None, True]
    verified = json.loads(invoke(url, "filters", "list", "--verify", "--json").stdout)
    assert [g["corrupt"] for g in verified] == [False, True]


def test_a_damaged_body_is_corrupt_where_the_body_is_read(url: str, tmp_path: Path) -> None:
    """A body's checksum needs the whole body: the listing reads headers and markers only, so
    it claims nothing about the body until asked (--verify, or filters show); then it says
    corrupt, as the sweep that refuses the filter does."""
    good = build(url)
    bad = build(url)
    poke(tmp_path, bad, 0, 3)  # the first body chunk
    swept = invoke(url, "sweep", "--generation", bad)
    assert swept.exit_code == 3, swept.output
    assert "body checksum mismatch" in swept.stderr

    listed = invoke(url, "filters", "list")
    assert [line.split()[1] for line in listed.stdout.splitlines()] == ["complete", "complete"]
    assert listed.stderr.splitlines()[-1] == (
        "headers and completion markers checked, bodies not read: 'filters list --verify' or"
        " 'filters show GENERATION' checks them too"
    )
    rows = json.loads(invoke(url, "filters", "list", "--json").stdout)
    assert [(r["corrupt"], r["checked"]) for r in rows] == [(None, "header and marker")] * 2

    verified = invoke(url, "filters", "list", "--verify")
    assert [line.split()[1] for line in verified.stdout.splitlines()] == ["complete", "CORRUPT"]
    assert verified.stderr == ""
    rows = json.loads(invoke(url, "filters", "list", "--verify", "--json").stdout)
    assert [(r["corrupt"], r["complete"]) for r in rows] == [(False, True), (True, False)]
    assert rows[1]["problem"].startswith(
        "shard 0: corrupt: body checksum mismatch against its completion marker"
    )
    assert all(r["checked"] == "header, marker and body" for r in rows)

    shown = json.loads(invoke(url, "filters", "show", bad).stdout)
    assert (shown["corrupt"], shown["complete"]) == (True, False)
    assert json.loads(invoke(url, "filters", "show", good).stdout)["corrupt"] is False
