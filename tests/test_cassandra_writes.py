"""The S3-style index writes on Cassandra, without a node: upserts go as single-partition
UNLOGGED batches, cut at a partition change and at the batch limits."""

from __future__ import annotations

from typing import Any

import pytest

from dircleaner.store.cassandra import writes
from dircleaner.store.cassandra.config import CassandraConfig
from dircleaner.store.cassandra.requests import CqlParts
from dircleaner.store.cassandra.writes import BATCH_MAX_BYTES, BATCH_MAX_ROWS, IndexWrites


class Batch:
    """A batch as the writes fill it: its type and the rows added."""

    def __init__(self, batch_type: Any) -> None:
        self.batch_type = batch_type
        self.rows: list[tuple[Any, ...]] = []

    def add(self, stmt: str, values: tuple[Any, ...]) -> None:
        assert stmt.startswith("INSERT INTO")
        self.rows.append(values)


@pytest.fixture(autouse=True)
def recorded_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writes, "BatchStatement", Batch)


class Recording:
    """The request layer's surface the writes use, recording what would be sent."""

    def __init__(self) -> None:
        self.config = CassandraConfig(keyspace="ks")
        self.key_columns = ("bucket", "parent")
        self.cql = CqlParts.of(self.config, self.key_columns)
        self.sent: list[Any] = []

    def prepare(self, cql: str) -> str:
        return cql

    def key_values(self, bucket: str, parent: str) -> tuple[str, ...]:
        return (bucket, parent)

    def run_statements(self, items: list[tuple[Any, Any]], profile: str, **_: Any) -> list[None]:
        self.sent.extend(stmt for stmt, _params in items)
        return [None] * len(items)

    def raise_first(self, results: list[Any]) -> None:
        assert all(r is None for r in results)


def batches(rows: list[tuple[str, str, str]]) -> list[list[tuple[Any, ...]]]:
    requests = Recording()
    IndexWrites(requests).write_object_rows(rows, 7)  # type: ignore[arg-type]
    assert all(batch.batch_type == writes.BatchType.UNLOGGED for batch in requests.sent)
    return [batch.rows for batch in requests.sent]


def test_rows_of_one_partition_share_a_batch_and_a_new_partition_starts_one() -> None:
    got = batches([("b", "a/", "x"), ("b", "a/", "y"), ("b", "c/", "z"), ("b", "a/", "w")])
    keys = [{(v[0], v[1]) for v in batch} for batch in got]
    assert keys == [{("b", "a/")}, {("b", "c/")}, {("b", "a/")}]
    assert [len(batch) for batch in got] == [2, 1, 1]
    assert all(v[-1] == 7 for batch in got for v in batch)  # every row at the write's timestamp


def test_a_wide_partition_is_cut_at_the_row_and_byte_limits() -> None:
    many = [("b", "a/", f"n{i:05d}") for i in range(BATCH_MAX_ROWS * 2 + 1)]
    assert [len(batch) for batch in batches(many)] == [BATCH_MAX_ROWS, BATCH_MAX_ROWS, 1]
    long_name = "x" * (BATCH_MAX_BYTES // 3)
    wide = [("b", "a/", f"{long_name}{i}") for i in range(6)]
    got = batches(wide)
    assert len(got) > 1 and sum(map(len, got)) == 6
