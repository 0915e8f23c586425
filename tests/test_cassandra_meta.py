"""The Cassandra store's own tables, without a node: every statement is prepared with bind
markers (the lease's as lightweight transactions with a TTL), and the tombstone ledger's reads
are chunked per bucket and summed per partition, each charge once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from dircleaner.store.cassandra.config import CassandraConfig
from dircleaner.store.cassandra.meta import LEDGER_READ_KEYS, CassandraMeta


class Recorded(CassandraMeta):
    """The meta tables over a recording ``_prepare`` and canned ledger rows."""

    def __init__(self, ledger: dict[tuple[str, str], list[tuple[str, str, int]]]) -> None:
        self.config = CassandraConfig(keyspace="ks")
        self.prepared: list[str] = []
        self.ledger = ledger
        self.reads: list[tuple[Any, ...]] = []
        self._prepare_meta()

    def _prepare(self, cql: str) -> Any:
        self.prepared.append(cql)
        return cql

    def _run_statements(self, items: Sequence[tuple[Any, Any]], *_args: Any, **_kw: Any) -> Any:
        results = []
        for _stmt, params in items:
            self.reads.append(params)
            bucket, parents = params[0], dict.fromkeys(params[1:])
            rows = [(p, *charge) for p in parents for charge in self.ledger.get((bucket, p), [])]
            results.append(rows)
        return results


def test_every_statement_binds_its_values_and_the_lease_is_a_transaction() -> None:
    meta = Recorded({})
    meta._ledger_read(4)  # the ledger's IN read, prepared on first use per size
    assert meta.prepared, "nothing prepared"
    for cql in meta.prepared:
        assert "'" not in cql, cql  # no value written into the CQL
        assert "?" in cql or cql.startswith("SELECT DISTINCT"), cql
    lease = [cql for cql in meta.prepared if " IF " in cql]
    assert len(lease) == 3  # take, replace, drop
    assert sum("USING TTL ?" in cql for cql in lease) == 2  # taken and renewed with a TTL


def test_the_ledger_sums_each_partitions_charges_once() -> None:
    ledger = {
        ("b", "p/"): [("g1", "c1", 3), ("g1", "c2", 2), ("g2", "c1", 1)],
        ("b", "q/"): [("g1", "c1", 0)],
        ("o", "p/"): [("g1", "c1", 7)],
    }
    meta = Recorded(ledger)
    asked = [("b", "p/"), ("b", "q/"), ("o", "p/"), ("b", "p/"), ("b", "none/")]
    # A repeated partition counts once; one without a live charge is left out.
    assert meta.tombstones_charged(asked) == {("b", "p/"): 6, ("o", "p/"): 7}


@pytest.mark.parametrize("count", [1, LEDGER_READ_KEYS, LEDGER_READ_KEYS + 1])
def test_the_ledger_is_read_in_chunks_of_one_bucket(count: int) -> None:
    meta = Recorded({})
    parents = [f"d{i}/" for i in range(count)]
    meta.tombstones_charged([("b", p) for p in parents] + [("o", "x/")])
    assert [r[0] for r in meta.reads].count("o") == 1
    chunks = [r[1:] for r in meta.reads if r[0] == "b"]
    assert len(chunks) == -(-count // LEDGER_READ_KEYS)
    assert all(len(chunk) <= LEDGER_READ_KEYS for chunk in chunks)
    assert {p for chunk in chunks for p in chunk} == set(parents)
