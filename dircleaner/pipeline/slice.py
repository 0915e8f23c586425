"""The clean of one slice of the ring, in two phases around one decision taken for all slices.

1. **Sweep and re-check** (``sweep_and_recheck``): stream the slice's folder rows against the
   filter, then ask the objects table whether any candidate directory has gained an object
   since the build. The candidates stay in the process that found them (``spill.Candidates``:
   in memory within the process's budget, else in a spill file); only counts and the (few)
   non-empty directories go to the parent.
2. **Plan and delete** (``plan_slice``, ``delete_slice``): once the parent has checked the
   totals against the guards and pooled every slice's non-empty directories (with their
   ancestors, which may live in another slice), drop those from the candidates, plan within
   the per-partition budgets and delete. A spilled slice is planned a chunk of partitions at a
   time (``plan_in_chunks``), the plan written to a spill file before the first delete.

``job.clean`` runs them.

A slice is a token range of the folders table, so it holds whole partitions: per-partition
budgets need no coordination between slices.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from dircleaner.audit import AuditLog, open_audit_log
from dircleaner.deadline import Deadline
from dircleaner.lease import lease_check
from dircleaner.model import BucketDir, DeleteAction, KindTally, PartitionFacts, Shard
from dircleaner.pipeline.backlog import CandidateSample, SampleFigures
from dircleaner.pipeline.budget import charged_so_far, ledger_charger
from dircleaner.pipeline.delete import DeleteStats, PlannedActions, execute_plan
from dircleaner.pipeline.deleterate import ThrottleConfig
from dircleaner.pipeline.plan import DeletionPlan, PlanSummary, drop_nonempty, plan_deletions
from dircleaner.pipeline.recheck import find_nonempty
from dircleaner.pipeline.spill import Candidates, SpilledActions
from dircleaner.pipeline.spillfile import SpillConfig
from dircleaner.pipeline.sweep import MembershipFilter, SweepTotals, sweep
from dircleaner.progress import ActionCounter, Progress
from dircleaner.scanrate import ScanRate, ScanStats, ScanThrottle
from dircleaner.store.base import Store
from dircleaner.timeutil import now_us


@dataclass(frozen=True)
class SliceSwept:
    """What the parent needs of one slice's first phase."""

    totals: SweepTotals
    #: directories re-checked against the objects table
    checked: int
    verify_s: float
    #: candidates found to hold objects after all
    nonempty: frozenset[BucketDir]
    #: of ``checked``, the directories that were not candidate rows of this slice (the own
    #: directories of partitions found empty, whose row another slice holds)
    checked_parents: int = 0
    #: how the slice's scan of the folders index read
    scan: ScanStats = field(default_factory=ScanStats)
    #: candidates written to a spill file (0: kept in memory), and that file's bytes
    spilled: int = 0
    spill_bytes: int = 0
    #: how the re-check's reads went (rows: directories re-checked), under the same cap
    recheck: ScanStats = field(default_factory=ScanStats)
    #: a random sample of the slice's candidates, re-checked (``backlog``)
    sample: SampleFigures = field(default_factory=SampleFigures)


@dataclass(frozen=True)
class DeleteOrders:
    """How the second phase deletes, the same for every slice."""

    #: N: tombstones a live partition may hold within the grace period (ledger included)
    max_row_tombstones: int
    #: how long a ledger charge lives: the folders table's grace period
    ledger_ttl_s: float
    #: a live partition over its budget is rewritten when it has at most this many rows to copy
    max_rewrite_rows: int
    delete_timestamp_us: int
    generation: str
    throttle: ThrottleConfig
    audit_log: Path | None
    dry_run: bool
    #: the run lease's owner: each slice stops deleting once the store shows another holder
    lease_owner: str | None = None
    #: the store every audit record names (``audit_scope``), and when this run started (µs)
    audit_scope: str | None = None
    run_started_us: int | None = None
    #: the night's end: no slice is planned, and no delete starts, once it is reached
    deadline: Deadline | None = None


@dataclass(frozen=True)
class SliceCleaned:
    """One slice's second phase."""

    plan: PlanSummary
    deleted: DeleteStats | None
    delete_s: float
    #: reading the budget ledger and planning, before the deletes
    plan_s: float = 0.0
    #: bytes of the plan's spill file (0: planned in one piece, in memory)
    plan_spill_bytes: int = 0
    #: the night's deadline stopped the slice: before its plan, or before the end of its deletes
    stopped: bool = False
    #: directories of its plan the deadline left, and candidates of a slice it kept from being
    #: planned (the next run's)
    left: int = 0
    unplanned: int = 0

    @classmethod
    def not_planned(cls, candidates: int) -> SliceCleaned:
        """A slice the deadline reached before its plan: nothing planned, nothing deleted."""
        return cls(PlanSummary(), None, 0.0, stopped=True, unplanned=candidates)


def sweep_and_recheck(
    store: Store,
    shard: Shard,
    bucket: str | None,
    filt: MembershipFilter,
    verify: bool,
    progress: Progress,
    scan: ScanRate | None = None,
    *,
    spill: SpillConfig | None = None,
    deletes: bool = True,
    sample: int = 0,
) -> tuple[SliceSwept, Candidates]:
    """Phase 1: the slice's candidates (kept) and what the parent must know of them.

    ``spill``: where candidates beyond the process's memory budget go; ``deletes``: whether a
    second phase will delete (then a chunked plan's room on disk is reserved here, before the
    decision); ``sample``: how many of the candidates to sample at random and re-check, for
    the decision to tell a backlog from a broken filter (``backlog``).
    """
    from dircleaner.filter.bloom import finish_loading_kernels

    # The kernels loaded while the filter was read; a loader still importing numba would hold
    # the GIL against the sweep's first batches.
    finish_loading_kernels()
    rate = scan or ScanRate()
    throttle = ScanThrottle(rate)
    held = Candidates(spill or SpillConfig())
    sampled = CandidateSample(held, sample)
    nonempty: set[BucketDir] = set()
    checked = parents = 0
    try:
        with rate.shared_by.joined():  # the cap is shared by the slices scanning now
            rows = store.scan_folder_keys(shard, bucket, throttle)
            result = sweep(rows, filt, progress, into=sampled)
        held.finish(plan_room=deletes)
        scanned = throttle.stats()
        started = time.monotonic()
        # The re-check's reads go through the slice's share of the cap too (a throttle of their
        # own, made now: nothing saved up while the sweep read); a batch of reads is no page,
        # so its latency steers nothing (the store retries what times out).
        reads = ScanThrottle(replace(rate, adaptive=False))
        if verify:
            with rate.shared_by.joined():
                rechecked = find_nonempty(store, held, filt, reads, progress)
            nonempty, checked, parents = rechecked.nonempty, rechecked.checked, rechecked.parents
        # The sample's members holding an object: the re-check's finds (the same reads), else
        # the sample re-checked alone.
        found = (
            nonempty
            if verify or not sampled.sample
            else store.nonempty_object_partitions(sampled.sample)
        )
    except BaseException:
        held.release()  # now, not whenever the traceback that refers to it goes
        raise
    swept = SliceSwept(
        SweepTotals(result.swept_rows, result.partitions, held.candidates, result.seconds),
        checked,
        time.monotonic() - started,
        frozenset(nonempty),
        parents,
        scanned,
        spilled=held.candidates if held.spilled else 0,
        spill_bytes=held.spill_bytes,
        recheck=reads.stats() if verify else ScanStats(),
        sample=sampled.figures(found),
    )
    return swept, held


def plan_and_delete(
    store: Store,
    facts: list[PartitionFacts] | Candidates,
    nonempty: frozenset[BucketDir],
    orders: DeleteOrders,
    progress: Progress,
) -> SliceCleaned:
    """Phase 2: plan (``plan_slice``, or ``plan_in_chunks`` for a spilled slice), then (unless
    a dry run) delete (``delete_slice``).

    The candidates are let go once planned: the plan holds what the deletes need (the
    partitions' keys and candidate rows), and the rest (the facts themselves, their ordinals, a
    spill file) goes before the deletes, whoever else holds them (the worker's state between
    the phases). A slice the night's deadline reached first is let go unplanned.
    """
    if orders.deadline is not None and not orders.dry_run and orders.deadline.reached():
        return let_go(facts)
    planning = time.monotonic()
    planned: DeletionPlan | ChunkedPlan
    try:
        if isinstance(facts, Candidates) and facts.chunked:
            planned = plan_in_chunks(store, facts, nonempty, orders)
        else:
            whole = facts if isinstance(facts, list) else [f for c in facts.chunks() for f in c]
            planned = plan_slice(store, whole, nonempty, orders)
    finally:
        if isinstance(facts, Candidates):
            facts.release()
        else:
            facts.clear()
    try:
        started = time.monotonic()
        deleted = delete_slice(store, planned, orders, progress)
        summary = planned.summary if isinstance(planned, ChunkedPlan) else PlanSummary.of(planned)
        stopped = deleted is not None and deleted.stopped_at_deadline
        return SliceCleaned(
            summary,
            deleted,
            time.monotonic() - started,
            started - planning,
            planned.spill_bytes if isinstance(planned, ChunkedPlan) else 0,
            stopped=stopped,
            left=summary.directories - deleted.directories if stopped and deleted else 0,
        )
    finally:
        if isinstance(planned, ChunkedPlan):
            planned.close()


def let_go(facts: list[PartitionFacts] | Candidates) -> SliceCleaned:
    """A slice the night's deadline reached before its plan: its candidates let go (a spill
    file removed), nothing planned or deleted."""
    held = facts.candidates if isinstance(facts, Candidates) else _candidates_of(facts)
    if isinstance(facts, Candidates):
        facts.release()
    else:
        facts.clear()
    return SliceCleaned.not_planned(held)


def plan_slice(
    store: Store,
    facts: list[PartitionFacts],
    nonempty: frozenset[BucketDir],
    orders: DeleteOrders,
) -> DeletionPlan:
    """Phase 2, the plan: drop what must stay (the directories found non-empty in any slice,
    and their ancestors) and plan within the budgets (the pure planner, on what the ledger
    says every run of the grace period already spent)."""
    if nonempty:
        facts = drop_nonempty(facts, nonempty)
    # What every run of the grace period already spent (this generation's killed attempts
    # included), read from the store before planning.
    used = charged_so_far(store, facts)
    return plan_deletions(
        facts,
        orders.max_row_tombstones,
        used,
        spread=store.traits.spread_deletes,
        ranges=store.traits.sweep_sees_every_write,
        max_rewrite_rows=orders.max_rewrite_rows,
    )


@dataclass
class ChunkedPlan:
    """A spilled slice's plan, made a chunk of partitions at a time: its summary, and (unless a
    dry run) its actions in a spill file, read back in the plan's order."""

    summary: PlanSummary
    spilled: SpilledActions | None

    @property
    def actions(self) -> Iterator[DeleteAction]:
        return self.spilled.actions() if self.spilled is not None else iter(())

    @property
    def directories(self) -> int:
        return self.summary.directories

    @property
    def spill_bytes(self) -> int:
        return self.spilled.spill_bytes if self.spilled is not None else 0

    def close(self) -> None:
        if self.spilled is not None:
            self.spilled.close()


def plan_in_chunks(
    store: Store, held: Candidates, nonempty: frozenset[BucketDir], orders: DeleteOrders
) -> ChunkedPlan:
    """Phase 2, the plan of a spilled slice: ``plan_slice`` on each chunk of whole partitions
    (a chunk plans as a slice of the ring would: a partition's deletes depend on its own facts,
    the ledger's charges to it and the pooled non-empty finds), the actions written to the
    slice's plan file (room reserved by the first phase) before any is deleted."""
    out = None if orders.dry_run else SpilledActions(held.plan_file())
    summary = PlanSummary()
    try:
        for chunk in held.chunks():
            plan = plan_slice(store, chunk, nonempty, orders)
            summary += PlanSummary.of(plan)
            if out is not None:
                out.add(plan)
    except BaseException:
        if out is not None:
            out.close()
        raise
    return ChunkedPlan(summary, out)


def delete_slice(
    store: Store, plan: DeletionPlan | ChunkedPlan, orders: DeleteOrders, progress: Progress
) -> DeleteStats | None:
    """Phase 2, the deletes: the plan at T, audited, charged to the ledger batch by batch,
    stopping once the store shows another lease holder (None: a dry run, or nothing to do)."""
    if orders.dry_run:
        return None
    # A plan writes one tombstone per action.
    count = plan.summary.tombstones if isinstance(plan, ChunkedPlan) else len(plan.actions)
    progress("clean", 0, count)  # the slice's total, even when it is 0
    if not count:
        return None
    # In deletes, the unit --rate limits (a range or partition delete takes several
    # directories).
    counted = ActionCounter(progress, "clean", count)
    stream = open_audit_log(orders.audit_log) if orders.audit_log else None
    try:
        audit = (
            AuditLog(
                stream,
                orders.generation,
                orders.delete_timestamp_us,
                scope=orders.audit_scope,
                run_started_us=orders.run_started_us,
                clock=now_us,
            )
            if stream
            else None
        )
        return execute_plan(
            store,
            PlannedActions(counted.through(plan.actions), plan.directories),
            orders.delete_timestamp_us,
            orders.throttle,
            audit,
            counted,
            keep_going=lease_check(store, orders.lease_owner),
            charge=ledger_charger(store, orders.generation, uuid.uuid4().hex, orders.ledger_ttl_s),
            deadline=orders.deadline,
        )
    finally:
        if stream is not None:
            stream.close()


def merge_delete_stats(parts: Sequence[DeleteStats | None], seconds: float) -> DeleteStats | None:
    """Several slices' (or batches') delete statistics as one, taking ``seconds`` in all (None
    when none deleted anything). Each slice's final rate is the one all the slices sharing
    ``--rate`` made together: the merged rate is their mean, not their sum."""
    present = [p for p in parts if p is not None]
    if not present:
        return None
    return DeleteStats(
        deletes=sum((p.deletes for p in present), KindTally()),
        rows_rewritten=sum(p.rows_rewritten for p in present),
        directories=sum(p.directories for p in present),
        retries=sum(p.retries for p in present),
        final_rate=sum(p.final_rate for p in present) / len(present),
        seconds=seconds,
        failures=[f for p in present for f in p.failures],
        rows_removed=(
            None
            if any(p.rows_removed is None for p in present)
            else sum(p.rows_removed or 0 for p in present)
        ),
        stopped_at_deadline=any(p.stopped_at_deadline for p in present),
    )


def _candidates_of(facts: Sequence[PartitionFacts]) -> int:
    return sum(len(f.candidates) for f in facts)
