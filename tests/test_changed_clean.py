"""``clean --changed``, the churn night, end to end on both backends: the cascade, the journal
never trusted (a dropped row, a spurious row), the timestamp rule, tombstone-heavy partitions,
kill -9, restore.

Every test runs on a SQLite file and on the real Cassandra node (a bucket of its own in this
module's keyspace, forgotten afterwards). Deletes go through ``delete-keys``, which journals
them; the nights read with ``--settle 0s``, so the hour still open is theirs too.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dircleaner.job.changed import ChangedCleanConfig, run_changed_clean
from dircleaner.journal import JOURNAL_SLOT_S, slot_of
from dircleaner.paths import dir_of_row, directories_of
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.store import Store, open_store
from dircleaner.timeutil import now_us
from tests.helpers import (
    audit_entries,
    audit_lines_written,
    expected_dirs,
    invoke,
    write_lines,
)

SESSION = secrets.token_hex(4)


@dataclass
class Backend:
    """A store to test against: its URL, an open connection and the test's own bucket."""

    url: str
    store: Store
    bucket: str

    def listed(self) -> set[str]:
        return {dir_of_row(r.parent, r.name) for r in self.store.iter_folder_rows(self.bucket)}


@pytest.fixture(params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'meta.db'}"
        with open_store(url, create=True) as store:
            yield Backend(url, store, "b1")
        return
    from tests.test_cassandra_end_to_end import _init_keyspace, forget_bucket

    url = _init_keyspace(request.getfixturevalue("cassandra_url"), "changed")
    bucket = f"{request.node.name}-{SESSION}".replace("[", "-").replace("]", "")
    with open_store(url) as store:
        try:
            yield Backend(url, store, bucket)
        finally:
            forget_bucket(store, bucket)  # type: ignore[arg-type]


def put_and_delete(backend: Backend, tmp: Path, put: Sequence[str], dead: Sequence[str]) -> None:
    """The keys put (an hour ago), then ``dead`` deleted through ``delete-keys`` (journaled)."""
    backend.store.put_objects(backend.bucket, put, now_us() - 3_600_000_000)
    result = invoke(
        backend.url, "delete-keys", str(write_lines(tmp / "dead.txt", dead)), "--bucket",
        backend.bucket,
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def churn_night(backend: Backend, audit: Path, *extra: str) -> dict[str, Any]:
    """``clean --changed`` of the backend's bucket, everything journaled so far; its summary."""
    result = invoke(
        backend.url, "clean", "--changed", "--settle", "0s", "--bucket", backend.bucket,
        "--min-age", "0s", "--rate", "0", "--max-delete-fraction", "1",
        "--audit-log", str(audit), "--json", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


#: a tree emptied at several depths: whole subtrees, a dir whose sibling stays, a marker, a
#: parent that keeps an object of its own
PUT = [
    "logs/2026/01/aa/1", "logs/2026/01/aa/2", "logs/2026/01/bb/1", "logs/2026/02/cc/1",
    "logs/2026/02/keep", "logs/2025/x/y/z/deep", "data/set/a", "data/set/b", "data/other/c",
    "marked/dir/", "marked/dir/obj", "top.txt",
]  # fmt: skip
DEAD = [
    "logs/2026/01/aa/1", "logs/2026/01/aa/2", "logs/2026/01/bb/1", "logs/2026/02/cc/1",
    "logs/2025/x/y/z/deep", "data/set/a", "marked/dir/obj",
]  # fmt: skip


def test_the_cascade_reaches_the_ancestors_and_nothing_else(
    backend: Backend, tmp_path: Path
) -> None:
    put_and_delete(backend, tmp_path, PUT, DEAD)
    every, live = expected_dirs(PUT, DEAD)
    summary = churn_night(backend, tmp_path / "audit.jsonl")
    # logs/2025/ and logs/2026/01/ go whole (up to logs/2025/ through four levels); logs/ and
    # data/set/ hold something; marked/dir/ keeps its marker.
    assert backend.listed() == live
    gone = every - live
    assert gone == {
        "logs/2026/01/", "logs/2026/01/aa/", "logs/2026/01/bb/", "logs/2026/02/cc/",
        "logs/2025/", "logs/2025/x/", "logs/2025/x/y/", "logs/2025/x/y/z/",
    }  # fmt: skip
    assert summary["delete_requested_dirs"] == len(gone)
    check = summary["check"]
    assert check["journaled"] == 6  # aa, bb, cc, z, data/set, marked/dir
    assert check["empty"] == len(gone)
    assert summary["night"] == "churn" and summary["dry_run"] is False
    # The next night has nothing more to do: its reads find the rows already gone.
    again = churn_night(backend, tmp_path / "audit.jsonl")
    assert again["delete_requested_dirs"] == 0
    assert backend.listed() == live


def test_a_dropped_journal_row_is_caught_by_the_next_full_night(
    backend: Backend, tmp_path: Path
) -> None:
    put = ["j/a/1", "j/b/1", "dropped/a/1", "live/x"]
    backend.store.put_objects(backend.bucket, put, now_us() - 3_600_000_000)
    # The delete path lost its journal row: the object went, the journal never heard.
    backend.store.delete_objects(backend.bucket, ["dropped/a/1"], now_us() - 60_000_000)
    put_and_delete(backend, tmp_path, [], ["j/a/1", "j/b/1"])
    churn_night(backend, tmp_path / "audit.jsonl")
    assert backend.listed() == {"dropped/", "dropped/a/", "live/"}
    full = invoke(
        backend.url, "run", "--bucket", backend.bucket, "--min-age", "0s", "--rate", "0",
        "--max-delete-fraction", "1", "--audit-log", str(tmp_path / "audit.jsonl"),
    )  # fmt: skip
    assert full.exit_code == 0, full.output
    assert backend.listed() == {"live/"}


def test_a_spurious_row_keeps_its_directory_and_costs_one_read(
    backend: Backend, tmp_path: Path
) -> None:
    backend.store.put_objects(backend.bucket, ["full/a", "full/b", "x/y/z"], now_us())
    # Journaled without any delete: a retried request, a notification of a failed delete, a
    # delete of a key that never existed.
    keys = write_lines(tmp_path / "spurious.txt", ["full/a", "nowhere/k"])
    added = invoke(backend.url, "journal", "add", str(keys), "--bucket", backend.bucket)
    assert added.exit_code == 0, added.output
    before = backend.listed()
    summary = churn_night(backend, tmp_path / "audit.jsonl")
    assert backend.listed() == before == {"full/", "x/", "x/y/"}
    check = summary["check"]
    assert (check["journaled"], check["with_objects"], check["empty"]) == (2, 1, 1)
    # full/: one objects probe. nowhere/ (never a directory): empty, no row to delete, and
    # the root above it is never checked.
    assert check["already_gone"] == 1
    assert check["reads"]["objects"] == 2 and summary["delete_requested_dirs"] == 0


def test_a_put_during_the_check_orphans_nothing(backend: Backend, tmp_path: Path) -> None:
    put = ["race/a/b/1", "race/a/c/1", "calm/d/1", "live/x"]
    put_and_delete(backend, tmp_path, put, ["race/a/b/1", "race/a/c/1", "calm/d/1"])
    store = backend.store
    heads = store.folder_partition_heads
    raced: list[str] = []

    def heads_then_a_put(keys: Any, rows: int) -> Any:
        # The check has read race/a/b/'s objects (empty) and now its folders: an S3 put
        # lands in between, after the night began (so after T).
        read = heads(keys, rows)
        if not raced and (backend.bucket, "race/a/b/") in keys:
            store.put_objects(backend.bucket, ["race/a/b/new"], now_us())
            raced.append("race/a/b/new")
        return read

    store.folder_partition_heads = heads_then_a_put  # type: ignore[method-assign]
    try:
        config = ChangedCleanConfig(
            bucket=backend.bucket, settle_s=0, min_age_s=0, throttle=ThrottleConfig(rate=0),
            guards=GuardConfig(max_delete_fraction=1.0), audit_log=tmp_path / "audit.jsonl",
        )  # fmt: skip
        report = run_changed_clean(store, config)
    finally:
        del store.folder_partition_heads
    assert raced
    # The night thought race/a/ empty and asked to delete it, race/a/b/ and race/a/c/; the put
    # rewrote race/ and race/a/ and race/a/b/ after T, so those rows survive the deletes.
    assert report.plan.directories >= 3
    listed = backend.listed()
    assert set(directories_of("race/a/b/new")) <= listed
    assert "calm/d/" not in listed and "race/a/c/" not in listed
    with open_store(backend.url) as fresh:
        assert fresh.nonempty_object_partitions([(backend.bucket, "race/a/b/")])
    if report.deleted is not None and report.deleted.kept_written_after_t is not None:
        assert report.deleted.kept_written_after_t >= 2  # SQLite can tell


def test_a_tombstone_heavy_partition_is_deferred(backend: Backend, tmp_path: Path) -> None:
    # Past Cassandra's own warning (1000), which is all it tells, and past the limit (500).
    heavy = [f"heavy/o{i:04d}" for i in range(1100)]
    counted = [f"counted/o{i:04d}" for i in range(600)]
    put_and_delete(backend, tmp_path, [*heavy, *counted, "light/x", "live/y"], [])
    backend.store.delete_objects(backend.bucket, heavy, now_us())  # not journaled by count...
    journal = write_lines(tmp_path / "one.txt", ["heavy/o0000"])  # ...one key names it
    assert (
        invoke(backend.url, "journal", "add", str(journal), "--bucket", backend.bucket).exit_code
        == 0
    )
    put_and_delete(backend, tmp_path, [], [*counted, "light/x"])  # one request: counts 600
    summary = churn_night(backend, tmp_path / "audit.jsonl")
    check = summary["check"]
    assert check["deferred_tombstones"] == 2
    assert check["deferred_unread"] == 1  # counted/: the journal says 600 > 500, not read
    assert summary["deferred"] == 2
    assert backend.listed() == {"heavy/", "counted/", "live/"}  # light/ went
    # Both wait in the journal for a night one grace period on.
    grace = summary["budget"]["grace_seconds"]
    later = slot_of(now_us() + int(grace * 1_000_000))
    waiting = {
        e.parent
        for slot in (later - JOURNAL_SLOT_S, later, later + JOURNAL_SLOT_S)
        for batch in backend.store.journal_read(slot, backend.bucket)
        for e in batch
    }
    assert waiting == {"heavy/", "counted/"}


def test_a_dry_run_writes_nothing(backend: Backend, tmp_path: Path) -> None:
    put_and_delete(backend, tmp_path, ["d/a/1", "live/x"], ["d/a/1"])
    before = backend.listed()
    dry = churn_night(backend, tmp_path / "audit.jsonl", "--dry-run")
    assert dry["dry_run"] is True and dry["plan"]["directories"] == 2
    assert backend.listed() == before and not (tmp_path / "audit.jsonl").exists()
    done = f"done|{backend.bucket}"
    assert [e for e in backend.store.kv_read("journal", done) if e.key == done] == []
    real = churn_night(backend, tmp_path / "audit.jsonl")
    assert real["delete_requested_dirs"] == 2


def test_restore_puts_back_what_a_churn_night_deleted(backend: Backend, tmp_path: Path) -> None:
    put_and_delete(backend, tmp_path, PUT, DEAD)
    before = backend.listed()
    audit = tmp_path / "audit.jsonl"
    summary = churn_night(backend, audit)
    assert backend.listed() < before
    entries = audit_entries(audit)
    assert {e["generation"] for e in entries} == {summary["generation"]}
    assert summary["generation"].startswith("changed-")
    restored = invoke(backend.url, "restore", str(audit), "--generation", summary["generation"])
    assert restored.exit_code == 0, restored.output
    assert backend.listed() == before


# -- kill -9 mid-night ----------------------------------------------------------------------------

#: 40 live parents of 10 emptied subtrees two levels deep each: 400 partition deletes and 400
#: row deletes, at 100 a second, so that a kill lands between a subtree's partition and its row
KILL_KEEP = [f"k{i:02d}/keep" for i in range(40)]
KILL_DEAD = [f"k{i:02d}/c{j}/d/obj" for i in range(40) for j in range(10)]


def night_process(backend: Backend, tmp: Path) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "dircleaner", "--store", backend.url, "clean", "--changed",
        "--settle", "0s", "--bucket", backend.bucket, "--min-age", "0s", "--rate", "100",
        "--concurrency", "4", "--max-delete-fraction", "1", "--lease-ttl", "2s",
        "--audit-log", str(tmp / "audit.jsonl"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


@pytest.mark.parametrize("seed", range(3))
def test_kill_9_mid_night_resumes(backend: Backend, tmp_path: Path, seed: int) -> None:
    put_and_delete(backend, tmp_path, KILL_KEEP + KILL_DEAD, KILL_DEAD)
    proc = night_process(backend, tmp_path)
    # Killed while it deletes: once its first group is in the audit log, a random moment into
    # the 8 seconds its 800 deletes take at 100 a second.
    deadline = time.monotonic() + 120
    while audit_lines_written(tmp_path / "audit.jsonl") == 0:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the night never started deleting"
        time.sleep(0.05)
    time.sleep(random.Random(seed).uniform(0.0, 3.0))
    assert proc.poll() is None, "the night finished before the kill: slow it down"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = backend.listed()
    assert {f"k{i:02d}/" for i in range(40)} <= killed
    deadline = time.monotonic() + 60
    while True:
        again = night_process(backend, tmp_path)
        out, err = again.communicate(timeout=180)
        if again.returncode == 3 and b"lease" in err:
            assert time.monotonic() < deadline, "the killed night's lease never expired"
            time.sleep(0.5)
            continue
        assert again.returncode == 0, (out + err).decode()
        break
    assert backend.listed() == {f"k{i:02d}/" for i in range(40)}
