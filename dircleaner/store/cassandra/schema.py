"""The reference schema (init-schema) and the check of a real metastore's mapping."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cassandra.cluster import (
    Session,
)
from cassandra.query import (
    SimpleStatement,
)

from dircleaner.errors import (
    SchemaError,
)
from dircleaner.store.cassandra.config import (
    CassandraConfig,
    load_cassandra_config,
    parse_cassandra_url,
)
from dircleaner.store.cassandra.mapping import _q
from dircleaner.store.cassandra.session import _connect
from dircleaner.store.records import JOURNAL_TTL_S


@dataclass(frozen=True, slots=True)
class _TableSpec:
    """What the mapping expects of one table: key columns and column types."""

    name: str
    partition_key: tuple[str, ...]
    clustering: tuple[str, ...]
    #: the clustering key must be exactly this (False: only start with it)
    exact_clustering: bool
    types: tuple[tuple[str, str], ...]
    #: the table's options (``WITH …``), if any
    options: str = ""
    #: opening a store needs the table (False: only the commands that use it do, and say so)
    required: bool = True

    def ddl(self, keyspace: str) -> str:
        cols = ", ".join(f"{_q(col)} {typ}" for col, typ in self.types)
        pk = "(" + ", ".join(_q(c) for c in self.partition_key) + ")"
        key = ", ".join([pk, *(_q(c) for c in self.clustering)])
        table = f"{_q(keyspace)}.{_q(self.name)}"
        options = f" WITH {self.options}" if self.options else ""
        return f"CREATE TABLE IF NOT EXISTS {table} ({cols}, PRIMARY KEY ({key})){options}"


#: the journal's options: rows are only ever written with a TTL and never deleted, so whole
#: SSTables of one day's writes expire together (time-window compaction) and an expired row's
#: tombstone need not outlive a repair cycle (a short grace); the table's default TTL is a net
#: under the TTL every write sets
JOURNAL_OPTIONS = (
    "compaction = {'class': 'TimeWindowCompactionStrategy',"
    " 'compaction_window_unit': 'DAYS', 'compaction_window_size': 1}"
    f" AND default_time_to_live = {JOURNAL_TTL_S} AND gc_grace_seconds = 10800"
)


def _table_specs(cfg: CassandraConfig) -> list[tuple[str, _TableSpec]]:
    """(role, spec) of every table the mapping names."""
    key = (*((cfg.columns.bucket,) if cfg.columns.bucket else ()), cfg.columns.parent)
    index_types = tuple((col, "text") for col in (*key, cfg.columns.name))
    return [
        ("objects", _TableSpec(cfg.tables.objects, key, (cfg.columns.name,), False, index_types)),
        ("folders", _TableSpec(cfg.tables.folders, key, (cfg.columns.name,), True, index_types)),
        (
            "kv",
            _TableSpec(
                cfg.tables.kv,
                ("space",),
                ("key",),
                True,
                (("space", "text"), ("key", "text"), ("value", "blob")),
            ),
        ),
        (
            "ledger",
            _TableSpec(
                cfg.tables.ledger,
                ("bucket", "parent"),
                ("generation", "charge"),
                True,
                (
                    ("bucket", "text"),
                    ("parent", "text"),
                    ("generation", "text"),
                    ("charge", "text"),
                    ("cost", "int"),
                ),
            ),
        ),
        (
            "journal",
            _TableSpec(
                cfg.tables.journal,
                ("slot", "shard"),
                ("bucket", "parent"),
                True,
                (
                    ("slot", "bigint"),
                    ("shard", "int"),
                    ("bucket", "text"),
                    ("parent", "text"),
                    ("deleted", "int"),
                ),
                JOURNAL_OPTIONS,
                required=False,
            ),
        ),
    ]


def schema_cql(cfg: CassandraConfig) -> list[str]:
    """The DDL ``init-schema`` runs (idempotent: IF NOT EXISTS), for review or manual use."""
    keyspace = (
        f"CREATE KEYSPACE IF NOT EXISTS {_q(cfg.keyspace)} WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {int(cfg.replication_factor)}}}"
    )
    return [keyspace, *(spec.ddl(cfg.keyspace) for _, spec in _table_specs(cfg))]


def _check_schema(metadata: Any, cfg: CassandraConfig) -> None:
    """Raise SchemaError naming the first missing or mis-shaped keyspace, table or column."""
    ks = metadata.keyspaces.get(cfg.keyspace)
    if ks is None:
        raise SchemaError(
            f"keyspace {cfg.keyspace!r} does not exist at {cfg.contact}"
            " (check the URL or config; 'dircleaner init-schema' creates the reference schema)"
        )
    for role, spec in _table_specs(cfg):
        if not spec.required and spec.name not in ks.tables:
            continue  # checked by the commands that use it (``check_table``)
        check_table(metadata, cfg, role)


def check_table(metadata: Any, cfg: CassandraConfig, role: str) -> None:
    """Raise SchemaError naming what is missing or mis-shaped in the table of ``role``."""
    spec = dict(_table_specs(cfg))[role]
    where = f"{cfg.keyspace}.{spec.name}"
    ks = metadata.keyspaces.get(cfg.keyspace)
    table = None if ks is None else ks.tables.get(spec.name)
    if table is None:
        hint = (
            "run 'dircleaner init-schema'"
            if role in ("kv", "ledger", "journal")
            else "check [cassandra.tables]"
        )
        raise SchemaError(f"table {where} ({role} table) does not exist; {hint}")
    for col, typ in spec.types:
        column = table.columns.get(col)
        if column is None:
            raise SchemaError(
                f"column {col!r} does not exist in table {where} (check [cassandra.columns];"
                " names are case-sensitive)"
            )
        actual = str(column.cql_type)
        if actual.replace("varchar", "text") != typ:
            raise SchemaError(f"column {where}.{col} is {actual}, expected {typ}")
    partition = tuple(c.name for c in table.partition_key)
    if partition != spec.partition_key:
        raise SchemaError(
            f"table {where} is partitioned by ({', '.join(partition)}), the mapping expects"
            f" ({', '.join(spec.partition_key)})"
        )
    clustering = tuple(c.name for c in table.clustering_key)
    expected = spec.clustering
    if clustering[: len(expected)] != expected or (
        spec.exact_clustering and clustering != expected
    ):
        raise SchemaError(
            f"table {where} has clustering columns ({', '.join(clustering)}), the mapping"
            f" expects ({', '.join(expected)}{'' if spec.exact_clustering else ', …'})"
        )


def _missing_schema(metadata: Any, cfg: CassandraConfig) -> list[str]:
    """Human names of the keyspace/tables init-schema would create."""
    ks = metadata.keyspaces.get(cfg.keyspace)
    if ks is None:
        return [f"keyspace {cfg.keyspace}"] + [
            f"table {cfg.keyspace}.{spec.name}" for _, spec in _table_specs(cfg)
        ]
    return [
        f"table {cfg.keyspace}.{spec.name}"
        for _, spec in _table_specs(cfg)
        if spec.name not in ks.tables
    ]


def init_schema(url: str, *, config_path: Path | None = None) -> list[str]:
    """Create the keyspace and tables the mapping names where missing; the names created.

    Existing tables are left untouched (a real metastore keeps its own), then the whole mapping
    is checked as ``open`` does. Idempotent: a second call returns ``[]``.
    """
    cfg = load_cassandra_config(parse_cassandra_url(url), config_path)
    cluster, session = _connect(cfg)
    try:
        return _create_schema(cluster, session, cfg)
    finally:
        cluster.shutdown()


def _create_schema(cluster: Any, session: Session, cfg: CassandraConfig) -> list[str]:
    """Create what the mapping names and is missing; the names of what was created."""
    created = _missing_schema(cluster.metadata, cfg)
    if not created:
        _check_schema(cluster.metadata, cfg)
        return []
    for ddl in schema_cql(cfg):
        session.execute(SimpleStatement(ddl), timeout=max(cfg.request_timeout_s, 60.0))
    cluster.refresh_schema_metadata()
    _check_schema(cluster.metadata, cfg)
    return created
