"""The tombstone budget (``dircleaner.pipeline.budget``) on the few methods it needs, not a store:
where N and the grace period come from, and what the deleter's hook charges to the ledger."""

from __future__ import annotations

from collections.abc import Sequence

from dircleaner.model import ActionKind, DeleteAction, FolderRow, PartitionKey
from dircleaner.pipeline.budget import (
    DEFAULT_WARN_THRESHOLD,
    TombstoneLedger,
    TombstoneSettings,
    ledger_charger,
    resolve_budget,
)
from dircleaner.store.records import TombstoneCharge


class Settings:
    def __init__(self, threshold: tuple[int, str] | None) -> None:
        self.threshold = threshold

    def folders_grace_seconds(self) -> tuple[float, str]:
        return 864_000.0, "gc_grace_seconds"

    def tombstone_warn_threshold(self) -> tuple[int, str] | None:
        return self.threshold


class Ledger:
    def __init__(self) -> None:
        self.charged: list[tuple[list[TombstoneCharge], float]] = []

    def tombstones_charged(
        self, partitions: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        return {}

    def charge_tombstones(self, charges: Sequence[TombstoneCharge], ttl_s: float) -> None:
        self.charged.append((list(charges), ttl_s))


def test_n_is_the_explicit_value_else_half_the_cluster_s_warning_else_half_the_default() -> None:
    cluster: TombstoneSettings = Settings((1000, "tombstone_warn_threshold in cassandra.yaml"))
    budget = resolve_budget(cluster, None)
    assert (budget.per_partition, budget.grace_s) == (500, 864_000.0)
    assert "half of 1000" in budget.source
    assert resolve_budget(cluster, 7).per_partition == 7
    assert resolve_budget(Settings(None), None).per_partition == DEFAULT_WARN_THRESHOLD // 2
    assert resolve_budget(Settings((-4, "x")), None).per_partition == 0
    overridden = resolve_budget(cluster, None, grace_override_s=60.0)
    assert (overridden.grace_s, overridden.grace_source) == (60.0, "--grace-period")


def test_the_deleter_s_hook_charges_each_batch_per_partition_under_its_own_id() -> None:
    ledger = Ledger()
    store: TombstoneLedger = ledger
    charge = ledger_charger(store, "gen", "run", 3600.0)
    a, b = PartitionKey(1, "b", "a/"), PartitionKey(2, "b", "b/")
    rows = (FolderRow(1, "b", "a/", "x"), FolderRow(1, "b", "a/", "y"))
    charge(
        [
            DeleteAction(ActionKind.ROW, a, rows[:1]),
            DeleteAction(ActionKind.RANGE, a, rows),
            DeleteAction(ActionKind.PARTITION, b, ()),  # costs none: not charged
        ]
    )
    charge([DeleteAction(ActionKind.PARTITION, b, ())])  # nothing to charge: no call
    charge([DeleteAction(ActionKind.ROW, b, (FolderRow(2, "b", "b/", "z"),))])
    assert ledger.charged == [
        ([TombstoneCharge("b", "a/", "gen", "run.0", 3)], 3600.0),
        ([TombstoneCharge("b", "b/", "gen", "run.2", 1)], 3600.0),
    ]
