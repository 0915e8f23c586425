"""The partition rewrite's first half: write the rows a partition keeps back at T.

Once the kept rows are written back at T + 1, a partition delete at T removes exactly the rows
left out. The statements depend on the folders table's regular columns, read from the table
metadata on first use; a column that cannot be copied faithfully refuses the rewrite.
"""

from __future__ import annotations

from collections.abc import Collection

from cassandra.query import UNSET_VALUE, PreparedStatement

from dircleaner.errors import RewriteUnsupported
from dircleaner.model import PartitionKey
from dircleaner.store.cassandra.mapping import _q
from dircleaner.store.cassandra.requests import CassandraRequests, Params


class PartitionRewrite:
    """``rewrite_folder_partition``, its statements prepared from the table on first use."""

    def __init__(self, requests: CassandraRequests) -> None:
        self.requests = requests
        #: the rewrite's read and write and its number of regular columns, once prepared
        self._statements: tuple[PreparedStatement, PreparedStatement, int] | None = None

    def rewrite_folder_partition(
        self, partition: PartitionKey, keep_out: Collection[str], timestamp_us: int
    ) -> int:
        """Reads the partition at the sweep's consistency with every regular column, and writes
        each kept row back whole at ``timestamp_us`` (null columns left unset, so the copy adds
        no tombstone cell)."""
        read, write, regular = self._statements or self._prepare()
        key = self.requests.key_values(partition.bucket, partition.parent)
        drop = set(keep_out)
        params: list[Params] = []
        for page in self.requests.pages(read, key, "sweep", self.requests.config.fetch_size):
            for row in page:
                if row[0] in drop:
                    continue
                values = row[1 : 1 + regular]
                ttls = row[1 + regular :]
                if any(ttl is not None for ttl in ttls):
                    raise RewriteUnsupported(
                        f"folders row {partition.parent!r}/{row[0]!r} has a TTL, which a rewrite"
                        " cannot keep; not rewriting its partition"
                    )
                cells = tuple(UNSET_VALUE if v is None else v for v in values)
                params.append((*key, row[0], *cells, timestamp_us))
        self.requests.raise_first(self.requests.run_many(write, params, "delete", retry=True))
        return len(params)

    def _prepare(self) -> tuple[PreparedStatement, PreparedStatement, int]:
        """The rewrite's statements, or RewriteUnsupported naming the column it cannot copy."""
        cfg = self.requests.config
        self.requests.cluster.refresh_table_metadata(cfg.keyspace, cfg.tables.folders)
        table = self.requests.cluster.metadata.keyspaces[cfg.keyspace].tables[cfg.tables.folders]
        keys = {c.name for c in (*table.partition_key, *table.clustering_key)}
        regular = [c for name, c in table.columns.items() if name not in keys]
        where = f"{cfg.keyspace}.{cfg.tables.folders}"
        for column in regular:
            kind = str(column.cql_type)
            if column.is_static:
                why = "a static column"
            elif kind == "counter":
                why = "a counter"
            elif kind.split("<", 1)[0] in ("list", "set", "map") or (
                not kind.startswith("frozen<") and "." in kind
            ):
                why = f"a non-frozen {kind} (writing it whole adds a tombstone)"
            else:
                continue
            raise RewriteUnsupported(
                f"column {where}.{column.name} is {why}: a partition rewrite cannot copy it;"
                " run with --max-rewrite-rows 0"
            )
        names = [_q(c.name) for c in regular]
        cql = self.requests.cql
        selected = ", ".join([cql.name, *names, *(f"TTL({n})" for n in names)])
        read = self.requests.prepare(f"SELECT {selected} FROM {cql.folders} WHERE {cql.key_eq}")
        columns = ", ".join([cql.key, cql.name, *names])
        marks = ", ".join("?" for _ in range(len(self.requests.key_columns) + 1 + len(names)))
        write = self.requests.prepare(
            f"INSERT INTO {cql.folders} ({columns}) VALUES ({marks}) USING TIMESTAMP ?"
        )
        self._statements = (read, write, len(names))
        return self._statements
