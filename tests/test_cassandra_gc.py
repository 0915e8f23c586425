"""On a real Cassandra node, with the cyclic GC paused as a clean pauses it: the driver's response
futures of the deletes, the many-statement reads and the scans' pages go by reference counting,
none is left for the collector. Each sits in a cycle of the driver's own (its timer holds a bound
method of it); left alone, a 16M-directory night held one per request, about 4 KB each, until the
pause ended."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator

import pytest

from dircleaner.model import ActionKind, DeleteAction, FolderRow, PartitionKey, Shard
from dircleaner.store.cassandra.store import CassandraStore
from dircleaner.timeutil import now_us
from tests.test_cassandra_end_to_end import _init_keyspace, forget_bucket

pytestmark = pytest.mark.cassandra

ROWS = 300


@pytest.fixture(scope="module")
def store(cassandra_url: str) -> Iterator[CassandraStore]:
    opened = CassandraStore.open(_init_keyspace(cassandra_url, "gc"))
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture()
def bucket(store: CassandraStore) -> Iterator[str]:
    name = f"gc-{now_us()}"
    rows = [(name, f"p{i % 30}/", f"d{i}") for i in range(ROWS)]
    store.write_folder_rows(rows, now_us() - 10_000_000)
    yield name
    forget_bucket(store, name)


def futures_left(work: Callable[[], None]) -> int:
    """Response futures that ``work``, run with the cyclic GC paused, leaves to the collector
    (the statements it prepares on first use, once per process, excepted: it runs once
    before)."""
    work()
    gc.collect()
    gc.disable()
    try:
        work()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return sum(1 for o in gc.garbage if type(o).__name__ == "ResponseFuture")
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_delete_requests_leave_no_future_to_the_collector(
    store: CassandraStore, bucket: str
) -> None:
    rows = list(store.iter_folder_rows(bucket))
    assert len(rows) == ROWS
    actions = [
        DeleteAction(ActionKind.ROW, PartitionKey(r.token, r.bucket, r.parent), (r,)) for r in rows
    ]

    def delete() -> None:
        requests = store.delete_requests(actions, now_us())  # a second time: no-ops
        done = threading.Semaphore(0)
        outcomes: list[object] = []

        def finished(outcome: object) -> None:
            outcomes.append(outcome)
            done.release()

        for request in requests:
            request.send(finished)
        for _ in requests:
            assert done.acquire(timeout=30)
        assert all(o == [None] for o in outcomes)

    assert futures_left(delete) == 0
    assert list(store.iter_folder_rows(bucket)) == []


def test_reads_and_scans_leave_no_future_to_the_collector(
    store: CassandraStore, bucket: str
) -> None:
    parents = sorted({(bucket, f"p{i}/") for i in range(30)})

    def read() -> None:
        heads = store.folder_partition_heads(parents, 2)
        assert len(heads) == len(parents)
        probe = store.probe_object_partitions(parents, 100)
        assert probe.nonempty == set()
        scanned = [r for batch in store.scan_folder_rows(Shard(), bucket) for r in batch]
        assert len(scanned) == ROWS and all(isinstance(r, FolderRow) for r in scanned)

    assert futures_left(read) == 0
