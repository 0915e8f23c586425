"""The reads of single folders partitions and the emptiness re-check: a partition in pages, a
row's point read, the objects probe, the re-check's batched ``IN`` reads, the churn night's
checks (the probe that notices tombstones, partitions' first rows, rows' point reads), a traced
read's tombstone count (tests)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any, cast

from cassandra import ReadFailure

from dircleaner.errors import SchemaError
from dircleaner.model import FolderRow
from dircleaner.paths import dir_of_row, folder_row_of
from dircleaner.store.base import PARTITION_PAGE_ROWS
from dircleaner.store.cassandra.mapping import model_parent, padded_in, partition_token
from dircleaner.store.cassandra.requests import CassandraRequests, ChunkKey, InStatements
from dircleaner.store.cassandra.session import map_error
from dircleaner.store.records import ObjectProbe

#: verify re-check: IN reads bound and run at a time (bounds the bound statements held at once)
VERIFY_WAVE_READS = 1000

_TRACE_COUNTS = re.compile(r"Read (\d+) live (?:rows )?and (\d+) tombstone cells")
#: the token a replica's tombstone warning names (``…; token -2056913360981389109 (see …)``)
_WARNED_TOKEN = re.compile(r"\btoken (-?\d+)")


class PartitionReads:
    """Reads of one folders partition, and the objects probes of the re-check."""

    def __init__(self, requests: CassandraRequests) -> None:
        self.requests = requests
        c = requests.cql
        p = requests.prepare
        self.object_probe = p(f"SELECT {c.name} FROM {c.objects} WHERE {c.key_eq} LIMIT 1")
        self.folder_partition_stmt = p(f"SELECT {c.name} FROM {c.folders} WHERE {c.key_eq}")
        self.folder_partition_rows_stmt = p(
            f"SELECT {c.token}, {c.name} FROM {c.folders} WHERE {c.key_eq}"
        )
        self.folder_row_stmt = p(f"SELECT {c.name} FROM {c.folders} WHERE {c.row_eq}")
        #: the churn night's rows' reads, one statement per pair of IN sizes
        self._rows_by_size: dict[tuple[int, int], Any] = {}
        self._rows_lock = threading.Lock()
        #: the re-check's IN reads (``… PER PARTITION LIMIT 1``), one statement per size
        self.in_probe = InStatements(
            p, f"SELECT {c.key} FROM {c.objects} WHERE {c.parent_in}", ") PER PARTITION LIMIT 1"
        )
        #: the churn night's reads of folders partitions' first rows
        self.in_heads = InStatements(
            p,
            f"SELECT {c.token}, {c.key}, {c.name} FROM {c.folders} WHERE {c.parent_in}",
            ") PER PARTITION LIMIT ?",
        )

    # -- one folders partition ----------------------------------------------------------------
    def folder_partition_pages(
        self, bucket: str, parent: str, page_rows: int = PARTITION_PAGE_ROWS
    ) -> Iterator[list[FolderRow]]:
        """Paged by the driver (``fetch_size``), at the sweep consistency, routed to a replica."""
        values = self.requests.key_values(bucket, parent)
        token = partition_token(cast(tuple[str, ...], values))
        for page in self.requests.pages(
            self.folder_partition_rows_stmt, values, "sweep", page_rows, token
        ):
            yield [FolderRow(int(row[0]), bucket, parent, row[1]) for row in page]

    def has_folder_row(self, bucket: str, directory: str) -> bool:
        parent, name = folder_row_of(directory)
        result = self.requests.execute(
            self.folder_row_stmt, (*self.requests.key_values(bucket, parent), name), "sweep"
        )
        return bool(result.current_rows)

    # -- emptiness re-check --------------------------------------------------------------------
    def objects_partition_nonempty(self, bucket: str, parent: str) -> bool:
        """One ``LIMIT 1`` read (the benchmarks' naive check is one of these per directory)."""
        result = self.requests.execute(
            self.object_probe, self.requests.key_values(bucket, parent), "verify"
        )
        return bool(result.current_rows)

    def nonempty_object_partitions(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """The keys whose objects partition holds a row, read ``verify_batch`` partitions at once.

        One read per chunk, ``concurrency`` chunks in flight, at the verify consistency::

            SELECT bucket, parent FROM objects
            WHERE bucket = ? AND parent IN (?, …) PER PARTITION LIMIT 1

        (without ``bucket = ?`` when the mapping has no bucket column). Each partition is read
        as the single-key probe reads it (``LIMIT 1``), so the answers are the same; a partition
        holding only static cells counts as non-empty in both. The keys are grouped by bucket and
        by the ring range their token (computed here, see ``partition_token``) falls in, sorted
        by token and cut into chunks; each chunk carries the token of its first key as its
        ``routing_token``, so ``RangeAwarePolicy`` sends it to a replica of that range, which
        reads every partition of the chunk locally. Chunks of different ranges are interleaved,
        so the requests in flight spread over the replicas. Reads are bound and run
        VERIFY_WAVE_READS at a time, so memory does not grow with the bound statements.

        A short chunk (the last of a group) is padded, by repeating its last key, to the next
        power of two (or ``verify_batch``): at most ⌈log2 verify_batch⌉ + 1 statements are
        prepared, and a padded chunk carries at most twice its keys. Cassandra reads a key
        repeated in ``IN`` once (tests check this on the node); the answer would be the same if
        it did not. Responses are not paged: a chunk returns at most one row per key.

        Guardrails: Cassandra 5.0's ``partition_keys_in_select_warn_threshold`` and
        ``partition_keys_in_select_fail_threshold`` are off (-1) by default. Where an operator
        sets them, keep ``verify_batch`` at or below the fail threshold (every chunk would be
        refused with InvalidRequest, and the job would stop) and below the warn threshold (one
        server warning per chunk otherwise). A chunk's reads share one request timeout: lower
        ``verify_batch`` if partitions full of tombstones make chunks time out.

        A chunk that keeps failing after ``retry_policy.attempts`` tries raises TransientStoreError
        (any other error is raised as it is), never a partial answer: an unverified directory
        must not be treated as empty, and silently treating it as non-empty would hide an
        outage.
        """
        unique = list(dict.fromkeys(keys))
        if not unique:
            return set()
        asked = set(unique)
        chunks = self.verify_chunks(unique)
        out: set[tuple[str, str]] = set()
        for start in range(0, len(chunks), VERIFY_WAVE_READS):
            results = self.requests.run_statements(
                [
                    (self.bind_in_probe(*chunk), ())
                    for chunk in chunks[start : start + VERIFY_WAVE_READS]
                ],
                "verify",
                retry=True,
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise map_error(result) from result
                if result.has_more_pages:
                    raise RuntimeError("an unpaged verify read returned a paged answer")
                out |= self._found_keys(result, asked)
        return out

    # -- the churn night's checks ----------------------------------------------------------------
    def probe_object_partitions(self, keys: Sequence[tuple[str, str]]) -> ObjectProbe:
        """The re-check's IN reads, each answer's warnings read too: a partition without a
        live row whose read warned of tombstones (``tombstone_warn_threshold``, the replica
        naming its token), or whose read failed on them (``tombstone_failure_threshold``), is
        tombstone-heavy. A warning that names no token marks every empty partition of its
        chunk: they wait for a later night, which is all a wrong guess costs.

        Cassandra cannot be asked to stop a read at a number of tombstones; it says so after
        the read, so the first read of a heavy partition meets them once, and the night that
        made it leaves the partition for a later one instead of reading it again.
        """
        unique = list(dict.fromkeys(keys))
        chunks = self.verify_chunks(unique)
        nonempty: set[tuple[str, str]] = set()
        heavy: set[tuple[str, str]] = set()
        for start in range(0, len(chunks), VERIFY_WAVE_READS):
            wave = chunks[start : start + VERIFY_WAVE_READS]
            results = self.requests.run_statements(
                [(self.bind_in_probe(*chunk), ()) for chunk in wave], "verify", retry=True
            )
            for (bucket, members), result in zip(wave, results, strict=True):
                if isinstance(result, ReadFailure) and _tombstone_failure(result):
                    heavy.update((bucket, parent) for _, _, parent in members)
                    continue
                if isinstance(result, BaseException):
                    raise map_error(result) from result
                found = self._found_keys(result, {(bucket, parent) for _, _, parent in members})
                nonempty |= found
                warned = _warned_tokens(result)
                if warned is not None:
                    heavy.update(
                        (bucket, parent)
                        for token, _, parent in members
                        if (bucket, parent) not in found and (not warned or token in warned)
                    )
        return ObjectProbe(nonempty, heavy)

    def _found_keys(self, result: Any, asked: set[tuple[str, str]]) -> set[tuple[str, str]]:
        cfg = self.requests.config
        out: set[tuple[str, str]] = set()
        for row in result.current_rows:
            bucket, stored = (row[0], row[1]) if cfg.columns.bucket else (cfg.bucket_name, row[0])
            key = (bucket, model_parent(cfg, stored))
            if key not in asked:
                raise SchemaError(
                    f"the verify read returned partition {(bucket, stored)!r}, which maps"
                    f" to {key!r}, a key it did not ask for; check the [cassandra] mapping"
                )
            out.add(key)
        return out

    def folder_partition_heads(
        self, keys: Sequence[tuple[str, str]], rows: int
    ) -> dict[tuple[str, str], list[FolderRow]]:
        """IN reads of ``verify_batch`` partitions, ``… PER PARTITION LIMIT rows``, at the
        verify consistency, each answer read to its last page."""
        if rows < 1:
            raise ValueError("rows must be >= 1")
        unique = list(dict.fromkeys(keys))
        chunks = self.verify_chunks(unique)
        cfg = self.requests.config
        out: dict[tuple[str, str], list[FolderRow]] = {}
        for start in range(0, len(chunks), VERIFY_WAVE_READS):
            items = []
            for bucket, chunk in chunks[start : start + VERIFY_WAVE_READS]:
                values, size = self.requests.in_keys(bucket, chunk, cfg.verify_batch)
                bound = self.in_heads(size).bind((*values, rows))
                bound.routing_token = chunk[0][0]
                bound.fetch_size = cfg.fetch_size
                items.append((bound, ()))
            results = self.requests.run_statements(items, "verify", retry=True)
            self.requests.raise_first(results)
            for result in results:
                for row in result:  # every page
                    bucket, parent = self.requests.bucket_of(row)
                    heads = out.setdefault((bucket, parent), [])
                    if len(heads) < rows:  # a key repeated to pad the IN list comes once
                        heads.append(FolderRow(int(row[0]), bucket, parent, row[-1]))
        return out

    def rows_listing(self, dirs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], FolderRow]:
        """The rows, ``verify_batch`` parent partitions of one ring range a request, at the
        verify consistency::

            SELECT token(…), bucket, parent, name FROM folders
            WHERE bucket = ? AND parent IN (?, …) AND name IN (?, …)

        with the chunk's parents and every name asked of any of them (both lists padded to a
        power of two, as the re-check pads): the answer holds each asked row that exists, and
        maybe a same-named sibling in another of the chunk's partitions, which is left out.
        """
        wanted: dict[tuple[str, str], set[str]] = {}
        for bucket, directory in dict.fromkeys(dirs):
            parent, name = folder_row_of(directory)
            wanted.setdefault((bucket, parent), set()).add(name)
        cfg = self.requests.config
        items = []
        for bucket, chunk in self.verify_chunks(list(wanted)):
            values, size = self.requests.in_keys(bucket, chunk, cfg.verify_batch)
            names = sorted({n for _, _, parent in chunk for n in wanted[(bucket, parent)]})
            padded = padded_in(names, max(cfg.verify_batch, len(names)))
            bound = self._in_rows(size, len(padded)).bind((*values, *padded))
            bound.routing_token = chunk[0][0]
            bound.fetch_size = cfg.fetch_size
            items.append((bound, ()))
        results = self.requests.run_statements(items, "verify", retry=True)
        self.requests.raise_first(results)
        out: dict[tuple[str, str], FolderRow] = {}
        for result in results:
            for row in result:  # every page
                bucket, parent = self.requests.bucket_of(row)
                name = row[-1]
                if name in wanted.get((bucket, parent), ()):
                    out[(bucket, dir_of_row(parent, name))] = FolderRow(
                        int(row[0]), bucket, parent, name
                    )
        return out

    def _in_rows(self, parents: int, names: int) -> Any:
        """The rows' read with ``parents`` partitions and ``names`` names in its IN lists."""
        with self._rows_lock:
            stmt = self._rows_by_size.get((parents, names))
            if stmt is None:
                c = self.requests.cql
                stmt = self._rows_by_size[(parents, names)] = self.requests.prepare(
                    f"SELECT {c.token}, {c.key}, {c.name} FROM {c.folders} WHERE {c.parent_in}"
                    + ", ".join("?" * parents)
                    + f") AND {c.name} IN ("
                    + ", ".join("?" * names)
                    + ")"
                )
            return stmt

    def verify_chunks(self, keys: Sequence[tuple[str, str]]) -> list[tuple[str, list[ChunkKey]]]:
        """``keys`` (distinct) as the re-check's and the walk's IN chunks (``verify_batch``)."""
        return self.requests.range_chunks(keys, self.requests.config.verify_batch)

    def bind_in_probe(self, bucket: str, chunk: Sequence[ChunkKey]) -> Any:
        """The IN read of one chunk of (token, stored parent), routed to its first token."""
        values, size = self.requests.in_keys(bucket, chunk, self.requests.config.verify_batch)
        bound = self.in_probe(size).bind(values)
        bound.routing_token = chunk[0][0]
        bound.fetch_size = None  # at most one row per key: one unpaged response
        return bound

    def tombstones_in_partition(self, bucket: str, parent: str) -> int:
        """Tombstones a read of one folders partition scans, as Cassandra counts them (tests).

        A traced read at ONE; the count is the largest ``Read N live rows and M tombstone
        cells`` M among the replicas' trace events. Each deleted row counts 1, each range
        deletion 2 (its start and end markers, however many rows it shadows). A partition
        deletion counts 0: Cassandra reports (and counts against tombstone_warn_threshold) only
        the row tombstones and range markers it iterates over, not the partition-level deletion.
        """
        bound = self.folder_partition_stmt.bind(self.requests.key_values(bucket, parent))
        bound.fetch_size = 100_000
        result = self.requests.session.execute(bound, execution_profile="trace", trace=True)
        trace = result.get_query_trace(max_wait_sec=10.0)
        counts = [
            int(match.group(2))
            for event in trace.events
            if (match := _TRACE_COUNTS.search(str(event.description)))
        ]
        if not counts:
            raise RuntimeError("the read's trace reports no tombstone count")
        return max(counts)


def _warned_tokens(result: Any) -> set[int] | None:
    """The tokens a read's tombstone warnings name (empty: a warning naming none), or None
    when the read drew no tombstone warning."""
    future = getattr(result, "response_future", None)
    warnings = getattr(future, "warnings", None) or []
    tombstones = [w for w in warnings if "tombstone" in str(w).lower()]
    if not tombstones:
        return None
    return {int(m.group(1)) for w in tombstones if (m := _WARNED_TOKEN.search(str(w)))}


def _tombstone_failure(exc: ReadFailure) -> bool:
    """Whether a read failed because a replica met too many tombstones (the failure reason
    ``READ_TOO_MANY_TOMBSTONES``, code 0x0001, or the message saying so)."""
    codes = getattr(exc, "error_code_map", None) or {}
    return "tombstone" in str(exc).lower() or any(
        str(code).lower() in ("0x0001", "1") for code in codes.values()
    )
