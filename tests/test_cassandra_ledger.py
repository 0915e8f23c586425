"""The tombstone ledger on Cassandra without a node: its reads are IN reads of one bucket's
partitions, LEDGER_READ_KEYS at most, and each charge is counted once by its key however many
times a read returns it (padding repeats a partition)."""

from __future__ import annotations

from typing import Any

from dircleaner.store.cassandra.config import CassandraConfig
from dircleaner.store.cassandra.ledger import LEDGER_READ_KEYS, CassandraLedger


class Canned:
    """The request layer's surface the ledger uses; answers each IN read from ``charges``."""

    def __init__(self, charges: dict[tuple[str, str], list[tuple[str, str, int]]]) -> None:
        self.config = CassandraConfig(keyspace="ks")
        self.charges = charges
        self.reads: list[tuple[Any, ...]] = []

    def prepare(self, cql: str) -> str:
        return cql

    def run_statements(self, items: list[tuple[Any, tuple[Any, ...]]], *_: Any, **__: Any):
        answers = []
        for stmt, params in items:
            assert "parent IN (" in stmt and stmt.count("?") == len(params)
            self.reads.append(params)
            bucket, parents = params[0], params[1:]
            answers.append([(p, *c) for p in parents for c in self.charges.get((bucket, p), [])])
        return answers

    def raise_first(self, results: list[Any]) -> None:
        pass


def test_each_charge_counts_once_and_reads_are_chunked_per_bucket() -> None:
    charges = {("b", "a/"): [("g1", "c1", 3), ("g2", "c1", 2)], ("c", "a/"): [("g1", "c9", 7)]}
    requests = Canned(charges)
    ledger = CassandraLedger(requests)  # type: ignore[arg-type]
    many = [("b", f"p{i}/") for i in range(LEDGER_READ_KEYS + 1)]
    asked = [("b", "a/"), ("b", "a/"), ("c", "a/"), *many, ("b", "z/")]
    # padding repeats "a/" in the short chunks: its charges still count once
    assert ledger.charged(asked) == {("b", "a/"): 5, ("c", "a/"): 7}
    assert all(len(params) - 1 <= LEDGER_READ_KEYS for params in requests.reads)
    assert {params[0] for params in requests.reads} == {"b", "c"}
    assert len(requests.reads) == 3  # b: 66 partitions in two reads, c: one
