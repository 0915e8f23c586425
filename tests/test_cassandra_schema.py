"""The Cassandra schema's text without a node: mapped identifiers quoted, the journal a time-window
table whose rows expire."""

from __future__ import annotations

import pytest

from dircleaner.errors import UsageError
from dircleaner.store.cassandra.config import CassandraConfig, Columns, Tables
from dircleaner.store.cassandra.schema import schema_cql


def test_schema_cql_quotes_mapped_identifiers() -> None:
    cfg = CassandraConfig(
        keyspace="Ks", tables=Tables(folders="Dirs"), columns=Columns(bucket=None)
    )
    ddl = schema_cql(cfg)
    assert ddl[0].startswith('CREATE KEYSPACE IF NOT EXISTS "Ks" WITH replication')
    assert "'replication_factor': 1" in ddl[0]
    folders = next(s for s in ddl if '"Dirs"' in s)
    assert folders == (
        'CREATE TABLE IF NOT EXISTS "Ks"."Dirs" ("parent" text, "name" text,'
        ' PRIMARY KEY (("parent"), "name"))'
    )
    assert (
        'CREATE TABLE IF NOT EXISTS "Ks"."dircleaner_kv" ("space" text, "key" text,'
        ' "value" blob, PRIMARY KEY (("space"), "key"))'
    ) in ddl


def test_the_journal_is_a_time_window_table_whose_rows_expire() -> None:
    cfg = CassandraConfig(keyspace="ks", tables=Tables(journal="jrnl"))
    (journal,) = [s for s in schema_cql(cfg) if '"jrnl"' in s]
    assert journal.startswith(
        'CREATE TABLE IF NOT EXISTS "ks"."jrnl" ("slot" bigint, "shard" int, "bucket" text,'
        ' "parent" text, "deleted" int, PRIMARY KEY (("slot", "shard"), "bucket", "parent"))'
        " WITH compaction = {'class': 'TimeWindowCompactionStrategy',"
    )
    # Longer than the full night's week; a short grace: rows only ever expire, never deleted.
    ttl = int(journal.split("default_time_to_live = ")[1].split()[0])
    assert ttl > 7 * 86_400
    assert "gc_grace_seconds = 10800" in journal
    with pytest.raises(UsageError, match="must be distinct"):
        Tables(journal="dircleaner_kv")
