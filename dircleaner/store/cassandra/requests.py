"""Requests against the node, shared by the store's reads and writes.

One request with bounded retries of transient failures (``execute``), every page of a query
(``pages``), jobs run ``concurrency`` at a time with their items yielded in job order
(``ordered``), token-range splits of a shard (``splits``, ``range_scan``), many statements at
once, optionally with retries (``run_many``), and the mapping of a model ``(bucket, parent)`` to
the bound key values and back. Retries follow ``REQUEST_RETRY``, the one policy of
``dircleaner.retry``.
"""

from __future__ import annotations

import bisect
import contextvars
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from cassandra import ReadFailure
from cassandra.cluster import Session
from cassandra.concurrent import execute_concurrent
from cassandra.query import PreparedStatement

from dircleaner.errors import UsageError
from dircleaner.model import Shard
from dircleaner.retry import RetryPolicy
from dircleaner.scanrate import ScanThrottle
from dircleaner.store.cassandra.config import CassandraConfig
from dircleaner.store.cassandra.mapping import (
    _q,
    model_parent,
    padded_in,
    partition_tokens,
    stored_parent,
)
from dircleaner.store.cassandra.ring import cql_token_bounds, ring_splits
from dircleaner.store.cassandra.session import (
    TRANSIENT_ERRORS,
    _one_line,
    map_error,
)
from dircleaner.workers import interrupt

log = logging.getLogger(__name__)

#: pages each running split may read ahead of the consumer
PAGES_AHEAD = 2
#: tries per page, per metadata, verify or generator request before giving up (mean waits
#: 0.1, 0.2, 0.4 s); the deleter's requests are retried by its window, which also steers the
#: rate
REQUEST_RETRY = RetryPolicy(attempts=4, base_s=0.1, cap_s=4.0)

T = TypeVar("T")
Params = tuple[object, ...]
#: one partition of an IN request's chunk: (token, stored parent, model parent)
ChunkKey = tuple[int, str, str]
#: what a throttled scan's page retries, and takes as a sign of strain: the transient errors and
#: a replica's read failure (a node shedding load fails reads before it times them out)
SCAN_RETRIED: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, ReadFailure)
#: a capped scan's pages, all readers' together, hold at most this share of a second's rows:
#: the requests are spread over the second rather than a few large pages at a time
CAPPED_PAGE_SECONDS = 0.25
#: ... and at least this many rows (a page's overhead would dominate below it)
MIN_CAPPED_PAGE_ROWS = 100


def release_rows(result: Any) -> None:
    """Let go of a read page's rows held by the driver, once copied out.

    The driver's response future sits in a reference cycle (its request timer holds a bound
    method of it) and keeps the page's rows: with the cyclic GC paused through a scan, as the
    build and the sweep pause it, every row read stays alive until the pause ends, and the
    first collection then walks and frees them all at once (a second per million rows). The
    list the result hands out is the one the future holds: emptied, the rows go by reference
    counting as soon as their consumer drops its copy.
    """
    rows = result.current_rows
    if isinstance(rows, list):
        rows.clear()


def let_go(future: Any) -> None:
    """Break the reference cycle a finished request's response future sits in.

    The driver cancels a request's timer when the response comes, before it calls back, but
    keeps it: the future holds the timer, the timer a bound method of the future. With the
    cyclic GC paused through a clean, every such future (about 4 KB with its statement, message
    and callbacks) stays alive until the pause ends: a 16M-directory night's deletes would hold
    tens of GB. Dropped, the timer goes when the driver's timer heap pops it, and the future
    with it, by reference counting.
    """
    future._timer = None


class _Done:
    """End of one split's pages."""


class _Failed:
    """A split's worker failed; the consumer re-raises."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_DONE = _Done()


class InStatements:
    """One CQL shape with an ``IN (?, …)`` list: a prepared statement per list size, prepared
    on first use (``padded_in`` keeps the sizes few). Safe to call from the scan threads."""

    def __init__(self, prepare: Callable[[str], PreparedStatement], head: str, tail: str) -> None:
        #: the CQL before and after the ``IN`` list's markers
        self._prepare, self._head, self._tail = prepare, head, tail
        self._by_size: dict[int, PreparedStatement] = {}
        self._lock = threading.Lock()

    def __call__(self, size: int) -> PreparedStatement:
        """The statement with ``size`` markers in its ``IN`` list."""
        with self._lock:
            stmt = self._by_size.get(size)
            if stmt is None:
                marks = ", ".join("?" * size)
                stmt = self._by_size[size] = self._prepare(f"{self._head}{marks}{self._tail}")
            return stmt


@dataclass(frozen=True, slots=True)
class CqlParts:
    """The mapped names as CQL fragments, each identifier double-quoted: what every statement
    of the store is put together from."""

    #: ``ks.objects`` and ``ks.folders``
    objects: str
    folders: str
    #: the partition key's columns, ``bucket, parent`` (or ``parent``), and the row's name
    key: str
    name: str
    #: ``token(bucket, parent)``
    token: str
    #: ``bucket = ? AND parent = ?``, and with ``AND name = ?``
    key_eq: str
    row_eq: str
    #: ``[bucket = ? AND] parent IN (`` (an ``InStatements`` head ends with it)
    parent_in: str

    @classmethod
    def of(cls, cfg: CassandraConfig, key_columns: Sequence[str]) -> CqlParts:
        ks = _q(cfg.keyspace)
        key = ", ".join(_q(c) for c in key_columns)
        key_eq = " AND ".join(f"{_q(c)} = ?" for c in key_columns)
        bucket_eq = f"{_q(cfg.columns.bucket)} = ? AND " if cfg.columns.bucket else ""
        return cls(
            objects=f"{ks}.{_q(cfg.tables.objects)}",
            folders=f"{ks}.{_q(cfg.tables.folders)}",
            key=key,
            name=_q(cfg.columns.name),
            token=f"token({key})",
            key_eq=key_eq,
            row_eq=f"{key_eq} AND {_q(cfg.columns.name)} = ?",
            parent_in=f"{bucket_eq}{_q(cfg.columns.parent)} IN (",
        )


class CassandraRequests:
    """Paging, ordered concurrency, retries and the key mapping: what every part of the store
    sends its requests through."""

    #: how transient failures of a request are retried
    retry_policy: RetryPolicy = REQUEST_RETRY

    def __init__(
        self,
        cfg: CassandraConfig,
        cluster: Any,
        session: Session,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self.config = cfg
        self.cluster = cluster
        self.session = session
        #: the partition key's mapped columns: ([bucket,] parent)
        self.key_columns: tuple[str, ...] = (
            *((cfg.columns.bucket,) if cfg.columns.bucket else ()),
            cfg.columns.parent,
        )
        if retry_policy is not None:
            self.retry_policy = retry_policy
        self.cql = CqlParts.of(cfg, self.key_columns)

    def prepare(self, cql: str) -> PreparedStatement:
        stmt = self.session.prepare(cql)
        # Every write we make carries an explicit timestamp or is an overwrite: replaying
        # it is harmless, so the driver may retry it on another host.
        stmt.is_idempotent = True
        return stmt

    # -- the parent and bucket mapping -----------------------------------------------------------
    def key_values(self, bucket: str, parent: str) -> Params:
        """Bind values of a partition key ``(bucket, parent)`` in the mapped columns' order."""
        stored = stored_parent(self.config, parent)
        if self.config.columns.bucket is None:
            if bucket != self.config.bucket_name:
                raise UsageError(
                    f"this metastore has no bucket column; its only bucket is"
                    f" {self.config.bucket_name!r}, not {bucket!r}"
                )
            return (stored,)
        return (bucket, stored)

    def bucket_of(self, row: Sequence[Any]) -> tuple[str, str]:
        """(bucket, model parent) from a row whose columns after the token are the key."""
        if self.config.columns.bucket is None:
            return self.config.bucket_name, model_parent(self.config, row[1])
        return row[1], model_parent(self.config, row[2])

    def range_chunks(
        self, keys: Sequence[tuple[str, str]], batch: int
    ) -> list[tuple[str, list[ChunkKey]]]:
        """``keys`` (distinct) as (bucket, [(token, stored parent, parent)]) chunks for IN
        requests: at most ``batch`` keys of one bucket and one ring range each, in token order.

        The n-th chunks of every (bucket, range) come before the (n+1)-th, so neighbours go to
        different replicas. Each chunk's first token routes it (``routing_token``) to a replica
        of its range, which then reads or writes every partition of it locally.
        """
        token_map = self.cluster.metadata.token_map
        ring = sorted(int(t.value) for t in token_map.ring) if token_map is not None else []
        # (bucket, ring range) → its keys. Range i is (ring[i-1], ring[i]]; tokens past the last
        # ring token wrap around to range 0.
        groups: dict[tuple[str, int], list[ChunkKey]] = {}
        for bucket, token, stored, parent in partition_tokens(self.config, keys):
            where = bisect.bisect_left(ring, token) % len(ring) if ring else 0
            group = groups.get((bucket, where))
            if group is None:
                group = groups[(bucket, where)] = []
            group.append((token, stored, parent))
        chunks: list[tuple[int, int, str, list[ChunkKey]]] = []
        for order, ((bucket, _), members) in enumerate(sorted(groups.items())):
            members.sort()
            for index, start in enumerate(range(0, len(members), batch)):
                chunks.append((index, order, bucket, members[start : start + batch]))
        chunks.sort(key=lambda chunk: chunk[:2])
        return [(bucket, members) for _, _, bucket, members in chunks]

    def in_keys(
        self, bucket: str, chunk: Sequence[ChunkKey], batch: int
    ) -> tuple[tuple[str, ...], int]:
        """The bound partition keys of one chunk's ``IN`` request, ``([bucket,] parents…)``, the
        parents padded (``padded_in``), and how many parents that is (the statement's size)."""
        parents = padded_in([stored for _, stored, _ in chunk], batch)
        keys = (bucket, *parents) if self.config.columns.bucket else tuple(parents)
        return keys, len(parents)

    def scans_bucket(self, bucket: str | None) -> bool:
        """False when a bucket filter cannot match anything in this metastore."""
        return (
            bucket is None
            or self.config.columns.bucket is not None
            or bucket == self.config.bucket_name
        )

    # -- paging and ordered concurrency ---------------------------------------------------------
    def execute(
        self,
        stmt: Any,
        params: Params | None,
        profile: str,
        *,
        paging_state: bytes | None = None,
        fetch_size: int | None = None,
        routing_token: int | None = None,
        throttle: ScanThrottle | None = None,
    ) -> Any:
        """One request with bounded retries of transient failures (then TransientStoreError).

        With ``throttle`` (a scan's page), a read failure is retried too, and every failure
        retried tells the throttle that the cluster strains.
        """
        retried = TRANSIENT_ERRORS if throttle is None else SCAN_RETRIED

        def on_retry(exc: Exception) -> None:
            log.debug("retrying after %s", _one_line(exc))
            if throttle is not None:
                throttle.strained()

        bound = stmt.bind(params) if params is not None else stmt
        if fetch_size is not None:
            bound.fetch_size = fetch_size
        if routing_token is not None:
            bound.routing_token = routing_token

        def once() -> Any:
            future = self.session.execute_async(
                bound, execution_profile=profile, paging_state=paging_state
            )
            if throttle is not None:
                # A scan's page may take seconds (a node straining): a stop does not wait
                # for it.
                answered = threading.Event()
                future.add_callbacks(lambda _rows: answered.set(), lambda _exc: answered.set())
                interrupt.wait_until(answered)
            return future.result()

        try:
            return self.retry_policy.call(
                once, retry_if=lambda exc: isinstance(exc, retried), on_retry=on_retry
            )
        except TRANSIENT_ERRORS as exc:
            raise map_error(exc) from exc

    def pages(
        self,
        stmt: Any,
        params: Params,
        profile: str,
        fetch_size: int,
        routing_token: int | None = None,
        paging_state: bytes | None = None,
        throttle: ScanThrottle | None = None,
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Every page of one query (from ``paging_state``, when given: the pages after one
        already read); a failed page is retried from its paging state. With ``throttle``, each
        page waits for its turn and reports its rows and latency."""
        while True:
            reserved = throttle.reserve(fetch_size) if throttle is not None else 0
            began = throttle.now() if throttle is not None else 0.0
            result = self.execute(
                stmt,
                params,
                profile,
                paging_state=paging_state,
                fetch_size=fetch_size,
                routing_token=routing_token,
                throttle=throttle,
            )
            rows = result.current_rows
            paging_state = result.paging_state
            if throttle is not None:
                throttle.page(len(rows), throttle.now() - began, reserved)
            page = list(rows)
            release_rows(result)
            let_go(result.response_future)
            del result, rows
            if page:
                yield page
            if not paging_state:
                return

    def ordered(self, jobs: Sequence[Callable[[], Iterator[T]]]) -> Iterator[T]:
        """Run jobs ``concurrency`` at a time; yield their items in job order.

        Each job gets a small bounded queue, so a split that runs ahead holds at most
        PAGES_AHEAD pages. The pool starts jobs in submission order, so the job the consumer
        waits on is always running or about to run: no deadlock.
        """
        if not jobs:
            return
        stop = threading.Event()
        queues: list[queue.Queue[T | _Done | _Failed]] = [
            queue.Queue(maxsize=PAGES_AHEAD) for _ in jobs
        ]

        def put(q: queue.Queue[T | _Done | _Failed], item: T | _Done | _Failed) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def run(index: int) -> None:
            if stop.is_set():
                return
            q = queues[index]
            try:
                for item in jobs[index]():
                    if not put(q, item):
                        return
            except Exception as exc:  # handed to the consumer, which re-raises it
                put(q, _Failed(exc))
                return
            put(q, _DONE)

        workers = min(self.config.concurrency, len(jobs))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dircleaner-scan")
        try:
            for index in range(len(jobs)):
                # In the caller's context: a split's waits obey what the caller's obey (a Dask
                # task's stop, ``interrupt.obeying``).
                pool.submit(contextvars.copy_context().run, run, index)
            for q in queues:
                while True:
                    item = q.get()
                    if isinstance(item, _Done):
                        break
                    if isinstance(item, _Failed):
                        raise item.exc
                    yield item
        finally:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)

    def splits(self, shard: Shard) -> list[tuple[int, int]]:
        token_map = self.cluster.metadata.token_map
        ring = [int(t.value) for t in token_map.ring] if token_map is not None else []
        lo, hi = shard.token_range()
        return ring_splits(ring, self.config.splits_per_range, lo, hi)

    def range_scan(
        self, stmt: Any, shard: Shard, profile: str, throttle: ScanThrottle | None = None
    ) -> Iterator[list[tuple[Any, ...]]]:
        fetch = self.config.fetch_size
        if throttle is not None and throttle.rate:
            share = throttle.rate * CAPPED_PAGE_SECONDS / self.config.concurrency
            fetch = min(fetch, max(MIN_CAPPED_PAGE_ROWS, int(share)))

        def job(a: int, b: int) -> Callable[[], Iterator[list[tuple[Any, ...]]]]:
            return lambda: self.pages(stmt, (a, b), profile, fetch, b, throttle=throttle)

        jobs = [
            job(*bounds)
            for lo, hi in self.splits(shard)
            if (bounds := cql_token_bounds(lo, hi)) is not None
        ]
        return self.ordered(jobs)

    def run_many(
        self, stmt: Any, params: Sequence[Params], profile: str, *, retry: bool = False
    ) -> list[Any]:
        """Run one statement per params, ``concurrency`` in flight; a result or the exception.

        With ``retry``, transient failures are retried by ``retry_policy`` before being returned.
        """
        return self.run_statements([(stmt, p) for p in params], profile, retry=retry)

    def run_statements(
        self, items: Sequence[tuple[Any, Params]], profile: str, *, retry: bool = False
    ) -> list[Any]:
        def run(batch: Sequence[tuple[Any, Params]]) -> list[tuple[bool, Any]]:
            done = list(
                execute_concurrent(
                    self.session,
                    batch,
                    concurrency=self.config.concurrency,
                    raise_on_first_error=False,
                    execution_profile=profile,
                )
            )
            for ok, result in done:
                if ok:  # the result keeps its rows; its future goes with it (``let_go``)
                    let_go(result.response_future)
            return done

        def transient(outcome: tuple[bool, Any]) -> bool:
            return not outcome[0] and isinstance(outcome[1], TRANSIENT_ERRORS)

        outcomes = self.retry_policy.rerun_failed(items, run, transient) if retry else run(items)
        return [value for _ok, value in outcomes]

    @staticmethod
    def outcomes(results: Sequence[Any]) -> list[BaseException | None]:
        return [map_error(r) if isinstance(r, BaseException) else None for r in results]

    @staticmethod
    def raise_first(results: Sequence[Any]) -> None:
        for result in results:
            if isinstance(result, BaseException):
                raise map_error(result) from result
