"""The journal's table on a real node: a keyspace made before it existed still opens, the
commands that use the journal name what to run, and ``init-schema`` adds the table."""

from __future__ import annotations

import uuid

import pytest
from cassandra.cluster import Cluster

from dircleaner.errors import SchemaError
from dircleaner.store.cassandra.config import parse_cassandra_url
from dircleaner.store.cassandra.schema import init_schema
from dircleaner.store.cassandra.store import CassandraStore
from dircleaner.store.records import JournalEntry
from tests.helpers import invoke, said
from tests.test_cassandra_store import keyspace_url


def test_a_keyspace_without_the_journal_opens_and_init_schema_adds_it(
    cassandra_url: str,
) -> None:
    keyspace = f"{parse_cassandra_url(cassandra_url).keyspace}_old_{uuid.uuid4().hex[:8]}"
    url = keyspace_url(cassandra_url, keyspace)
    parts = parse_cassandra_url(url)
    init_schema(url)
    cluster = Cluster(list(parts.hosts), port=parts.port)
    session = cluster.connect()
    try:
        session.execute(f'DROP TABLE "{keyspace}"."dircleaner_journal"')
        with CassandraStore.open(url) as store:  # an older keyspace opens as before
            assert store.folder_partition_heads([("b", "x/")], 1) == {}
            with pytest.raises(SchemaError, match=r"dircleaner_journal.*init-schema"):
                store.journal_write([JournalEntry(3600, 0, "b", "x/", 1)], 60)
            with pytest.raises(SchemaError, match=r"dircleaner_journal.*init-schema"):
                list(store.journal_read(3600))
            store.put_objects("b", ["x/1", "y/2"], 1)
        # delete-keys deletes all the same, and says once that it could not journal.
        deleted = invoke(url, "delete-keys", "-", "--bucket", "b", input="x/1\n")
        assert deleted.exit_code == 0, deleted.output
        assert said(deleted).startswith("warning: deletes not journaled: table ")
        assert "init-schema" in said(deleted)
        with CassandraStore.open(url) as store:
            assert not store.objects_partition_nonempty("b", "x/")  # deleted all the same
            assert store.objects_partition_nonempty("b", "y/")
        assert init_schema(url) == [f"table {keyspace}.dircleaner_journal"]
        with CassandraStore.open(url) as store:
            store.journal_write([JournalEntry(3600, 0, "b", "x/", 1)], 60)
            assert [e for batch in store.journal_read(3600) for e in batch] == [
                JournalEntry(3600, 0, "b", "x/", 1)
            ]
    finally:
        session.execute(f'DROP KEYSPACE IF EXISTS "{keyspace}"')
        cluster.shutdown()
