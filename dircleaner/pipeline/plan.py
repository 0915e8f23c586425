"""The deletion plan: which folder-index entries to delete, how, in what order, within budgets.

Pure: plain data in, plain data out, no IO. The sweep hands over, for every folders partition that
holds at least one candidate, how many rows it has, which of them are candidates (directories
known to be empty) and where each candidate sat among the partition's rows. From that the planner

* collapses empty subtrees: a partition whose own directory is empty and whose rows are all
  candidates is removed with one *partition* tombstone (a dead partition costs one marker);
* deletes the remaining candidates in their live parent partitions: a *run* of at least
  ``MIN_RANGE_ROWS`` candidates that the sweep saw next to each other (consecutive ordinals, no
  other row between them) goes with one *range* tombstone, which costs ``RANGE_TOMBSTONES`` (its
  two bound markers); shorter runs go row by row, one *row* tombstone each. At most
  ``max_row_tombstones`` of that cost (less what the ledger says the grace period's earlier runs
  spent) goes into one partition (more would push range
  reads of that partition towards ``tombstone_warn_threshold``), spent greedily in clustering
  order; the rest is deferred to the next run;
* rewrites instead a live partition whose deletes would cost more than it may still take, when
  it has at most ``max_rewrite_rows`` other rows to copy (``choose_rewrite``): its other rows
  are copied at T+1 and the partition deleted at T, which costs no tombstone cell;
* orders the live partitions' deletes round-robin across partitions by token, so consecutive
  deletes hit different partitions and replicas (or, for a store without replicas, partition by
  partition in key order, so consecutive deletes hit the same pages).

Why a range delete is as safe as the row deletes it replaces: a range tombstone at timestamp T
removes every row in [first, last] written at or before T, and nothing written after T (rows and
tombstones are reconciled by timestamp, exactly as for row and partition tombstones). When the
sweep read the partition, the range held the run's rows and nothing else (their ordinals are
consecutive), and every one of them is a candidate that the re-check (``--verify``) found still
empty. A directory that gains an object after T has its row rewritten after T (a put rewrites the
row of every ancestor), so it survives; so does a new sibling created inside the range after T.
A directory of the run that the re-check finds non-empty is dropped, with its ancestors, before
planning: its ordinal goes missing, so the run splits in two around it and no range covers it.
What a range adds to the row tombstones' exposure is a row written at or before T that the sweep
did not see (a writer whose clock lags this job's by more than ``--min-age``): a row tombstone
would spare it, a range covering its name would not. ``--min-age`` is the margin for that skew,
as it already is for an object put under a candidate itself.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from dircleaner.model import (
    RANGE_TOMBSTONES,
    ActionKind,
    BucketDir,
    DeleteAction,
    FolderRow,
    KindTally,
    PartitionFacts,
)
from dircleaner.paths import dir_of_row, iter_ancestors_upward

T = TypeVar("T")

#: the shortest run of adjacent candidates deleted with one range tombstone (a run of two costs
#: two either way, and row tombstones shadow nothing but their own rows)
MIN_RANGE_ROWS = 3


@dataclass(frozen=True)
class DeletionPlan:
    """The ordered deletes of one run, and what was held back."""

    actions: tuple[DeleteAction, ...]
    deferred: tuple[FolderRow, ...]
    #: tombstones planned per live partition (bucket, parent): 1 per row delete, 2 per range
    row_tombstones: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: rows the plan's rewrites copy (as the sweep counted them)
    rewrite_rows: int = 0

    @property
    def deletes(self) -> KindTally:
        """The plan's actions, by kind."""
        return KindTally.of(self.actions)

    @property
    def directories(self) -> int:
        """How many directory entries the plan removes."""
        return sum(len(a.rows) for a in self.actions)


@dataclass(frozen=True)
class PlanSummary:
    """The counts of a plan (or of several shards' plans added up)."""

    directories: int = 0
    #: the actions, by kind: one tombstone each (a range counts two against the budget)
    deletes: KindTally = field(default_factory=KindTally)
    #: directory entries removed by each kind of action (they add up to ``directories``)
    dirs: KindTally = field(default_factory=KindTally)
    deferred: int = 0
    #: the most tombstones planned into one live partition (rows 1, ranges 2 each)
    max_row_tombstones_in_a_partition: int = 0
    #: rows the plan's rewrites copy
    rewrite_rows: int = 0

    @property
    def tombstones(self) -> int:
        """Tombstones the plan writes: one per partition, row, range delete and rewrite (a
        rewrite deletes its partition); a range costs two against the budget (its bounds)."""
        return self.deletes.total

    @classmethod
    def of(cls, plan: DeletionPlan) -> PlanSummary:
        return cls(
            directories=plan.directories,
            deletes=plan.deletes,
            dirs=KindTally.of(plan.actions, entries=True),
            deferred=len(plan.deferred),
            max_row_tombstones_in_a_partition=max(plan.row_tombstones.values(), default=0),
            rewrite_rows=plan.rewrite_rows,
        )

    def __add__(self, other: PlanSummary) -> PlanSummary:
        return PlanSummary(
            directories=self.directories + other.directories,
            deletes=self.deletes + other.deletes,
            dirs=self.dirs + other.dirs,
            deferred=self.deferred + other.deferred,
            max_row_tombstones_in_a_partition=max(
                self.max_row_tombstones_in_a_partition, other.max_row_tombstones_in_a_partition
            ),
            rewrite_rows=self.rewrite_rows + other.rewrite_rows,
        )


def with_ancestors(dirs: Iterable[BucketDir]) -> set[BucketDir]:
    """The directories and every one of their ancestors (a non-empty dir makes its parents so)."""
    out: set[BucketDir] = set()
    for bucket, directory in dirs:
        for ancestor in iter_ancestors_upward(directory):
            if (bucket, ancestor) in out:
                break
            out.add((bucket, ancestor))
    return out


def drop_nonempty(
    facts: Iterable[PartitionFacts], nonempty: Iterable[BucketDir]
) -> list[PartitionFacts]:
    """Facts without the directories found non-empty on re-check, nor any of their ancestors.

    Kept candidates keep their ordinals, so a dropped one leaves a gap that splits its run.
    """
    alive = with_ancestors(nonempty)
    out: list[PartitionFacts] = []
    for fact in facts:
        keep = [
            i
            for i, row in enumerate(fact.candidates)
            if (row.bucket, dir_of_row(row.parent, row.name)) not in alive
        ]
        own_alive = (fact.key.bucket, fact.key.parent) in alive
        absent = fact.dir_absent and not own_alive
        parent_absent = fact.parent_dir_absent and not own_alive
        if (
            len(keep) == len(fact.candidates)
            and absent == fact.dir_absent
            and parent_absent == fact.parent_dir_absent
        ):
            out.append(fact)
        elif keep or absent:
            kept = tuple(fact.candidates[i] for i in keep)
            ordinals = tuple(fact.ordinals[i] for i in keep) if fact.ordinals else ()
            out.append(
                PartitionFacts(fact.key, fact.total_rows, kept, absent, ordinals, parent_absent)
            )
    return out


def plan_deletions(
    facts: Iterable[PartitionFacts],
    max_row_tombstones: int,
    already_used: Mapping[tuple[str, str], int] | None = None,
    spread: bool = True,
    ranges: bool = True,
    max_rewrite_rows: int = 0,
) -> DeletionPlan:
    """Turn the sweep's partition facts into an ordered, budgeted deletion plan.

    ``max_row_tombstones`` is each live partition's budget: a row delete costs 1, a range delete
    ``RANGE_TOMBSTONES``. ``already_used`` is what an interrupted attempt at the same generation
    already spent of each partition's budget (in the same units), so a resumed run never exceeds
    it. ``spread`` interleaves the live partitions' deletes across partitions; without it they go
    partition by partition, in key order. Without ``ranges``, every live delete is a row delete
    (for a sweep that may not have seen every row between a run's bounds), and no partition is
    rewritten (a rewrite's partition delete, like a range, removes what the sweep did not see).

    A live partition whose deletes would cost more than its budget left is rewritten instead
    (``choose_rewrite``) when it has at most ``max_rewrite_rows`` rows to copy (0: never):
    one REWRITE action removes all its candidates and costs no tombstone cell. Rewrites come
    first in the plan, so a store that cannot copy the table's columns refuses before any delete.
    """
    used = already_used or {}
    if max_row_tombstones < 0:
        raise ValueError("max_row_tombstones must be >= 0")
    facts = list(facts)
    empty = _empty_own_dirs(facts)
    dead: list[PartitionFacts] = []
    live: list[PartitionFacts] = []
    for fact in facts:
        # A partition is dead only if its directory is empty AND we hold every row it has: a
        # partition tombstone must never remove a row the audit log could not put back.
        if (fact.key.bucket, fact.key.parent) in empty:
            dead.append(fact)
        else:
            live.append(fact)

    actions = [
        DeleteAction(ActionKind.PARTITION, fact.key, fact.candidates)
        for fact in sorted(dead, key=_partition_order)
    ]
    # Live deletes: partition by partition, or (spread) each partition's first, then the rest
    # round-robin over the partitions with more than one; no list per partition is kept (most
    # have a single delete, and there are as many as live partitions with candidates).
    ordered: list[DeleteAction] = []
    rests: list[list[DeleteAction]] = []
    rewrites: list[DeleteAction] = []
    rewrite_rows = 0
    deferred: list[FolderRow] = []
    budget_used: dict[tuple[str, str], int] = {}
    min_range = MIN_RANGE_ROWS if ranges else sys.maxsize
    may_rewrite = ranges and max_rewrite_rows > 0
    for fact in sorted(live, key=_partition_order):
        key = fact.key
        budget = max(0, max_row_tombstones - used.get((key.bucket, key.parent), 0))
        keep = fact.total_rows - len(fact.candidates)
        if may_rewrite and choose_rewrite(
            deletes_cost(fact, min_range), budget, keep, max_rewrite_rows
        ):
            rewrites.append(DeleteAction(ActionKind.REWRITE, key, fact.candidates))
            rewrite_rows += keep
            continue
        planned, spent, held = _live_deletes(fact, budget, min_range)
        deferred.extend(held)
        if planned:
            budget_used[(key.bucket, key.parent)] = spent
            if not spread:
                ordered.extend(planned)
                continue
            ordered.append(planned[0])
            if len(planned) > 1:
                rests.append(planned[1:])
    actions[:0] = rewrites
    actions.extend(ordered)
    actions.extend(round_robin(rests))
    return DeletionPlan(tuple(actions), tuple(deferred), budget_used, rewrite_rows)


def choose_rewrite(cost: int, budget_left: int, rows_to_copy: int, max_rewrite_rows: int) -> bool:
    """Whether to rewrite a live partition rather than delete its candidates one by one.

    Rewrite when its row and range deletes (``cost`` tombstones) would not fit in what the
    partition may still take within the grace period, and its live rows are few enough to copy.
    Otherwise the deletes go within the budget and the rest waits (a partition too wide to copy
    is cleaned over several grace periods, never past its budget).
    """
    return cost > budget_left and rows_to_copy <= max_rewrite_rows


def deletes_cost(fact: PartitionFacts, min_range: int = MIN_RANGE_ROWS) -> int:
    """The tombstones all of a live partition's candidates take as row and range deletes."""
    return sum(RANGE_TOMBSTONES if len(run) >= min_range else len(run) for run in _runs(fact))


def _live_deletes(
    fact: PartitionFacts, budget: int, min_range: int
) -> tuple[list[DeleteAction], int, tuple[FolderRow, ...]]:
    """One live partition's deletes within ``budget``: (actions, cost spent, rows held back).

    Runs of adjacent candidates become range deletes, the rest row deletes; the budget is spent
    in clustering order and what does not fit, always the last rows, is held back. A range that
    does not fit in the one tombstone left still gets its first row deleted as a row.
    """
    # Every action shares the fact's key, not a copy per action.
    key = fact.key
    row_kind, range_kind = ActionKind.ROW, ActionKind.RANGE
    out: list[DeleteAction] = []
    spent = done = 0
    for run in _runs(fact):
        if len(run) >= min_range:
            if spent + RANGE_TOMBSTONES <= budget:
                out.append(DeleteAction(range_kind, key, run))
                spent += RANGE_TOMBSTONES
                done += len(run)
                continue
            if spent < budget:
                out.append(DeleteAction(row_kind, key, run[:1]))
                spent += 1
                done += 1
            break
        fits = run[: budget - spent]
        if len(fits) == 1:
            # Already a one-row tuple (a lone candidate's is the fact's own): no copy per row.
            out.append(DeleteAction(row_kind, key, fits))
        else:
            out.extend(DeleteAction(row_kind, key, (row,)) for row in fits)
        spent += len(fits)
        done += len(fits)
        if len(fits) < len(run):
            break
    return out, spent, fact.candidates[done:]


def _runs(fact: PartitionFacts) -> list[tuple[FolderRow, ...]]:
    """The candidates cut into runs of consecutive ordinals (each row alone if they are unknown)."""
    rows, ordinals = fact.candidates, fact.ordinals
    if not ordinals:
        return [(row,) for row in rows]
    out: list[tuple[FolderRow, ...]] = []
    start = 0
    for i in range(1, len(ordinals)):
        step = ordinals[i] - ordinals[i - 1]
        if step != 1:
            if step < 1:
                raise ValueError(f"partition {fact.key.parent!r}: ordinals out of order")
            out.append(rows[start:i])
            start = i
    out.append(rows[start:])
    return out


def dead_partitions(facts: Iterable[PartitionFacts]) -> set[BucketDir]:
    """The partitions the plan removes with one partition deletion (they take no tombstone)."""
    return _empty_own_dirs(list(facts))


def _empty_own_dirs(facts: list[PartitionFacts]) -> set[BucketDir]:
    """The partitions whose rows are all candidates and whose own directory is known empty.

    Same answer as testing each against every directory the facts show to be empty (each
    candidate's, each absent partition's), without holding a string per candidate: only the
    few partitions that could be dead are looked up.
    """
    whole = {
        (f.key.bucket, f.key.parent)
        for f in facts
        if f.key.parent and len(f.candidates) == f.total_rows
    }
    if not whole:
        return whole
    # Known empty from the partition's own facts: its directory or its parent's is absent from
    # the filter. (The same as finding its row among the parent partition's candidates, which
    # may be in another slice, so every slicing of the ring plans the same.)
    empty = {
        (f.key.bucket, f.key.parent) for f in facts if f.dir_absent or f.parent_dir_absent
    } & whole
    for fact in facts:
        for row in fact.candidates:
            directory = (row.bucket, row.parent + row.name + "/")
            if directory in whole:
                empty.add(directory)
    return empty


def round_robin(groups: list[list[T]]) -> list[T]:
    """One item from each group in turn, until all are used."""
    out: list[T] = []
    depth = 0
    remaining = [g for g in groups if g]
    while remaining:
        out.extend(group[depth] for group in remaining)
        depth += 1
        remaining = [g for g in remaining if len(g) > depth]
    return out


def _partition_order(fact: PartitionFacts) -> tuple[int, str, str]:
    return (fact.key.token, fact.key.bucket, fact.key.parent)
