"""The deleter through its sliding window: order, retries, and a kill -9 mid-clean (the window's
own bound and barrier: ``test_deletewindow``).

A fake store whose requests complete on other threads (as Cassandra's ``execute_async`` do)
records every event: the lease check, the charge, the audit record, each request sent and each
one completed. Its batch calls (``delete_folder_rows``) go through the same requests and wait
for all of them, as a batch would.
"""

from __future__ import annotations

import ast
import inspect
import io
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest
from cassandra import OperationTimedOut

from dircleaner.audit import AuditLog
from dircleaner.errors import DircleanerError, StoreUnavailable, TransientStoreError
from dircleaner.model import ActionKind, DeleteAction, FolderRow, PartitionKey
from dircleaner.paths import dir_of_row, directories_of
from dircleaner.pipeline import delete
from dircleaner.pipeline.delete import DeleteFailed, ThrottleConfig, execute_plan
from dircleaner.pipeline.plan import DeletionPlan
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.capabilities import TombstoneCounter
from dircleaner.store.cassandra.store import CassandraStore
from dircleaner.store.records import DeleteOutcome, DeleteRequest, StoreTraits, murmur_token
from dircleaner.timeutil import now_us
from tests.helpers import audit_entries, expected_dirs, invoke

BUCKET = "bkt"
DELETE_TS = 5_000
#: how long a fake request waits for what the test expects to happen meanwhile
PATIENCE_S = 20.0


def row(i: int) -> FolderRow:
    return FolderRow(i, BUCKET, f"p{i % 7}/", f"c{i:04d}")


def row_plan(n: int) -> DeletionPlan:
    return DeletionPlan(
        tuple(
            DeleteAction(ActionKind.ROW, PartitionKey(r.token, r.bucket, r.parent), (r,))
            for r in map(row, range(n))
        ),
        (),
    )


class WindowStore:
    """Deletes that complete on other threads; every event in ``events``, in order.

    ``hold`` makes a row's request wait (at most PATIENCE_S) until a condition on the store
    holds before it completes; ``transient`` fails a row's next requests with a timeout.
    """

    rows_removed = None
    traits = StoreTraits()

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.events: list[tuple[str, object]] = []
        self.in_flight = self.max_in_flight = self.sent = self.completed = 0
        self.deleted: list[FolderRow] = []
        self.hold: dict[FolderRow, Callable[[], bool]] = {}
        #: whether every held request saw its condition come true
        self.held_ok = True
        self.transient: dict[FolderRow, int] = {}
        self.hard: dict[FolderRow, BaseException] = {}
        #: rows whose action is a partition deletion, those in flight, and each row request
        #: sent while one of them was in flight
        self.partitions: set[FolderRow] = set()
        self.partitions_in_flight = 0
        self.overtaken: list[FolderRow] = []
        #: a send that raises instead of sending
        self.send_raises: dict[FolderRow, BaseException] = {}
        self.patience = PATIENCE_S
        self.pool = ThreadPoolExecutor(max_workers=64)

    def event(self, kind: str, what: object) -> None:
        with self.cond:
            self.events.append((kind, what))
            self.cond.notify_all()

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.events if k == kind)

    # -- the window's requests ----------------------------------------------------------------
    def delete_requests(
        self, actions: Sequence[DeleteAction], timestamp_us: int
    ) -> list[DeleteRequest]:
        return [DeleteRequest((i,), partial(self._send, a.rows[0])) for i, a in enumerate(actions)]

    def _send(self, r: FolderRow, done: Callable[[DeleteOutcome], None]) -> None:
        if r in self.send_raises:
            raise self.send_raises[r]
        with self.cond:
            if r in self.partitions:
                self.partitions_in_flight += 1
            elif self.partitions_in_flight:
                self.overtaken.append(r)
            self.events.append(("send", r))
            self.sent += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.cond.notify_all()
        self.pool.submit(self._complete, r, done)

    def _complete(self, r: FolderRow, done: Callable[[DeleteOutcome], None]) -> None:
        error: BaseException | None = None
        with self.cond:
            hold = self.hold.get(r)
            if hold is not None and not self.cond.wait_for(hold, timeout=self.patience):
                self.held_ok = False
            self.in_flight -= 1
            self.partitions_in_flight -= r in self.partitions
            self.completed += 1
            if self.transient.get(r, 0) > 0:
                self.transient[r] -= 1
                error = TransientStoreError(f"OperationTimedOut: deleting {r.name}")
            elif r in self.hard:
                error = self.hard[r]
            else:
                self.deleted.append(r)
            self.events.append(("done", r))
            self.cond.notify_all()
        done([error])

    # -- the batch form, on the same requests ---------------------------------------------------
    def delete_folder_rows(
        self, rows: Sequence[FolderRow], timestamp_us: int
    ) -> list[BaseException | None]:
        results: list[BaseException | None] = [None] * len(rows)
        finished = [threading.Event() for _ in rows]

        def done(i: int, outcome: DeleteOutcome) -> None:
            results[i] = outcome[0]
            finished[i].set()

        for i, r in enumerate(rows):
            self._send(r, partial(done, i))
        for flag in finished:
            flag.wait()
        return results

    def delete_folder_partitions(self, *args: object) -> list[BaseException | None]:
        return []

    def delete_folder_ranges(self, *args: object) -> list[BaseException | None]:
        return []


class RecordingAudit(AuditLog):
    def __init__(self, store: WindowStore) -> None:
        super().__init__(io.BytesIO(), "gen", DELETE_TS)
        self.store = store

    def write_ahead(self, actions: Sequence[DeleteAction]) -> None:
        self.store.event("audit", [a.rows[0] for a in actions])
        super().write_ahead(actions)


def run(
    store: WindowStore, plan: DeletionPlan, concurrency: int, **overrides: Any
) -> tuple[Any, RecordingAudit]:
    audit = RecordingAudit(store)
    stats = execute_plan(
        cast(Store, store),
        plan,
        DELETE_TS,
        ThrottleConfig(rate=0.0, concurrency=concurrency, **overrides),
        audit,
        sleep=lambda _s: None,
        keep_going=lambda: store.event("lease", None),
        charge=lambda actions: store.event("charge", [a.rows[0] for a in actions]),
    )
    return stats, audit


def test_every_delete_is_lease_checked_charged_and_audited_before_it_is_sent() -> None:
    store = WindowStore()
    plan = row_plan(200)
    stats, _ = run(store, plan, concurrency=4)
    assert stats.directories == 200
    assert sorted(store.deleted) == sorted(map(row, range(200)))
    events = store.events
    first_sent = {}
    for at, (kind, what) in enumerate(events):
        if kind == "send":
            first_sent.setdefault(what, at)
    groups = [(at, what) for at, (kind, what) in enumerate(events) if kind == "charge"]
    audits = [(at, what) for at, (kind, what) in enumerate(events) if kind == "audit"]
    assert [what for _, what in groups] == [what for _, what in audits]
    assert len(groups) == 200 // 4
    for n, ((charged_at, group), (audited_at, _)) in enumerate(zip(groups, audits, strict=True)):
        # the lease was checked right before the group was charged, then it was audited
        assert events[charged_at - 1] == ("lease", None)
        assert charged_at < audited_at
        for r in cast(list[FolderRow], group):
            assert audited_at < first_sent[r], f"{r} sent before it was charged and audited"
        # Charged only once every earlier group was sent: a killed run has charged at most
        # one group it did not send.
        sent_before = {what for kind, what in events[:charged_at] if kind == "send"}
        earlier = [r for _, g in groups[:n] for r in cast(list[FolderRow], g)]
        assert set(earlier) <= sent_before


def test_a_timed_out_request_is_retried_once_the_wait_is_over() -> None:
    store = WindowStore()
    store.transient[row(5)] = 2
    stats, audit = run(store, row_plan(20), concurrency=4)
    assert sorted(store.deleted) == sorted(map(row, range(20)))
    assert stats.retries == 2
    assert [what for kind, what in store.events if kind == "send"].count(row(5)) == 3
    # audited once, ahead of its first attempt
    assert cast(io.BytesIO, audit._stream).getvalue().count(b'"c0005"') == 1


def test_a_request_timing_out_past_the_retries_stops_the_run() -> None:
    store = WindowStore()
    store.transient[row(5)] = 100
    with pytest.raises(StoreUnavailable, match="1 deletes still failing after 2 retries"):
        run(store, row_plan(20), concurrency=4, max_retries=2)
    assert [what for kind, what in store.events if kind == "send"].count(row(5)) == 3
    assert store.in_flight == 0  # the requests in flight were waited for


def test_a_hard_error_stops_sending_and_waits_for_the_requests_in_flight() -> None:
    store = WindowStore()
    store.hard[row(9)] = DircleanerError("bad request")
    with pytest.raises(DeleteFailed, match="bad request"):
        run(store, row_plan(400), concurrency=4)
    assert store.in_flight == 0
    assert store.sent < 400  # it stopped: not the whole plan went
    charged = {r for kind, what in store.events if kind == "charge" for r in cast(list, what)}
    sent = {what for kind, what in store.events if kind == "send"}
    assert sent <= charged
    assert len(charged - sent) <= 4  # at most one group charged and never sent


def test_a_signal_between_groups_still_sends_every_audited_delete() -> None:
    """The progress hook raises (a signal was asked for) while the window is full and a
    charged, audited group still waits to be sent: it is sent, and waited for, first."""
    store = WindowStore()
    # groups of 4 (one row per request), 2 in flight
    store.traits = StoreTraits(deletes_per_request=2)
    interrupted = threading.Event()

    def progress(phase: str, done: int, total: int | None) -> None:
        with store.cond:
            interrupted.set()
            store.cond.notify_all()
        raise DircleanerError("interrupted")

    # Group 1 ends (and the hook raises) only once group 2 was audited; group 2's requests
    # wait for the interruption, so two of them are still unsent when it comes.
    store.hold[row(1)] = lambda: store.count("audit") >= 2
    for i in range(4, 8):
        store.hold[row(i)] = interrupted.is_set
    audit = RecordingAudit(store)
    with pytest.raises(DircleanerError, match="interrupted"):
        execute_plan(
            cast(Store, store),
            row_plan(40),
            DELETE_TS,
            ThrottleConfig(rate=0.0, concurrency=2),
            audit,
            progress=progress,
            sleep=lambda _s: None,
        )
    assert store.held_ok
    audited = [r for kind, what in store.events if kind == "audit" for r in cast(list, what)]
    sent = [what for kind, what in store.events if kind == "send"]
    assert sorted(sent) == sorted(audited) == sorted(map(row, range(8)))
    assert store.in_flight == 0


def test_an_interrupt_between_groups_sends_only_what_was_charged_and_audited() -> None:
    """A KeyboardInterrupt (not an Exception) from the lease check: the window is abandoned
    cleanly, every request sent was charged and audited, and all were waited for."""
    store = WindowStore()
    checks = 0

    def lease() -> None:
        nonlocal checks
        checks += 1
        store.event("lease", None)
        if checks == 3:
            raise KeyboardInterrupt

    audit = RecordingAudit(store)
    with pytest.raises(KeyboardInterrupt):
        execute_plan(
            cast(Store, store),
            row_plan(40),
            DELETE_TS,
            ThrottleConfig(rate=0.0, concurrency=4),
            audit,
            sleep=lambda _s: None,
            keep_going=lease,
            charge=lambda actions: store.event("charge", [a.rows[0] for a in actions]),
        )
    charged = {r for kind, what in store.events if kind == "charge" for r in cast(list, what)}
    audited = {r for kind, what in store.events if kind == "audit" for r in cast(list, what)}
    sent = {what for kind, what in store.events if kind == "send"}
    # two groups (a window's worth of requests each) went before the third check
    assert charged == audited == sent == set(map(row, range(8)))
    assert store.in_flight == 0


# -- kill -9 during a real clean, on both backends ------------------------------------------------

PARENTS = 10
CHILDREN = 40
#: live parents, each with forty empty children in runs between a few live siblings
#: (``c007k/`` sorts between ``c007/`` and ``c008/``): row and range deletes, all charged
LIVE = [f"p{i:02d}/live/obj" for i in range(PARENTS)] + [
    f"p{i:02d}/c{j:03d}k/obj" for i in range(PARENTS) for j in range(0, CHILDREN, 7)
]
#: every other empty child holds an empty directory of its own: its partition goes with a
#: partition deletion, and the row naming it in its parent with a row or range delete
DEAD = [
    f"p{i:02d}/c{j:03d}/d/obj" if j % 2 else f"p{i:02d}/c{j:03d}/obj"
    for i in range(PARENTS)
    for j in range(CHILDREN)
]
LIVE_DIRS = {d for k in LIVE for d in directories_of(k)}


@pytest.mark.parametrize("seed", range(4))
def test_a_clean_killed_at_a_random_point_deleted_nothing_unaudited_or_uncharged(
    real_store: tuple[Store, str], tmp_path: Path, seed: int
) -> None:
    store, bucket = real_store
    store.put_objects(bucket, LIVE + DEAD, now_us() - 3_600_000_000)
    store.delete_objects(bucket, DEAD, now_us() - 3_600_000_000)
    before = {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows(bucket)}
    # half the runs write a compressed log: a kill tears a gzip member as it tears a line
    audit = tmp_path / ("audit.jsonl.gz" if seed % 2 else "audit.jsonl")
    args = [
        sys.executable, "-m", "dircleaner", "--store", store.url, "run", "--bucket", bucket,
        "--min-age", "0", "--max-delete-fraction", "1", "--rate", "100", "--concurrency", "4",
        "--max-tombstones-per-partition", "25", "--audit-log", str(audit),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    # Kill once a random number of audit entries is there: mid-clean, wherever that falls (past
    # the first group, which is a few hundred partition deletions on Cassandra).
    kill_after = random.Random(seed).randrange(150, 500)
    deadline = time.monotonic() + 180
    while proc.poll() is None and time.monotonic() < deadline:
        if len(audit_entries(audit)) >= kill_after:
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the clean finished before the kill: slow it down"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rows = list(store.iter_folder_rows(bucket))
    after = {dir_of_row(r.parent, r.name) for r in rows}
    assert isinstance(store, TombstoneCounter)
    written = {
        f"p{i:02d}/": store.tombstones_in_partition(bucket, f"p{i:02d}/") for i in range(PARENTS)
    }
    charged = store.tombstones_charged([(bucket, p) for p in written])
    gone = before - after
    assert gone, "nothing was deleted before the kill"
    # precision 1: only empty directories went
    assert not gone & LIVE_DIRS
    assert after >= LIVE_DIRS
    # whole records only: the kill may have torn the last one (never one of a sent delete)
    audited = {dir_of_row(e["parent"], e["name"]) for e in audit_entries(audit)}
    assert gone <= audited, "deleted without an audit record"
    for parent, tombstones in written.items():
        assert tombstones <= charged.get((bucket, parent), 0), f"{parent} uncharged"
    # No partition left that its parent's rows no longer name: a re-run can reach it.
    orphans = {r.parent for r in rows if r.parent.count("/") > 1} - after
    assert not orphans, "a child partition outlived the row naming it"


# -- the stores' requests, on both backends --------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)])
def real_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, str]]:
    """A store of each backend and a bucket of this test alone."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'meta.db'}"
    else:
        url = request.getfixturevalue("cassandra_url")
    with open_store(url, create=True) as opened:
        yield opened, f"w{uuid.uuid4().hex[:12]}"


def folder_row(bucket: str, parent: str, name: str) -> FolderRow:
    return FolderRow(murmur_token(bucket, parent), bucket, parent, name)


def send_all(store: Store, actions: Sequence[DeleteAction], ts: int) -> list[BaseException | None]:
    """Every request of ``actions`` sent at once; each action's outcome."""
    outcomes: list[BaseException | str | None] = ["unsent"] * len(actions)
    requests = store.delete_requests(actions, ts)
    finished = [threading.Event() for _ in requests]

    def done(i: int, request: DeleteRequest, outcome: DeleteOutcome) -> None:
        for member, error in zip(request.members, outcome, strict=True):
            assert outcomes[member] == "unsent", "an action in two requests"
            outcomes[member] = error
        finished[i].set()

    for i, request in enumerate(requests):
        request.send(partial(done, i, request))
    assert all(flag.wait(timeout=60) for flag in finished)
    assert "unsent" not in outcomes
    return cast(list[BaseException | None], outcomes)


def test_a_stores_delete_requests_delete_each_action_once_at_the_timestamp(
    real_store: tuple[Store, str],
) -> None:
    store, bucket = real_store
    t = now_us()
    names = [f"n{i:02d}" for i in range(10)]
    # 40 dead partitions (more than one IN request's worth), one wide live parent
    dead = [f"dead{i:02d}/" for i in range(40)]
    store.write_folder_rows([(bucket, p, n) for p in dead for n in names[:2]], t)
    store.write_folder_rows([(bucket, "live/", n) for n in names], t)
    # written after the delete timestamp: survives its row delete
    store.write_folder_rows([(bucket, "live/", "n09")], t + 10)
    live = PartitionKey(murmur_token(bucket, "live/"), bucket, "live/")
    actions = [
        *(
            DeleteAction(
                ActionKind.PARTITION,
                PartitionKey(murmur_token(bucket, p), bucket, p),
                (folder_row(bucket, p, names[0]), folder_row(bucket, p, names[1])),
            )
            for p in dead
        ),
        DeleteAction(ActionKind.ROW, live, (folder_row(bucket, "live/", "n00"),)),
        DeleteAction(
            ActionKind.RANGE, live, tuple(folder_row(bucket, "live/", n) for n in names[2:6])
        ),
        DeleteAction(ActionKind.ROW, live, (folder_row(bucket, "live/", "n09"),)),
    ]
    assert send_all(store, actions, t + 5) == [None] * len(actions)
    left = {(r.parent, r.name) for r in store.iter_folder_rows(bucket)}
    assert left == {("live/", n) for n in ("n01", "n06", "n07", "n08", "n09")}


def test_a_clean_through_the_window_has_precision_one_and_full_recall(
    real_store: tuple[Store, str], tmp_path: Path
) -> None:
    store, bucket = real_store
    put = [f"a{i:02d}/b{j:02d}/obj" for i in range(8) for j in range(12)]
    dead = [k for k in put if int(k[5:7]) % 3]
    store.put_objects(bucket, put, now_us() - 3_600_000_000)
    store.delete_objects(bucket, dead, now_us() - 3_600_000_000)
    every, live = expected_dirs(put, dead)
    audit = tmp_path / "audit.jsonl"
    result = invoke(
        store.url, "run", "--bucket", bucket, "--min-age", "0", "--max-delete-fraction", "1",
        "--rate", "0", "--concurrency", "5", "--audit-log", str(audit),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    left = {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows(bucket)}
    audited = {str(e["dir"]) for e in audit_entries(audit)}
    assert live <= left
    assert audited <= every - live  # precision 1
    assert left == live  # recall 1
    assert audited == every - live


class TimingOut:
    """A session whose ``n``-th ``execute_async`` fails with the driver's timeout, reported
    through the future's errback on another thread, as the driver does."""

    def __init__(self, session: Any, n: int) -> None:
        self._session, self._n, self.calls = session, n, 0

    def execute_async(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls != self._n:
            return self._session.execute_async(*args, **kwargs)
        return FailedFuture(OperationTimedOut("injected: client request timeout"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


class FailedFuture:
    def __init__(self, error: BaseException) -> None:
        self._error = error

    def add_callbacks(self, callback: Callable[..., Any], errback: Callable[..., Any]) -> None:
        threading.Timer(0.01, errback, (self._error,)).start()


@pytest.mark.cassandra
def test_a_driver_timeout_is_retried_by_the_window(cassandra_url: str) -> None:
    bucket = f"w{uuid.uuid4().hex[:12]}"
    with CassandraStore.open(cassandra_url, create=True) as store:
        t = now_us()
        rows = [folder_row(bucket, f"p{i % 3}/", f"n{i:03d}") for i in range(30)]
        store.write_folder_rows([(r.bucket, r.parent, r.name) for r in rows], t)
        plan = DeletionPlan(
            tuple(
                DeleteAction(ActionKind.ROW, PartitionKey(r.token, r.bucket, r.parent), (r,))
                for r in rows
            ),
            (),
        )
        session = TimingOut(store.requests.session, n=7)
        store.requests.session = cast(Any, session)
        stats = execute_plan(store, plan, t + 1, ThrottleConfig(rate=0.0, concurrency=4))
        assert session.calls == len(rows) + 1
        assert stats.retries == 1
        assert stats.directories == len(rows)
        assert not [r for r in store.iter_folder_rows(bucket)]


def test_a_paced_group_waits_for_its_rate_before_its_lease_check() -> None:
    """With --rate set, each group's share of the rate is waited for before the lease check,
    so the check, the charge, the audit and the sends follow each other with no wait between:
    a run whose lease went (its Dask client gone) sends nothing it checked before that."""
    store = WindowStore()

    def sleep(seconds: float) -> None:
        if seconds > 0:
            store.event("sleep", seconds)

    stats = execute_plan(
        cast(Store, store),
        row_plan(24),
        DELETE_TS,
        ThrottleConfig(rate=50.0, concurrency=4),
        RecordingAudit(store),
        sleep=sleep,
        keep_going=lambda: store.event("check", None),
    )
    assert stats.deletes.row == 24
    kinds = [kind for kind, _ in store.events if kind in ("sleep", "check", "audit", "send")]
    checks = [i for i, kind in enumerate(kinds) if kind == "check"]
    assert len(checks) == 6 and "sleep" in kinds
    for at in checks:
        # the check, the group's audit, then its four sends: no wait among them
        assert kinds[at : at + 6] == ["check", "audit", "send", "send", "send", "send"], kinds


def self_attributes(module: ModuleType, name: str) -> set[str]:
    """Every ``self.x =`` of class ``name`` in ``module``."""
    tree = ast.parse(inspect.getsource(module))
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name]
    return {
        target.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for assigned in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for target in ast.walk(assigned)
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    }


def test_the_rounds_state_only_what_cannot_be_derived() -> None:
    """The rounds the caller's thread counts keep the driver's size: at most ten attributes
    (the requests in flight: ``test_deletewindow``)."""
    attributes = self_attributes(delete, "_Rounds")
    assert 0 < len(attributes) <= 10, sorted(attributes)
