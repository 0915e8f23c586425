"""The key-value table on Cassandra without a node: which statement each form of ``kv_write``
sends, with what values, and on which profile (compare-and-sets as lightweight transactions on
the lease profile, plain writes on the meta profile, TTL 0 for none)."""

from __future__ import annotations

from typing import Any

import pytest

from dircleaner.store.cassandra.config import CassandraConfig
from dircleaner.store.cassandra.kv import CassandraKV
from dircleaner.store.kv import ANY, Expect


class Result:
    def __init__(self, applied: bool) -> None:
        self.current_rows = [(applied,)]


class Recording:
    """The request layer's surface the key-value object uses, recording what it sends."""

    def __init__(self, applied: bool = True) -> None:
        self.config = CassandraConfig(keyspace="ks")
        self.sent: list[tuple[str, tuple[Any, ...], str]] = []
        self.applied = applied

    def prepare(self, cql: str) -> str:
        return cql

    def execute(self, stmt: str, params: tuple[Any, ...], profile: str) -> Result:
        self.sent.append((stmt, params, profile))
        return Result(self.applied)


def sent_by(value: bytes | None, expect: Expect, ttl_s: float | None = None, applied: bool = True):
    requests = Recording(applied)
    kv = CassandraKV(requests)  # type: ignore[arg-type]
    result = kv.write("lease", "run", value, ttl_s=ttl_s, expect=expect)
    [(stmt, params, profile)] = requests.sent
    return result, stmt, params, profile


def test_a_plain_write_is_an_insert_with_ttl_zero_for_none_on_the_meta_profile() -> None:
    applied, stmt, params, profile = sent_by(b"v", ANY)
    assert stmt.startswith('INSERT INTO "ks"."dircleaner_kv"') and " IF " not in stmt
    assert (params, profile, applied) == (("lease", "run", b"v", 0), "meta", True)
    _, stmt, params, _ = sent_by(None, ANY)
    assert stmt.startswith("DELETE FROM") and " IF " not in stmt and params == ("lease", "run")


@pytest.mark.parametrize(
    ("value", "expect", "form", "params"),
    [
        (b"me", None, "IF NOT EXISTS USING TTL ?", ("lease", "run", b"me", 30)),
        (b"me", b"old", 'IF "value" = ?', (30, b"me", "lease", "run", b"old")),
        (None, b"me", 'IF "value" = ?', ("lease", "run", b"me")),
    ],
    ids=["insert-if-absent", "replace-if-equal", "delete-if-equal"],
)
def test_a_compare_and_set_is_a_lightweight_transaction_on_the_lease_profile(
    value: bytes | None, expect: Expect, form: str, params: tuple[Any, ...]
) -> None:
    for applied in (True, False):
        result, stmt, sent, profile = sent_by(value, expect, ttl_s=30, applied=applied)
        assert stmt.endswith(form) and (sent, profile, result) == (params, "lease", applied)
