"""One run at a time: the store's lease, its heartbeat, and a deleter that lost it.

Both backends: a SQLite file and the real Cassandra node (a lightweight transaction on our state
table). The CLI's refusal of a second run and the recovery after ``kill -9`` are end-to-end
tests with real processes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dircleaner.errors import LeaseHeld, LeaseLost
from dircleaner.lease import (
    Lease,
    deleting_under_lease,
    describe_owner,
    lease_check,
    lease_name,
    lease_still_held,
    new_owner,
)
from dircleaner.model import Shard
from dircleaner.paths import dir_of_row, directories_of
from dircleaner.store import Store, open_store
from dircleaner.store.bookkeeping import LEASE_SPACE
from dircleaner.store.sqlite.schema import open_database
from dircleaner.store.sqlite.store import SqliteStore
from dircleaner.timeutil import now_us
from dircleaner.workers.local import map_shards
from tests.helpers import EAGER, invoke, said

BACKENDS = ["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'meta.db'}"
    else:
        url = request.getfixturevalue("cassandra_url")
    with open_store(url, create=True) as opened:
        holder = opened.lease_holder(lease_name(opened))
        if holder is not None:  # a test before this one was killed while holding it
            opened.release_lease(lease_name(opened), holder)
        yield opened
        holder = opened.lease_holder(lease_name(opened))
        if holder is not None:  # left by this test: the node's next user finds it free
            opened.release_lease(lease_name(opened), holder)


def test_a_second_acquire_is_refused_naming_the_holder(store: Store) -> None:
    with Lease.acquire(store, ttl_s=30) as first:
        with pytest.raises(LeaseHeld) as refused:
            Lease.acquire(store, ttl_s=30)
        message = str(refused.value)
        assert f"host {socket.gethostname()}, pid {os.getpid()}, since " in message
        assert "\n" not in message
        assert lease_still_held(store, first.owner)
        first.check()
    # Released on exit: the next run takes it at once.
    with Lease.acquire(store, ttl_s=30) as second:
        assert second.owner != first.owner
        assert not lease_still_held(store, first.owner)
        with pytest.raises(LeaseLost):
            first.check()


def test_a_run_deletes_under_its_own_lease_its_caller_s_or_none_when_dry(store: Store) -> None:
    name = lease_name(store)
    with deleting_under_lease(store, dry_run=False, ttl_s=30) as owner:
        assert owner is not None and store.lease_holder(name) == owner
        with pytest.raises(LeaseHeld):  # the helper takes the store's one lease
            Lease.acquire(store, ttl_s=30)
        # The caller's lease, held: nothing more taken.
        with deleting_under_lease(store, dry_run=False, ttl_s=30, held=owner) as inner:
            assert inner == owner
    assert store.lease_holder(name) is None  # let go as the block ends
    with deleting_under_lease(store, dry_run=True, ttl_s=30) as owner:
        assert owner is None and store.lease_holder(name) is None


def test_the_heartbeat_keeps_a_lease_alive_past_its_ttl(store: Store) -> None:
    # A TTL of 3 s renewed every second: the lease lapses only if a renewal takes over 2 s
    # (with 1.5 s, one renewal slower than about a second, an LWT on a loaded node, could lose it).
    with Lease.acquire(store, ttl_s=3) as lease:
        time.sleep(4)
        assert lease_still_held(store, lease.owner)
        assert not lease.lost
        with pytest.raises(LeaseHeld):
            Lease.acquire(store, ttl_s=3)


def test_an_abandoned_lease_expires_and_the_next_run_proceeds(store: Store) -> None:
    abandoned = Lease.acquire(store, ttl_s=1)  # no heartbeat: as after kill -9
    deadline = time.monotonic() + 30
    while True:
        try:
            taken = Lease.acquire(store, ttl_s=30)
            break
        except LeaseHeld:
            assert time.monotonic() < deadline, "the abandoned lease never expired"
            time.sleep(0.2)
    with taken:
        assert not abandoned.renew() and abandoned.lost
        with pytest.raises(LeaseLost):
            abandoned.check()


def test_a_deleter_check_stops_once_another_process_holds_the_lease(store: Store) -> None:
    lease = Lease.acquire(store, ttl_s=30)
    check = lease_check(store, lease.owner)
    check()  # still ours
    lease.release()
    other = Lease.acquire(store, ttl_s=30)
    try:
        time.sleep(1.1)  # past the check's interval: the next batch asks the store
        with pytest.raises(LeaseLost, match="stopped deleting"):
            check()
    finally:
        other.release()


# -- the CLI: two runs at once, and kill -9 ---------------------------------------------------

LIVE = [f"p{i:02d}/live/obj" for i in range(6)]
DEAD = [f"p{i:02d}/c{j:03d}/x/obj" for i in range(6) for j in range(40)]
LIVE_DIRS = {d for k in LIVE for d in directories_of(k)}


def dataset(tmp: Path) -> str:
    url = f"sqlite:///{tmp / 'meta.db'}"
    with open_store(url, create=True) as opened:
        opened.put_objects("default", LIVE + DEAD, now_us() - 3_600_000_000)
        opened.delete_objects("default", DEAD, now_us() - 3_600_000_000)
    return url


def listed(url: str) -> set[str]:
    with open_store(url) as opened:
        return {dir_of_row(r.parent, r.name) for r in opened.iter_folder_rows()}


def slow_run(url: str, tmp: Path, ttl: str = "2s") -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "dircleaner", "--store", url, "run", *EAGER[:-2], "--rate", "40",
        "--concurrency", "4", "--lease-ttl", ttl, "--audit-log", str(tmp / "slow.jsonl"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def wait_for_holder(url: str, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 60
    with open_store(url) as opened:
        while (holder := opened.lease_holder(lease_name(opened))) is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
    return holder


def test_two_concurrent_runs_one_proceeds_one_exits_3(tmp_path: Path) -> None:
    url = dataset(tmp_path)
    first = slow_run(url, tmp_path)
    holder = json.loads(wait_for_holder(url, first))
    before = listed(url)
    second = invoke(url, "run", *EAGER, "--audit-log", str(tmp_path / "second.jsonl"))
    assert second.exit_code == 3
    assert said(second).count("\n") == 1  # one line, after the one naming the store
    assert (
        f"(host {holder['host']}, pid {holder['pid']}, since {holder['since']});"
        " that process still runs on this host"
    ) in second.output
    assert not (tmp_path / "second.jsonl").exists()
    assert listed(url) <= before  # the first run may have deleted meanwhile; never the second
    out, err = first.communicate(timeout=180)
    assert first.returncode == 0, (out + err).decode()
    assert listed(url) == LIVE_DIRS
    with open_store(url) as opened:
        assert opened.lease_holder(lease_name(opened)) is None  # released at the end


def test_after_kill_9_the_next_run_takes_the_lease_over_at_once(tmp_path: Path) -> None:
    url = dataset(tmp_path)
    killed = slow_run(url, tmp_path, ttl="10m")
    holder = json.loads(wait_for_holder(url, killed))
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    result = invoke(url, "run", *EAGER)  # the killed run's lease had ten minutes to go
    assert result.exit_code == 0, result.output
    assert (
        "took over the store's lease from a run that is gone"
        f" (host {holder['host']}, pid {holder['pid']}, since {holder['since']}): no such"
        " process runs on this host any more"
    ) in result.stderr
    assert listed(url) == LIVE_DIRS


class _SlowRenewal(SqliteStore):
    """Its first renewal holds its write transaction open for a while, and says when."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        super().__init__(path, conn)
        self.inside = threading.Event()

    def renew_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        if self.inside.is_set():
            return super().renew_lease(name, owner, ttl_s)
        conn = sqlite3.connect(self.path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE kv SET expires_us = expires_us WHERE space = ? AND key = ?",
            (LEASE_SPACE, name),
        )
        self.inside.set()
        time.sleep(0.5)
        conn.execute("COMMIT")
        conn.close()
        return super().renew_lease(name, owner, ttl_s)


def _write_state(part_store: Store, shard: Shard, _report: object) -> int:
    part_store.put_state(f"written by slice {shard.index}", "yes")
    return shard.index


def test_workers_forked_during_a_renewal_can_still_write(tmp_path: Path) -> None:
    """A process forked while another thread is inside a SQLite write transaction inherits
    SQLite's lock bookkeeping without the lock: each of its writes then waits out the busy
    timeout (60 s) and fails with "database is locked" (CI saw it in the kill-and-resume tests).
    The local workers are forked only between two renewals of the heartbeat."""
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    open_store(url, create=True).close()
    conn, _ = open_database(tmp_path / "meta.db", create=False)
    store = _SlowRenewal(tmp_path / "meta.db", conn)
    store.url = url
    with Lease.acquire(store, ttl_s=0.6):
        assert store.inside.wait(10)  # the heartbeat is inside its write transaction now
        # Forked now, a worker's write would raise "database is locked" after 60 s.
        done = map_shards(store, [Shard(0, 2), Shard(1, 2)], _write_state, "test")
    assert done == [0, 1]
    assert store.get_state("written by slice 0") == store.get_state("written by slice 1") == "yes"
    store.close()


# -- a holder whose process is gone -------------------------------------------------------------


def _gone_pid() -> int:
    """The pid of a process of this host that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _holder(**changes: object) -> str:
    """An owner id of this process (a live holder of this host), with ``changes``."""
    return json.dumps({**json.loads(new_owner()), **changes}, sort_keys=True)


def _held_by(store: Store, holder: str) -> None:
    assert store.try_acquire_lease(lease_name(store), holder, 60) is None


@pytest.mark.parametrize(
    "gone",
    [
        pytest.param({"pid": "GONE"}, id="its pid is free"),
        pytest.param({"started": "EARLIER"}, id="its pid now names a later process"),
    ],
)
def test_a_lease_whose_holder_is_gone_is_taken_over_at_once(
    store: Store, gone: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    live = json.loads(new_owner())
    values = {"GONE": _gone_pid(), "EARLIER": int(live["started"]) - 1}
    dead = _holder(**{key: values[str(value)] for key, value in gone.items()})
    _held_by(store, dead)
    with caplog.at_level("WARNING", logger="dircleaner"), Lease.acquire(store, ttl_s=30) as taken:
        assert lease_still_held(store, taken.owner)
    assert f"from a run that is gone ({describe_owner(dead)})" in caplog.text


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({}, id="alive on this host"),
        pytest.param({"host": "elsewhere", "pid": "GONE"}, id="on another host"),
        pytest.param({"boot": "another-boot", "pid": "GONE"}, id="before a reboot"),
        pytest.param({"pidns": "pid:[1]", "pid": "GONE"}, id="in another pid namespace"),
        pytest.param({"pid": "GONE", "started": None}, id="not described enough"),
    ],
)
def test_a_lease_whose_holder_may_be_alive_is_still_refused(
    store: Store, changes: dict[str, object]
) -> None:
    holder = _holder(**{k: _gone_pid() if v == "GONE" else v for k, v in changes.items()})
    _held_by(store, holder)
    with pytest.raises(LeaseHeld, match="another run holds this store's lease"):
        Lease.acquire(store, ttl_s=30)
    assert store.lease_holder(lease_name(store)) == holder


def test_a_takeover_is_a_compare_and_set_on_the_holder(store: Store) -> None:
    name = lease_name(store)
    _held_by(store, "first")
    assert not store.replace_lease(name, "someone else", "second", 30)
    assert store.lease_holder(name) == "first"
    assert store.replace_lease(name, "first", "second", 30)
    assert store.lease_holder(name) == "second"
    assert not store.replace_lease(name, "first", "third", 30)  # first no longer holds it
    assert store.lease_holder(name) == "second"
