"""The clean, in one place: sweep and re-check each slice, decide, plan, delete, summarize.

``clean`` reads top to bottom as the night's clean runs:

1. load and check the filter; cut the ring into slices, the slowest of the last run first, the
   ones an interrupted attempt finished left out (``slices_to_do``);
2. share the delete rate and the scan cap between the slices running at the time (the
   workers' ``sharers``) and resolve the delete orders (the tombstone budget, the ledger purge,
   T: ``job.orders``);
3. hand the workers one ``TwoPhaseWork``: per slice, **sweep and re-check** (``SliceWork.sweep``);
   here, once, the **decision** on every slice's tally (``decide``: the deadline read, then
   ``decide_clean``, pure: the guards, the pooled non-empty finds, what the slices do; then
   ``Checkpoints`` records it); per slice again, **plan and delete**
   (``SliceWork.clean``: ``pipeline.slice.plan_slice``, the pure planner on what the ledger
   leaves, then ``delete_slice``, the deleter);
4. sum the slices up (``sum_slices``: ``add_totals``, ``deletes_of``),
   record what the next run needs (``record_for_next_run``), and report (``summary``).

The decisions are pure functions of plain data (tested without a store in
``tests/test_job_clean.py``); the store is read and written only by the steps around them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from dircleaner.deadline import Deadline
from dircleaner.filter.format import FilterHeader
from dircleaner.filter.sizing import record_clean
from dircleaner.gcpause import cyclic_gc_paused
from dircleaner.job.decision import Checkpoints, Decision, Go, add_totals, decide_clean
from dircleaner.job.orders import CleanSettings, delete_orders
from dircleaner.job.resume import CleanCheckpoint, CleanProgress
from dircleaner.job.sharedfilter import SharedFilter
from dircleaner.job.sliceorder import (
    longest_first,
    record_seconds,
    recorded_seconds,
    slice_seconds_key,
)
from dircleaner.job.sweep import LoadedFilter, SweepConfig, expected_sweep, load_filter
from dircleaner.lease import deleting_under_lease
from dircleaner.model import BucketDir, Shard
from dircleaner.pipeline.backlog import SAMPLE_SIZE, SampleFigures, explain, sample_sizes
from dircleaner.pipeline.budget import TombstoneBudget
from dircleaner.pipeline.build import scope_of, swept_count_key
from dircleaner.pipeline.delete import DeleteStats
from dircleaner.pipeline.guards import check_filter, check_scan_consistency
from dircleaner.pipeline.plan import PlanSummary
from dircleaner.pipeline.slice import (
    DeleteOrders,
    SliceCleaned,
    SliceSwept,
    let_go,
    merge_delete_stats,
    plan_and_delete,
    sweep_and_recheck,
)
from dircleaner.pipeline.spill import Candidates
from dircleaner.pipeline.spillfile import SpillConfig
from dircleaner.pipeline.sweep import SweepTotals
from dircleaner.progress import Progress, expecting, no_progress
from dircleaner.scanrate import ScanRate, ScanStats
from dircleaner.scanrate import merge as merge_scans
from dircleaner.store.base import Store
from dircleaner.timeutil import now_us
from dircleaner.workers.base import CLEAN, LocalWorkers, TwoPhaseWork, Workers

#: what a slice's first phase keeps for its second: its candidates and its own non-empty finds
HeldBetweenPhases = tuple[Candidates, frozenset[BucketDir]]


@dataclass(frozen=True, kw_only=True)
class CleanConfig(CleanSettings):
    """How to turn candidates into deletes."""

    sweep: SweepConfig = field(default_factory=SweepConfig)
    verify: bool = True
    #: when the run began (wall clock, µs; the audit log records it); None: when the clean began
    started_us: int | None = None
    #: where the slices spill their candidates beyond a process's memory budget
    spill: SpillConfig = field(default_factory=SpillConfig)
    #: the night's end (--deadline, --max-run-time): no slice is planned, and no delete
    #: starts, once it is reached; None: the night runs until it is done
    deadline: Deadline | None = None


@dataclass
class CleanSweep:
    """The sweep a clean ran (its candidates stayed with the workers that found them)."""

    loaded: LoadedFilter
    result: SweepTotals
    #: how the scan of the folders index read (rate, page latency, back-offs)
    scan: ScanStats = field(default_factory=ScanStats)


@dataclass
class CleanReport:
    """Everything a clean decided and did."""

    sweep: CleanSweep
    delete_timestamp_us: int
    verified: int
    dropped_nonempty: int
    plan: PlanSummary
    dry_run: bool
    deleted: DeleteStats | None
    phase_seconds: dict[str, float]
    #: slices of the ring an interrupted attempt had finished, not swept again
    slices_already_clean: tuple[int, ...] = ()
    #: the per-partition tombstone budget over the grace period, and where it came from
    budget: TombstoneBudget | None = None
    #: a dry run's verdict: why a real run would be refused (None: it would go ahead)
    would_be_refused: str | None = None
    #: of ``verified``, the directories that were not candidates: the own directories of
    #: partitions found empty whose row another slice swept (each slice re-checks them)
    verified_parents: int = 0
    #: candidates the slices spilled beyond their processes' memory budget, the bytes of
    #: their spill files, and of their plans' (each file gone by the end of its slice)
    spilled: int = 0
    spill_bytes: int = 0
    plan_spill_bytes: int = 0
    #: a random sample of the candidates, re-checked: what tells a backlog from a broken filter
    sample: SampleFigures = field(default_factory=SampleFigures)
    #: where the night's deadline left it (None: no deadline)
    night_end: NightEnd | None = None
    #: how the re-check's reads went (rows: directories read), under the scan's cap
    recheck: ScanStats = field(default_factory=ScanStats)


@dataclass(frozen=True)
class NightEnd:
    """The night's deadline, and what it left for the next run."""

    at_us: int
    #: the deletes stopped at it (with something left), or it passed before they began
    reached: bool = False
    #: it passed before the deletes began: nothing was planned or deleted
    before_deletes: bool = False
    #: directories of the slices' plans not deleted, and candidates of slices not planned
    left: int = 0
    unplanned: int = 0

    @property
    def left_total(self) -> int:
        """Everything the night left: its plans' rest and its unplanned slices' candidates."""
        return self.left + self.unplanned


# -- the clean, top to bottom ------------------------------------------------------------------


def run_clean(
    store: Store,
    config: CleanConfig,
    progress: Progress = no_progress,
    checkpoint: CleanCheckpoint | None = None,
    lease_owner: str | None = None,
    workers: Workers | None = None,
    *,
    loaded: LoadedFilter | None = None,
    expected_rows: int | None = None,
) -> CleanReport:
    """Sweep, guard, re-check, plan and (unless a dry run) delete.

    With ``checkpoint``, the clean skips the slices an interrupted attempt already finished and
    reports each slice as it finishes. A clean that deletes holds the store's lease: the
    caller's (``lease_owner``, held by a ``Lease`` it keeps alive), or one taken here (LeaseHeld
    when another run has it). ``loaded``: the filter to use, not read from the store (a dry
    run's, never stored). ``expected_rows``: the folder rows the sweep's progress expects, where
    the caller knows them (a run's build has just counted them).
    """
    check_scan_consistency(store, config.verify)
    pool = workers or LocalWorkers(config.sweep.workers)
    with (
        cyclic_gc_paused(),
        deleting_under_lease(
            store, dry_run=config.dry_run, ttl_s=config.lease_ttl_s, held=lease_owner
        ) as owner,
    ):
        return clean(store, config, pool, owner, progress, checkpoint, loaded, expected_rows)


def clean(
    store: Store,
    config: CleanConfig,
    pool: Workers,
    lease_owner: str | None,
    progress: Progress = no_progress,
    checkpoint: CleanCheckpoint | None = None,
    loaded: LoadedFilter | None = None,
    expected_rows: int | None = None,
) -> CleanReport:
    """One clean with the lease held (or a dry run): the steps of the module's docstring."""
    started_us = config.started_us or now_us()
    # The filter, checked; the slices still to do, the slowest of the last run first.
    if loaded is None:
        loaded = load_filter(store, config.sweep)
    check_filter(loaded.header, loaded.estimated_fpr, now_us(), config.sweep.guards)
    slices = pool.slices(config.sweep.shard, CLEAN)
    schedule = schedule_slices(store, config.sweep, len(slices), checkpoint)
    running = min(len(schedule.todo), pool.parallelism)
    # The orders: the tombstone budget, the rate the slices deleting at the time share, and T
    # (after the filter's build started, an entry (re)written survives whatever happens here).
    budget, orders = delete_orders(
        store,
        config,
        snapshot_us=loaded.header.snapshot_us,
        generation=loaded.generation,
        throttle=replace(config.throttle, shared_by=pool.sharers()),
        lease_owner=lease_owner,
        run_started_us=started_us,
        deadline=config.deadline,
    )
    # Per slice, sweep and re-check; here, once, decide; per slice again, plan and delete.
    records = Checkpoints(checkpoint, schedule.todo, dry_run=config.dry_run)
    # The progress's total (a count where the last run left none) is read before the clock
    # starts: it is no part of the sweep.
    first_expected = None
    if not schedule.previous.done:
        first_expected = (
            expected_rows if expected_rows is not None else expected_sweep(store, config.sweep)
        )
    clock = PhaseClock(partial(decide, config, loaded.header, schedule.previous, records))
    work = clean_work(store, config, loaded, orders, pool, clock, records, len(schedule.todo))
    tallies, cleaned = pool.run_two_phases(
        store,
        [slices[i] for i in schedule.todo],
        work,
        expecting(progress, "sweep", first_expected),
    )
    # The slices summed up; what the next run reads; the report.
    outcome = sum_slices(tallies, cleaned, clock.phases(tallies, cleaned, config.verify), running)
    decision = records.decision
    assert decision is not None  # the workers decide once, even with no slice to do
    verdict = decision.verdict
    if decision.refusal is not None:
        # Over --max-delete-fraction: refused (a dry run says a real run would be), with what
        # the sample of candidates looks like and what the plan would take.
        plan = sum((c.plan for c in cleaned), PlanSummary())
        refusal = explain(decision.refusal, decision.sample, plan, config.throttle.rate)
        if not config.dry_run:
            raise refusal
        verdict = str(refusal)
    if not config.dry_run:  # a dry run writes nothing
        record_for_next_run(store, config.sweep, schedule, loaded.generation, outcome)
    report = summary(loaded, budget, orders, schedule, verdict, outcome, config.dry_run)
    return replace(report, sample=decision.sample, night_end=night_end(config, decision, cleaned))


# -- the steps ---------------------------------------------------------------------------------


def decide(
    config: CleanConfig,
    header: FilterHeader,
    previous: CleanProgress,
    records: Checkpoints,
    tallies: list[SliceSwept],
) -> Go:
    """Between the phases, once: read the clock against the night's deadline, decide on
    every slice's tally (``decide_clean``, pure), record the decision, give the slices its word."""
    past_deadline = config.deadline is not None and config.deadline.reached()
    decision = decide_clean(
        tallies,
        header,
        config.sweep.guards,
        previous,
        dry_run=config.dry_run,
        past_deadline=past_deadline,
    )
    records.decided(decision)
    return decision.go


@dataclass(frozen=True)
class SliceSchedule:
    """Which slices this clean runs, in what order, and what the last run timed of them."""

    #: what an interrupted attempt finished and found (empty when none, or sliced otherwise)
    previous: CleanProgress
    #: the slices still to do, slowest first
    todo: list[int]
    #: the state key of the slices' first-phase seconds, and what the last run recorded there
    seconds_key: str
    known: list[float | None]


def schedule_slices(
    store: Store, sweep: SweepConfig, slices: int, checkpoint: CleanCheckpoint | None
) -> SliceSchedule:
    """Read what the last run timed, and order the slices still to do by it."""
    # The slices the last run found slowest go first, so that none is left to run alone.
    key = slice_seconds_key(scope_of(store, sweep.bucket), sweep.shard, slices)
    known = recorded_seconds(store, key, slices)
    previous, todo = slices_to_do(checkpoint.previous if checkpoint else None, slices, known)
    return SliceSchedule(previous, todo, key, known)


def clean_work(
    store: Store,
    config: CleanConfig,
    loaded: LoadedFilter,
    orders: DeleteOrders,
    pool: Workers,
    clock: PhaseClock,
    records: Checkpoints,
    slices: int,
) -> TwoPhaseWork[SliceSwept, HeldBetweenPhases, Go, SliceCleaned]:
    """The work handed to the workers: each slice's two phases around the timed decision
    (``slices``: how many slices run, to share the candidates' sample between them)."""
    sweep = config.sweep
    slice_work = SliceWork(
        SharedFilter(loaded.generation, sweep.bucket, loaded.filt),
        sweep.bucket,
        config.verify,
        orders,
        # The scan cap is a total too, shared like the delete rate.
        sweep.scan.over(store.traits.scan_defaults).shared(pool.sharers()),
        config.spill,
        sample_sizes(SAMPLE_SIZE, slices),
    )
    return TwoPhaseWork(
        slice_work.sweep,
        clock.decide,
        slice_work.clean,
        ("sweep", "clean"),
        records.slice_done,
    )


def record_for_next_run(
    store: Store,
    sweep: SweepConfig,
    schedule: SliceSchedule,
    generation: str,
    outcome: SlicesOutcome,
) -> None:
    """What the next run reads: each slice's time, the rows swept, the rows left after the
    deletes (a clean that deleted; a dry run records nothing)."""
    if len(schedule.known) > 1:
        timed = zip(schedule.todo, outcome.tallies, strict=True)
        ran = {i: t.totals.seconds + t.verify_s for i, t in timed}
        record_seconds(store, schedule.seconds_key, schedule.known, ran)
    whole = not schedule.previous.done and sweep.shard.count == 1
    if not whole:
        return
    scope, swept_rows, deleted = (
        scope_of(store, sweep.bucket),
        outcome.totals.swept_rows,
        outcome.deleted,
    )
    # The exact count sizes the next build on stores that cannot count cheaply.
    store.put_state(swept_count_key(scope), str(swept_rows))
    if deleted is not None:
        # The folder rows left are what the next build's growth is measured from (the
        # empties just removed were never in the filter).
        gone = deleted.directories if deleted.rows_removed is None else deleted.rows_removed
        record_clean(store, scope, generation, swept_rows - gone)


def summary(
    loaded: LoadedFilter,
    budget: TombstoneBudget,
    orders: DeleteOrders,
    schedule: SliceSchedule,
    verdict: str | None,
    outcome: SlicesOutcome,
    dry_run: bool,
) -> CleanReport:
    """The clean's report."""
    tallies, cleaned = outcome.tallies, outcome.cleaned
    return CleanReport(
        sweep=CleanSweep(loaded, outcome.totals, outcome.scan),
        delete_timestamp_us=orders.delete_timestamp_us,
        verified=sum(t.checked for t in tallies),
        dropped_nonempty=sum(len(t.nonempty) for t in tallies),
        plan=sum((c.plan for c in cleaned), PlanSummary()),
        dry_run=dry_run,
        deleted=outcome.deleted,
        phase_seconds=outcome.phases,
        slices_already_clean=tuple(sorted(schedule.previous.done)),
        budget=budget,
        would_be_refused=verdict,
        verified_parents=sum(t.checked_parents for t in tallies),
        spilled=sum(t.spilled for t in tallies),
        spill_bytes=sum(t.spill_bytes for t in tallies),
        plan_spill_bytes=sum(c.plan_spill_bytes for c in cleaned),
        recheck=outcome.recheck,
    )


# -- the pure decisions ------------------------------------------------------------------------


def slices_to_do(
    previous: CleanProgress | None, slices: int, known: Sequence[float | None]
) -> tuple[CleanProgress, list[int]]:
    """Where this clean starts (an interrupted attempt's progress, if it cut the ring into as
    many slices) and the slices it still has to do, those known to be slowest first."""
    if previous is None or previous.slices != slices:
        previous = CleanProgress(slices, frozenset(), frozenset())
    return previous, longest_first([i for i in range(slices) if i not in previous.done], known)


def night_end(
    config: CleanConfig, decision: Decision, cleaned: Sequence[SliceCleaned]
) -> NightEnd | None:
    """Where the night's deadline left the clean (None: it had none, or deleted nothing
    anyway: a dry run)."""
    if config.deadline is None or config.dry_run:
        return None
    return NightEnd(
        config.deadline.at_us,
        reached=decision.stopped_before_deletes or any(c.stopped for c in cleaned),
        before_deletes=decision.stopped_before_deletes,
        left=sum(c.left for c in cleaned),
        unplanned=sum(c.unplanned for c in cleaned),
    )


def deletes_of(cleaned: Sequence[SliceCleaned], delete_s: float) -> DeleteStats | None:
    """Every slice's deletes as one (None when none deleted), with the phase's time; their
    final rate is the mean of the totals each slice's made with the slices sharing --rate."""
    return merge_delete_stats([c.deleted for c in cleaned], delete_s)


@dataclass(frozen=True)
class SlicesOutcome:
    """Every slice's two phases, summed up."""

    tallies: list[SliceSwept]
    cleaned: list[SliceCleaned]
    #: seconds per phase, timed here (``PhaseClock``)
    phases: dict[str, float]
    #: the sweep's totals; its time the phase's
    totals: SweepTotals
    scan: ScanStats
    deleted: DeleteStats | None
    #: the re-check's reads, all slices together
    recheck: ScanStats = field(default_factory=ScanStats)


def sum_slices(
    tallies: list[SliceSwept], cleaned: list[SliceCleaned], phases: dict[str, float], running: int
) -> SlicesOutcome:
    """The slices' tallies and deletes as one, with the phases' times (``running``: the slices
    that ran at once)."""
    totals = replace(add_totals([t.totals for t in tallies]), seconds=phases["sweep"])
    scan = merge_scans([t.scan for t in tallies], running, phases["sweep"])
    recheck = merge_scans([t.recheck for t in tallies], running, phases.get("verify", 0.0))
    deleted = deletes_of(cleaned, phases.get("delete", 0.0))
    return SlicesOutcome(tallies, cleaned, phases, totals, scan, deleted, recheck)


# -- the two phases and the parent's part between them -------------------------------------------


@dataclass(frozen=True)
class SliceWork:
    """One slice's two phases, the same for every slice of a clean.

    Plain data (the filter travels by reference), so a Dask worker can receive it.
    """

    shared: SharedFilter
    bucket: str | None
    verify: bool
    orders: DeleteOrders
    #: the sweep's scan rate, shared by the slices scanning at the time
    scan: ScanRate = field(default_factory=ScanRate)
    spill: SpillConfig = field(default_factory=SpillConfig)
    #: candidates each slice samples at random and re-checks (``pipeline.backlog``)
    sample: int = 0

    def sweep(
        self, store: Store, shard: Shard, report: Progress
    ) -> tuple[SliceSwept, HeldBetweenPhases]:
        """Phase 1: sweep and re-check the slice; the tally goes back, the candidates stay."""
        swept, held = sweep_and_recheck(
            store,
            shard,
            self.bucket,
            self.shared.get(store),
            self.verify,
            report,
            self.scan,
            spill=self.spill,
            deletes=not self.orders.dry_run,
            sample=self.sample,
        )
        return swept, (held, swept.nonempty)

    def clean(
        self,
        store: Store,
        shard: Shard,
        kept: HeldBetweenPhases,
        go: Go,
        report: Progress,
    ) -> SliceCleaned:
        """Phase 2: plan the slice's deletes (the pure planner, within the budgets the ledger
        leaves), keeping every non-empty find, and delete (as ``go`` says: a refused night
        only plans, a night past its deadline lets its candidates go)."""
        facts, own_nonempty = kept
        if not go.plans:
            return let_go(facts)
        orders = self.orders if go.deletes else replace(self.orders, dry_run=True)
        # A first phase run again (its worker was lost) may have found more than the decision
        # pooled: its own finds stay too.
        return plan_and_delete(store, facts, go.nonempty | own_nonempty, orders, report)


class PhaseClock:
    """The wall time of the clean's phases, taken in this process around the decision (a
    process runs several slices, so no one slice's time is a phase's).

    Each phase's span is split between its steps (sweep and re-check; plan and deletes) in the
    proportion of the slices' own times for them.
    """

    def __init__(self, decide: Callable[[list[SliceSwept]], Go]) -> None:
        self._decide = decide
        self._started = time.monotonic()
        self._decided = (self._started, self._started)

    def decide(self, tallies: list[SliceSwept]) -> Go:
        """The decision, timed: every first phase ends before it, every second starts after."""
        reached = time.monotonic()
        try:
            return self._decide(tallies)
        finally:
            self._decided = (reached, time.monotonic())

    def phases(
        self, tallies: Sequence[SliceSwept], cleaned: Sequence[SliceCleaned], verify: bool
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
