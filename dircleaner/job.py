"""The job: sweep and clean against a stored filter, and ``run`` = build + clean."""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from dircleaner.bloom import Filter
from dircleaner.build import (
    BuildConfig,
    BuildResult,
    PartialBuild,
    build_filter,
    find_partial_build,
    new_generation,
    scope_of,
    swept_count_key,
)
from dircleaner.deleter import AuditLog, DeleteStats, ThrottleConfig, execute_plan, open_audit_log
from dircleaner.errors import FilterNotFound, UsageError
from dircleaner.filterformat import FilterHeader
from dircleaner.filterstore import (
    collect_garbage,
    find_generation,
    latest_complete,
    load_generation,
)
from dircleaner.generation import parse_generation_id
from dircleaner.guards import GuardConfig, check_filter, check_sweep
from dircleaner.parallel import map_shards
from dircleaner.plan import (
    BucketDir,
    DeletionPlan,
    PartitionFacts,
    drop_nonempty,
    plan_deletions,
)
from dircleaner.progress import Progress, no_progress
from dircleaner.resume import (
    PHASE_BUILD,
    PHASE_CLEAN,
    PHASE_DONE,
    RunState,
    load_run_state,
    row_deletes_already_made,
    save_run_state,
)
from dircleaner.store.base import Shard, Store
from dircleaner.sweep import SweepResult, sweep
from dircleaner.timeutil import now_us

#: candidate directories handed to the store's re-check at once
RECHECK_BATCH = 100_000
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


@dataclass(frozen=True)
class CleanConfig:
    """How to turn candidates into deletes."""

    sweep: SweepConfig = field(default_factory=SweepConfig)
    min_age_s: float = 600.0
    max_tombstones_per_partition: int = 500
    verify: bool = True
    dry_run: bool = False
    throttle: ThrottleConfig = field(default_factory=ThrottleConfig)
    audit_log: Path | None = None


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


@dataclass
class CleanReport:
    """Everything a clean decided and did."""

    sweep: SweepReport
    delete_timestamp_us: int
    verified: int
    dropped_nonempty: int
    plan: DeletionPlan
    dry_run: bool
    deleted: DeleteStats | None
    phase_seconds: dict[str, float]


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
    scope = scope_of(store, config.bucket)
    if config.generation is not None:
        info = find_generation(store, config.generation)
    else:
        info = latest_complete(store, scope)
    header, filt = load_generation(store, info, scope)
    return LoadedFilter(info.generation, header, filt, filt.fill_ratio(), filt.estimated_fpr())


def run_sweep(store: Store, config: SweepConfig, progress: Progress = no_progress) -> SweepReport:
    """Load the filter, refuse it if unsafe, and stream the folders index against it."""
    loaded = load_filter(store, config)
    check_filter(loaded.header, loaded.estimated_fpr, now_us(), config.guards)

    def sweep_part(part_store: Store, shard: Shard, report: Progress) -> SweepResult:
        return sweep(part_store.scan_folder_rows(shard, config.bucket), loaded.filt, report)

    shards = config.shard.split(config.workers) if config.workers > 1 else [config.shard]
    parts = map_shards(store, shards, sweep_part, "sweep", progress)
    # Shards are token-ordered slices and a partition never spans two, so concatenation keeps
    # partitions whole and in token order.
    result = SweepResult(
        facts=[fact for part in parts for fact in part.facts],
        swept_rows=sum(p.swept_rows for p in parts),
        partitions=sum(p.partitions for p in parts),
        seconds=max(p.seconds for p in parts),
    )
    if config.shard.count == 1:
        # The exact count sizes the next build on stores that cannot count cheaply.
        store.put_state(swept_count_key(scope_of(store, config.bucket)), str(result.swept_rows))
    return SweepReport(loaded, result)


def run_clean(store: Store, config: CleanConfig, progress: Progress = no_progress) -> CleanReport:
    """Sweep, guard, re-check, plan and (unless a dry run) delete."""
    with _no_cyclic_gc():
        return _run_clean(store, config, progress)


def _run_clean(store: Store, config: CleanConfig, progress: Progress) -> CleanReport:
    phases: dict[str, float] = {}
    started = time.monotonic()
    swept = run_sweep(store, config.sweep, progress)
    phases["sweep"] = time.monotonic() - started
    header, result = swept.loaded.header, swept.result
    check_sweep(header, result.swept_rows, result.candidates, config.sweep.guards)

    # Deletes at T: a tombstone shadows only writes at or before T, so an entry (re)written
    # after the build started (minus the clock-skew margin) survives whatever happens below.
    delete_ts = header.snapshot_us - int(config.min_age_s * 1_000_000)

    facts = result.facts
    verified = dropped = 0
    if config.verify:
        started = time.monotonic()
        facts, verified, dropped = _recheck(store, facts)
        phases["verify"] = time.monotonic() - started
        progress("verify", verified, verified)

    # One generation, one budget: an interrupted attempt's row deletes count against it.
    used = row_deletes_already_made(config.audit_log, swept.loaded.generation)
    plan = plan_deletions(facts, config.max_tombstones_per_partition, used)
    deleted = None
    if not config.dry_run and plan.actions:
        started = time.monotonic()
        stream = open_audit_log(config.audit_log) if config.audit_log else None
        try:
            audit = AuditLog(stream, swept.loaded.generation, delete_ts) if stream else None
            deleted = execute_plan(store, plan, delete_ts, config.throttle, audit, progress)
        finally:
            if stream is not None:
                stream.close()
        phases["delete"] = time.monotonic() - started
    return CleanReport(swept, delete_ts, verified, dropped, plan, config.dry_run, deleted, phases)


def _recheck(store: Store, facts: list[PartitionFacts]) -> tuple[list[PartitionFacts], int, int]:
    """Re-check every empty directory's objects partition; drop the non-empty (and ancestors).

    Streams the directories in chunks rather than building one set of them all: each candidate
    row is a distinct directory, and an absent partition's own directory is almost always also a
    candidate row of its parent partition, so only the few that are not are kept aside.
    """
    orphans = {(f.key.bucket, f.key.parent) for f in facts if f.dir_absent}
    nonempty: set[BucketDir] = set()
    checked = 0
    chunk: list[BucketDir] = []
    for fact in facts:
        for row in fact.candidates:
            directory = (row.bucket, row.parent + row.name + "/")
            orphans.discard(directory)
            chunk.append(directory)
        if len(chunk) >= RECHECK_BATCH:
            nonempty |= store.nonempty_object_partitions(chunk)
            checked += len(chunk)
            chunk = []
    chunk.extend(sorted(orphans))
    if chunk:
        nonempty |= store.nonempty_object_partitions(chunk)
        checked += len(chunk)
    if nonempty:
        facts = drop_nonempty(facts, nonempty)
    return facts, checked, len(nonempty)


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic GC while millions of long-lived, acyclic rows are alive.

    Every full collection walks all of them (sweep facts, plan actions) and finds nothing;
    reference counting still frees everything as usual.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run_job(
    store: Store, build: BuildConfig, clean: CleanConfig, progress: Progress = no_progress
) -> RunReport:
    """The nightly job: build a fresh filter, clean with it, collect old generations.

    An interrupted run is resumed while its snapshot is fresh: after its build, its filter is
    reused (same salt, so the same candidates) and the clean picks up where it stopped; during
    its build, only the shards it had not stored yet are built, with the generation's own
    parameters.
    """
    scope = scope_of(store, build.bucket)
    generation = _interrupted_generation(store, scope, clean.sweep.guards)
    built = None
    if generation is None:
        built = _build_or_resume(store, scope, build, clean.sweep.guards, progress)
        generation = built.generation
        save_run_state(store, scope, RunState(generation, PHASE_CLEAN))
    # Clean with exactly this generation, never a newer one from another host.
    sweep_config = replace(clean.sweep, bucket=build.bucket, generation=generation)
    cleaned = run_clean(store, replace(clean, sweep=sweep_config), progress)
    if not clean.dry_run:
        save_run_state(store, scope, RunState(generation, PHASE_DONE))
    removed = collect_garbage(store, scope, KEEP_GENERATIONS, protect=[generation])
    resumed = generation if built is None or built.reused_shards else None
    return RunReport(built, cleaned, removed, resumed)


def _interrupted_generation(store: Store, scope: str, guards: GuardConfig) -> str | None:
    """The generation of an interrupted run worth resuming: complete and still fresh."""
    state = load_run_state(store, scope)
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
    store: Store, scope: str, build: BuildConfig, guards: GuardConfig, progress: Progress
) -> BuildResult:
    """Finish the interrupted build of this scope if worth it, else build a new generation.

    The new generation's id is recorded before anything is scanned, so a run killed during the
    build leaves behind which generation its stored parts belong to.
    """
    partial = _interrupted_build(store, scope, build, guards)
    if partial is not None:
        log.info(
            "resuming the interrupted build of generation %s: reusing shards %s, building %s",
            partial.generation,
            _shard_list(p.shard for p in partial.reused),
            _shard_list(s.index for s in partial.missing),
        )
        config = replace(build, generation=partial.generation)
        return build_filter(store, config, progress, resume=partial)
    generation = new_generation(build)
    save_run_state(store, scope, RunState(generation, PHASE_BUILD))
    return build_filter(store, replace(build, generation=generation), progress)


def _interrupted_build(
    store: Store, scope: str, build: BuildConfig, guards: GuardConfig
) -> PartialBuild | None:
    """The interrupted build of this scope worth finishing: fresh, same layout and parameters."""
    state = load_run_state(store, scope)
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
    return find_partial_build(store, build, state.generation)


def _shard_list(indices: Iterable[int]) -> str:
    return ",".join(map(str, indices)) or "none"
