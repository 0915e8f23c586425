"""``clean --prefix``: clean one subtree now, after a mass delete, without the store-wide job.

The prefix walk (``pipeline.prefix``) decides exactly which directories under PREFIX are empty and
describes them as the sweep would (``PartitionFacts``); from there the subtree goes through the
nightly clean's own second phase, ``pipeline.slice.plan_and_delete``: the same planner (subtree
collapse, range deletes, the per-partition budget), the same deleter (rate limit, bounded
concurrency, retries, the audit log). Deletes go at T = walk start - ``--min-age``, so a
directory written after T (an object put during the walk rewrites every ancestor's row) survives.

It holds the store's run lease like the nightly clean (a prefix clean and a nightly run never
delete at once) and spends the same live-tombstone budget over the grace period, read from and
charged to the store's ledger, so a prefix clean followed by the nightly run, or a killed one run
again, never puts more than N of our tombstones into a live partition; a live partition over its
budget is rewritten as the nightly clean does.

Resume: a killed prefix clean is resumed by running the same command again. The new walk no longer
sees what the first one deleted and finds the rest again; every delete is idempotent, and the
second run's T is later than the first's, so nothing written after the first walk began is at
risk either way. Each run is its own audit-log generation (``prefix-<walk start>``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dircleaner.filter.generation import fresh_generation_id
from dircleaner.job.orders import CleanSettings, delete_orders
from dircleaner.lease import deleting_under_lease
from dircleaner.paths import DEFAULT_BUCKET
from dircleaner.pipeline.budget import TombstoneBudget
from dircleaner.pipeline.delete import DeleteStats
from dircleaner.pipeline.plan import PlanSummary
from dircleaner.pipeline.prefix import MAX_DEPTH, PrefixWalk, walk_prefix
from dircleaner.pipeline.slice import plan_and_delete
from dircleaner.progress import Progress, no_progress
from dircleaner.scanrate import ScanRate
from dircleaner.store.base import Store

#: the default of --max-deletes: directories a prefix clean walks (and so may delete) at most
DEFAULT_MAX_DELETES = 1_000_000


@dataclass(frozen=True, kw_only=True)
class PrefixCleanConfig(CleanSettings):
    """What to clean under which prefix, and how."""

    #: a normalised directory (``pipeline.prefix.normalise_prefix``)
    prefix: str
    bucket: str = DEFAULT_BUCKET
    max_deletes: int = DEFAULT_MAX_DELETES
    max_depth: int = MAX_DEPTH
    #: how fast the walk may read
    scan: ScanRate = field(default_factory=ScanRate)


@dataclass
class PrefixCleanReport:
    """The walk, the plan and the deletes of one prefix clean."""

    walk: PrefixWalk
    generation: str
    delete_timestamp_us: int
    plan: PlanSummary
    dry_run: bool
    deleted: DeleteStats | None
    phase_seconds: dict[str, float]
    budget: TombstoneBudget | None = None


def run_prefix_clean(
    store: Store,
    config: PrefixCleanConfig,
    progress: Progress = no_progress,
) -> PrefixCleanReport:
    """Walk PREFIX, then plan and delete its empty directories as the nightly clean does.

    Nothing is deleted unless the walk finished within ``max_deletes`` directories and
    ``max_depth`` levels. A real clean holds the store's lease (``LeaseHeld`` when another run
    does); a dry run needs none.
    """
    with deleting_under_lease(store, dry_run=config.dry_run, ttl_s=config.lease_ttl_s) as owner:
        return _walk_and_clean(store, config, progress, owner)


def _walk_and_clean(
    store: Store,
    config: PrefixCleanConfig,
    progress: Progress,
    lease_owner: str | None,
) -> PrefixCleanReport:
    walk = walk_prefix(
        store,
        config.bucket,
        config.prefix,
        max_directories=config.max_deletes,
        max_depth=config.max_depth,
        progress=progress,
        scan=config.scan.over(store.traits.scan_defaults),
    )
    generation = "prefix-" + fresh_generation_id(walk.started_us)
    # T: after the walk began, an entry (re)written survives whatever happens here.
    budget, orders = delete_orders(
        store,
        config,
        snapshot_us=walk.started_us,
        generation=generation,
        throttle=config.throttle,
        lease_owner=lease_owner,
        run_started_us=walk.started_us,
    )
    # The walk probed every directory it calls empty: nothing is left to re-check.
    started = time.monotonic()
    cleaned = plan_and_delete(store, walk.facts, frozenset(), orders, progress)
    phases = {"walk": walk.seconds, "plan": time.monotonic() - started - cleaned.delete_s}
    if cleaned.deleted is not None:
        phases["delete"] = cleaned.delete_s
    return PrefixCleanReport(
        walk=walk,
        generation=generation,
        delete_timestamp_us=orders.delete_timestamp_us,
        plan=cleaned.plan,
        dry_run=config.dry_run,
        deleted=cleaned.deleted,
        phase_seconds=phases,
        budget=budget,
    )
