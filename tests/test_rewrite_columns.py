"""A partition rewrite on a real metastore's folders table: every regular column is copied.

Real folders tables carry columns of their own (owner, created_at, …). The rewrite reads them
from the table metadata and writes each kept row back whole at T+1; null columns stay unset (no
tombstone cell); a column it cannot round-trip (a non-frozen collection, a static column) is
refused with one line naming it, before anything is written.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest

from dircleaner.errors import RewriteUnsupported
from dircleaner.model import PartitionKey, Shard
from dircleaner.store.cassandra.config import parse_cassandra_url
from dircleaner.store.cassandra.store import CassandraStore
from dircleaner.timeutil import now_us
from tests.test_cassandra_end_to_end import keyspace_url

pytestmark = pytest.mark.cassandra


def fresh_store(cassandra_url: str, suffix: str, columns: str) -> Iterator[CassandraStore]:
    base = parse_cassandra_url(cassandra_url).keyspace or "dircleaner_test"
    url = keyspace_url(cassandra_url, f"{base}_{suffix}")
    with CassandraStore.open(url, create=True) as setup:
        cfg = setup.config
        table = f'"{cfg.keyspace}"."{cfg.tables.folders}"'
        setup.requests.session.execute(f"DROP TABLE IF EXISTS {table}")
        setup.requests.session.execute(
            f"CREATE TABLE {table} (bucket text, parent text, name text, {columns},"
            " PRIMARY KEY ((bucket, parent), name))"
        )
    store = CassandraStore.open(url)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def with_columns(cassandra_url: str) -> Iterator[CassandraStore]:
    yield from fresh_store(
        cassandra_url,
        "cols",
        "owner text, created_at timestamp, size bigint, tags frozen<set<text>>",
    )


def test_every_regular_column_is_copied_and_nulls_stay_unset(
    with_columns: CassandraStore,
) -> None:
    store = with_columns
    cfg = store.config
    table = f'"{cfg.keyspace}"."{cfg.tables.folders}"'
    session = store.requests.session
    t = now_us() - 60_000_000
    when = datetime.datetime(2026, 4, 11, 3, 0, tzinfo=datetime.UTC)
    insert = session.prepare(
        f"INSERT INTO {table} (bucket, parent, name, owner, created_at, size, tags)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
    )
    for i in range(10):
        owner = f"user{i}" if i % 2 else None  # half the rows have no owner
        session.execute(insert, ("b", "p/", f"d{i}", owner, when, i * 100, {"x", f"t{i}"}, t))
    (key,) = {
        PartitionKey(r.token, r.bucket, r.parent)
        for batch in store.scan_folder_rows(Shard())
        for r in batch
    }
    drop = {"d0", "d3", "d7"}
    assert store.rewrite_folder_partition(key, drop, t + 101) == 7
    assert store.delete_folder_partitions([key], t + 100) == [None]
    rows = session.execute(
        f"SELECT name, owner, created_at, size, tags, writetime(size) FROM {table}"
        " WHERE bucket = 'b' AND parent = 'p/'"
    )
    got = {r[0]: r[1:] for r in rows}
    assert set(got) == {f"d{i}" for i in range(10)} - drop
    for name, (owner, created, size, tags, written) in got.items():
        i = int(name[1:])
        assert owner == (f"user{i}" if i % 2 else None)
        assert created.replace(tzinfo=datetime.UTC) == when
        assert (size, set(tags)) == (i * 100, {"x", f"t{i}"})
        assert written == t + 101
    # An unset owner wrote no tombstone cell: the partition reads none.
    assert store.tombstones_in_partition("b", "p/") == 0


@pytest.fixture
def with_a_set(cassandra_url: str) -> Iterator[CassandraStore]:
    yield from fresh_store(cassandra_url, "cols_set", "labels set<text>")


def test_a_column_the_copy_cannot_round_trip_is_refused_naming_it(
    with_a_set: CassandraStore,
) -> None:
    store = with_a_set
    store.write_folder_rows([("b", "p/", "d0"), ("b", "p/", "d1")], now_us())
    key = PartitionKey(0, "b", "p/")
    with pytest.raises(RewriteUnsupported, match=r"\.labels is a non-frozen set<text>"):
        store.rewrite_folder_partition(key, {"d0"}, now_us())
    assert {r.name for b in store.scan_folder_rows(Shard()) for r in b} == {"d0", "d1"}
