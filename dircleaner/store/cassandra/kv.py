"""The key–value table: one partition per space, clustered by key, each statement prepared here.

Plain reads and writes run at the ``meta`` consistency; a compare-and-set is a lightweight
transaction (Paxos at SERIAL, committed at QUORUM: the ``lease`` profile) and a ``fresh`` read is a
SERIAL read, which sees every compare-and-set applied before it. A TTL is ``USING TTL`` (0: none).
Values are up to 1 MiB: a space is paged ``KV_FETCH_SIZE`` entries at a time.
"""

from __future__ import annotations

from typing import Any

from cassandra import ConsistencyLevel
from cassandra.query import PreparedStatement

from dircleaner.store.cassandra.mapping import _q
from dircleaner.store.cassandra.requests import CassandraRequests, Params
from dircleaner.store.cassandra.session import _ttl
from dircleaner.store.kv import ANY, Entry, Expect, check_write, prefix_end

#: values are up to 1 MiB each: a read pages a few at a time, not fetch_size at a time
KV_FETCH_SIZE = 4


class CassandraKV:
    """``kv_read``, ``kv_write`` and ``kv_clear`` on the table ``tables.kv``."""

    def __init__(self, requests: CassandraRequests) -> None:
        self._requests = requests
        cfg = requests.config
        table = f"{_q(cfg.keyspace)}.{_q(cfg.tables.kv)}"
        space, key, value = _q("space"), _q("key"), _q("value")
        p = requests.prepare
        select = f"SELECT {key}, {value} FROM {table} WHERE {space} = ?"
        self._read_all = p(select)
        self._read_range = p(f"{select} AND {key} >= ? AND {key} < ?")
        self._read_from = p(f"{select} AND {key} >= ?")
        where = f"WHERE {space} = ? AND {key} = ?"
        insert = f"INSERT INTO {table} ({space}, {key}, {value}) VALUES (?, ?, ?)"
        self._put = p(f"{insert} USING TTL ?")
        self._put_new = p(f"{insert} IF NOT EXISTS USING TTL ?")
        self._put_if = p(f"UPDATE {table} USING TTL ? SET {value} = ? {where} IF {value} = ?")
        self._drop = p(f"DELETE FROM {table} {where}")
        self._drop_if = p(f"DELETE FROM {table} {where} IF {value} = ?")
        self._clear = p(f"DELETE FROM {table} WHERE {space} = ?")

    def read(self, space: str, prefix: str = "", *, fresh: bool = False) -> list[Entry]:
        stmt: PreparedStatement
        params: Params
        end = prefix_end(prefix)
        if not prefix:
            stmt, params = self._read_all, (space,)
        elif end is None:
            stmt, params = self._read_from, (space, prefix)
        else:
            stmt, params = self._read_range, (space, prefix, end)
        r = self._requests
        if fresh:
            # A Paxos read: no stale answer (a linearizable read of one partition).
            bound = stmt.bind(params)
            bound.consistency_level = ConsistencyLevel.SERIAL
            bound.fetch_size = KV_FETCH_SIZE
            rows: list[tuple[Any, ...]] = list(r.execute(bound, None, "lease"))
        else:
            rows = [row for page in r.pages(stmt, params, "meta", KV_FETCH_SIZE) for row in page]
        return [
            Entry(str(k), bytes(v)) for k, v in rows if str(k).startswith(prefix) and v is not None
        ]

    def write(
        self,
        space: str,
        key: str,
        value: bytes | None,
        *,
        ttl_s: float | None = None,
        expect: Expect = ANY,
    ) -> bool:
        check_write(space, key, value, expect)
        ttl = 0 if ttl_s is None else _ttl(ttl_s)
        if expect is ANY:
            if value is None:
                self._requests.execute(self._drop, (space, key), "meta")
            else:
                self._requests.execute(self._put, (space, key, value, ttl), "meta")
            return True
        if value is None:
            assert expect is not None  # check_write refused it
            return self._cas(self._drop_if, (space, key, expect))
        if expect is None:
            return self._cas(self._put_new, (space, key, value, ttl))
        return self._cas(self._put_if, (ttl, value, space, key, expect))

    def clear(self, space: str) -> None:
        if not space:
            raise ValueError("a key-value space cannot be empty")
        self._requests.execute(self._clear, (space,), "meta")

    def _cas(self, stmt: PreparedStatement, params: Params) -> bool:
        rows = self._requests.execute(stmt, params, "lease").current_rows
        return bool(rows[0][0])
