"""The sweep: the filter a clean or a sweep uses, and the ``sweep`` job (candidates, no delete).

``load_filter`` finds, verifies and merges the generation; ``run_sweep`` streams the folders
index against it and brings every candidate back (what ``dircleaner sweep`` lists). The clean
(``job.clean``) sweeps the same way, but keeps each slice's candidates where they were found.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dircleaner.errors import FilterNotFound
from dircleaner.filter.bloom import start_loading_kernels
from dircleaner.filter.engines import Filter
from dircleaner.filter.format import FilterHeader
from dircleaner.filter.stored import (
    find_generation,
    latest_complete,
    list_generations,
    load_generation,
)
from dircleaner.job.sharedfilter import SharedFilter
from dircleaner.model import Shard
from dircleaner.pipeline.build import describe_scope, scope_of, scope_parts, swept_count_key
from dircleaner.pipeline.guards import GuardConfig, check_filter
from dircleaner.pipeline.sweep import SweepResult, sweep
from dircleaner.progress import Progress, expecting, no_progress
from dircleaner.scanrate import ScanRate, ScanStats, ScanThrottle
from dircleaner.scanrate import merge as merge_scans
from dircleaner.store.base import Store
from dircleaner.timeutil import now_us
from dircleaner.workers.base import CLEAN, LocalWorkers, Workers


@dataclass(frozen=True)
class SweepConfig:
    """Which filter to sweep with, over which slice of the index."""

    bucket: str | None = None
    shard: Shard = field(default_factory=Shard)
    #: filter generation to use; the newest complete one for this scope when None
    generation: str | None = None
    guards: GuardConfig = field(default_factory=GuardConfig)
    #: worker processes, each sweeping a sub-slice of the shard
    workers: int = 1
    #: how fast the sweep may read the folders index (all workers together)
    scan: ScanRate = field(default_factory=ScanRate)


@dataclass(frozen=True)
class LoadedFilter:
    """A verified, merged filter generation."""

    generation: str
    header: FilterHeader
    filt: Filter
    fill_ratio: float
    estimated_fpr: float


@dataclass
class SweepReport:
    """The sweep and the filter it used."""

    loaded: LoadedFilter
    result: SweepResult
    #: how the scan of the folders index read (rate, page latency, back-offs)
    scan: ScanStats = field(default_factory=ScanStats)


def load_filter(store: Store, config: SweepConfig) -> LoadedFilter:
    """Find, verify and merge the filter generation this sweep should use."""
    start_loading_kernels()  # while the filter is read: the sweep's tests use them
    scope = scope_of(store, config.bucket)
    if config.generation is not None:
        info = find_generation(store, config.generation)
    else:
        try:
            info = latest_complete(store, scope, force=config.guards.force)
        except FilterNotFound as exc:
            raise FilterNotFound(_none_for_scope(store, config.bucket) or str(exc)) from None
    header, filt = load_generation(store, info, scope)
    return LoadedFilter(info.generation, header, filt, filt.fill_ratio(), filt.estimated_fpr())


def _none_for_scope(store: Store, bucket: str | None) -> str | None:
    """Why no filter serves this sweep when the store holds complete filters of this store's
    tables for other buckets (None when it holds none: nothing was built at all)."""
    tables = store.scope_id()
    others: dict[str, str] = {}  # scope -> its newest complete generation
    for info in list_generations(store):
        header = info.header
        if info.complete and header is not None and scope_parts(header.scope)[0] == tables:
            others[header.scope] = info.generation
    if not others:
        return None
    covered = "; ".join(
        f"{describe_scope(scope)} ({generation})" for scope, generation in sorted(others.items())
    )
    wanted = "every bucket" if bucket is None else f"--bucket {bucket!r}"
    hint = "'dircleaner build" + ("'" if bucket is None else f" --bucket {bucket}'")
    if bucket is None:
        hint += ", or sweep one of those buckets with --bucket"
    elif any(scope_parts(scope)[1] is None for scope in others):
        hint += ", or leave out --bucket to sweep every bucket with that filter"
    return (
        f"no filter has been built for {wanted} yet: the stored filters cover {covered}, and a"
        f" filter serves only the buckets it was built for; build one with {hint}"
    )


def run_sweep(
    store: Store,
    config: SweepConfig,
    progress: Progress = no_progress,
    workers: Workers | None = None,
) -> SweepReport:
    """Load the filter, refuse it if unsafe, and stream the folders index against it.

    It writes nothing: the count of folder rows that sizes the next build where counting is
    dear is recorded by a run or clean that deletes, never by a command that only reads."""
    loaded = load_filter(store, config)
    check_filter(loaded.header, loaded.estimated_fpr, now_us(), config.guards)
    pool = workers or LocalWorkers(config.workers)
    shards = pool.slices(config.shard, CLEAN)
    running = min(len(shards), pool.parallelism)
    task = SweepSlice(
        SharedFilter(loaded.generation, config.bucket, loaded.filt),
        config.bucket,
        # The cap is the total, shared by the slices scanning at the time.
        config.scan.over(store.traits.scan_defaults).shared(pool.sharers()),
    )
    started = time.monotonic()
    expected = expecting(progress, "sweep", expected_sweep(store, config))
    scanned = pool.map_shards(store, shards, task.sweep, "sweep", expected)
    parts = [part for part, _ in scanned]
    # Shards are token-ordered slices and a partition never spans two, so concatenation keeps
    # partitions whole and in token order.
    result = SweepResult(
        facts=[fact for part in parts for fact in part.facts],
        swept_rows=sum(p.swept_rows for p in parts),
        partitions=sum(p.partitions for p in parts),
        seconds=time.monotonic() - started,  # a process sweeps several slices in turn
    )
    scan = merge_scans([stats for _, stats in scanned], running, result.seconds)
    return SweepReport(loaded, result, scan)


@dataclass(frozen=True)
class SweepSlice:
    """One slice's sweep, the same for every slice (plain data: a Dask worker receives it)."""

    shared: SharedFilter
    bucket: str | None
    #: the scan rate, shared by the slices scanning at the time
    scan: ScanRate

    def sweep(self, store: Store, shard: Shard, report: Progress) -> tuple[SweepResult, ScanStats]:
        """The slice's candidates, and how its scan read."""
        throttle = ScanThrottle(self.scan)
        with self.scan.shared_by.joined():
            rows = store.scan_folder_keys(shard, self.bucket, throttle)
            result = sweep(rows, self.shared.get(store), report)
        return result, throttle.stats()


def expected_sweep(store: Store, config: SweepConfig) -> int | None:
    """The folder rows a sweep of the whole ring expects, for its progress: the last sweep's
    count, or an exact count where that is cheap (None for a slice of the ring)."""
    if config.shard.count != 1:
        return None
    previous = store.get_state(swept_count_key(scope_of(store, config.bucket)))
    if previous is not None:
        return int(previous)
    return (
        store.estimate_directory_count(config.bucket).count
        if store.traits.cheap_exact_count
        else None
    )
