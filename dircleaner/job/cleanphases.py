"""The clean's two phases over the slices of the ring, as two small objects.

``SliceWork`` is what runs for each slice wherever the workers are: phase 1 sweeps and re-checks
the slice, phase 2 plans and deletes it. It is plain data (the filter travels by reference), so a
Dask worker can receive it. ``CleanDecision`` stays in this process between the phases: it
applies the guards to the whole sweep, pools every slice's non-empty finds, and records the
clean's progress for a resumed run. ``job.run`` hands their methods to the workers.
``PhaseClock`` times the phases from here: a process runs several slices, so no one slice's
time is a phase's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from dircleaner.errors import GuardRefused
from dircleaner.filter.format import FilterHeader
from dircleaner.job.resume import MAX_CHECKPOINTED_NONEMPTY, CleanProgress
from dircleaner.job.sharedfilter import SharedFilter
from dircleaner.model import BucketDir, PartitionFacts, Shard
from dircleaner.pipeline.guards import GuardConfig, check_sweep
from dircleaner.pipeline.slice import (
    DeleteOrders,
    ShardCleaned,
    ShardSwept,
    plan_and_delete,
    sweep_and_recheck,
)
from dircleaner.pipeline.sweep import SweepTotals
from dircleaner.progress import Progress
from dircleaner.scanrate import ScanRate
from dircleaner.store.base import Store

#: what a slice's first phase keeps for its second: its candidates and its own non-empty finds
Kept = tuple[list[PartitionFacts], frozenset[BucketDir]]


@dataclass(frozen=True)
class CleanCheckpoint:
    """Where an interrupted clean of this generation got to, and how to record progress."""

    previous: CleanProgress | None
    save: Callable[[CleanProgress], None]


@dataclass(frozen=True)
class SliceWork:
    """One slice's two phases, the same for every slice of a clean."""

    shared: SharedFilter
    bucket: str | None
    verify: bool
    orders: DeleteOrders
    #: one slice's share of the sweep's scan rate
    scan: ScanRate = field(default_factory=ScanRate)

    def sweep(self, store: Store, shard: Shard, report: Progress) -> tuple[ShardSwept, Kept]:
        """Phase 1: sweep and re-check the slice; the tally goes back, the candidates stay."""
        swept, facts = sweep_and_recheck(
            store, shard, self.bucket, self.shared.get(store), self.verify, report, self.scan
        )
        return swept, (facts, swept.nonempty)

    def clean(
        self,
        store: Store,
        shard: Shard,
        kept: Kept,
        nonempty: frozenset[BucketDir],
        report: Progress,
    ) -> ShardCleaned:
        """Phase 2: plan and delete the slice's candidates, keeping every non-empty find."""
        facts, own_nonempty = kept
        # A first phase run again (its worker was lost) may have found more than the decision
        # pooled: its own finds stay too.
        return plan_and_delete(store, facts, nonempty | own_nonempty, self.orders, report)


class CleanDecision:
    """The parent's part between the phases: guards, pooled finds, the checkpoint."""

    def __init__(
        self,
        header: FilterHeader,
        guards: GuardConfig,
        *,
        dry_run: bool,
        previous: CleanProgress,
        todo: list[int],
        checkpoint: CleanCheckpoint | None,
    ) -> None:
        self._header = header
        self._guards = guards
        self._dry_run = dry_run
        self._previous = previous
        self._todo = todo
        self._checkpoint = checkpoint
        #: the clean's progress as it goes (what a resumed run starts from)
        self.progress = previous
        #: a dry run's verdict: why a real run would be refused (None: it would go ahead)
        self.verdict: str | None = None

    def decide(self, tallies: list[ShardSwept]) -> frozenset[BucketDir]:
        """Refuse the whole clean if the sweep fails a guard; else every slice's finds pooled."""
        totals = add_totals([t.totals for t in tallies])
        # Nothing is deleted anywhere unless the whole sweep passes the guards. A dry run
        # deletes nothing anyway: it plans on, and reports what a real run would meet.
        try:
            check_sweep(self._header, totals.swept_rows, totals.candidates, self._guards)
        except GuardRefused as exc:
            if not self._dry_run:
                raise
            self.verdict = str(exc)
        # A directory with an object keeps its ancestors, whichever slice lists them: every
        # slice drops every slice's finds (and their ancestors) from its candidates, and so do
        # the slices an interrupted attempt left for this one.
        nonempty = self._previous.nonempty.union(*(t.nonempty for t in tallies))
        self.progress = replace(self._previous, nonempty=nonempty)
        self._save()  # before any delete
        return nonempty

    def slice_done(self, position: int) -> None:
        """Record that the ``position``-th slice still to do finished its deletes."""
        self.progress = replace(self.progress, done=self.progress.done | {self._todo[position]})
        self._save()

    def _save(self) -> None:
        # Too many non-empty finds to store: a resumed run then cleans every slice again.
        small = len(self.progress.nonempty) <= MAX_CHECKPOINTED_NONEMPTY
        if self._checkpoint and not self._dry_run and small:
            self._checkpoint.save(self.progress)


class PhaseClock:
    """The wall time of the clean's phases, taken in this process around the decision.

    Each phase's span is split between its steps (sweep and re-check; plan and deletes) in the
    proportion of the slices' own times for them.
    """

    def __init__(self, decide: Callable[[list[ShardSwept]], frozenset[BucketDir]]) -> None:
        self._decide = decide
        self._started = time.monotonic()
        self._decided = (self._started, self._started)

    def decide(self, tallies: list[ShardSwept]) -> frozenset[BucketDir]:
        """The decision, timed: every first phase ends before it, every second starts after."""
        reached = time.monotonic()
        try:
            return self._decide(tallies)
        finally:
            self._decided = (reached, time.monotonic())

    def phases(
        self, tallies: list[ShardSwept], cleaned: list[ShardCleaned], verify: bool
    ) -> dict[str, float]:
        """Seconds per phase: ``sweep``, ``verify`` (if re-checked), ``plan`` and ``delete`` (if
        deleted)."""
        first_s = self._decided[0] - self._started
        second_s = time.monotonic() - self._decided[1]
        sweep_s = sum(t.totals.seconds for t in tallies)
        phases = {"sweep": _share(first_s, sweep_s, sum(t.verify_s for t in tallies))}
        if verify:
            phases["verify"] = first_s - phases["sweep"]
        if any(c.deleted is not None for c in cleaned):
            delete_s = sum(c.delete_s for c in cleaned)
            phases["delete"] = _share(second_s, delete_s, sum(c.plan_s for c in cleaned))
            phases["plan"] = second_s - phases["delete"]
        return phases


def _share(span: float, mine: float, other: float) -> float:
    """``mine``'s part of ``span`` when ``mine`` and ``other`` took it together."""
    return span * mine / (mine + other) if mine + other > 0 else span


def add_totals(parts: list[SweepTotals]) -> SweepTotals:
    """The sweep totals of several slices as one."""
    return SweepTotals(
        swept_rows=sum(p.swept_rows for p in parts),
        partitions=sum(p.partitions for p in parts),
        candidates=sum(p.candidates for p in parts),
        seconds=max((p.seconds for p in parts), default=0.0),
    )
