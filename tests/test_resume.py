"""kill -9 at random points; the next run resumes and ends as an uninterrupted run would.

Runs on both backends: the embedded store, and a real Cassandra node (one bucket per test, row
tombstones counted by Cassandra's own tracing). A run killed during its build is resumed by
building only the shards it had not stored: tested in the library (a failure injected into one
shard's worker) and through the CLI on the embedded store (kill -9 once the first shard is stored).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

import dircleaner.job.clean as job_clean
import dircleaner.pipeline.build as build_module
from dircleaner.cli.report import run_build_lines, run_summary
from dircleaner.errors import StoreUnavailable
from dircleaner.filter.format import FilterHeader
from dircleaner.filter.generation import new_generation_id
from dircleaner.filter.stored import find_generation
from dircleaner.job.clean import CleanConfig
from dircleaner.job.resume import PHASE_BUILD, RunState, load_run_state, save_run_state
from dircleaner.job.run import run_job
from dircleaner.job.sweep import SweepConfig
from dircleaner.model import Shard
from dircleaner.paths import dir_of_row, directories_of
from dircleaner.pipeline.build import BuildConfig, build_filter, scope_of
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.pipeline.slice import plan_and_delete
from dircleaner.store import Store, open_store
from dircleaner.store.base import HEADER_SEQ, MARKER_SEQ
from dircleaner.store.capabilities import TombstoneCounter
from dircleaner.store.cassandra.config import parse_cassandra_url
from dircleaner.store.records import murmur_token
from dircleaner.store.sqlite import SqliteStore
from dircleaner.timeutil import now_us
from dircleaner.workers.base import CLEAN, LocalWorkers
from tests.helpers import audit_entries, tombstones_per_partition

PARENTS = 12
CHILDREN = 50
BUDGET = 30
#: the empty children of each parent come in runs of 1, 2, 3 and 4 between live siblings
#: (``c009k/`` sorts between ``c009/`` and ``c010/``): per ten children a row, two rows and two
#: ranges, 7 tombstones; all fifty would take 35, over the budget of 30
RUN_ENDS = [j for j in range(CHILDREN) if j % 10 in (0, 2, 5, 9)]
LONGEST_RUN = 4
LIVE = [f"p{i:02d}/live/obj" for i in range(PARENTS)] + [
    f"p{i:02d}/c{j:03d}k/obj" for i in range(PARENTS) for j in RUN_ENDS
]
DEAD = [f"p{i:02d}/c{j:03d}/x/obj" for i in range(PARENTS) for j in range(CHILDREN)]
LIVE_DIRS = {d for k in LIVE for d in directories_of(k)}


@dataclass(frozen=True)
class Target:
    """One store and bucket holding wide live parents full of empty children."""

    url: str
    bucket: str

    def listed(self) -> set[str]:
        with open_store(self.url) as store:
            return {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows(self.bucket)}

    def max_row_tombstones(self) -> int:
        with open_store(self.url) as store:
            assert isinstance(store, TombstoneCounter)
            count = store.tombstones_in_partition
            return max(int(count(self.bucket, f"p{i:02d}/")) for i in range(PARENTS))


def make_target(backend: str, tmp: Path, request: pytest.FixtureRequest) -> Target:
    if backend == "sqlite":
        url, bucket = f"sqlite:///{tmp / 'meta.db'}", "default"
    else:
        base: str = request.getfixturevalue("cassandra_url")
        keyspace = parse_cassandra_url(base).keyspace or "dircleaner_test"
        url, bucket = base.rsplit("/", 1)[0] + f"/{keyspace}_resume", f"r{uuid.uuid4().hex}"
    with open_store(url, create=True) as store:
        store.put_objects(bucket, LIVE + DEAD, now_us() - 3_600_000_000)
        store.delete_objects(bucket, DEAD, now_us() - 3_600_000_000)
    return Target(url, bucket)


def run_cli(target: Target, tmp: Path, workers: int = 1) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "dircleaner", "--store", target.url, "run",
        "--bucket", target.bucket, "--min-age", "0", "--fpr", "0.0001",
        "--max-delete-fraction", "1", "--rate", "150", "--concurrency", "8",
        "--max-tombstones-per-partition", str(BUDGET), "--audit-log", str(tmp / "audit.jsonl"),
        "--workers", str(workers), "--lease-ttl", "2s",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def finish(proc: subprocess.Popen[bytes]) -> None:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, (out + err).decode()


def finish_after_lease(target: Target, tmp: Path, workers: int) -> None:
    """Run again until the killed run's lease (2 s TTL) has expired and the run proceeds."""
    deadline = time.monotonic() + 60
    while True:
        proc = run_cli(target, tmp, workers)
        out, err = proc.communicate(timeout=180)
        if proc.returncode == 3 and b"holds this store's lease" in err:
            assert time.monotonic() < deadline, "the killed run's lease never expired"
            time.sleep(0.5)
            continue
        assert proc.returncode == 0, (out + err).decode()
        return


UNINTERRUPTED: dict[str, set[str]] = {}


def uninterrupted(backend: str, tmp: Path, request: pytest.FixtureRequest) -> set[str]:
    """What a run that nobody killed leaves behind, once per backend."""
    if backend not in UNINTERRUPTED:
        (tmp / "whole").mkdir()
        target = make_target(backend, tmp / "whole", request)
        finish(run_cli(target, tmp / "whole"))
        UNINTERRUPTED[backend] = target.listed()
    return UNINTERRUPTED[backend]


CASES = (
    [("sqlite", seed, 1) for seed in range(5)]
    + [("sqlite", seed, 2) for seed in range(5, 10)]
    + [pytest.param("cassandra", seed, 1, marks=pytest.mark.cassandra) for seed in range(3)]
    + [pytest.param("cassandra", seed, 2, marks=pytest.mark.cassandra) for seed in range(3, 5)]
)


@pytest.mark.parametrize(("backend", "seed", "workers"), CASES)
def test_a_killed_run_resumes_to_the_same_result(
    tmp_path: Path, backend: str, seed: int, workers: int, request: pytest.FixtureRequest
) -> None:
    """With two workers the kill also hits them (they die with the main process), possibly
    mid-write to the shared audit log, and the resumed run skips the slices they finished."""
    expected = uninterrupted(backend, tmp_path, request)
    target = make_target(backend, tmp_path, request)
    proc = run_cli(target, tmp_path, workers)
    time.sleep(random.Random(seed).uniform(0.3, 2.0))
    assert proc.poll() is None, "the run finished before the kill: slow it down"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert target.listed() >= LIVE_DIRS
    finish_after_lease(target, tmp_path, workers)
    remaining = target.listed()
    assert remaining >= LIVE_DIRS, "a non-empty directory lost its entry"
    # One generation, one budget: the killed attempt and the resumed one share it.
    assert target.max_row_tombstones() <= BUDGET
    # Same filter (same salt), same budget accounting: the same directories are gone. A kill
    # inside a delete batch (8 deletes, one batch per worker) may leave entries for the next
    # night: the batch was logged, so its deletes are charged, and the resumed run issues again
    # those that never ran; each such charge moves the budget's frontier by at most one delete
    # of at most LONGEST_RUN entries.
    assert expected <= remaining
    assert len(remaining - expected) <= 8 * LONGEST_RUN * workers


# -- a run killed during its build: only the missing shards are built again -----------------------

SALT = 0x5EED1234
#: live partitions on both halves of the ring, each with empty children; and empty subtrees
BUILD_LIVE = [f"l{i:03d}/obj" for i in range(60)]
BUILD_DEAD = [f"l{i:03d}/gone{j}/x/obj" for i in range(60) for j in range(3)] + [
    f"e{i:02d}/x/obj" for i in range(30)
]
BUILD_LIVE_DIRS = {d for k in BUILD_LIVE for d in directories_of(k)}
RESUME_BUILD = BuildConfig(fpr=0.001, salt=SALT, workers=2)
RESUME_CLEAN = CleanConfig(
    sweep=SweepConfig(guards=GuardConfig(max_delete_fraction=1.0)),
    min_age_s=0,
    max_tombstones_per_partition=1000,
    throttle=ThrottleConfig(rate=0),
)


def build_dataset(tmp: Path, name: str) -> str:
    url = f"sqlite:///{tmp / name / 'meta.db'}"
    with open_store(url, create=True) as store:
        store.put_objects("default", BUILD_LIVE + BUILD_DEAD, now_us() - 3_600_000_000)
        store.delete_objects("default", BUILD_DEAD, now_us() - 3_600_000_000)
    return url


def listed(url: str) -> set[str]:
    with open_store(url) as store:
        return {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows()}


def uninterrupted_library_run(tmp: Path) -> set[str]:
    url = build_dataset(tmp, "whole")
    with open_store(url) as store:
        run_job(store, RESUME_BUILD, RESUME_CLEAN)
    return listed(url)


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[Shard]:
    """The shards this process scans the objects table of (forked workers are not seen)."""
    scanned: list[Shard] = []
    real = SqliteStore.scan_object_keys

    def counting(
        self: SqliteStore, shard: Shard, bucket: str | None = None, throttle: Any = None
    ) -> Any:
        scanned.append(shard)
        return real(self, shard, bucket, throttle)

    monkeypatch.setattr(SqliteStore, "scan_object_keys", counting)
    return scanned


def test_the_dataset_has_live_partitions_in_both_halves_of_the_ring() -> None:
    tokens = [murmur_token("default", key.rsplit("/", 1)[0] + "/") for key in BUILD_LIVE]
    assert min(tokens) < 0 <= max(tokens)


def test_a_build_that_died_in_its_second_shard_is_finished_by_the_next_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scans: list[Shard],
    caplog: pytest.LogCaptureFixture,
) -> None:
    expected = uninterrupted_library_run(tmp_path)
    url = build_dataset(tmp_path, "killed")
    real_save = build_module.save_filter_part

    def dies_in_shard_1(
        store: Store, generation: str, header: FilterHeader, header_bytes: bytes, body: bytes
    ) -> int:
        if header.shard_index == 1:  # header and a torn first chunk, no completion marker
            store.put_filter_cell(generation, 1, HEADER_SEQ, header_bytes)
            store.put_filter_cell(generation, 1, 0, body[: len(body) // 2])
            # Die only once shard 0 (another forked worker) has stored its part: otherwise the
            # failure stops shard 0 too, and which shards survive depends on the scheduler.
            deadline = time.monotonic() + 60
            while not any(
                s.shard == 0 and s.complete for s in find_generation(store, generation).shards
            ):
                assert time.monotonic() < deadline, "shard 0 never stored its part"
                time.sleep(0.01)
            raise RuntimeError("killed while storing shard 1")
        return real_save(store, generation, header, header_bytes, body)

    with monkeypatch.context() as patch:
        patch.setattr(build_module, "save_filter_part", dies_in_shard_1)
        with open_store(url) as store, pytest.raises(RuntimeError, match="killed"):
            run_job(store, RESUME_BUILD, RESUME_CLEAN)
    with open_store(url) as store:
        state = load_run_state(store, scope_of(store, None))
        assert state is not None and state.phase == PHASE_BUILD
        generation = state.generation
        parts = {s.shard: s.complete for s in find_generation(store, generation).shards}
        assert parts == {0: True, 1: False}
        stored_shard_0 = store.get_filter_cells(generation, 0)
    assert listed(url) > expected  # the killed run deleted nothing

    scans.clear()
    caplog.set_level(logging.INFO, logger="dircleaner")
    with open_store(url) as store:
        report = run_job(store, RESUME_BUILD, RESUME_CLEAN)
        assert store.get_filter_cells(generation, 0) == stored_shard_0
        assert find_generation(store, generation).complete
    # One missing shard is built in this process, so its scan is seen here; shard 0's is not.
    assert scans == [Shard(1, 2)]
    assert report.resumed_generation == generation
    assert report.build is not None
    assert (report.build.reused_shards, report.build.built_shards) == ((0,), (1,))
    assert report.clean.sweep.loaded.generation == generation
    assert run_summary(report, True)["build"]["resumed"] == generation
    assert "reused shards 0 of 2 as stored, built 1" in "\n".join(run_build_lines(report))
    assert f"generation {generation}: reusing shards 0, building 1" in caplog.text
    remaining = listed(url)
    assert remaining >= BUILD_LIVE_DIRS, "a non-empty directory lost its entry"
    assert remaining == expected  # same salt, same parameters: the same filter, the same deletes


def interrupted_build(url: str, generation: str, shards: list[int], *, fpr: float = 0.001) -> None:
    """What a run killed during its build leaves: some parts of ``generation`` and its state."""
    with open_store(url) as store:
        dirs = store.estimate_directory_count().count
        for index in shards:
            shard = Shard(index, 2)
            build_filter(store, BuildConfig(fpr, dirs, shard=shard, generation=generation))
        save_run_state(store, scope_of(store, None), RunState(generation, PHASE_BUILD))


def test_a_run_killed_after_its_last_shard_was_stored_scans_nothing_again(
    tmp_path: Path, scans: list[Shard]
) -> None:
    expected = uninterrupted_library_run(tmp_path)
    url = build_dataset(tmp_path, "killed")
    generation = new_generation_id(now_us() - 60_000_000, SALT)
    interrupted_build(url, generation, [0, 1])
    scans.clear()
    with open_store(url) as store:
        report = run_job(store, RESUME_BUILD, RESUME_CLEAN)
    assert scans == []
    assert report.resumed_generation == generation
    assert report.build is not None
    assert (report.build.reused_shards, report.build.built_shards) == ((0, 1), ())
    assert listed(url) == expected


@pytest.mark.parametrize(
    ("why", "age_s", "fpr", "workers"),
    [
        ("too old for --max-filter-age", 2 * 86_400, 0.001, 2),
        ("another --fpr", 60, 0.01, 2),
        ("another shard layout", 60, 0.001, 3),
    ],
)
def test_a_partial_build_that_does_not_fit_is_not_resumed(
    tmp_path: Path, why: str, age_s: int, fpr: float, workers: int
) -> None:
    url = build_dataset(tmp_path, "killed")
    generation = new_generation_id(now_us() - age_s * 1_000_000, SALT)
    interrupted_build(url, generation, [0], fpr=fpr)
    build = BuildConfig(fpr=0.001, workers=workers)
    with open_store(url) as store:
        report = run_job(store, build, RESUME_CLEAN)
    assert report.resumed_generation is None, why
    assert report.build is not None and report.build.generation != generation
    assert report.build.built_shards == tuple(range(workers))
    assert report.build.reused_shards == ()
    assert generation in report.garbage_collected  # the stale partial build is not left behind
    assert listed(url) >= BUILD_LIVE_DIRS


# -- the same through the CLI, with a real kill -9 mid-build --------------------------------------

#: object partitions in the second half of the ring: that shard's worker takes far longer than
#: the first's, so the first part is complete well before the second
HEAVY = 200_000
LIGHT = 200


def heavy_second_shard_keys() -> tuple[list[str], list[str]]:
    """(live keys, deleted keys): LIGHT live partitions in shard 0 of 2, HEAVY in shard 1."""
    light: list[str] = []
    heavy: list[str] = []
    i = 0
    while len(heavy) < HEAVY or len(light) < LIGHT:
        parent = f"h{i:07d}/a/"
        side = heavy if murmur_token("default", parent) >= 0 else light
        if len(side) < (HEAVY if side is heavy else LIGHT):
            side.append(parent + "o")
        i += 1
    dead = [f"z{j % 20:02d}/d{j:04d}/x/o" for j in range(600)]
    return light + heavy + ["z00/live/o"], dead


@pytest.fixture(scope="module")
def heavy_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """A metastore file to copy (generated once) and its non-empty directories."""
    path = tmp_path_factory.mktemp("heavy") / "meta.db"
    live, dead = heavy_second_shard_keys()
    with open_store(f"sqlite:///{path}", create=True) as store:
        store.put_objects("default", live + dead, now_us() - 3_600_000_000)
        store.delete_objects("default", dead, now_us() - 3_600_000_000)
    return path, {d for k in live for d in directories_of(k)}


def copy_of(dataset: Path, where: Path) -> str:
    where.mkdir()
    shutil.copyfile(dataset, where / "meta.db")
    return f"sqlite:///{where / 'meta.db'}"


def start_run(url: str, *extra: str) -> subprocess.Popen[bytes]:
    # --fpr 1e-9: a false positive (which would differ between salts) is all but impossible.
    # The filter holds 400,000 directories at about its capacity, so the effective rate is the
    # target: at 1e-7, with 49 empties exposed in each of the two runs, about 1e-5 a run.
    audit = Path(url.removeprefix("sqlite:///")).with_name("audit.jsonl")
    args = [
        sys.executable, "-m", "dircleaner", "--store", url, "run", "--workers", "2",
        "--fpr", "1e-9", "--min-age", "0", "--max-delete-fraction", "1", "--rate", "0",
        "--max-tombstones-per-partition", "1000", "--audit-log", str(audit), "--lease-ttl", "2s",
        *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True
    )


def building_generation(db: sqlite3.Connection) -> str | None:
    """The generation the running job recorded before building, once it has."""
    row = db.execute("SELECT value FROM kv WHERE space = 'state' AND key LIKE 'run|%'").fetchone()
    return None if row is None else str(json.loads(row[0])["generation"])


def part_complete(db: sqlite3.Connection, generation: str, shard: int) -> bool:
    sql = "SELECT 1 FROM kv WHERE space = ? AND key = ?"
    space = f"filter|{generation}|{shard}"
    return db.execute(sql, (space, f"m{MARKER_SEQ}")).fetchone() is not None


def kill_when_shard_0_is_stored(proc: subprocess.Popen[bytes], path: Path) -> str:
    """SIGKILL the run as soon as its generation's first part is complete; the generation.

    The whole process group goes, as when a host or container dies: killing only the parent
    would leave its forked workers to finish (and store) the parts they are building.
    """
    deadline = time.monotonic() + 120
    generation = None
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
                generation = generation or building_generation(db)
                if generation and part_complete(db, generation, 0):
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return generation
        except sqlite3.OperationalError:
            pass  # the writer holds a lock for a moment, or the tables are not there yet
        time.sleep(0.005)
    out, err = proc.communicate(timeout=60)
    pytest.fail(f"the run was not caught mid-build: {(out + err).decode()}")


def test_a_run_killed_during_its_build_builds_only_the_missing_shard(
    tmp_path: Path, heavy_dataset: tuple[Path, set[str]]
) -> None:
    dataset, live = heavy_dataset
    whole = copy_of(dataset, tmp_path / "whole")
    finish(start_run(whole))
    expected = listed(whole)
    assert expected == live  # every empty directory went: nothing to tell salts apart

    url = copy_of(dataset, tmp_path / "killed")
    path = tmp_path / "killed" / "meta.db"
    generation = kill_when_shard_0_is_stored(start_run(url), path)
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        mid_build = not part_complete(db, generation, 1)
    if mid_build:
        assert listed(url) > live  # nothing deleted yet

    deadline = time.monotonic() + 60
    while True:  # until the killed run's lease (2 s TTL) has expired
        proc = start_run(url, "--json")
        out, err = proc.communicate(timeout=180)
        if proc.returncode != 3 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert proc.returncode == 0, (out + err).decode()
    build = json.loads(out)["build"]
    assert build["resumed"] == generation
    if mid_build:  # the common case: shard 1 was still being scanned
        assert build["generation"] == generation
        assert (build["reused_shards"], build["built_shards"]) == ([0], [1])
        # shard 1's partitions (and z00/live/ if it hashes there), none of shard 0's
        assert HEAVY <= build["partitions_scanned"] <= HEAVY + 1
    assert listed(url) == expected


# -- a clean that died in some slices of the ring -------------------------------------------------

SLICED_CLEAN = replace(
    RESUME_CLEAN,
    sweep=replace(RESUME_CLEAN.sweep, workers=2),
    max_tombstones_per_partition=2,  # the budget must hold across the two attempts
)


def test_a_clean_that_died_in_some_slices_sweeps_only_those_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(url: str) -> Any:
        with open_store(url) as store:
            return run_job(store, RESUME_BUILD, replace(SLICED_CLEAN, audit_log=audit))

    audit = tmp_path / "whole.jsonl"
    whole = build_dataset(tmp_path, "whole")
    expected = run(whole)
    assert expected.clean.slices_already_clean == ()

    audit = tmp_path / "audit.jsonl"
    url = build_dataset(tmp_path, "killed")
    real = plan_and_delete

    def dies_in_the_second_half(store: Store, facts: list[Any], *args: Any) -> Any:
        if any(f.key.token >= 0 for f in facts):  # the slices of the non-negative tokens
            raise StoreUnavailable("injected: the slice's replicas went away")
        return real(store, facts, *args)

    # Workers are forked after the patch, so they inherit it.
    monkeypatch.setattr(job_clean, "plan_and_delete", dies_in_the_second_half)
    with pytest.raises(StoreUnavailable, match="injected"):
        run(url)
    monkeypatch.setattr(job_clean, "plan_and_delete", real)
    with open_store(url) as store:
        state = load_run_state(store, scope_of(store, None))
    assert state is not None and state.clean is not None
    # Each worker cleans its slices in ring order and stops at its first failure: every slice
    # of the first half of the ring was finished, none of the second.
    slices = LocalWorkers(2).slices(Shard(), CLEAN)
    first_half = set(range(len(slices) // 2))
    assert len(slices) > 2 and state.clean.slices == len(slices)
    assert state.clean.done == first_half

    with open_store(url) as store:
        unfinished = sum(len(b) for b in store.scan_folder_rows(Shard(1, 2)))
    resumed = run(url)
    assert resumed.resumed_generation == state.generation
    assert resumed.clean.slices_already_clean == tuple(sorted(first_half))
    # Only the unfinished slice was swept again.
    assert 0 < resumed.clean.sweep.result.swept_rows == unfinished
    assert listed(url) == listed(whole)
    assert listed(url) >= BUILD_LIVE_DIRS
    # One generation, one budget per partition (rows 1, ranges 2), across both attempts.
    entries = audit_entries(audit)
    per_partition = tombstones_per_partition(entries)
    assert per_partition and max(per_partition.values()) <= 2
    assert any(e["via"] == "range" for e in entries)
    with open_store(url) as store:
        final = load_run_state(store, scope_of(store, None))
    assert final is not None and final.phase == "done"


def test_a_dry_run_leaves_nothing_for_the_next_run_to_resume(tmp_path: Path) -> None:
    url = build_dataset(tmp_path, "dry")
    with open_store(url) as store:
        dry = run_job(store, RESUME_BUILD, replace(RESUME_CLEAN, dry_run=True))
        assert dry.build is not None and dry.clean.deleted is None
        assert load_run_state(store, scope_of(store, None)) is None
        real = run_job(store, RESUME_BUILD, RESUME_CLEAN)
    # The real run built its own filter instead of "resuming" the dry run's.
    assert real.build is not None and real.resumed_generation is None
    assert real.build.generation != dry.build.generation
    assert listed(url) >= BUILD_LIVE_DIRS
