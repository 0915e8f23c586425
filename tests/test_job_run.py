"""Property tests of the nightly job (``job/run.py``: build, then clean) on random trees and random
deletes (embedded store)."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dircleaner.job.clean import CleanConfig
from dircleaner.job.run import run_job
from dircleaner.job.sweep import SweepConfig
from dircleaner.paths import dir_of_row, directories_of
from dircleaner.pipeline.build import BuildConfig
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.store import open_store
from dircleaner.timeutil import now_us
from tests.helpers import audit_entries, tombstones_per_partition

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
            for run in range(2):
                # What the run deleted, as it records it: its own audit log.
                audit = Path(tmp) / f"audit-{run}.jsonl"
                run_job(store, BuildConfig(fpr=0.01), replace(config, audit_log=audit))
                entries = audit_entries(audit)
                removed = {e["dir"] for e in entries}
                assert removed <= empty, f"non-empty deleted: {sorted(removed - empty)}"
                # Within the budget in every partition: 1 per row delete, 2 per range delete.
                spent = tombstones_per_partition(entries)
                assert max(spent.values(), default=0) <= budget, spent.most_common(3)
                remaining = {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows()}
                assert live_dirs <= remaining
                assert remaining <= every
            if budget >= len(every):
                # With room in every partition, two runs at 1% clear all but false positives.
                assert len(remaining & empty) <= max(1, len(empty) // 10)
