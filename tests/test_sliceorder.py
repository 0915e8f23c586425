"""The clean hands its slices out longest first, by what each took in the last run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dircleaner.job.clean import CleanConfig, run_clean
from dircleaner.job.sliceorder import (
    longest_first,
    record_seconds,
    recorded_seconds,
    slice_seconds_key,
)
from dircleaner.job.sweep import SweepConfig
from dircleaner.model import Shard
from dircleaner.pipeline.build import BuildConfig, build_filter, scope_of
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.timeutil import now_us
from dircleaner.workers.base import CLEAN, LocalWorkers

OLD = now_us() - 10**10


def test_the_slowest_known_slices_go_first_and_the_unknown_after_in_ring_order() -> None:
    seconds: list[float | None] = [0.6, None, 0.7, 0.6, None, 1.1, 0.0, 0.9]
    assert longest_first(range(8), seconds) == [5, 7, 2, 0, 3, 6, 1, 4]
    # Only the slices still to do (a resumed run), in the same order.
    assert longest_first([0, 1, 5, 6], seconds) == [5, 0, 6, 1]
    assert longest_first(range(3), [None] * 3) == [0, 1, 2]


@pytest.mark.parametrize(
    "stored",
    [
        None,
        "not json",
        json.dumps({"0": 1.0}),
        json.dumps([1.0, 2.0]),  # another slice count
    ],
)
def test_a_missing_or_unreadable_record_leaves_the_ring_order(
    tmp_path: Path, stored: str | None
) -> None:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        if stored is not None:
            store.put_state("k", stored)
        assert recorded_seconds(store, "k", 3) == [None, None, None]


def test_bad_values_are_unknown_and_a_run_keeps_what_it_did_not_time(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        store.put_state("k", json.dumps([1.5, -1, True, "2", None, 0.25]))
        known = recorded_seconds(store, "k", 6)
        assert known == [1.5, None, None, None, None, 0.25]
        record_seconds(store, "k", known, {1: 0.5, 5: 2.0})
        assert recorded_seconds(store, "k", 6) == [1.5, 0.5, None, None, None, 2.0]


class RecordingWorkers(LocalWorkers):
    """The local pool, noting the order in which each clean hands it the slices."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.orders: list[list[int]] = []

    def run_two_phases(self, store: Store, shards: Sequence[Shard], *args: Any) -> Any:
        self.orders.append([shard.index for shard in shards])
        return super().run_two_phases(store, shards, *args)


def test_the_next_clean_hands_out_the_slices_the_last_found_slowest_first(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    # One wide parent (a partition is never split between slices) among small ones.
    keys = [f"wide/{i}/obj" for i in range(20_000)]
    keys += [f"t/{i % 13}/{i % 97}/{i}/obj" for i in range(3000)]
    with open_store(url, create=True) as store:
        store.put_objects("b", keys, OLD)
        store.delete_objects("b", keys[::5], OLD)
        generation = build_filter(store, BuildConfig(fpr=0.001)).generation
    pool = RecordingWorkers(2)
    slices = pool.slices(Shard(), CLEAN)
    config = CleanConfig(
        sweep=SweepConfig(
            generation=generation, workers=2, guards=GuardConfig(max_delete_fraction=1.0)
        ),
        min_age_s=0,
        dry_run=True,
    )
    with open_store(url) as store:
        key = slice_seconds_key(scope_of(store, None), Shard(), len(slices))
        # A clean that deletes times its slices; a dry run reads those times, records nothing.
        real = replace(config, dry_run=False, audit_log=tmp_path / "audit.jsonl")
        first = run_clean(store, real, workers=pool)
        recorded = recorded_seconds(store, key, len(slices))
        second = run_clean(store, config, workers=pool)
        assert recorded_seconds(store, key, len(slices)) == recorded
    # The first run knew nothing: ring order. It timed every slice.
    assert pool.orders[0] == list(range(len(slices)))
    assert all(isinstance(s, float) for s in recorded)
    # The second ran them slowest first by those times, and swept every row the first left.
    times = [s for s in recorded if s is not None]
    assert pool.orders[1] == sorted(range(len(slices)), key=lambda i: -times[i])
    assert pool.orders[1] != pool.orders[0]
    assert first.deleted is not None and first.deleted.rows_removed is not None
    left = first.sweep.result.swept_rows - first.deleted.rows_removed
    assert second.sweep.result.swept_rows == left
    assert first.sweep.result.candidates > 1000
