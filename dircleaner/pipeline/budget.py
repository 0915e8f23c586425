"""The live-tombstone budget over the grace period, kept in the store's ledger.

Cassandra keeps a tombstone for the folders table's ``gc_grace_seconds`` (and until compaction),
so nightly runs add up: the budget is not per run but per grace period. No live partition may
hold more than N of our tombstones (a row delete 1, a range delete 2) written within the grace
period, however many runs fall in it. What each run spends is charged in the store's ledger
*before* the deletes it pays for, and expires with the grace period; the next run (resumed, on
another host, or tomorrow's) reads the ledger before planning and plans only what is left.

A charge written but never spent (a run killed between the charge and its deletes) only makes
the budget tighter: never looser.

This module needs only the few store methods of ``TombstoneSettings`` and ``TombstoneLedger``
(every ``Store`` has them), so the budget is computed and tested without a store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from dircleaner.model import DeleteAction, PartitionFacts
from dircleaner.pipeline.plan import dead_partitions
from dircleaner.store.records import TombstoneCharge

#: Cassandra's default tombstone_warn_threshold, when the node does not say
DEFAULT_WARN_THRESHOLD = 1000
#: partitions whose running total a slice's deletes keep before charging under a new id
LEDGER_RUNNING_TOTALS = 200_000


class TombstoneSettings(Protocol):
    """Where the budget's figures come from (a ``Store``)."""

    def folders_grace_seconds(self) -> tuple[float, str]:
        """How long a folders tombstone is kept, and where that figure came from."""
        ...

    def tombstone_warn_threshold(self) -> tuple[int, str] | None:
        """The lowest tombstone warning the cluster has set, and which setting it is."""
        ...


class TombstoneLedger(Protocol):
    """The ledger of what runs spent (a ``Store``): read before planning, charged before
    each batch of deletes."""

    def tombstones_charged(
        self, partitions: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        """The unexpired charges of each ``(bucket, parent)``, summed (absent: none)."""
        ...

    def charge_tombstones(self, charges: Sequence[TombstoneCharge], ttl_s: float) -> None:
        """Record charges that expire after ``ttl_s``."""
        ...


@dataclass(frozen=True)
class TombstoneBudget:
    """How many of our tombstones a live partition may hold, for how long, and why."""

    per_partition: int
    #: where ``per_partition`` came from
    source: str
    #: how long a tombstone counts (the folders table's grace period), seconds
    grace_s: float
    grace_source: str


def resolve_budget(
    store: TombstoneSettings, explicit: int | None, grace_override_s: float | None = None
) -> TombstoneBudget:
    """N: ``explicit`` if given, else half the lowest tombstone warning the cluster has set
    (``Store.tombstone_warn_threshold``: Cassandra 5.0's partition_tombstones_warn_threshold
    guardrail or tombstone_warn_threshold), or of Cassandra's default 1000; the grace period
    from the store unless overridden."""
    if grace_override_s is not None:
        grace_s, grace_source = grace_override_s, "--grace-period"
    else:
        grace_s, grace_source = store.folders_grace_seconds()
    if explicit is not None:
        return TombstoneBudget(explicit, "--max-tombstones-per-partition", grace_s, grace_source)
    threshold = store.tombstone_warn_threshold()
    if threshold is None:
        source = f"half the default tombstone_warn_threshold ({DEFAULT_WARN_THRESHOLD})"
        return TombstoneBudget(DEFAULT_WARN_THRESHOLD // 2, source, grace_s, grace_source)
    value, where = threshold
    return TombstoneBudget(max(0, value // 2), f"half of {value}, {where}", grace_s, grace_source)


def charged_so_far(
    store: TombstoneLedger, facts: Iterable[PartitionFacts]
) -> dict[tuple[str, str], int]:
    """What the ledger holds for every partition of ``facts`` that may take tombstones (a
    dead partition goes with a partition deletion, which costs none)."""
    facts = list(facts)
    dead = dead_partitions(facts)
    keys = [(f.key.bucket, f.key.parent) for f in facts if (f.key.bucket, f.key.parent) not in dead]
    return store.tombstones_charged(keys) if keys else {}


def ledger_charger(
    store: TombstoneLedger,
    generation: str,
    charge_id: str,
    ttl_s: float,
    held: int = LEDGER_RUNNING_TOTALS,
) -> Callable[[Sequence[DeleteAction]], None]:
    """A hook for the deleter: charges a group of actions' tombstones, per partition, before
    they are issued.

    One ledger row per partition for the whole attempt (``charge_id``, one per slice's
    deletes), rewritten with the partition's running total as each group that touches it is
    charged: the stores' charges are upserts by key. With the deletes spread round-robin over
    the partitions, a group of a thousand actions touches about a thousand partitions, so a row
    per group and partition (as charges once were) made the ledger, and the next night's
    reads of it, grow with the deletes; now they follow the live partitions. The sum the ledger
    holds for a partition is the same at every moment; a rewritten row expires with the
    attempt's last charge of it, after, never before, the tombstones it pays for.

    The running totals are kept for at most ``held`` partitions: past that, the hook forgets
    them and goes on under a new charge id (``charge_id.1``, ``.2``, …), so a partition charged
    again starts a second row from zero beside its first, and the ledger's sum stays exact (a
    backlog night charges millions of partitions: their totals once held hundreds of MB).
    """
    spent: Counter[tuple[str, str]] = Counter()
    current, renewed = charge_id, 0  # the id charged under, and how many times it was renewed

    def charge(actions: Sequence[DeleteAction]) -> None:
        nonlocal current, renewed
        group: Counter[tuple[str, str]] = Counter()
        for action in actions:
            if action.tombstones:
                group[(action.partition.bucket, action.partition.parent)] += action.tombstones
        if not group:
            return
        if len(spent) + len(group) > held and spent:
            spent.clear()
            renewed += 1
            current = f"{charge_id}.{renewed}"
        spent.update(group)
        store.charge_tombstones(
            [
                TombstoneCharge(bucket, parent, generation, current, spent[(bucket, parent)])
                for bucket, parent in sorted(group)
            ],
            ttl_s,
        )

    return charge
