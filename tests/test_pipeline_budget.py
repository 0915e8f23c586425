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


def test_the_deleter_s_hook_charges_each_partition_its_running_total_under_one_id() -> None:
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
    charge([DeleteAction(ActionKind.ROW, a, (FolderRow(1, "b", "a/", "w"),))])
    assert ledger.charged == [
        ([TombstoneCharge("b", "a/", "gen", "run", 3)], 3600.0),
        ([TombstoneCharge("b", "b/", "gen", "run", 1)], 3600.0),
        ([TombstoneCharge("b", "a/", "gen", "run", 4)], 3600.0),  # a/'s total so far
    ]


class UpsertLedger:
    """A ledger keyed as the stores key it: a charge of the same key replaces the one before."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str, str], int] = {}
        self.writes = 0

    def tombstones_charged(
        self, partitions: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        wanted = set(partitions)
        out: dict[tuple[str, str], int] = {}
        for (bucket, parent, _gen, _id), cost in self.rows.items():
            if (bucket, parent) in wanted:
                out[(bucket, parent)] = out.get((bucket, parent), 0) + cost
        return out

    def charge_tombstones(self, charges: Sequence[TombstoneCharge], ttl_s: float) -> None:
        for c in charges:
            self.writes += 1
            self.rows[(c.bucket, c.parent, c.generation, c.charge_id)] = c.cost


def test_a_night_of_spread_deletes_leaves_one_ledger_row_per_live_partition() -> None:
    """Deletes go round-robin over the partitions (as on Cassandra), groups of 1,024 actions:
    every group touches hundreds of partitions, each partition many groups. The ledger keeps
    a row per partition and the exact sums, at every group (charged ahead of the deletes)."""
    from dircleaner.model import PartitionFacts
    from dircleaner.pipeline.plan import plan_deletions

    facts = []
    for p in range(2000):
        key = PartitionKey(p, "b", f"p{p:04d}/")
        # every other name a candidate: no two adjacent, so row deletes, no ranges
        names = [f"n{i:03d}" for i in range(0, 2 * (5 + p % 20), 2)]
        rows = tuple(FolderRow(p, "b", key.parent, n) for n in names)
        ordinals = tuple(range(0, 2 * len(rows), 2))
        facts.append(PartitionFacts(key, 2 * len(rows) + 1, rows, ordinals=ordinals))
    plan = plan_deletions(facts, 500, spread=True)
    assert plan.deletes.row == sum(5 + p % 20 for p in range(2000)) == 29_000
    ledger = UpsertLedger()
    charge = ledger_charger(ledger, "gen", "attempt", 3600.0)
    sent: dict[tuple[str, str], int] = {}
    groups = [plan.actions[i : i + 1024] for i in range(0, len(plan.actions), 1024)]
    for group in groups:
        charge(group)
        for action in group:
            key = (action.partition.bucket, action.partition.parent)
            sent[key] = sent.get(key, 0) + action.tombstones
        assert ledger.tombstones_charged(list(sent)) == sent  # exact, before each group goes
    # one row per live partition; it was one per group that touched it, as many as the writes
    assert len(ledger.rows) == 2000
    assert 2000 < ledger.writes <= 29_000


def test_a_slice_charging_more_partitions_than_it_keeps_totals_for_renews_its_id() -> None:
    """A backlog night charges millions of live partitions: the hook keeps the running totals
    of at most ``held`` of them, then goes on under a new id, so no id's rows cover more than
    ``held`` partitions, and the ledger's sums stay exact before every group."""
    from dircleaner.model import PartitionFacts
    from dircleaner.pipeline.plan import plan_deletions

    facts = []
    for p in range(600):
        key = PartitionKey(p, "b", f"p{p:04d}/")
        names = [f"n{i:03d}" for i in range(0, 2 * (3 + p % 7), 2)]
        rows = tuple(FolderRow(p, "b", key.parent, n) for n in names)
        facts.append(
            PartitionFacts(key, 2 * len(rows) + 1, rows, ordinals=tuple(range(0, 2 * len(rows), 2)))
        )
    plan = plan_deletions(facts, 500, spread=True)
    ledger = UpsertLedger()
    charge = ledger_charger(ledger, "gen", "attempt", 3600.0, held=100)
    sent: dict[tuple[str, str], int] = {}
    for start in range(0, len(plan.actions), 64):
        group = plan.actions[start : start + 64]
        charge(group)
        for action in group:
            key = (action.partition.bucket, action.partition.parent)
            sent[key] = sent.get(key, 0) + action.tombstones
        assert ledger.tombstones_charged(list(sent)) == sent
    per_id: dict[str, int] = {}
    for _bucket, _parent, _gen, charge_id in ledger.rows:
        per_id[charge_id] = per_id.get(charge_id, 0) + 1
    assert len(per_id) > 6 and max(per_id.values()) <= 100, per_id
    assert set(per_id) == {"attempt", *(f"attempt.{n}" for n in range(1, len(per_id)))}
