"""The nightly job: ``run`` = build a fresh filter (or resume an interrupted run's), then clean.

A run refused by a guard was not interrupted: the next one builds afresh.

The clean itself is ``job.clean`` (its top function reads as the night's clean runs); the sweep
and the filter load are ``job.sweep``. This module decides what to build or reuse, records the
run's phase for a resumed run, and collects old generations afterwards.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import partial

from dircleaner.errors import (
    DircleanerError,
    FilterCorrupt,
    FilterMismatch,
    FilterNotFound,
    GuardRefused,
    UsageError,
)
from dircleaner.filter.generation import parse_generation_id
from dircleaner.filter.stored import collect_garbage, find_generation
from dircleaner.job.clean import (
    CleanConfig,
    CleanReport,
    run_clean,
)
from dircleaner.job.resume import (
    PHASE_BUILD,
    PHASE_CLEAN,
    PHASE_DONE,
    PHASE_REFUSED,
    CleanCheckpoint,
    CleanProgress,
    RunState,
    load_run_state,
    save_run_state,
)
from dircleaner.job.sweep import (
    LoadedFilter,
)
from dircleaner.lease import deleting_under_lease
from dircleaner.pipeline.build import (
    BuildConfig,
    BuildResult,
    PartialBuild,
    build_filter,
    find_partial_build,
    new_generation,
    scope_of,
)
from dircleaner.pipeline.guards import GuardConfig, check_scan_consistency
from dircleaner.progress import Progress, no_progress
from dircleaner.store.base import Store
from dircleaner.timeutil import now_us
from dircleaner.workers.base import Workers

# The sweep's and the clean's names, where the CLI, the tests and the benches have found them.
__all__ = ["KEEP_GENERATIONS", "RunReport", "run_job"]

#: complete generations kept after a build (older ones are garbage-collected)
KEEP_GENERATIONS = 3
#: what refuses a clean before its first delete: the guards and the filter's own checks
REFUSED_BEFORE_DELETING = (GuardRefused, FilterCorrupt, FilterMismatch)

log = logging.getLogger(__name__)


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
        build = replace(build, persist=False)
    # One run at a time, from before the build: a second run refuses before it scans anything.
    with deleting_under_lease(store, dry_run=clean.dry_run, ttl_s=clean.lease_ttl_s) as owner:
        return _run_job(store, build, clean, progress, owner, workers)


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
    loaded = None
    if built is not None and built.in_memory is not None:
        header, filt = built.in_memory
        loaded = LoadedFilter(generation, header, filt, filt.fill_ratio(), filt.estimated_fpr())

    # Clean with exactly this generation, never a newer one from another host.
    sweep_config = replace(clean.sweep, bucket=build.bucket, generation=generation)
    # The build counted the folder rows it sized for moments ago (where counting is cheap): the
    # sweep's progress expects as many rather than counting the table again.
    whole = build.shard.count == 1 and sweep_config.shard.count == 1
    counted = built.sizing.folder_rows if built is not None and whole else None
    checkpoint = CleanCheckpoint(previous, partial(_save_clean, store, scope, generation))
    try:
        cleaned = run_clean(
            store,
            replace(clean, sweep=sweep_config),
            progress,
            checkpoint,
            lease_owner,
            workers,
            loaded=loaded,
            expected_rows=counted,
        )
    except DircleanerError as exc:
        exc.details.setdefault("generation", generation)
        if record and isinstance(exc, REFUSED_BEFORE_DELETING):
            # Not an interrupted run: the next one builds afresh rather than reusing this
            # generation (and its T), whose candidates a guard has just refused.
            save_run_state(store, scope, RunState(generation, PHASE_REFUSED))
        raise
    if not record:
        return RunReport(built, cleaned, [], None)
    if cleaned.night_end is None or not cleaned.night_end.reached:
        save_run_state(store, scope, RunState(generation, PHASE_DONE))
    # else stopped at the deadline: the run state says how far the clean got, and the next
    # run resumes it (with this generation, and its T, while the filter is fresh).
    removed = collect_garbage(store, scope, KEEP_GENERATIONS, protect=[generation])
    resumed = generation if built is None or built.reused_shards else None
    return RunReport(built, cleaned, removed, resumed)


def _save_clean(store: Store, scope: str, generation: str, progress: CleanProgress) -> None:
    """Record how far the clean with ``generation`` got (what a resumed run starts from)."""
    save_run_state(store, scope, RunState(generation, PHASE_CLEAN, progress))


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
