"""The Cassandra metastore: connect, check the mapping, compose the parts.

Every data value goes through a prepared statement. The only identifiers in CQL come from the
mapping (``CassandraConfig``), are validated as plain identifiers and are always double-quoted.

The store is a handful of objects, each preparing its own statements, all sending their requests
through one ``CassandraRequests`` (retries, paging, ordered concurrency, the key mapping):
``IndexScans`` (the scans and the directory count), ``PartitionReads`` (one partition, the
re-check), ``WalkReads`` (the prefix walk's overlapped reads), ``FolderDeletes`` (deletes at T),
``PartitionRewrite``, ``IndexWrites`` (the S3 front-end's writes), ``CassandraKV`` (the key-value
table the lease, run state and filter cells are built on), ``CassandraLedger`` (the tombstone
ledger) and ``CassandraJournal`` (the journal of dirty directories). Each ``Store`` method hands
over to one of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

from cassandra.cluster import Session

from dircleaner.errors import StoreReadOnly
from dircleaner.model import DeleteAction, FolderRange, FolderRow, PartitionKey, Shard
from dircleaner.scanrate import ScanRate, ScanThrottle
from dircleaner.store.base import PARTITION_PAGE_ROWS, Store
from dircleaner.store.cassandra.config import (
    CassandraConfig,
    load_cassandra_config,
    parse_cassandra_url,
)
from dircleaner.store.cassandra.deletes import PARTITION_DELETES_PER_REQUEST, FolderDeletes
from dircleaner.store.cassandra.journal import CassandraJournal
from dircleaner.store.cassandra.kv import CassandraKV
from dircleaner.store.cassandra.ledger import CassandraLedger
from dircleaner.store.cassandra.reads import PartitionReads
from dircleaner.store.cassandra.requests import CassandraRequests
from dircleaner.store.cassandra.rewrite import PartitionRewrite
from dircleaner.store.cassandra.scans import IndexScans
from dircleaner.store.cassandra.schema import _check_schema, _create_schema, init_schema
from dircleaner.store.cassandra.session import _connect
from dircleaner.store.cassandra.walkreads import WalkReads
from dircleaner.store.cassandra.writes import IndexWrites
from dircleaner.store.kv import ANY, Entry, Expect
from dircleaner.store.records import (
    DeleteRequest,
    DirCountEstimate,
    DirectoryReads,
    JournalEntry,
    ObjectProbe,
    StoreTraits,
    TombstoneCharge,
)

__all__ = ["CassandraStore"]

#: sweep consistency levels under which range deletes are used
QUORUM_READS = frozenset({"QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL", "SERIAL", "LOCAL_SERIAL"})


def cassandra_traits(cfg: CassandraConfig) -> StoreTraits:
    """What a store mapped by ``cfg`` can do: only a quorum read is sure to see every write
    acknowledged at a quorum; below that, a replica missing a row would let a range delete
    take it unseen."""
    return StoreTraits(
        scheme="cassandra",
        sweep_sees_every_write=cfg.consistency.sweep in QUORUM_READS,
        build_sees_every_write=cfg.consistency.build in QUORUM_READS,
        deletes_per_request=PARTITION_DELETES_PER_REQUEST,
        scan_defaults=ScanRate(cfg.scan_rate, cfg.scan_slow_page_s),
    )


class CassandraStore(Store):
    """Metastore in a Cassandra cluster, mapped by a CassandraConfig; an ``IndexWriter`` and a
    ``TombstoneCounter`` too."""

    def __init__(self, cfg: CassandraConfig, cluster: Any, session: Session) -> None:
        self.traits = cassandra_traits(cfg)
        self.index_tables = (f"{cfg.keyspace}.{cfg.tables.objects}", cfg.tables.folders)
        self.requests = CassandraRequests(cfg, cluster, session)
        self.scans = IndexScans(self.requests)
        self.reads = PartitionReads(self.requests)
        self.walk = WalkReads(self.requests, self.reads)
        self.deletes = FolderDeletes(self.requests)
        self.rewrite = PartitionRewrite(self.requests)
        self.writes = IndexWrites(self.requests)
        self.kv = CassandraKV(self.requests)
        self.ledger = CassandraLedger(self.requests)
        self.journal = CassandraJournal(self.requests)

    @property
    def config(self) -> CassandraConfig:
        """The mapping and settings every part of the store reads (the requests' own)."""
        return self.requests.config

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
        read_only: bool = False,
    ) -> CassandraStore:
        cfg = load_cassandra_config(parse_cassandra_url(url), config_path)
        store = cls.from_config(cfg, create=create)
        store.url, store.config_path = url, config_path
        if read_only and not create:
            store.traits = dataclasses.replace(store.traits, read_only=True)
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

    def location_id(self) -> str:
        # The cluster's name, the same through any of its nodes; the contact points otherwise.
        name = getattr(self.requests.cluster.metadata, "cluster_name", None)
        return f"cluster {name}" if name else self.config.contact

    def close(self) -> None:
        self.requests.cluster.shutdown()

    # -- scans ------------------------------------------------------------------------------------
    def scan_object_partitions(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[list[PartitionKey]]:
        return self.scans.scan_object_partitions(shard, bucket, throttle)

    def scan_folder_rows(
        self, shard: Shard, bucket: str | None = None, throttle: ScanThrottle | None = None
    ) -> Iterator[list[FolderRow]]:
        return self.scans.scan_folder_rows(shard, bucket, throttle)

    def estimate_directory_count(self, bucket: str | None = None) -> DirCountEstimate:
        return self.scans.estimate_directory_count(bucket)

    # -- one folders partition, the re-check, the walk -------------------------------------------
    def folder_partition_pages(
        self, bucket: str, parent: str, page_rows: int = PARTITION_PAGE_ROWS
    ) -> Iterator[list[FolderRow]]:
        return self.reads.folder_partition_pages(bucket, parent, page_rows)

    def has_folder_row(self, bucket: str, directory: str) -> bool:
        return self.reads.has_folder_row(bucket, directory)

    def nonempty_object_partitions(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        return self.reads.nonempty_object_partitions(keys)

    def objects_partition_nonempty(self, bucket: str, parent: str) -> bool:
        return self.reads.objects_partition_nonempty(bucket, parent)

    def tombstones_in_partition(self, bucket: str, parent: str) -> int:
        return self.reads.tombstones_in_partition(bucket, parent)

    def probe_object_partitions(
        self, keys: Sequence[tuple[str, str]], tombstone_limit: int
    ) -> ObjectProbe:
        # Cassandra tells only past its own tombstone_warn_threshold, after the read.
        return self.reads.probe_object_partitions(keys)

    def folder_partition_heads(
        self, keys: Sequence[tuple[str, str]], rows: int
    ) -> dict[tuple[str, str], list[FolderRow]]:
        return self.reads.folder_partition_heads(keys, rows)

    def rows_listing(self, dirs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], FolderRow]:
        return self.reads.rows_listing(dirs)

    def read_directories(self, keys: Sequence[tuple[str, str]]) -> DirectoryReads:
        return self.walk.read_directories(keys)

    def folder_partitions(
        self, keys: Sequence[tuple[str, str]]
    ) -> Iterator[tuple[tuple[str, str], list[FolderRow]]]:
        return self.walk.folder_partitions(keys)

    # -- deletes at a timestamp ---------------------------------------------------------------
    def delete_folder_rows(
        self, rows: Sequence[FolderRow], timestamp_us: int
    ) -> list[BaseException | None]:
        return self.deletes.delete_folder_rows(rows, timestamp_us)

    def delete_folder_ranges(
        self, ranges: Sequence[FolderRange], timestamp_us: int
    ) -> list[BaseException | None]:
        return self.deletes.delete_folder_ranges(ranges, timestamp_us)

    def delete_requests(
        self, actions: Sequence[DeleteAction], timestamp_us: int
    ) -> list[DeleteRequest]:
        return self.deletes.delete_requests(actions, timestamp_us)

    def delete_folder_partitions(
        self, partitions: Sequence[PartitionKey], timestamp_us: int
    ) -> list[BaseException | None]:
        return self.deletes.delete_folder_partitions(partitions, timestamp_us)

    def rewrite_folder_partition(
        self, partition: PartitionKey, keep_out: Collection[str], timestamp_us: int
    ) -> int:
        return self.rewrite.rewrite_folder_partition(partition, keep_out, timestamp_us)

    def folders_grace_seconds(self) -> tuple[float, str]:
        return self.deletes.folders_grace_seconds()

    def tombstone_warn_threshold(self) -> tuple[int, str] | None:
        return self.deletes.tombstone_warn_threshold()

    # -- the S3 front-end's writes (``IndexWriter``) ---------------------------------------------
    def write_object_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        self.writes.write_object_rows(rows, timestamp_us)

    def write_folder_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        self.writes.write_folder_rows(rows, timestamp_us)

    def delete_object_rows(
        self, rows: Sequence[tuple[str, str, str]], timestamp_us: int
    ) -> int | None:
        return self.writes.delete_object_rows(rows, timestamp_us)

    # -- the key-value table and the ledger -----------------------------------------------------
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
        self._refuse_if_read_only()
        return self.kv.write(space, key, value, ttl_s=ttl_s, expect=expect)

    def kv_clear(self, space: str) -> None:
        self._refuse_if_read_only()
        self.kv.clear(space)

    def _refuse_if_read_only(self) -> None:
        """Opened for a command that only reads: no key-value write (every delete holds the
        lease, a key-value write, first)."""
        if self.traits.read_only:
            raise StoreReadOnly(
                f"{self.shown(self.url)} is opened for reading only: a write was refused"
            )

    def charge_tombstones(self, charges: Sequence[TombstoneCharge], ttl_s: float) -> None:
        self.ledger.charge(charges, ttl_s)

    def tombstones_charged(
        self, partitions: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        return self.ledger.charged(partitions)

    def journal_write(self, entries: Sequence[JournalEntry], ttl_s: float) -> None:
        self.journal.write(entries, ttl_s)

    def journal_read(self, slot: int, bucket: str | None = None) -> Iterator[list[JournalEntry]]:
        return self.journal.read(slot, bucket)
