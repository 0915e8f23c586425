"""A clean split across worker processes does exactly what one process does, safely."""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import dircleaner.job.clean as job_clean
from dircleaner.errors import TooManyCandidates
from dircleaner.job.clean import CleanConfig, CleanReport, run_clean
from dircleaner.job.orders import delete_orders
from dircleaner.job.sweep import SweepConfig
from dircleaner.model import Shard
from dircleaner.paths import directories_of
from dircleaner.pipeline.build import BuildConfig, build_filter
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.rateshare import ProcessSharers, Sharers
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.records import murmur_token
from dircleaner.timeutil import now_us
from dircleaner.workers.base import CLEAN, LocalWorkers
from tests.helpers import audit_entries, tombstones_per_partition

OLD = now_us() - 10**10
BUCKET = "default"


def listed(store: Store) -> set[str]:
    return {r.parent + r.name + "/" for b in store.scan_folder_rows(Shard()) for r in b}


def make_db(tmp_path: Path) -> tuple[Path, str]:
    """A store with empties at every depth and a filter built for it (generation returned)."""
    db = tmp_path / "base.db"
    keys = [f"t/{i % 7}/{i % 23}/{i % 151}/{i}/obj" for i in range(4000)]
    with open_store(f"sqlite:///{db}", create=True) as store:
        store.put_objects(BUCKET, keys, OLD)
        store.delete_objects(BUCKET, keys[::3], OLD)  # leaves empty leaf directories
        store.delete_objects(BUCKET, [k for k in keys if k.startswith("t/3/")], OLD)  # a subtree
        built = build_filter(store, BuildConfig(fpr=0.001, salt=99))
    return db, built.generation


def clean_copy(
    tmp_path: Path, db: Path, generation: str, workers: int, **changes: object
) -> tuple[CleanReport, set[str], list[dict[str, object]]]:
    copy = tmp_path / f"w{workers}-{len(list(tmp_path.iterdir()))}.db"
    shutil.copyfile(db, copy)
    audit = copy.with_suffix(".jsonl")
    lenient = GuardConfig(max_delete_fraction=0.9)
    config = CleanConfig(
        sweep=SweepConfig(generation=generation, workers=workers, guards=lenient),
        min_age_s=0,
        max_tombstones_per_partition=40,
        throttle=ThrottleConfig(rate=0),
        audit_log=audit,
    )
    config = replace(config, **changes)  # type: ignore[arg-type]
    with open_store(f"sqlite:///{copy}") as store:
        report = run_clean(store, config)
        left = listed(store)
    return report, left, audit_entries(audit)


@pytest.mark.parametrize("workers", [2, 4])
def test_workers_delete_exactly_what_one_process_deletes(tmp_path: Path, workers: int) -> None:
    db, generation = make_db(tmp_path)
    with open_store(f"sqlite:///{db}") as store:
        before = listed(store)
        nonempty = {d for b in store.scan_object_partitions(Shard()) for _, _, p in b for d in [p]}
    one, left1, audit1 = clean_copy(tmp_path, db, generation, 1)
    many, left_n, audit_n = clean_copy(tmp_path, db, generation, workers)
    assert one.deleted is not None and one.deleted.directories > 100
    assert left_n == left1
    # The same directories, each removed the same way (partition, row, range or rewrite).
    assert sorted((e["dir"], e["via"]) for e in audit_n) == sorted(
        (e["dir"], e["via"]) for e in audit1
    )
    assert many.plan == one.plan
    assert many.sweep.result.candidates == one.sweep.result.candidates
    assert many.sweep.result.swept_rows == one.sweep.result.swept_rows == len(before)
    # Never a directory that holds an object (or an ancestor of one).
    holding = {a for p in nonempty for a in directories_of(p + "x")}
    assert not holding & (before - left_n)


def test_the_rate_is_shared_by_the_slices_that_delete_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, generation = make_db(tmp_path)
    rate = 50_000.0
    shares: list[tuple[float, Sharers]] = []

    def recorded(*args: Any, throttle: ThrottleConfig, **kwargs: Any) -> Any:
        shares.append((throttle.rate, throttle.shared_by))
        return delete_orders(*args, throttle=throttle, **kwargs)

    monkeypatch.setattr(job_clean, "delete_orders", recorded)
    # Full rate from the start: with no overload, each slice deletes at its share throughout.
    throttle = ThrottleConfig(rate=rate, start_fraction=1.0)
    report, _, _ = clean_copy(tmp_path, db, generation, 2, throttle=throttle)
    deleted = report.deleted
    assert deleted is not None and deleted.directories > 100
    # The rate asked for is the total, shared by the slices deleting at the time (two
    # processes, each deleting its slices one after the other): counted in shared memory.
    assert len(LocalWorkers(2).slices(Shard(), CLEAN)) > 2
    [(total, sharers)] = shares
    assert total == rate and isinstance(sharers, ProcessSharers)
    assert deleted.final_rate == pytest.approx(rate)
    # The phase's time is the deletes' time, wherever it is reported.
    assert deleted.seconds == report.phase_seconds["delete"] > 0


def test_the_guards_see_every_worker_and_stop_them_all(tmp_path: Path) -> None:
    db, generation = make_db(tmp_path)
    with open_store(f"sqlite:///{db}") as store:
        before = listed(store)
    strict = SweepConfig(
        generation=generation, workers=3, guards=GuardConfig(max_delete_fraction=0.01)
    )
    with pytest.raises(TooManyCandidates):
        clean_copy(tmp_path, db, generation, 3, sweep=strict)
    copy = sorted(tmp_path.glob("w3-*.db"))[-1]
    with open_store(f"sqlite:///{copy}") as store:
        assert listed(store) == before
    assert not copy.with_suffix(".jsonl").exists()


def chain_across_shards(workers: int) -> list[str]:
    """An empty chain of directories whose partitions fall into more than one worker's slice."""
    shards = Shard().split(workers)

    def slice_of(parent: str) -> int:
        token = murmur_token(BUCKET, parent)
        return next(i for i, s in enumerate(shards) if s.token_range()[1] >= token)

    for n in range(1000):
        chain = [f"race{n}/", f"race{n}/a/", f"race{n}/a/b/", f"race{n}/a/b/c/"]
        if len({slice_of(p) for p in ["", *chain[:-1]]}) > 1:
            return chain
    raise AssertionError("no chain spans two slices")


@pytest.mark.parametrize("verify", [True, False])
def test_an_object_found_by_one_worker_keeps_ancestors_another_worker_lists(
    tmp_path: Path, verify: bool
) -> None:
    db, _ = make_db(tmp_path)
    chain = chain_across_shards(3)
    with open_store(f"sqlite:///{db}") as store:
        store.put_objects(BUCKET, [chain[-1] + "gone"], OLD)
        store.delete_objects(BUCKET, [chain[-1] + "gone"], OLD)
        generation = build_filter(store, BuildConfig(fpr=0.001, salt=7)).generation
        # After the build, an object lands in the deepest directory: its row only, written
        # before the delete timestamp, so only the re-check can save the chain's entries.
        store.write_object_rows([(BUCKET, chain[-1], "late")], OLD)
    _, left, _ = clean_copy(tmp_path, db, generation, 3, verify=verify)
    if verify:
        assert set(chain) <= left
    else:
        assert not set(chain) & left  # without the re-check the chain goes: the test can fail


def test_sqlite_deletes_run_in_key_order_partition_by_partition(tmp_path: Path) -> None:
    """The embedded store has no replicas to spread over: its deletes go in key order."""
    db, generation = make_db(tmp_path)
    report, _, audit = clean_copy(tmp_path, db, generation, 1)
    rows = [e for e in audit if e["via"] == "row"]
    assert report.plan.deletes.row == len(rows) > 100
    keys = [(murmur_token(BUCKET, str(e["parent"])), e["parent"], e["name"]) for e in rows]
    assert keys == sorted(keys)
    # More than one row in some partition: a round-robin order would have interleaved them.
    parents = [e["parent"] for e in rows]
    assert len(set(parents)) < len(parents)


def test_runs_of_one_grace_period_share_one_budget_whatever_their_audit_logs(
    tmp_path: Path,
) -> None:
    """The spending is in the store's ledger: a second clean (another audit log, another
    generation) only spends what the first left of each partition's budget; once the grace
    period is over, a clean may spend again."""
    db, generation = make_db(tmp_path)
    config = CleanConfig(
        sweep=SweepConfig(generation=generation, guards=GuardConfig(max_delete_fraction=0.9)),
        min_age_s=0,
        max_tombstones_per_partition=3,
        max_rewrite_rows=0,  # row and range deletes only: their budget is what is tested
        throttle=ThrottleConfig(rate=0),
        grace_period_s=15,
    )
    logs = [tmp_path / f"audit{i}.jsonl" for i in range(3)]
    with open_store(f"sqlite:///{db}") as store:
        dry = run_clean(store, replace(config, dry_run=True, audit_log=logs[0]))
        first = run_clean(store, replace(config, audit_log=logs[0]))
        assert dry.plan == first.plan
        assert first.deleted is not None and first.plan.deferred > 0
        rebuilt = build_filter(store, BuildConfig(fpr=0.001, salt=7)).generation
        second_config = replace(config, sweep=replace(config.sweep, generation=rebuilt))
        second = run_clean(store, replace(second_config, audit_log=logs[1]))
        assert second.plan.deferred > 0
        entries = [e for log in logs[:2] for e in audit_entries(log)]
        spent = tombstones_per_partition(entries)
        assert max(spent.values()) == 3
        assert store.tombstones_charged(list(spent)) == spent
        # Once the grace period is over, the charges have expired and a clean spends again.
        deadline = time.monotonic() + 120
        while store.tombstones_charged(list(spent)):
            assert time.monotonic() < deadline, "the charges never expired"
            time.sleep(0.5)
        third = run_clean(store, replace(second_config, audit_log=logs[2]))
    assert third.plan.deletes.row + third.plan.deletes.range > 0
