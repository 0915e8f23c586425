"""The bulk loader: rows through Cassandra's own sstable writer, loaded by sstableloader or
nodetool import, read back row for row through the store, write times included.

The frame format needs no node; the loads need the suite's node and Cassandra's jars
(``scripts/cassandra fetch``), and Java (without them, one line: ``test_cassandra_bulkjava.py``;
``--bulk`` on the command line and its summary: ``test_cli_bulk.py``). Each load uses a keyspace of
its own, dropped first: an emptied table would hide the rows with tombstones newer than theirs.
"""

from __future__ import annotations

import json
import os
import sqlite3
import struct
import tempfile
from pathlib import Path

import pytest
from cassandra.cluster import Cluster
from cassandra.query import SimpleStatement

from dircleaner.errors import UsageError
from dircleaner.model import FolderRow, PartitionKey
from dircleaner.paths import split_key
from dircleaner.store import Store, open_store
from dircleaner.store.cassandra import bulkjava
from dircleaner.store.cassandra.bulkjava import BulkLoaderUnavailable
from dircleaner.store.cassandra.bulkload import CassandraBulkLoad, Row, encode_frame
from dircleaner.store.cassandra.config import CassandraConfig, Columns, parse_cassandra_url
from dircleaner.store.cassandra.mapping import model_parent
from dircleaner.store.cassandra.store import CassandraStore
from dircleaner.synth import SynthSpec, generate
from tests.helpers import invoke, write_lines, write_toml
from tests.test_cassandra_store import keyspace_url, now_us

#: one write time for the whole generated dataset (µs)
TS = 1_700_000_000_000_000

# -- the frame, without Java ----------------------------------------------------------------------


def decode_frame(frame: bytes, text_columns: int) -> tuple[int, list[tuple[object, ...]]]:
    """(table index, rows as bound values) from a frame: the Java helper's reading, in Python."""
    index, n, flags = struct.unpack_from(">BiB", frame, 0)
    at = 6
    columns: list[list[str]] = []
    for c in range(text_columns):
        (size,) = struct.unpack_from(">i", frame, at)
        values = frame[at + 4 : at + 4 + size].decode("utf-8").split("\0")[:-1]
        at += 4 + size
        if text_columns == 3 and c == 0 and flags & 1:
            values = values * n
        if c == text_columns - 2:  # the parent: empty repeats the previous row's
            for i in range(1, len(values)):
                values[i] = values[i] or values[i - 1]
        columns.append(values)
    (size,) = struct.unpack_from(">i", frame, at)
    stamps = list(struct.unpack_from(f"<{size // 8}q", frame, at + 4))
    assert at + 4 + size == len(frame)
    if flags & 2:
        stamps = stamps * n
    return index, list(zip(*columns, stamps, strict=True))


def test_a_frame_holds_every_row_with_its_stored_parent_and_write_time() -> None:
    cfg = CassandraConfig(keyspace="k")
    rows: list[Row] = [
        (0, "b1", "", "top", 5),
        (0, "b1", "a/", "x", 6),
        (0, "b1", "a/", "y", 6),
        (0, "b2", "/odd/", "z", 7),
        (0, "b2", "a/", "ü", 8),
    ]
    index, decoded = decode_frame(encode_frame(1, rows, cfg), 3)
    assert index == 1
    # the root is stored as "/", a parent starting with it gets it once more in front
    assert decoded == [
        ("b1", "/", "top", 5),
        ("b1", "a/", "x", 6),
        ("b1", "a/", "y", 6),
        ("b2", "//odd/", "z", 7),
        ("b2", "a/", "ü", 8),
    ]


def test_a_frame_of_one_bucket_and_one_time_says_each_once() -> None:
    cfg = CassandraConfig(keyspace="k")
    rows: list[Row] = [(0, "b", f"p{i // 10}/", f"n{i}", 42) for i in range(100)]
    frame = encode_frame(0, rows, cfg)
    _, decoded = decode_frame(frame, 3)
    assert decoded == [("b", f"p{i // 10}/", f"n{i}", 42) for i in range(100)]
    assert frame.count(b"b\0") == 1 and len(frame) < 100 * 8


def test_a_frame_without_a_bucket_column_maps_parents_and_refuses_another_bucket() -> None:
    cfg = CassandraConfig(
        keyspace="k", columns=Columns(bucket=None), bucket_name="only", parent_prefix="/"
    )
    _, decoded = decode_frame(
        encode_frame(0, [(0, "only", "", "a", 1), (0, "only", "a/", "b", 2)], cfg), 2
    )
    assert decoded == [("/", "a", 1), ("/a/", "b", 2)]
    with pytest.raises(UsageError, match="no bucket column; its only bucket is 'only', not 'x'"):
        encode_frame(0, [(0, "only", "", "a", 1), (0, "x", "", "b", 1)], cfg)


# -- loads on the suite's node --------------------------------------------------------------------


@pytest.fixture(scope="session")
def java_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One compile cache for the session: the helper is compiled once."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture
def bulk_ready(cassandra_url: str, java_cache: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The node's URL, once Java and Cassandra's jars are known to be here."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(java_cache))
    try:
        bulkjava.java_helper()
    except BulkLoaderUnavailable as exc:
        if os.environ.get("DIRCLEANER_REQUIRE_CASSANDRA") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    return cassandra_url


def fresh_store(base_url: str, suffix: str, toml: str | None = None) -> CassandraStore:
    """A store in keyspace ``<the suite's keyspace>_bulk_<suffix>``, dropped and created anew
    (``toml``: a mapping, ``{keyspace}`` in it filled in)."""
    parts = parse_cassandra_url(base_url)
    keyspace = f"{parts.keyspace or 'dircleaner_test'}_bulk_{suffix}"
    cluster = Cluster(list(parts.hosts), port=parts.port)
    try:
        cluster.connect().execute(f'DROP KEYSPACE IF EXISTS "{keyspace}"', timeout=120)
    finally:
        cluster.shutdown()
    config = None
    if toml is not None:
        config = write_toml(Path(tempfile.mkdtemp()) / "bulk.toml", toml.format(keyspace=keyspace))
    return CassandraStore.open(keyspace_url(base_url, keyspace), config_path=config, create=True)


def object_rows(store: CassandraStore) -> set[tuple[str, str, str]]:
    """Every (bucket, parent, name) object row, read through the store's session."""
    cfg = store.config
    columns = [c for c in (cfg.columns.bucket, cfg.columns.parent, cfg.columns.name) if c]
    selected = ", ".join(f'"{c}"' for c in columns)
    cql = f'SELECT {selected} FROM "{cfg.keyspace}"."{cfg.tables.objects}"'
    out = set()
    for row in store.requests.session.execute(SimpleStatement(cql, fetch_size=5000)):
        *bucket, parent, name = row
        out.add((bucket[0] if bucket else cfg.bucket_name, model_parent(cfg, parent), name))
    return out


def folder_rows(store: Store) -> set[tuple[str, str, str]]:
    return {(r.bucket, r.parent, r.name) for r in store.iter_folder_rows()}


def assert_written_at(store: CassandraStore, earliest: int, latest: int) -> None:
    """Every index row was written at a time in [earliest, latest]: a delete at earliest - 1
    leaves every one (the write is newer), a delete at latest removes every one."""
    folders = {(b, p) for b, p, _ in folder_rows(store)}
    objects = sorted(object_rows(store))
    before = (folder_rows(store), set(objects))
    partitions = [PartitionKey(0, b, p) for b, p in sorted(folders)]
    for at in (earliest - 1, latest):
        assert all(e is None for e in store.delete_folder_partitions(partitions, at))
        store.delete_object_rows(objects, at)
        after = (folder_rows(store), object_rows(store))
        assert after == (before if at < earliest else (set(), set()))


def sqlite_rows(path: Path) -> tuple[set[tuple[str, str, str]], set[tuple[str, str, str]]]:
    """(folder rows, object rows) of an SQLite metastore: the reference."""
    with sqlite3.connect(path) as db:
        folders = set(db.execute("SELECT bucket, parent, name FROM folders"))
        objects = set(db.execute("SELECT bucket, parent, name FROM objects"))
    return folders, objects


def test_a_generated_dataset_loads_row_for_row_at_its_write_time(
    bulk_ready: str, tmp_path: Path
) -> None:
    spec = SynthSpec(dirs=3000, seed=7, timestamp_us=TS)
    reference = tmp_path / "ref.db"
    generate(open_store(f"sqlite:///{reference}", create=True), spec, None)
    store = fresh_store(bulk_ready, "gen")
    try:
        bulk = CassandraBulkLoad(store.config, store.requests.cluster.metadata)
        result = generate(store, spec, None, bulk=bulk)
        want_folders, want_objects = sqlite_rows(reference)
        assert len(want_folders) == result.dirs > 2900
        assert folder_rows(store) == want_folders
        assert object_rows(store) == want_objects
        # every row but the few the generator puts through the store came in the sstables
        assert bulk.report.rows > 0.95 * (len(want_folders) + len(want_objects))
        assert bulk.report.write.sstables == 2
        assert_written_at(store, TS, TS)
    finally:
        store.close()


def test_gen_bulk_says_what_it_loaded(bulk_ready: str) -> None:
    store = fresh_store(bulk_ready, "cli")
    try:
        url = keyspace_url(bulk_ready, store.config.keyspace)
        result = invoke(url, "gen", "--dirs", "500", "--bulk", "--json")
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        bulk = summary["bulk"]
        assert bulk["via"] == "sstableloader" and bulk["sstables"] == 2
        assert 0 < bulk["rows"] <= summary["dirs"] + summary["objects"]
        assert len(folder_rows(store)) == summary["dirs"]
    finally:
        store.close()


KEYS = [
    "top.txt",
    "a/b/c.txt",
    "a/b/d.txt",
    "a/b/",
    "/lead/x.bin",
    "x/y/z/ü.txt",
    "logs/2026/04/11/AB/part-0.gz",
]


def test_a_key_file_loads_as_s3_puts_would_write_it_by_nodetool_import(
    bulk_ready: str, tmp_path: Path
) -> None:
    keys = write_lines(
        tmp_path / "keys.txt", [*KEYS, "", *(f"wide/{i:05d}/o" for i in range(3000))]
    )
    reference = tmp_path / "ref.db"
    assert invoke(f"sqlite:///{reference}", "import-keys", str(keys)).exit_code == 1  # "" line
    store = fresh_store(bulk_ready, "keys")
    try:
        url = keyspace_url(bulk_ready, store.config.keyspace)
        started = now_us()
        result = invoke(url, "import-keys", "--bulk", "--bulk-via", "nodetool-import", str(keys))
        finished = now_us()
        assert result.exit_code == 1, result.output  # the empty line is rejected, as without --bulk
        assert "line 8: " in result.stderr
        assert "put 3,007 keys" in result.stdout and "loaded by nodetool-import" in result.stdout
        want_folders, want_objects = sqlite_rows(reference)
        assert folder_rows(store) == want_folders
        assert (
            object_rows(store)
            == want_objects
            == {("default", *split_key(k)) for k in KEYS + [f"wide/{i:05d}/o" for i in range(3000)]}
        )
        assert_written_at(store, started, finished)
    finally:
        store.close()


CUSTOM = """
[cassandra]
keyspace = "{keyspace}"
bucket_name = "only"
root_parent = "<root>"
parent_prefix = "/"

[cassandra.tables]
objects = "s3_objs"
folders = "s3_dirs"

[cassandra.columns]
bucket = false
parent = "dir"
name = "entry"
"""


def test_a_custom_mapping_without_a_bucket_column_keeps_each_rows_own_write_time(
    bulk_ready: str,
) -> None:
    store = fresh_store(bulk_ready, "custom", CUSTOM)
    # each row its own write time: the frames carry one per row
    folders: list[Row] = [(0, "only", "", f"d{i}", TS + i) for i in range(50)]
    folders += [(0, "only", f"d{i}/", "e", TS + 100 + i) for i in range(50)]
    objects: list[Row] = [(0, "only", f"d{i}/e/", "o", TS + 200 + i) for i in range(50)]
    objects.append((0, "only", "", "at-root", TS + 300))
    try:
        bulk = CassandraBulkLoad(store.config, store.requests.cluster.metadata)
        with bulk.bulk_loading():
            bulk.bulk_insert("folders", folders)
            bulk.bulk_insert("objects", objects)
        assert bulk.report.rows == 151
        assert folder_rows(store) == {(b, p, n) for _, b, p, n, _ in folders}
        assert object_rows(store) == {(b, p, n) for _, b, p, n, _ in objects}
        # stored as the mapping says: the root as "<root>", every other parent behind "/"
        cql = f'SELECT "dir" FROM "{store.config.keyspace}".s3_dirs'
        stored = {r[0] for r in store.requests.session.execute(cql)}
        assert stored == {"<root>"} | {f"/d{i}/" for i in range(50)}
        for row in folders:
            _, bucket, parent, name, ts = row
            for at, left in ((ts - 1, 1), (ts, 0)):
                store.delete_folder_rows([FolderRow(0, bucket, parent, name)], at)
                pages = store.folder_partition_pages(bucket, parent)
                got = {(r.parent, r.name) for page in pages for r in page}
                assert ((parent, name) in got) == bool(left), (row, at)
        for _, bucket, parent, name, ts in objects:
            store.delete_object_rows([(bucket, parent, name)], ts - 1)
            assert store.objects_partition_nonempty(bucket, parent)
            store.delete_object_rows([(bucket, parent, name)], ts)
            assert not store.objects_partition_nonempty(bucket, parent)
    finally:
        store.close()
