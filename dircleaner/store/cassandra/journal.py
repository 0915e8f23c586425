"""The journal of dirty directories: a table of its own, ``((slot, shard), bucket, parent)``,
every row written with a TTL, read a whole time slot (its ``JOURNAL_SHARDS`` partitions, in one
``IN`` request) at a time. Its statements are prepared on first use: a keyspace made before the
journal existed opens as before, and only the commands that use the journal ask for
``init-schema``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from dircleaner.store.cassandra.mapping import _q
from dircleaner.store.cassandra.requests import CassandraRequests
from dircleaner.store.cassandra.schema import check_table
from dircleaner.store.cassandra.session import _ttl
from dircleaner.store.records import JOURNAL_SHARDS, JournalEntry


class CassandraJournal:
    """``journal_write`` and ``journal_read`` on the table ``tables.journal``."""

    def __init__(self, requests: CassandraRequests) -> None:
        self._requests = requests
        self._lock = threading.Lock()
        self._statements: tuple[Any, Any, Any] | None = None

    def _prepared(self) -> tuple[Any, Any, Any]:
        """The upsert and the two reads, prepared once the table is known to be there."""
        with self._lock:
            if self._statements is None:
                r = self._requests
                check_table(r.cluster.metadata, r.config, "journal")
                table = f"{_q(r.config.keyspace)}.{_q(r.config.tables.journal)}"
                select = f"SELECT slot, shard, bucket, parent, deleted FROM {table}"
                self._statements = (
                    r.prepare(
                        f"INSERT INTO {table} (slot, shard, bucket, parent, deleted)"
                        " VALUES (?, ?, ?, ?, ?) USING TTL ?"
                    ),
                    r.prepare(f"{select} WHERE slot = ? AND shard IN ?"),
                    r.prepare(f"{select} WHERE slot = ? AND shard IN ? AND bucket = ?"),
                )
            return self._statements

    def write(self, entries: Sequence[JournalEntry], ttl_s: float) -> None:
        """One upsert per row, ``concurrency`` in flight, at the ``meta`` consistency."""
        upsert, _, _ = self._prepared()
        ttl = _ttl(ttl_s)
        r = self._requests
        r.raise_first(r.run_many(upsert, [(*entry, ttl) for entry in entries], "meta", retry=True))

    def read(self, slot: int, bucket: str | None = None) -> Iterator[list[JournalEntry]]:
        """One request for the slot's partitions (``shard IN …``), read to its last page."""
        _, every, of_bucket = self._prepared()
        r = self._requests
        shards = list(range(JOURNAL_SHARDS))
        if bucket is None:
            pages = r.pages(every, (slot, shards), "meta", r.config.fetch_size)
        else:
            pages = r.pages(of_bucket, (slot, shards, bucket), "meta", r.config.fetch_size)
        for page in pages:
            yield [
                JournalEntry(int(s), int(h), str(b), str(p), int(d or 0)) for s, h, b, p, d in page
            ]
