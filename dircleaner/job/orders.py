"""The delete orders of one clean: its tombstone budget, the ledger purge, and T.

The nightly clean (``run.py``) and the prefix clean (``prefix.py``) take the same four steps
before planning: resolve the per-partition tombstone budget, purge the ledger entries whose grace
period is over (unless a dry run), build ``DeleteOrders`` from the budget, and compute the delete
timestamp T from the snapshot the deletes are safe against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dircleaner.audit import audit_scope
from dircleaner.deadline import Deadline
from dircleaner.lease import DEFAULT_LEASE_TTL_S
from dircleaner.pipeline.budget import TombstoneBudget, resolve_budget
from dircleaner.pipeline.deleterate import ThrottleConfig
from dircleaner.pipeline.slice import DeleteOrders
from dircleaner.store.base import Store

#: --max-rewrite-rows: a partition of up to this many live rows is copied in well under a minute
DEFAULT_MAX_REWRITE_ROWS = 100_000


@dataclass(frozen=True, kw_only=True)
class CleanSettings:
    """What every clean says about its deletes, each field and its default once: the base of
    ``CleanConfig``, ``PrefixCleanConfig`` and ``ChangedCleanConfig``."""

    min_age_s: float = 600.0
    #: None: half the cluster's tombstone_warn_threshold (see budget.resolve_budget)
    max_tombstones_per_partition: int | None = None
    #: how long a tombstone counts against its partition; None: the store's (gc_grace_seconds,
    #: or --grace-period)
    grace_period_s: float | None = None
    #: rewrite a live partition over its budget when it has at most this many rows to copy
    max_rewrite_rows: int = DEFAULT_MAX_REWRITE_ROWS
    dry_run: bool = False
    throttle: ThrottleConfig = field(default_factory=ThrottleConfig)
    audit_log: Path | None = None
    #: how long the run lease lives without a heartbeat (a killed run's lease expires after it)
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S


def delete_orders(
    store: Store,
    config: CleanSettings,
    *,
    snapshot_us: int,
    generation: str,
    throttle: ThrottleConfig,
    lease_owner: str | None,
    run_started_us: int,
    deadline: Deadline | None = None,
) -> tuple[TombstoneBudget, DeleteOrders]:
    """Resolve the budget, purge the expired ledger (unless a dry run) and build the orders:
    the budget the clean spends, and the orders its deleter follows.

    Deletes at T: a tombstone shadows only writes at or before T, so an entry (re)written after
    ``snapshot_us`` (minus the ``min_age_s`` clock-skew margin) survives whatever the clean does.
    """
    budget = resolve_budget(store, config.max_tombstones_per_partition, config.grace_period_s)
    if not config.dry_run:
        store.purge_expired(budget.grace_s)
    orders = DeleteOrders(
        max_row_tombstones=budget.per_partition,
        ledger_ttl_s=budget.grace_s,
        max_rewrite_rows=config.max_rewrite_rows,
        delete_timestamp_us=snapshot_us - int(config.min_age_s * 1_000_000),
        generation=generation,
        throttle=throttle,
        audit_log=config.audit_log,
        dry_run=config.dry_run,
        lease_owner=lease_owner,
        audit_scope=audit_scope(store),
        run_started_us=run_started_us,
        deadline=deadline,
    )
    return budget, orders
