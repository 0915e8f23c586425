"""The delete orders of one clean: its tombstone budget, the ledger purge, and T.

The nightly clean (``run.py``) and the prefix clean (``prefix.py``) take the same four steps
before planning: resolve the per-partition tombstone budget, purge the ledger entries whose grace
period is over (unless a dry run), build ``DeleteOrders`` from the budget, and compute the delete
timestamp T from the snapshot the deletes are safe against.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dircleaner.audit import audit_scope
from dircleaner.deadline import Deadline
from dircleaner.pipeline.budget import TombstoneBudget, resolve_budget
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.slice import DeleteOrders
from dircleaner.store.base import Store


class CleanSettings(Protocol):
    """What a clean's config says about its deletes (``CleanConfig``, ``PrefixCleanConfig``)."""

    @property
    def max_tombstones_per_partition(self) -> int | None: ...
    @property
    def grace_period_s(self) -> float | None: ...
    @property
    def max_rewrite_rows(self) -> int: ...
    @property
    def min_age_s(self) -> float: ...
    @property
    def audit_log(self) -> Path | None: ...
    @property
    def dry_run(self) -> bool: ...


@dataclass(frozen=True)
class Orders:
    """The budget a clean spends and the orders its deleter follows."""

    budget: TombstoneBudget
    delete: DeleteOrders


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
) -> Orders:
    """Resolve the budget, purge the expired ledger (unless a dry run) and build the orders.

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
    return Orders(budget, orders)
