"""The Cassandra metastore: connect, check the mapping, prepare the statements.

Every data value goes through a prepared statement. The only identifiers in CQL come from the
mapping (``CassandraConfig``), are validated as plain identifiers and are always double-quoted.

The store is its reads (``reads.py``: scans, estimates, the re-check) and its writes
(``writes.py``: deletes at T, the rewrite), both built on the requests layer (``requests.py``:
retries, paging, ordered concurrency, the key mapping); the key-value table (``kv.py``) and the
tombstone ledger (``ledger.py``) are objects of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cassandra.cluster import Session
from cassandra.query import PreparedStatement

from dircleaner.scanrate import ScanRate
from dircleaner.store.base import Store, TombstoneCharge
from dircleaner.store.cassandra.config import (
    CassandraConfig,
    load_cassandra_config,
    parse_cassandra_url,
)
from dircleaner.store.cassandra.kv import CassandraKV
from dircleaner.store.cassandra.ledger import CassandraLedger
from dircleaner.store.cassandra.mapping import _q
from dircleaner.store.cassandra.requests import InStatements
from dircleaner.store.cassandra.schema import _check_schema, _create_schema, init_schema
from dircleaner.store.cassandra.session import _connect
from dircleaner.store.cassandra.walkreads import CassandraWalkReads
from dircleaner.store.cassandra.writes import PARTITION_DELETES_PER_REQUEST, CassandraWrites
from dircleaner.store.kv import ANY, Entry, Expect

__all__ = ["CassandraStore"]

#: sweep consistency levels under which range deletes are used
QUORUM_READS = frozenset({"QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL", "SERIAL", "LOCAL_SERIAL"})


class CassandraStore(CassandraWalkReads, CassandraWrites, Store):
    """Metastore in a Cassandra cluster, mapped by a CassandraConfig."""

    scheme = "cassandra"
    deletes_per_request = PARTITION_DELETES_PER_REQUEST

    def __init__(self, cfg: CassandraConfig, cluster: Any, session: Session) -> None:
        self.config = cfg
        # Only a quorum read is sure to see every write acknowledged at a quorum; below that, a
        # replica missing a row would let a range delete take it unseen.
        self.sweep_sees_every_write = cfg.consistency.sweep in QUORUM_READS
        self.build_sees_every_write = cfg.consistency.build in QUORUM_READS
        self.scan_defaults = ScanRate(cfg.scan_rate, cfg.scan_slow_page_s)
        self._cluster = cluster
        self._session = session
        self._key_columns = (
            *((cfg.columns.bucket,) if cfg.columns.bucket else ()),
            cfg.columns.parent,
        )
        #: the partition rewrite's read and write, prepared from the table metadata on first use
        self._rewrite_statements: tuple[PreparedStatement, PreparedStatement, int] | None = None
        self._prepare_all()
        #: the key-value table and the tombstone ledger, each with its own statements
        self.kv = CassandraKV(self)
        self.ledger = CassandraLedger(self)

    @classmethod
    def init_schema(
        cls, url: str, *, config_path: Path | None = None, force: bool = False
    ) -> list[str]:
        return init_schema(url, config_path=config_path)

    @classmethod
    def open(
        cls,
        url: str,
        *,
        config_path: Path | None = None,
        create: bool = False,
        force: bool = False,
    ) -> CassandraStore:
        cfg = load_cassandra_config(parse_cassandra_url(url), config_path)
        store = cls.from_config(cfg, create=create)
        store.url, store.config_path = url, config_path
        return store

    @classmethod
    def from_config(cls, cfg: CassandraConfig, *, create: bool = False) -> CassandraStore:
        """Connect and check the mapping; with ``create``, first create what is missing."""
        cluster, session = _connect(cfg)
        try:
            created: list[str] = []
            if create:
                created = _create_schema(cluster, session, cfg)
            else:
                _check_schema(cluster.metadata, cfg)
            store = cls(cfg, cluster, session)
            store.created = tuple(created)
            return store
        except BaseException:
            cluster.shutdown()
            raise

    def scope_id(self) -> str:
        cfg = self.config
        return f"cassandra:{cfg.keyspace}.{cfg.tables.objects},{cfg.tables.folders}"

    def location_id(self) -> str:
        # The cluster's name, the same through any of its nodes; the contact points otherwise.
        name = getattr(self._cluster.metadata, "cluster_name", None)
        return f"cluster {name}" if name else self.config.contact

    def close(self) -> None:
        self._cluster.shutdown()

    # -- the key-value table and the ledger: their own objects ---------------------------------
    def kv_read(self, space: str, prefix: str = "", *, fresh: bool = False) -> list[Entry]:
        return self.kv.read(space, prefix, fresh=fresh)

    def kv_write(
        self,
        space: str,
        key: str,
        value: bytes | None,
        *,
        ttl_s: float | None = None,
        expect: Expect = ANY,
    ) -> bool:
        return self.kv.write(space, key, value, ttl_s=ttl_s, expect=expect)

    def kv_clear(self, space: str) -> None:
        self.kv.clear(space)

    def charge_tombstones(self, charges: Sequence[TombstoneCharge], ttl_s: float) -> None:
        self.ledger.charge(charges, ttl_s)

    def tombstones_charged(
        self, partitions: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        return self.ledger.charged(partitions)

    # -- statements -----------------------------------------------------------------------------
    def _prepare_all(self) -> None:
        cfg = self.config
        ks = _q(cfg.keyspace)
        objects = f"{ks}.{_q(cfg.tables.objects)}"
        folders = f"{ks}.{_q(cfg.tables.folders)}"
        key = ", ".join(_q(c) for c in self._key_columns)
        name = _q(cfg.columns.name)
        token = f"token({key})"
        in_range = f"{token} > ? AND {token} <= ?"
        key_eq = " AND ".join(f"{_q(c)} = ?" for c in self._key_columns)
        row_eq = f"{key_eq} AND {name} = ?"
        # Bounds by value (min, max), which Cassandra applies in the column's own order: the
        # same slice whether the table clusters ascending or DESC (the bind sorts the bounds).
        range_eq = f"{key_eq} AND {name} >= ? AND {name} <= ?"
        marks = ", ".join("?" for _ in (*self._key_columns, name))
        p = self._prepare
        self._scan_objects = p(f"SELECT DISTINCT {token}, {key} FROM {objects} WHERE {in_range}")
        self._scan_folders = p(f"SELECT {token}, {key}, {name} FROM {folders} WHERE {in_range}")
        self._object_probe = p(f"SELECT {name} FROM {objects} WHERE {key_eq} LIMIT 1")
        self._folder_partition = p(f"SELECT {name} FROM {folders} WHERE {key_eq}")
        self._folder_partition_rows = p(f"SELECT {token}, {name} FROM {folders} WHERE {key_eq}")
        self._folder_row = p(f"SELECT {name} FROM {folders} WHERE {row_eq}")
        # IN reads: one statement per number of markers, prepared when first needed.
        bucket_eq = f"{_q(cfg.columns.bucket)} = ? AND " if cfg.columns.bucket else ""
        parent_in = f"{bucket_eq}{_q(cfg.columns.parent)} IN ("
        self._in_probe = InStatements(
            p, f"SELECT {key} FROM {objects} WHERE {parent_in}", ") PER PARTITION LIMIT 1"
        )
        # the walk's folders reads: the stored parent and the name, nothing else
        parent_col = _q(cfg.columns.parent)
        self._walk_folder_read = InStatements(
            p, f"SELECT {parent_col}, {name} FROM {folders} WHERE {parent_in}", ")"
        )
        self._partition_delete = InStatements(
            p, f"DELETE FROM {folders} USING TIMESTAMP ? WHERE {parent_in}", ")"
        )
        self._delete_folder_row = p(f"DELETE FROM {folders} USING TIMESTAMP ? WHERE {row_eq}")
        self._delete_folder_range = p(f"DELETE FROM {folders} USING TIMESTAMP ? WHERE {range_eq}")
        self._delete_object_row = p(f"DELETE FROM {objects} USING TIMESTAMP ? WHERE {row_eq}")
        self._insert = {
            table: p(f"INSERT INTO {ref} ({key}, {name}) VALUES ({marks}) USING TIMESTAMP ?")
            for table, ref in (("objects", objects), ("folders", folders))
        }
        self._grace = p(
            "SELECT gc_grace_seconds FROM system_schema.tables"
            " WHERE keyspace_name = ? AND table_name = ?"
        )
        self._size_estimates = p(
            "SELECT range_start, range_end, partitions_count, mean_partition_size"
            " FROM system.size_estimates WHERE keyspace_name = ? AND table_name = ?"
        )
