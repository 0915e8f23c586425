"""The job: sweep and clean against a stored filter, and ``run`` = build + clean."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from dircleaner.errors import DircleanerError, FilterNotFound, UsageError
from dircleaner.filter.bloom import start_loading_kernels
from dircleaner.filter.engines import Filter
from dircleaner.filter.format import FilterHeader
from dircleaner.filter.generation import parse_generation_id
from dircleaner.filter.sizing import record_clean
from dircleaner.filter.stored import (
    collect_garbage,
    find_generation,
    latest_complete,
    load_generation,
)
from dircleaner.gcpause import cyclic_gc_paused
from dircleaner.job.cleanphases import (
    CleanCheckpoint,
    CleanDecision,
    PhaseClock,
    SliceWork,
    add_totals,
)
from dircleaner.job.orders import delete_orders
from dircleaner.job.resume import (
    PHASE_BUILD,
    PHASE_CLEAN,
    PHASE_DONE,
    CleanProgress,
    RunState,
    load_run_state,
    save_run_state,
)
from dircleaner.job.sharedfilter import SharedFilter
from dircleaner.job.sliceorder import (
    longest_first,
    record_seconds,
    recorded_seconds,
    slice_seconds_key,
)
from dircleaner.lease import DEFAULT_LEASE_TTL_S, Lease
from dircleaner.model import Shard
from dircleaner.pipeline.budget import TombstoneBudget
from dircleaner.pipeline.build import (
    BuildConfig,
    BuildResult,
    PartialBuild,
    build_filter,
    find_partial_build,
    new_generation,
    scope_of,
    swept_count_key,
)
from dircleaner.pipeline.delete import DeleteStats, ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig, check_filter, check_scan_consistency
from dircleaner.pipeline.plan import DeletionPlan, PlanSummary
from dircleaner.pipeline.slice import (
    merge_delete_stats,
)
from dircleaner.pipeline.sweep import SweepResult, SweepTotals, sweep
from dircleaner.progress import Progress, expecting, no_progress
from dircleaner.scanrate import ScanRate, ScanStats, ScanThrottle
from dircleaner.scanrate import merge as merge_scans
from dircleaner.store.base import Store
from dircleaner.timeutil import now_us
from dircleaner.workers.base import CLEAN, LocalWorkers, Workers

#: --max-rewrite-rows: a partition of up to this many live rows is copied in well under a minute
DEFAULT_MAX_REWRITE_ROWS = 100_000
#: complete generations kept after a build (older ones are garbage-collected)
KEEP_GENERATIONS = 3

log = logging.getLogger(__name__)


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
class CleanConfig:
    """How to turn candidates into deletes."""

    sweep: SweepConfig = field(default_factory=SweepConfig)
    min_age_s: float = 600.0
    #: None: half the cluster's tombstone_warn_threshold (see budget.resolve_budget)
    max_tombstones_per_partition: int | None = None
    verify: bool = True
    dry_run: bool = False
    throttle: ThrottleConfig = field(default_factory=ThrottleConfig)
    audit_log: Path | None = None
    #: how long the run lease lives without a heartbeat (a killed run's lease expires after it)
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S
    #: rewrite a live partition over its budget when it has at most this many rows to copy
    max_rewrite_rows: int = DEFAULT_MAX_REWRITE_ROWS
    #: how long a tombstone counts against its partition; None: the store's (gc_grace_seconds)
    grace_period_s: float | None = None
    #: when the run began (wall clock, µs; the audit log records it); None: when the clean began
    started_us: int | None = None


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


@dataclass
class CleanSweep:
    """The sweep a clean ran (its candidates stayed with the workers that found them)."""

    loaded: LoadedFilter
    result: SweepTotals
    #: how the scan of the folders index read (rate, page latency, back-offs)
    scan: ScanStats = field(default_factory=ScanStats)


@dataclass
class CleanReport:
    """Everything a clean decided and did."""

    sweep: CleanSweep
    delete_timestamp_us: int
    verified: int
    dropped_nonempty: int
    plan: PlanSummary
    dry_run: bool
    deleted: DeleteStats | None
    phase_seconds: dict[str, float]
    #: the whole plan, kept only by an in-process clean (one worker) for callers that inspect it
    deletion_plan: DeletionPlan | None = None
    #: slices of the ring an interrupted attempt had finished, not swept again
    slices_already_clean: tuple[int, ...] = ()
    #: the per-partition tombstone budget over the grace period, and where it came from
    budget: TombstoneBudget | None = None
    #: a dry run's verdict: why a real run would be refused (None: it would go ahead)
    would_be_refused: str | None = None
    #: of ``verified``, the directories that were not candidates: the own directories of
    #: partitions found empty whose row another slice swept (each slice re-checks them)
    verified_parents: int = 0


@dataclass
class RunReport:
    """build + clean."""

    #: None when an interrupted run's fresh, complete filter was reused
    build: BuildResult | None
    clean: CleanReport
    garbage_collected: list[str]
    #: the interrupted run's generation this run reused whole, or completed (``build`` then
    #: tells which shards it reused and which it built)
    resumed_generation: str | None = None


def load_filter(store: Store, config: SweepConfig) -> LoadedFilter:
    """Find, verify and merge the filter generation this sweep should use."""
    start_loading_kernels()  # while the filter is read: the sweep's tests use them
    scope = scope_of(store, config.bucket)
    if config.generation is not None:
        info = find_generation(store, config.generation)
    else:
        info = latest_complete(store, scope, force=config.guards.force)
    header, filt = load_generation(store, info, scope)
    return LoadedFilter(info.generation, header, filt, filt.fill_ratio(), filt.estimated_fpr())


def run_sweep(
    store: Store,
    config: SweepConfig,
    progress: Progress = no_progress,
    workers: Workers | None = None,
) -> SweepReport:
    """Load the filter, refuse it if unsafe, and stream the folders index against it."""
    loaded = load_filter(store, config)
    check_filter(loaded.header, loaded.estimated_fpr, now_us(), config.guards)
    pool = workers or LocalWorkers(config.workers)
    shared = SharedFilter(loaded.generation, config.bucket, loaded.filt)
    bucket = config.bucket
    shards = pool.slices(config.shard, CLEAN)
    running = min(len(shards), pool.parallelism)
    # The cap is the total, shared by the slices that scan at once.
    share = config.scan.over(store.traits.scan_defaults).share(running)

    def sweep_part(
        part_store: Store, shard: Shard, report: Progress
    ) -> tuple[SweepResult, ScanStats]:
        throttle = ScanThrottle(share)
        rows = part_store.scan_folder_keys(shard, bucket, throttle)
        return sweep(rows, shared.get(part_store), report), throttle.stats()

    started = time.monotonic()
    expected = expecting(progress, "sweep", expected_sweep(store, config))
    scanned = pool.map_shards(store, shards, sweep_part, "sweep", expected)
    parts = [part for part, _ in scanned]
    # Shards are token-ordered slices and a partition never spans two, so concatenation keeps
    # partitions whole and in token order.
    result = SweepResult(
        facts=[fact for part in parts for fact in part.facts],
        swept_rows=sum(p.swept_rows for p in parts),
        partitions=sum(p.partitions for p in parts),
        seconds=time.monotonic() - started,  # a process sweeps several slices in turn
    )
    if config.shard.count == 1 and not store.traits.read_only:
        # The exact count sizes the next build on stores that cannot count cheaply.
        store.put_state(swept_count_key(scope_of(store, config.bucket)), str(result.swept_rows))
    scan = merge_scans([stats for _, stats in scanned], running, result.seconds)
    return SweepReport(loaded, result, scan)


def expected_sweep(store: Store, config: SweepConfig) -> int | None:
    """The folder rows a sweep of the whole ring expects, for its progress: the last sweep's
    count, or an exact count where that is cheap (None for a slice of the ring)."""
    if config.shard.count != 1:
        return None
    previous = store.get_state(swept_count_key(scope_of(store, config.bucket)))
    if previous is not None:
        return int(previous)
    if not store.traits.cheap_exact_count:
        return None
    return store.estimate_directory_count(config.bucket).count


def run_clean(
    store: Store,
    config: CleanConfig,
    progress: Progress = no_progress,
    checkpoint: CleanCheckpoint | None = None,
    lease_owner: str | None = None,
    workers: Workers | None = None,
    *,
    loaded: LoadedFilter | None = None,
) -> CleanReport:
    """Sweep, guard, re-check, plan and (unless a dry run) delete.

    With ``checkpoint``, the clean skips the slices an interrupted attempt already finished and
    reports each slice as it finishes. A clean that deletes holds the store's lease: the
    caller's (``lease_owner``, held by a ``Lease`` it keeps alive), or one taken here (LeaseHeld
    when another run has it). ``loaded``: the filter to use, not read from the store (a dry
    run's, never stored).
    """
    check_scan_consistency(store, config.verify)
    pool = workers or LocalWorkers(config.sweep.workers)
    with cyclic_gc_paused():
        if config.dry_run or lease_owner is not None:
            return _run_clean(store, config, progress, checkpoint, pool, lease_owner, loaded)
        with Lease.acquire(store, ttl_s=config.lease_ttl_s) as lease:
            return _run_clean(store, config, progress, checkpoint, pool, lease.owner, loaded)


def _run_clean(
    store: Store,
    config: CleanConfig,
    progress: Progress,
    checkpoint: CleanCheckpoint | None,
    pool: Workers,
    lease_owner: str | None,
    loaded: LoadedFilter | None,
) -> CleanReport:
    started_us = config.started_us or now_us()
    sweep_config = config.sweep
    if loaded is None:
        loaded = load_filter(store, sweep_config)
    check_filter(loaded.header, loaded.estimated_fpr, now_us(), sweep_config.guards)
    slices = pool.slices(sweep_config.shard, CLEAN)
    previous = checkpoint.previous if checkpoint else None
    if previous is None or previous.slices != len(slices):
        previous = CleanProgress(len(slices), frozenset(), frozenset())
    scope = scope_of(store, sweep_config.bucket)
    # The slices the last run found slowest go first, so that none is left to run alone.
    order_key = slice_seconds_key(scope, sweep_config.shard, len(slices))
    known = recorded_seconds(store, order_key, len(slices))
    todo = longest_first([i for i in range(len(slices)) if i not in previous.done], known)
    # The rate is the total, shared by the slices that delete at once.
    running = min(len(todo), pool.parallelism)
    throttle = config.throttle
    if running > 1 and throttle.rate:
        throttle = replace(throttle, rate=throttle.rate / running)
    # T: after the filter's build started, an entry (re)written survives whatever happens here.
    planned = delete_orders(
        store,
        config,
        snapshot_us=loaded.header.snapshot_us,
        generation=loaded.generation,
        throttle=throttle,
        lease_owner=lease_owner,
        run_started_us=started_us,
        keep_plan=len(todo) == 1,
    )
    budget, orders = planned.budget, planned.delete
    work = SliceWork(
        SharedFilter(loaded.generation, sweep_config.bucket, loaded.filt),
        sweep_config.bucket,
        config.verify,
        orders,
        sweep_config.scan.over(store.traits.scan_defaults).share(running),
    )
    decision = CleanDecision(
        loaded.header,
        sweep_config.guards,
        dry_run=config.dry_run,
        previous=previous,
        todo=todo,
        checkpoint=checkpoint,
    )
    clock = PhaseClock(decision.decide)
    tallies, cleaned = pool.run_two_phases(
        store,
        [slices[i] for i in todo],
        work.sweep,
        clock.decide,
        work.clean,
        ("sweep", "clean"),
        expecting(
            progress, "sweep", expected_sweep(store, sweep_config) if not previous.done else None
        ),
        decision.slice_done,
    )
    phases = clock.phases(tallies, cleaned, config.verify)
    if len(slices) > 1 and not store.traits.read_only:
        ran = {i: t.totals.seconds + t.verify_s for i, t in zip(todo, tallies, strict=True)}
        record_seconds(store, order_key, known, ran)
    totals = replace(add_totals([t.totals for t in tallies]), seconds=phases["sweep"])
    whole = not previous.done and sweep_config.shard.count == 1
    if whole and not store.traits.read_only:  # a dry run of a read-only store writes nothing
        # The exact count sizes the next build on stores that cannot count cheaply.
        store.put_state(swept_count_key(scope), str(totals.swept_rows))
    deleted = merge_delete_stats([c.deleted for c in cleaned])
    if deleted is not None:
        # A process deletes several slices one after the other: the deletes took the phase's
        # time, and only ``running`` slices' throttles ran at once.
        throttled = sum(c.deleted is not None for c in cleaned)
        final_rate = deleted.final_rate / throttled * min(running, throttled)
        deleted = replace(deleted, seconds=phases["delete"], final_rate=final_rate)
        if whole:
            # The folder rows left are what the next build's growth is measured from (the
            # empties just removed were never in the filter).
            gone = deleted.directories if deleted.rows_removed is None else deleted.rows_removed
            record_clean(store, scope, loaded.generation, totals.swept_rows - gone)
    scan = merge_scans([t.scan for t in tallies], running, phases["sweep"])
    return CleanReport(
        sweep=CleanSweep(loaded, totals, scan),
        delete_timestamp_us=orders.delete_timestamp_us,
        verified=sum(t.checked for t in tallies),
        dropped_nonempty=sum(len(t.nonempty) for t in tallies),
        plan=sum((c.plan for c in cleaned), PlanSummary()),
        dry_run=config.dry_run,
        deleted=deleted,
        phase_seconds=phases,
        deletion_plan=cleaned[0].deletion_plan if len(cleaned) == 1 else None,
        slices_already_clean=tuple(sorted(previous.done)),
        budget=budget,
        would_be_refused=decision.verdict,
        verified_parents=sum(t.checked_parents for t in tallies),
    )


def run_job(
    store: Store,
    build: BuildConfig,
    clean: CleanConfig,
    progress: Progress = no_progress,
    workers: Workers | None = None,
) -> RunReport:
    """The nightly job: build a fresh filter, clean with it, collect old generations.

    An interrupted run is resumed while its snapshot is fresh: after its build, its filter is
    reused (same salt, so the same candidates) and the clean picks up where it stopped; during
    its build, only the shards it had not stored yet are built, with the generation's own
    parameters.

    A dry run writes nothing: its filter is kept in memory (so it works on a read-only store)
    and is used by forked local workers only (a cluster's workers load a filter from the store).
    """
    check_scan_consistency(store, clean.verify)  # before the build, not after it
    clean = replace(clean, started_us=clean.started_us or now_us())
    if clean.dry_run:
        if workers is not None and workers.outlives_client:
            raise UsageError(
                "a dry run keeps its filter in memory, where a cluster's workers cannot load"
                " it: run it without --scheduler"
            )
        return _run_job(store, replace(build, persist=False), clean, progress, None, workers)
    # One run at a time, from before the build: a second run refuses before it scans anything.
    with Lease.acquire(store, ttl_s=clean.lease_ttl_s) as lease:
        return _run_job(store, build, clean, progress, lease.owner, workers)


def _run_job(
    store: Store,
    build: BuildConfig,
    clean: CleanConfig,
    progress: Progress,
    lease_owner: str | None,
    workers: Workers | None,
) -> RunReport:
    scope = scope_of(store, build.bucket)
    # A dry run neither resumes nor leaves anything to resume: the next real run builds afresh.
    record = not clean.dry_run
    state = load_run_state(store, scope) if record else None
    generation = _interrupted_generation(store, state, clean.sweep.guards)
    built = None
    previous = None
    if generation is None:
        built = _build_or_resume(
            store, scope, state, build, clean.sweep.guards, progress, record, workers
        )
        generation = built.generation
        if record:
            save_run_state(store, scope, RunState(generation, PHASE_CLEAN))
    elif state is not None:
        previous = state.clean
    chosen = generation
    loaded = None
    if built is not None and built.in_memory is not None:
        header, filt = built.in_memory
        loaded = LoadedFilter(generation, header, filt, filt.fill_ratio(), filt.estimated_fpr())

    def save(clean_progress: CleanProgress) -> None:
        save_run_state(store, scope, RunState(chosen, PHASE_CLEAN, clean_progress))

    # Clean with exactly this generation, never a newer one from another host.
    sweep_config = replace(clean.sweep, bucket=build.bucket, generation=generation)
    checkpoint = CleanCheckpoint(previous, save)
    try:
        cleaned = run_clean(
            store,
            replace(clean, sweep=sweep_config),
            progress,
            checkpoint,
            lease_owner,
            workers,
            loaded=loaded,
        )
    except DircleanerError as exc:
        exc.details.setdefault("generation", generation)
        raise
    if not record:
        return RunReport(built, cleaned, [], None)
    save_run_state(store, scope, RunState(generation, PHASE_DONE))
    removed = collect_garbage(store, scope, KEEP_GENERATIONS, protect=[generation])
    resumed = generation if built is None or built.reused_shards else None
    return RunReport(built, cleaned, removed, resumed)


def _interrupted_generation(
    store: Store, state: RunState | None, guards: GuardConfig
) -> str | None:
    """The generation of an interrupted run worth resuming: complete and still fresh."""
    if state is None or state.phase != PHASE_CLEAN:
        return None
    try:
        info = find_generation(store, state.generation)
    except FilterNotFound:
        return None
    header = info.header
    if not info.complete or header is None or not _fresh(header.snapshot_us, guards):
        return None
    return state.generation


def _fresh(snapshot_us: int, guards: GuardConfig) -> bool:
    """Whether a generation's snapshot is recent enough to clean with (--max-filter-age)."""
    return (now_us() - snapshot_us) / 1e6 <= guards.max_filter_age_s


def _build_or_resume(
    store: Store,
    scope: str,
    state: RunState | None,
    build: BuildConfig,
    guards: GuardConfig,
    progress: Progress,
    record: bool,
    workers: Workers | None,
) -> BuildResult:
    """Finish the interrupted build of this scope if worth it, else build a new generation.

    The new generation's id is recorded before anything is scanned, so a run killed during the
    build leaves behind which generation its stored parts belong to.
    """
    partial = _interrupted_build(store, state, build, guards, workers)
    if partial is not None:
        log.info(
            "resuming the interrupted build of generation %s: reusing shards %s, building %s",
            partial.generation,
            _shard_list(p.shard for p in partial.reused),
            _shard_list(s.index for s in partial.missing),
        )
        config = replace(build, generation=partial.generation)
        return build_filter(store, config, progress, resume=partial, workers=workers)
    generation = new_generation(build)
    if record:
        save_run_state(store, scope, RunState(generation, PHASE_BUILD))
    return build_filter(store, replace(build, generation=generation), progress, workers=workers)


def _interrupted_build(
    store: Store,
    state: RunState | None,
    build: BuildConfig,
    guards: GuardConfig,
    workers: Workers | None,
) -> PartialBuild | None:
    """The interrupted build worth finishing: fresh, same layout and parameters."""
    if state is None or state.phase != PHASE_BUILD:
        return None
    if build.generation not in (None, state.generation):
        return None  # the caller asked for a generation of its own
    try:
        snapshot_us, _salt = parse_generation_id(state.generation)
    except UsageError:
        return None  # an unreadable record only costs a fresh build
    if not _fresh(snapshot_us, guards):
        log.info("not resuming the build of generation %s: too old", state.generation)
        return None
    return find_partial_build(store, build, state.generation, workers)


def _shard_list(indices: Iterable[int]) -> str:
    return ",".join(map(str, indices)) or "none"
