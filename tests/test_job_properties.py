"""Property tests of the whole job on random trees and random deletes (embedded store)."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dircleaner.job.clean import CleanConfig
from dircleaner.job.run import run_job
from dircleaner.job.sweep import SweepConfig
from dircleaner.model import ActionKind
from dircleaner.paths import dir_of_row, directories_of
from dircleaner.pipeline.build import BuildConfig
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.store import open_store
from dircleaner.timeutil import now_us

segment = st.sampled_from(["a", "b", "c", "dd", "é", "x y", "", "'", "\\"])
key = st.lists(segment, min_size=1, max_size=6).map("/".join).filter(bool)
dataset = st.lists(st.tuples(key, st.booleans()), min_size=1, max_size=60)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=dataset,
    budget=st.integers(min_value=0, max_value=4),
    verify=st.booleans(),
    markers=st.lists(key.map(lambda k: k + "/"), max_size=5),
)
def test_no_nonempty_directory_is_ever_deleted(
    items: list[tuple[str, bool]], budget: int, verify: bool, markers: list[str]
) -> None:
    keys = sorted({k for k, _ in items} | set(markers))
    dead = sorted({k for k, deleted in items if deleted})
    live_dirs = {d for k in keys if k not in dead for d in directories_of(k)}
    every = {d for k in keys for d in directories_of(k)}
    empty = every - live_dirs
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'meta.db'}"
        with open_store(url, create=True) as store:
            store.put_objects("default", keys, now_us() - 1000)
            store.delete_objects("default", dead, now_us() - 500)
            config = CleanConfig(
                sweep=SweepConfig(guards=GuardConfig(force=True)),
                min_age_s=0,
                verify=verify,
                max_tombstones_per_partition=budget,
                throttle=ThrottleConfig(rate=0),
            )
            for _ in range(2):
                report = run_job(store, BuildConfig(fpr=0.01), config)
                plan = report.clean.deletion_plan
                assert plan is not None
                removed = {dir_of_row(r.parent, r.name) for a in plan.actions for r in a.rows}
                assert removed <= empty, f"non-empty deleted: {sorted(removed - empty)}"
                rows = Counter(
                    (a.partition.bucket, a.partition.parent)
                    for a in plan.actions
                    if a.kind is ActionKind.ROW
                )
                assert max(rows.values(), default=0) <= budget
                remaining = {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows()}
                assert live_dirs <= remaining
                assert remaining <= every
            if budget >= len(every):
                # With room in every partition, two runs at 1% clear all but false positives.
                assert len(remaining & empty) <= max(1, len(empty) // 10)
