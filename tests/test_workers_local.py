"""Worker processes: partial filters OR-merge to exactly the single-process filter, and the
local pool hands slices out as its processes free up."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

from dircleaner.filter.generation import parse_generation_id
from dircleaner.filter.stored import find_generation, load_generation
from dircleaner.job.sweep import SweepConfig, run_sweep
from dircleaner.model import Shard
from dircleaner.pipeline.build import BuildConfig, build_filter, scope_of
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.progress import Progress
from dircleaner.store import Store, open_store
from dircleaner.timeutil import now_us
from dircleaner.workers.base import TwoPhaseWork
from dircleaner.workers.local import map_shards, run_two_phases


def make_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = [f"t/{i % 13}/{i % 101}/{i}/obj" for i in range(3000)]
    with open_store(url, create=True) as store:
        store.put_objects("default", keys, now_us() - 10**9)
        store.delete_objects("default", keys[::7], now_us() - 10**9)
    return url


def test_workers_build_the_same_bits_and_sweep_the_same_candidates(tmp_path: Path) -> None:
    url = make_store(tmp_path)
    with open_store(url) as store:
        scope = scope_of(store, None)
        results = {}
        for workers in (1, 3):
            # Same size for both (a second build would be sized from the first one).
            config = BuildConfig(fpr=0.01, salt=1234, workers=workers, expected_dirs=5000)
            built = build_filter(store, config)
            info = find_generation(store, built.generation)
            assert len(info.shards) == workers and info.complete
            _, merged = load_generation(store, info, scope)
            swept = run_sweep(
                store,
                SweepConfig(
                    generation=built.generation, guards=GuardConfig(force=True), workers=workers
                ),
            )
            results[workers] = (merged.bits_bytes(), swept.result, built)
    bits1, sweep1, built1 = results[1]
    bits3, sweep3, built3 = results[3]
    assert bits1 == bits3
    assert built1.partitions_scanned == built3.partitions_scanned
    assert abs(built1.fill_ratio - built3.fill_ratio) < 0.01
    assert sweep1.swept_rows == sweep3.swept_rows
    assert sweep1.facts == sweep3.facts
    assert sweep1.candidates > 0


def test_a_host_shard_splits_into_nested_worker_shards() -> None:
    host = Shard(1, 4)
    lo, hi = host.token_range()
    parts = host.split(3)
    assert [p.count for p in parts] == [12, 12, 12]
    assert parts[0].token_range()[0] == lo
    assert parts[-1].token_range()[1] == hi
    for left, right in itertools.pairwise(parts):
        assert left.token_range()[1] + 1 == right.token_range()[0]


def test_four_hosts_building_shards_of_one_generation_agree_with_one_worker(
    tmp_path: Path,
) -> None:
    from tests.helpers import invoke

    url = make_store(tmp_path)
    generation = invoke(url, "filters", "new-id").output.strip()
    common = ["--expected-dirs", "5000", "--generation", generation]
    for index in range(3):
        result = invoke(url, "build", "--shard", f"{index}/4", *common)
        assert result.exit_code == 0, result.output
    # Three of four shards: the sweep refuses the incomplete set.
    result = invoke(url, "sweep", "--generation", generation)
    assert result.exit_code == 3
    assert "incomplete" in result.stderr
    assert invoke(url, "build", "--shard", "3/4", *common).exit_code == 0
    sharded = tmp_path / "sharded.txt"
    assert invoke(url, "sweep", "--generation", generation, "--out", str(sharded)).exit_code == 0

    with open_store(url) as store:
        snapshot_salt = parse_generation_id(generation)
        single = build_filter(store, BuildConfig(expected_dirs=5000, salt=snapshot_salt[1]))
    whole = tmp_path / "whole.txt"
    assert (
        invoke(url, "sweep", "--generation", single.generation, "--out", str(whole)).exit_code == 0
    )
    assert sharded.read_text() == whole.read_text()
    assert sharded.read_text().count("\n") > 100


def test_a_sharded_build_needs_a_shared_generation_and_size(tmp_path: Path) -> None:
    from tests.helpers import invoke

    url = make_store(tmp_path)
    result = invoke(url, "build", "--shard", "0/2")
    assert result.exit_code == 2
    assert "--expected-dirs" in result.stderr
    result = invoke(url, "build", "--shard", "0/2", "--expected-dirs", "10")
    assert result.exit_code == 2
    assert "--generation" in result.stderr


# -- the local pool hands slices out as its processes free up --------------------------------------


def _held_until_the_last_slice_is_done(gate: Path, count: int) -> Any:
    def task(store: Store, shard: Shard, report: Progress) -> int:
        if shard.index == 0:
            deadline = time.monotonic() + 60
            while not gate.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        elif shard.index == count - 1:
            gate.touch()
        return os.getpid()

    return task


def test_a_free_process_takes_the_next_slice_while_another_is_held(tmp_path: Path) -> None:
    url = make_store(tmp_path)
    shards = Shard().split(8)
    task = _held_until_the_last_slice_is_done(tmp_path / "gate", len(shards))
    with open_store(url) as store:
        pids = map_shards(store, shards, task, "test", processes=2)
    # Slice 0 holds its process until slice 7 is done: the other process ran slices 1 to 7.
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert pids[0] not in pids[1:] and len(set(pids[1:])) == 1


def test_each_slice_s_second_phase_runs_where_its_first_phase_ran(tmp_path: Path) -> None:
    url = make_store(tmp_path)
    shards = Shard().split(6)
    held = _held_until_the_last_slice_is_done(tmp_path / "gate", len(shards))

    def first(store: Store, shard: Shard, report: Progress) -> tuple[int, tuple[int, int]]:
        pid = held(store, shard, report)
        return pid, (shard.index, pid)  # what the process keeps across the barrier

    def second(
        store: Store, shard: Shard, kept: tuple[int, int], factor: int, report: Progress
    ) -> tuple[int, int]:
        assert kept[0] == shard.index
        return kept[1], os.getpid() * factor

    finished: list[int] = []
    with open_store(url) as store:
        work = TwoPhaseWork(
            first, lambda t: 1, second, ("one", "two"), lambda index, _: finished.append(index)
        )
        tallies, results = run_two_phases(store, shards, work, processes=2)
    assert [kept for kept, _ in results] == tallies
    assert [ran for _, ran in results] == tallies
    assert len(set(tallies)) == 2 and tallies[0] not in tallies[1:]
    assert sorted(finished) == list(range(len(shards)))
