"""The build and the clean as tasks on a real Dask cluster (a scheduler and two workers on
loopback), on SQLite (one shared file) and on the Cassandra node: the same deletes as one process
with the same filter, perfect precision, a worker killed mid-clean, the client killed mid-clean."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import pytest

from dircleaner.errors import DircleanerError
from dircleaner.job.clean import CleanConfig, run_clean
from dircleaner.job.run import RunReport, run_job
from dircleaner.job.sweep import SweepConfig
from dircleaner.lease import CHECK_INTERVAL_S
from dircleaner.model import Shard
from dircleaner.paths import dir_of_row, directories_of
from dircleaner.pipeline.build import BuildConfig, BuildResult, build_filter
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.pipeline.spillfile import SpillConfig
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.cassandra.store import CassandraStore
from dircleaner.timeutil import now_us
from dircleaner.workers.base import SliceFailed
from dircleaner.workers.daskcluster import DaskWorkers
from tests.daskcluster import ROOT, LoopbackCluster
from tests.helpers import (
    audit_entries,
    audit_lines_written,
    invoke,
    said,
    samples_of,
    tombstones_per_partition,
)

R = TypeVar("R")

OLD = now_us() - 10**10
SESSION = secrets.token_hex(4)
BUDGET = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    started = LoopbackCluster(tmp_path_factory.mktemp("dask"), workers=2)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture()
def workers(cluster: LoopbackCluster) -> Iterator[DaskWorkers]:
    cluster.wait_for_workers(2)  # a worker killed by an earlier test is back
    pool = DaskWorkers(cluster.address)
    try:
        yield pool
    finally:
        pool.close()


@dataclass
class Dataset:
    url: str
    bucket: str
    live: set[str]
    every: set[str]
    #: the SQLite file (None: a Cassandra bucket)
    path: Path | None = None


def keys_of(n: int) -> tuple[list[str], list[str]]:
    """Keys at several depths, and the ones deleted: empty leaves, an empty subtree."""
    keys = [f"t/{i % 7}/{i % 23}/{i % 151}/{i}/obj" for i in range(n)]
    dead = set(keys[::3]) | {k for k in keys if k.startswith("t/3/")}
    return keys, sorted(dead)


N = 1500


def fill(store: Store, bucket: str, n: int = N) -> tuple[set[str], set[str]]:
    keys, dead = keys_of(n)
    store.put_objects(bucket, keys, OLD)
    store.delete_objects(bucket, dead, OLD)
    gone = set(dead)
    every = {d for k in keys for d in directories_of(k)}
    live = {d for k in keys if k not in gone for d in directories_of(k)}
    return every, live


@pytest.fixture(params=["sqlite", "cassandra"])
def dataset(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Dataset]:
    """1500 keys in a store the workers reach: a SQLite file, or a bucket of the Cassandra node."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'meta.db'}"
        bucket = "default"
        with open_store(url, create=True) as store:
            every, live = fill(store, bucket)
        yield Dataset(url, bucket, live, every, tmp_path / "meta.db")
        return
    from tests.test_cassandra_end_to_end import _init_keyspace, forget_bucket

    url = _init_keyspace(request.getfixturevalue("cassandra_url"), "dask")
    bucket = f"{request.node.name}-{SESSION}"
    with open_store(url) as store:
        every, live = fill(store, bucket)
        try:
            yield Dataset(url, bucket, live, every)
        finally:
            forget_bucket(store, bucket)  # type: ignore[arg-type]


def listed(url: str, bucket: str) -> set[str]:
    with open_store(url) as store:
        return {
            dir_of_row(r.parent, r.name)
            for batch in store.scan_folder_rows(Shard(), bucket)
            for r in batch
        }


def clean_config(data: Dataset, audit: Path, **throttle: float) -> CleanConfig:
    return CleanConfig(
        sweep=SweepConfig(bucket=data.bucket, guards=GuardConfig(max_delete_fraction=0.9)),
        min_age_s=0,
        max_tombstones_per_partition=BUDGET,
        throttle=ThrottleConfig(**throttle) if throttle else ThrottleConfig(rate=0),
        audit_log=audit,
    )


def assert_precise(data: Dataset) -> set[str]:
    """No directory that holds an object lost its entry; the directories left."""
    left = listed(data.url, data.bucket)
    assert data.live <= left, sorted(data.live - left)[:5]
    return left


@contextlib.contextmanager
def copy_of(data: Dataset, built: BuildResult, tmp_path: Path) -> Iterator[str]:
    """A second store holding the dataset and its filter as they are now (its URL).

    SQLite: a copy of the file (the workers' writes included). Cassandra: the same keys in a
    keyspace of its own, under the same bucket name, and the same generation of the filter
    (salt, snapshot and size: the same bits as the workers' shards OR-merged)."""
    if data.path is not None:
        copy = tmp_path / "copy.db"
        with (
            contextlib.closing(sqlite3.connect(data.path)) as source,
            contextlib.closing(sqlite3.connect(copy)) as target,
        ):
            source.backup(target)
        yield f"sqlite:///{copy}"
        return
    from tests.test_cassandra_end_to_end import _init_keyspace, forget_bucket

    url = _init_keyspace(data.url, "copy")
    header = built.header
    with open_store(url) as store:
        try:
            fill(store, data.bucket)
            config = BuildConfig(
                fpr=header.target_p,
                expected_dirs=header.expected_n,
                bucket=data.bucket,
                generation=built.generation,
            )
            copied = build_filter(store, config).header
            assert (copied.salt, copied.m, copied.k) == (header.salt, header.m, header.k)
            yield url
        finally:
            forget_bucket(store, data.bucket)  # type: ignore[arg-type]


def test_same_filter_same_deletes_as_one_process(
    dataset: Dataset, workers: DaskWorkers, tmp_path: Path
) -> None:
    with open_store(dataset.url) as store:
        built = build_filter(store, BuildConfig(fpr=0.01, bucket=dataset.bucket), workers=workers)
    # The build's slices are shards of one generation, merged at load.
    assert built.header.shard_count == workers.parallelism == 2
    one_audit, many_audit = tmp_path / "one.jsonl", tmp_path / "many.jsonl"
    with copy_of(dataset, built, tmp_path) as copy_url:
        # One process, for real, on the copy; then the workers on the dataset itself.
        with open_store(copy_url) as copy:
            one = run_clean(copy, clean_config(dataset, one_audit))
        left_in_copy = listed(copy_url, dataset.bucket)
    with open_store(dataset.url) as store:
        many = run_clean(store, clean_config(dataset, many_audit), workers=workers)
    by_one = sorted(e["dir"] for e in audit_entries(one_audit))
    # The whole plan went, each directory once.
    assert len(by_one) == len(set(by_one)) == one.plan.directories > 100
    assert many.sweep.loaded.generation == one.sweep.loaded.generation == built.generation
    # The same directories; the form may differ: a partition whose own directory is a false
    # positive but whose row is a candidate of its (absent) parent's partition goes by a
    # partition delete when one process sees both, by row deletes when a slice sees only it.
    assert many.plan.directories == one.plan.directories
    assert many.sweep.result.candidates == one.sweep.result.candidates
    assert sorted(e["dir"] for e in audit_entries(many_audit)) == by_one
    left = assert_precise(dataset)
    assert left == listed_expected(dataset, set(by_one)) == left_in_copy


def test_spilled_on_the_workers_the_same_deletes_and_nothing_held_after(
    dataset: Dataset, workers: DaskWorkers, tmp_path: Path
) -> None:
    """Every slice spills on the worker that swept it (and plans there in chunks): the same
    directories go as with one process holding them in memory, and no worker holds a spill
    file once the run is over."""
    with open_store(dataset.url) as store:
        built = build_filter(store, BuildConfig(fpr=0.01, bucket=dataset.bucket), workers=workers)
    one_audit, many_audit = tmp_path / "one.jsonl", tmp_path / "many.jsonl"
    with copy_of(dataset, built, tmp_path) as copy_url, open_store(copy_url) as copy:
        one = run_clean(copy, clean_config(dataset, one_audit))
    spill = tmp_path / "spill"
    config = replace(
        clean_config(dataset, many_audit),
        spill=SpillConfig(spill, memory_candidates=0, plan_chunk=30),
    )
    with open_store(dataset.url) as store:
        many = run_clean(store, config, workers=workers)
    assert one.spilled == 0 and many.spilled == many.sweep.result.candidates > 100
    assert many.plan_spill_bytes > 0
    assert many.plan == one.plan
    by_one = sorted(e["dir"] for e in audit_entries(one_audit))
    assert sorted(e["dir"] for e in audit_entries(many_audit)) == by_one
    assert_precise(dataset)

    def spill_files_held() -> list[str]:
        held = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{fd}").startswith(f"{spill}/"):
                    held.append(fd)
        return held

    # The client let go of the tasks' results; each worker drops them as it hears so.
    deadline = time.monotonic() + 30
    while any(workers.client.run(spill_files_held).values()):
        assert time.monotonic() < deadline, workers.client.run(spill_files_held)
        time.sleep(0.1)
    assert list(spill.iterdir()) == []


def listed_expected(data: Dataset, deleted: set[str]) -> set[str]:
    return {d for d in data.every} - deleted


def test_a_fresh_run_through_the_cli_is_precise(
    dataset: Dataset, cluster: LoopbackCluster, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    result = invoke(
        dataset.url,
        "run",
        "--bucket",
        dataset.bucket,
        "--fpr",
        "0.001",
        "--min-age",
        "0",
        "--max-delete-fraction",
        "1",
        "--rate",
        "0",
        "--audit-log",
        str(audit),
        "--json",
        "--scheduler",
        cluster.address,
    )
    assert result.exit_code == 0, result.output
    # Where the tasks run and where to watch them, before anything else but the store.
    assert said(result).splitlines()[0] == (
        f"Dask scheduler {cluster.address}: 2 workers, 2 threads;"
        f" dashboard http://127.0.0.1:{cluster.dashboard_port}/status"
    )
    assert "note:" not in result.stderr  # the workers run with scripts/dask-worker.yaml
    summary = json.loads(result.stdout)
    left = assert_precise(dataset)
    empty = dataset.every - dataset.live
    deleted = {e["dir"] for e in audit_entries(audit)}
    assert deleted <= empty
    assert left == dataset.every - deleted
    assert len(deleted) >= 0.95 * len(empty)  # recall: only false positives survive
    assert summary["clean"]["delete_requested_dirs"] == len(deleted)


def test_a_worker_killed_mid_clean_the_run_completes(
    dataset: Dataset, cluster: LoopbackCluster, workers: DaskWorkers, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    config = clean_config(dataset, audit, rate=150, concurrency=4)
    build = BuildConfig(fpr=0.01, bucket=dataset.bucket)
    outcome: list[RunReport | BaseException] = []

    def job() -> None:
        try:
            with open_store(dataset.url) as store:
                outcome.append(run_job(store, build, config, workers=workers))
        except DircleanerError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=job)
    thread.start()
    deadline = time.monotonic() + 120
    while not audit_lines_written(audit) and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert thread.is_alive(), "the clean ended before a worker could be killed"
    victim = sorted(cluster.worker_pids().values())[0]
    os.kill(victim, signal.SIGKILL)
    thread.join(timeout=240)
    assert not thread.is_alive()
    [first] = outcome
    if isinstance(first, BaseException):
        # Failed for good: one line naming the slice; the next run finishes the rest.
        assert isinstance(first, SliceFailed), first
        assert "\n" not in str(first) and " of slice " in str(first)
        cluster.wait_for_workers(2)
        with open_store(dataset.url) as store:
            second = run_job(store, build, config, workers=workers)
        assert second.build is None  # the interrupted run's filter, reused
        assert second.clean.slices_already_clean
    left = assert_precise(dataset)
    entries = audit_entries(audit)
    deleted = {e["dir"] for e in entries}
    assert left == dataset.every - deleted
    assert len(deleted) >= 0.9 * len(dataset.every - dataset.live)
    # A task run again re-issues the same deletes (the same tombstones): the budget still holds.
    distinct = list({json.dumps(e, sort_keys=True): e for e in entries}.values())
    charged = tombstones_per_partition(distinct)
    assert max(charged.values(), default=0) <= BUDGET
    if dataset.url.startswith("cassandra"):
        # And as Cassandra counts them: a traced read of every partition the clean deleted in
        # scans no more tombstone cells than the budget.
        with open_store(dataset.url) as store:
            assert isinstance(store, CassandraStore)
            traced = {key: store.tombstones_in_partition(*key) for key in charged}
        assert len(traced) > 0 and max(traced.values()) <= BUDGET, traced


def test_the_client_killed_no_worker_deletes_after_its_lease_expired(
    cluster: LoopbackCluster, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    with open_store(url, create=True) as store:
        every, live = fill(store, "default", 1500)
        build_filter(store, BuildConfig(fpr=0.01))
    ttl_s = 2.0
    client = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dircleaner",
            "--store",
            url,
            "clean",
            "--scheduler",
            cluster.address,
            "--min-age",
            "0",
            "--max-delete-fraction",
            "1",
            "--rate",
            "20",
            "--concurrency",
            "1",
            "--audit-log",
            str(tmp_path / "audit.jsonl"),
            "--lease-ttl",
            f"{ttl_s:g}s",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while len(listed(url, "default")) == len(every) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.poll() is None, "the clean ended before its client could be killed"
    client.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    client.wait()
    # The last heartbeat was at most now: the lease is gone ttl_s later. A task asks the store
    # at most once a second (lease.CHECK_INTERVAL_S), and a batch that passed its check just
    # before then may still be in flight for a moment.
    time.sleep(max(0.0, killed_at + ttl_s + CHECK_INTERVAL_S + 1.5 - time.monotonic()))
    after_expiry = listed(url, "default")
    time.sleep(5)
    assert listed(url, "default") == after_expiry  # nobody deleted since
    # The workers were still deleting when the client died, and stopped short of the end.
    assert live <= after_expiry
    assert len(after_expiry) > len(live) + 50
    assert len(after_expiry) < len(every)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--slices", "8"), "Error: --slices needs --scheduler"),
        (("--scheduler", "tcp://127.0.0.1:1", "--workers", "2"), "Error: --workers is for local"),
    ],
)
def test_options_that_do_not_go_together_are_one_line(
    tmp_path: Path, extra: tuple[str, ...], message: str
) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    with open_store(url, create=True) as store:
        fill(store, "default", 50)
    result = invoke(url, "run", *extra)
    assert result.exit_code == 2
    [line] = said(result).splitlines()
    assert line.startswith(message), line
    assert listed(url, "default") == {d for k in keys_of(50)[0] for d in directories_of(k)}


def test_worker_tasks_hash_with_the_compiled_kernels(workers: DaskWorkers, tmp_path: Path) -> None:
    """A worker process is no fork of the client: unless a task loads the compiled kernels,
    every build and sweep task there hashes key by key with mmh3 (several times slower)."""

    def kernels_loaded(store: Store, shard: Shard, report: object) -> bool:
        # A nested function: pickled by value, as the workers cannot import this module.
        from dircleaner.filter import bloom

        return bloom._kernels is not None

    assert _one_task_on_each_worker(workers, kernels_loaded, tmp_path) == [True, True]


def _one_task_on_each_worker(
    workers: DaskWorkers, task: Callable[[Store, Shard, object], R], tmp_path: Path
) -> list[R]:
    """``task`` run on each worker as the job's tasks run there (``_one_phase``)."""
    from dircleaner.workers import daskcluster

    url = f"sqlite:///{tmp_path / 'meta.db'}"
    open_store(url, create=True).close()
    futures = [
        workers.client.submit(
            daskcluster._one_phase,
            url,
            None,
            task,
            Shard(i, 2),
            f"probe-{i}",
            "sweep",
            workers=[address],
            pure=False,
        )
        for i, address in enumerate(sorted(workers.client.scheduler_info()["workers"]))
    ]
    return list(workers.client.gather(futures))


def test_the_workers_run_with_the_recommended_settings(workers: DaskWorkers) -> None:
    """``scripts/dask-worker.yaml`` is valid Dask configuration, under the keys Dask reads: a
    misspelled key would leave the 20 ms tick and the 10 ms stack sampler that cost a slice
    5-12% (the README's systemd unit and the benchmark's workers use this file)."""

    def settings() -> tuple[object, object]:
        import dask

        return (
            dask.config.get("distributed.admin.tick.interval"),
            dask.config.get("distributed.worker.profile.enabled"),
        )

    assert list(workers.client.run(settings).values()) == [("1s", False)] * 2


def test_the_client_says_when_workers_run_dask_s_busy_diagnostics(
    cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """Workers started with Dask's defaults (a 20 ms tick, a 10 ms stack sampler) make every
    slice slower and nothing else says so: the client learns each worker's settings as it
    connects and names the fix; with ``scripts/dask-worker.yaml`` it says nothing."""

    def profile(enabled: bool) -> None:
        import dask

        dask.config.set({"distributed.worker.profile.enabled": enabled})

    cluster.wait_for_workers(2)
    quiet = DaskWorkers(cluster.address)
    try:
        assert quiet.advice is None
        quiet.client.run(profile, True)
        loud = DaskWorkers(cluster.address)
        try:
            assert loud.advice is not None
            assert loud.advice.startswith("2 of 2 Dask workers run")
            assert "scripts/dask-worker.yaml" in loud.advice
        finally:
            loud.close()
        # The CLI says it on stderr, after where the tasks run.
        url = f"sqlite:///{tmp_path / 'meta.db'}"
        with open_store(url, create=True) as store:
            fill(store, "b", 50)
        result = invoke(url, "build", "--scheduler", cluster.address)
        assert result.exit_code == 0, result.output
        assert said(result).splitlines()[1].startswith("note: 2 of 2 Dask workers run")
    finally:
        quiet.client.run(profile, False)
        quiet.close()


def test_the_client_takes_each_result_as_its_task_ends(
    workers: DaskWorkers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client waits on the tasks themselves, not in sleeps of its progress interval (which
    cost each phase up to that interval). With the interval at a minute, two short tasks still
    come back in seconds; a sleeping client would take a minute."""
    from dircleaner.workers import daskcluster

    monkeypatch.setattr(daskcluster, "_PROGRESS_EVERY_S", 60.0)

    def short(store: Store, shard: Shard, report: object) -> int:
        import time

        time.sleep(0.5)
        return shard.index

    url = f"sqlite:///{tmp_path / 'meta.db'}"
    store = open_store(url, create=True)
    try:
        started = time.monotonic()
        assert workers.map_shards(store, Shard().split(2), short, "sweep") == [0, 1]
        assert time.monotonic() - started < 30
    finally:
        store.close()


def test_worker_tasks_keep_large_blocks_on_the_heap(workers: DaskWorkers, tmp_path: Path) -> None:
    """Dask's nanny sets MALLOC_TRIM_THRESHOLD_, which pins glibc's mmap threshold at 128 KiB:
    every batch-sized array then costs a mapping of its own (a build slice ran ~30% slower).
    A task raises the threshold before its work: a 1 MiB block then comes from the heap."""

    def blocks_mapped(store: Store, shard: Shard, report: object) -> tuple[str | None, int]:
        # A nested function: pickled by value, as the workers cannot import this module.
        import ctypes

        class MallInfo2(ctypes.Structure):
            _fields_ = [
                (name, ctypes.c_size_t)
                for name in (
                    "arena",
                    "ordblks",
                    "smblks",
                    "hblks",
                    "hblkhd",
                    "usmblks",
                    "fsmblks",
                    "uordblks",
                    "fordblks",
                    "keepcost",
                )
            ]

        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = MallInfo2
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]
        before = int(libc.mallinfo2().hblks)
        block = libc.malloc(1 << 20)
        after = int(libc.mallinfo2().hblks)
        libc.free(block)
        return os.environ.get("MALLOC_TRIM_THRESHOLD_"), after - before

    results = _one_task_on_each_worker(workers, blocks_mapped, tmp_path)
    assert [trim for trim, _ in results] == ["65536", "65536"]  # as the nanny sets it
    assert [mapped for _, mapped in results] == [0, 0]


def test_fresh_workers_load_the_kernels_once_the_client_connects(tmp_path: Path) -> None:
    """A worker started for this run loads the compiled kernels in the background as soon as
    the client connects, not in its first task (a second of the first task's time otherwise)."""

    def kernels_started() -> bool:
        # A nested function: pickled by value, as the workers cannot import this module.
        from dircleaner.filter import bloom

        return bloom._loader is not None or bloom._kernels is not None

    fresh = LoopbackCluster(tmp_path, workers=1)
    try:
        fresh.wait_for_workers(1)
        pool = DaskWorkers(fresh.address)
        try:
            deadline = time.monotonic() + 30
            while (started := list(pool.client.run(kernels_started).values())) != [True]:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert started == [True]
        finally:
            pool.close()
    finally:
        fresh.close()


def test_a_relative_audit_log_is_where_the_client_runs(
    cluster: LoopbackCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers run in their own directories: `--audit-log audit.jsonl` is the file the
    operator sees beside them, as the summary says, not one in each worker's directory."""
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    with open_store(url, create=True) as store:
        every, live = fill(store, "default", 200)
    name = f"audit-{SESSION}-relative.jsonl"
    monkeypatch.chdir(tmp_path)
    try:
        args = ["--min-age", "0", "--max-delete-fraction", "1", "--rate", "0"]
        result = invoke(url, "run", *args, "--audit-log", name, "--scheduler", cluster.address)
        assert result.exit_code == 0, result.output
        assert not (ROOT / name).exists()
        deleted = {e["dir"] for e in audit_entries(tmp_path / name)}
        assert deleted and deleted <= every - live
        assert listed(url, "default") == every - deleted
    finally:
        (ROOT / name).unlink(missing_ok=True)  # where the workers would have put it


def test_sigterm_stops_the_client_and_its_tasks_and_the_next_run_resumes(
    cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """SIGTERM to a `run --scheduler` client: 143, one line, metrics 0, and no task deletes
    after it (the client cancels them); the next run finishes the job."""
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    with open_store(url, create=True) as store:
        every, live = fill(store, "default", 1500)
    audit, metrics = tmp_path / "audit.jsonl", tmp_path / "m.prom"
    metrics.write_text("dircleaner_last_run_success 1\n")
    args = ["--min-age", "0", "--max-delete-fraction", "1", "--fpr", "1e-7"]
    args += ["--audit-log", str(audit), "--scheduler", cluster.address]
    command = [sys.executable, "-m", "dircleaner", "--store", url, "run", *args]
    command += ["--rate", "20", "--concurrency", "4", "--metrics-file", str(metrics)]
    client = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while audit_lines_written(audit) == 0 and time.monotonic() < deadline:
        assert client.poll() is None, client.communicate()
        time.sleep(0.05)
    client.send_signal(signal.SIGTERM)
    _out, err = client.communicate(timeout=120)
    assert client.returncode == 143, err
    assert re.fullmatch(
        "Error: interrupted by SIGTERM: stopped after [0-9,]+( of [0-9,]+)? deletes; what was"
        " deleted is in the audit log and the next run resumes",
        err.splitlines()[-1],
    ), err
    assert samples_of(metrics.read_text())["dircleaner_last_run_success"] == 0
    stopped = listed(url, "default")
    time.sleep(CHECK_INTERVAL_S + 2)
    assert listed(url, "default") == stopped  # no task went on deleting
    assert live < stopped < every
    again = invoke(url, "run", *args, "--rate", "0")
    assert again.exit_code == 0, again.output
    assert listed(url, "default") == live


def test_the_tasks_open_the_store_as_the_client_did(workers: DaskWorkers, tmp_path: Path) -> None:
    """A command that only reads has its tasks open the store for reading too (both phases of a
    clean's work): they write nothing either, and work where the store cannot be written."""
    from dircleaner.workers.work import TwoPhaseWork

    def opened_read_only(store: Store, shard: Shard, report: object) -> bool:
        return store.traits.read_only

    def first(store: Store, shard: Shard, report: object) -> tuple[bool, None]:
        return store.traits.read_only, None

    def second(store: Store, shard: Shard, kept: None, told: None, report: object) -> bool:
        return store.traits.read_only

    url = f"sqlite:///{tmp_path / 'meta.db'}"
    open_store(url, create=True).close()
    shards = Shard().split(2)
    for read_only in (True, False):
        # Phase names of their own: a pool's task keys are its phases' and slices'.
        phase = f"read-only-{read_only}"
        work = TwoPhaseWork(first, lambda _tallies: None, second, (f"1-{phase}", f"2-{phase}"))
        with open_store(url, read_only=read_only) as store:
            assert workers.map_shards(store, shards, opened_read_only, phase) == [read_only] * 2
            both = workers.run_two_phases(store, shards, work)
            assert both == ([read_only] * 2, [read_only] * 2)
