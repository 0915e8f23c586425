"""The prefix walk's reads on Cassandra: a wave's objects probes and folders reads in one window.

The walk reads two partitions of every directory under PREFIX: its objects partition (``PER
PARTITION LIMIT 1``: does it hold an object?) and its folders partition (its subdirectories).
Both are ``IN`` reads of up to ``verify_batch`` partitions of one bucket and one ring range, in
token order, routed to a replica of that range (``routing_token``), as the re-check's reads are.
Here both kinds go out in one sliding window of ``concurrency`` requests, so the node does not
wait for the slowest probe before the first folders read starts, and the tokens and chunks are
computed once for both::

    SELECT bucket, parent FROM objects WHERE bucket = ? AND parent IN (?, …) PER PARTITION LIMIT 1
    SELECT parent, name FROM folders WHERE bucket = ? AND parent IN (?, …)

The folders read selects only the parent and the name: the bucket is the chunk's and the token is
computed here (``partition_tokens``), so neither is sent back with every row. It is paged by
``fetch_size``; a chunk whose rows fill more than one page reads its other pages on its own.
Probes run at the verify consistency, folders reads at the sweep consistency (set on each
statement; the window runs under the verify profile, which differs from the sweep's only in it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from cassandra import ConsistencyLevel
from cassandra.query import PreparedStatement

from dircleaner.errors import SchemaError
from dircleaner.model import FolderRow
from dircleaner.store.cassandra.mapping import _q
from dircleaner.store.cassandra.reads import PartitionReads
from dircleaner.store.cassandra.requests import CassandraRequests, InStatements
from dircleaner.store.cassandra.session import map_error
from dircleaner.store.records import DirectoryReads


class _Read(NamedTuple):
    """One request of the window and what its rows map back to."""

    probe: bool
    bucket: str
    #: stored parent → (token, model parent) of the chunk's partitions
    keys: dict[str, tuple[int, str]]
    stmt: PreparedStatement
    values: tuple[str, ...]
    token: int


class WalkReads:
    """``read_directories`` and ``folder_partitions`` as overlapped IN reads."""

    def __init__(self, requests: CassandraRequests, reads: PartitionReads) -> None:
        #: the re-check's reads, whose chunks and IN probes the walk shares
        self.requests, self.reads = requests, reads
        c = requests.cql
        parent = _q(requests.config.columns.parent)
        #: the walk's IN reads of folders partitions (the stored parent and the name)
        self.folder_read = InStatements(
            requests.prepare, f"SELECT {parent}, {c.name} FROM {c.folders} WHERE {c.parent_in}", ")"
        )

    def read_directories(self, keys: Sequence[tuple[str, str]]) -> DirectoryReads:
        return self._walk_reads(keys, probe=True)

    def folder_partitions(
        self, keys: Sequence[tuple[str, str]]
    ) -> Iterator[tuple[tuple[str, str], list[FolderRow]]]:
        """The folders reads of ``read_directories`` alone; in ``keys`` order once all are read."""
        found = self._walk_reads(keys, probe=False).folder_rows
        for key in keys:
            yield key, found.get(key, [])

    def _walk_reads(self, keys: Sequence[tuple[str, str]], *, probe: bool) -> DirectoryReads:
        unique = list(dict.fromkeys(keys))
        if not unique:
            return DirectoryReads(set(), {})
        cfg = self.requests.config
        batch = cfg.verify_batch
        sweep_level = ConsistencyLevel.name_to_value[cfg.consistency.sweep]
        reads: list[_Read] = []
        items: list[tuple[Any, tuple[()]]] = []
        for bucket, chunk in self.reads.verify_chunks(unique):
            values, size = self.requests.in_keys(bucket, chunk, batch)
            lookup = {stored: (token, parent) for token, stored, parent in chunk}
            token = chunk[0][0]
            if probe:
                stmt = self.reads.in_probe(size)
                bound = stmt.bind(values)
                bound.routing_token, bound.fetch_size = token, None
                reads.append(_Read(True, bucket, lookup, stmt, values, token))
                items.append((bound, ()))
            stmt = self.folder_read(size)
            bound = stmt.bind(values)
            bound.routing_token, bound.fetch_size = token, cfg.fetch_size
            bound.consistency_level = sweep_level
            reads.append(_Read(False, bucket, lookup, stmt, values, token))
            items.append((bound, ()))
        results = self.requests.run_statements(items, "verify", retry=True)
        with_objects: set[tuple[str, str]] = set()
        folder_rows: dict[tuple[str, str], list[FolderRow]] = {}
        for read, result in zip(reads, results, strict=True):
            if isinstance(result, BaseException):
                raise map_error(result) from result
            rows: Sequence[tuple[Any, ...]] = result.current_rows
            if read.probe:
                if result.has_more_pages:
                    raise RuntimeError("an unpaged probe returned a paged answer")
                for row in rows:
                    with_objects.add((read.bucket, _mapped(read, row[-1])[1]))
                continue
            if result.has_more_pages:
                rows = list(rows)
                for page in self.requests.pages(
                    read.stmt,
                    read.values,
                    "sweep",
                    cfg.fetch_size,
                    read.token,
                    paging_state=result.paging_state,
                ):
                    rows.extend(page)
            bucket = read.bucket
            for stored, name in rows:
                token, parent = _mapped(read, stored)
                found = folder_rows.get((bucket, parent))
                if found is None:
                    found = folder_rows[(bucket, parent)] = []
                found.append(FolderRow(token, bucket, parent, name))
        return DirectoryReads(with_objects, folder_rows)


def _mapped(read: _Read, stored: str) -> tuple[int, str]:
    """(token, model parent) of a partition a read returned; SchemaError if it was not asked for."""
    hit = read.keys.get(stored)
    if hit is None:
        what = "probe" if read.probe else "folders read"
        raise SchemaError(
            f"the walk's {what} returned partition {stored!r}, a key it did not ask for;"
            " check the [cassandra] mapping"
        )
    return hit
