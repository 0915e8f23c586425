"""``clean --changed``: the churn night, which checks only the directories the journal names.

The full night reads the whole store to find what changed; a churn night reads the journal's
settled time slots (``job.journalstate``), checks each directory they name exactly, and the
parents of those found empty (``pipeline.changed``), then plans and deletes through the full
night's own second phase (``pipeline.slice.plan_slice`` and ``delete_slice``): the same
planner, tombstone budget and ledger, deleter, audit log, lease and dry run. Its one guard is
the full night's ``--max-delete-fraction``, of the store's directories (as the last full night
counted them), over the night's deletes; ``--force`` overrides it.

**T, the delete timestamp: the night's start minus ``--min-age``**, taken before the first
read. There is no build, so nothing earlier is known to be safe, and nothing later is needed:

- an object put during the check (after the night began) rewrites the folder row of every
  ancestor at its own time, later than T, so no delete at T removes any of them, whatever the
  check saw;
- an object put before T landed before the check's quorum read of its objects partition began,
  so the check sees it and keeps the directory and, through the parent's folders read, every
  ancestor; ``--min-age`` is the margin for clocks that disagree, as in the full night.

The journal is a hint, never a verdict: every directory is checked before it is deleted, a
missing row only leaves an empty directory for the weekly full night, a spurious one costs a
read. Directories left for later — an objects partition full of tombstones (read, or by the
journal's count) or a live partition out of budget — are written back to the journal in the
slot one grace period ahead, when those tombstones are gone. Slots are marked done once their
deletes are through, so a killed night reads again only what it had not finished; what it had
deleted is gone from the index, and the parents above it are checked again all the same.

A night reads its slots in batches of at most ``max_batch_dirs`` directories, each checked,
guarded, planned and deleted before the next is read: memory follows the batch, not the
journal's backlog.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from dircleaner.errors import TooManyCandidates
from dircleaner.filter.generation import fresh_generation_id
from dircleaner.job.journalstate import (
    SlotsToRead,
    defer,
    done_slots,
    mark_done,
    slots_to_read,
)
from dircleaner.job.orders import CleanSettings, delete_orders
from dircleaner.lease import deleting_under_lease
from dircleaner.model import BucketDir
from dircleaner.paths import dir_of_row
from dircleaner.pipeline.budget import TombstoneBudget
from dircleaner.pipeline.changed import (
    ChangedCheck,
    CheckReads,
    check_changed,
    read_tombstone_limit,
)
from dircleaner.pipeline.delete import DeleteStats
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.pipeline.plan import PlanSummary
from dircleaner.pipeline.slice import delete_slice, merge_delete_stats, plan_slice
from dircleaner.progress import Progress, no_progress
from dircleaner.store.base import Store
from dircleaner.timeutil import now_us

#: --settle: how long after its hour a slot is left for writers whose requests were in flight
DEFAULT_SETTLE_S = 900.0
#: directories a night checks, plans and deletes at a time
MAX_BATCH_DIRS = 500_000


@dataclass(frozen=True, kw_only=True)
class ChangedCleanConfig(CleanSettings):
    """Which journal slots to take, and how to delete what they lead to."""

    bucket: str | None = None
    settle_s: float = DEFAULT_SETTLE_S
    #: --max-delete-fraction and --force (the filter's guards have no filter to check here)
    guards: GuardConfig = field(default_factory=GuardConfig)
    max_batch_dirs: int = MAX_BATCH_DIRS
    #: when the night began (µs; tests fix it), else when it is called
    started_us: int | None = None
    #: never a rewrite: the night does not read a live partition whole, so it cannot bound
    #: what a rewrite would copy
    max_rewrite_rows: int = 0


@dataclass(frozen=True)
class JournalBatch:
    """Slots read together: the directories they name, each with the objects they lost."""

    slots: list[int]
    hints: dict[BucketDir, int]
    entries: int
    seconds: float
    #: the oldest of ``slots`` holding a row (None: none does)
    oldest_with_rows: int | None = None


@dataclass
class ChangedTotals:
    """The night's batches added up."""

    batches: int = 0
    entries: int = 0
    journaled: int = 0
    parents: int = 0
    with_objects: int = 0
    with_subdirectories: int = 0
    empty: int = 0
    already_gone: int = 0
    deferred_tombstones: int = 0
    deferred_unread: int = 0
    deferred_budget: int = 0
    reads: CheckReads = field(default_factory=CheckReads)
    #: the oldest slot read that held a row (None: none did)
    oldest_slot_with_rows: int | None = None


@dataclass
class ChangedCleanReport:
    """Everything a churn night read, decided and did."""

    generation: str
    started_us: int
    delete_timestamp_us: int
    settle_s: float
    slots: SlotsToRead
    #: slots marked done (none in a dry run)
    slots_done: list[int]
    totals: ChangedTotals
    plan: PlanSummary
    deleted: DeleteStats | None
    budget: TombstoneBudget
    dry_run: bool
    #: what the max-delete-fraction guard measured against, and where the figure came from
    directory_count: int | None
    directory_count_source: str
    phase_seconds: dict[str, float]
    #: a dry run's verdict: why a real night would be refused (None: it would go ahead)
    would_be_refused: str | None = None

    @property
    def oldest_entry_age_s(self) -> float:
        """How old, at the night's start, the oldest slot it read that held a row was (0:
        none held one): about a day when every night runs, more after nights were missed."""
        oldest = self.totals.oldest_slot_with_rows
        return 0.0 if oldest is None else max(0.0, self.started_us / 1e6 - oldest)

    @property
    def deferred(self) -> int:
        """Directories put back in the journal for a later night."""
        return self.totals.deferred_tombstones + self.totals.deferred_budget


def run_changed_clean(
    store: Store, config: ChangedCleanConfig, progress: Progress = no_progress
) -> ChangedCleanReport:
    """One churn night: read the settled slots of the journal, check, plan and delete.

    A real night holds the store's lease (``LeaseHeld`` when another run does); a dry run
    takes none and writes nothing. ``TooManyCandidates`` when a batch would take the night
    past ``--max-delete-fraction`` (the batches before it are deleted and their slots done).
    """
    with deleting_under_lease(store, dry_run=config.dry_run, ttl_s=config.lease_ttl_s) as owner:
        return _night(store, config, progress, owner)


def _night(
    store: Store, config: ChangedCleanConfig, progress: Progress, lease_owner: str | None
) -> ChangedCleanReport:
    started_us = config.started_us if config.started_us is not None else now_us()
    generation = "changed-" + fresh_generation_id(started_us)
    # T: the night's start minus --min-age (the module's docstring says why).
    budget, orders = delete_orders(
        store,
        config,
        snapshot_us=started_us,
        generation=generation,
        throttle=config.throttle,
        lease_owner=lease_owner,
        run_started_us=started_us,
    )
    limit = read_tombstone_limit(store)
    slots = slots_to_read(done_slots(store, config.bucket), started_us, config.settle_s)
    guard = _NightGuard(store, config)
    totals = ChangedTotals()
    plans: list[PlanSummary] = []
    deletes: list[DeleteStats | None] = []
    done: list[int] = []
    phases = dict.fromkeys(("journal", "check", "plan", "delete"), 0.0)
    for batch in journal_batches(store, slots.read, config.bucket, config.max_batch_dirs, progress):
        phases["journal"] += batch.seconds
        check = check_changed(store, batch.hints, limit, progress)
        phases["check"] += check.seconds
        planning = time.monotonic()
        plan = plan_slice(store, check.facts, frozenset(), orders)
        guard.check(PlanSummary.of(plan).directories)
        phases["plan"] += time.monotonic() - planning
        deleting = time.monotonic()
        deletes.append(delete_slice(store, plan, orders, progress))
        phases["delete"] += time.monotonic() - deleting
        over_budget = {(row.bucket, dir_of_row(row.parent, row.name)) for row in plan.deferred}
        if not config.dry_run:
            defer(store, check.deferred | over_budget, now_us(), budget.grace_s)
            closed = [slot for slot in batch.slots if slot in set(slots.closing)]
            mark_done(store, config.bucket, closed, now_us())
            done.extend(closed)
        plans.append(PlanSummary.of(plan))
        _add(totals, batch, check, len(over_budget))
    return ChangedCleanReport(
        generation=generation,
        started_us=started_us,
        delete_timestamp_us=orders.delete_timestamp_us,
        settle_s=config.settle_s,
        slots=slots,
        slots_done=done,
        totals=totals,
        plan=sum(plans, PlanSummary()),
        deleted=merge_delete_stats(deletes, phases["delete"]),  # one batch after another
        budget=budget,
        dry_run=config.dry_run,
        directory_count=guard.count,
        directory_count_source=guard.count_source,
        phase_seconds={k: v for k, v in phases.items() if v or k != "delete"},
        would_be_refused=guard.verdict,
    )


def journal_batches(
    store: Store,
    slots: Sequence[int],
    bucket: str | None,
    max_dirs: int,
    progress: Progress = no_progress,
) -> Iterator[JournalBatch]:
    """The slots' rows, oldest slot first, a batch once it names ``max_dirs`` directories
    (a slot is never split): each directory once, with the objects its rows say it lost."""
    hints: dict[BucketDir, int] = {}
    taken: list[int] = []
    entries = 0
    oldest: int | None = None
    started = time.monotonic()
    for slot in slots:
        for rows in store.journal_read(slot, bucket):
            for row in rows:
                key = (row.bucket, row.parent)
                hints[key] = hints.get(key, 0) + row.deleted
            entries += len(rows)
            oldest = slot if oldest is None else oldest
            progress("journal", entries, None)
        taken.append(slot)
        if len(hints) >= max_dirs:
            yield JournalBatch(taken, hints, entries, time.monotonic() - started, oldest)
            hints, taken, entries, oldest, started = {}, [], 0, None, time.monotonic()
    if taken:
        yield JournalBatch(taken, hints, entries, time.monotonic() - started, oldest)


def churn_fraction_refusal(
    planned: int, directory_count: int, guards: GuardConfig
) -> TooManyCandidates | None:
    """The refusal of a night that would delete ``planned`` of ``directory_count``
    directories, over ``--max-delete-fraction`` (None: within it, or forced). Pure."""
    if guards.force or planned == 0:
        return None
    fraction = planned / max(directory_count, 1)
    if fraction <= guards.max_delete_fraction:
        return None
    return TooManyCandidates(
        f"this churn night would delete {planned:,} of the store's {directory_count:,}"
        f" directories ({fraction:.1%}), over --max-delete-fraction"
        f" {guards.max_delete_fraction:g}; check the journal's sources and the store, then"
        " rerun with a higher --max-delete-fraction or --force",
        details={
            "planned": planned,
            "directories": directory_count,
            "max_delete_fraction": guards.max_delete_fraction,
        },
    )


class _NightGuard:
    """``--max-delete-fraction`` over the night's batches, against the store's directories
    (counted once, when a batch first has something to delete)."""

    def __init__(self, store: Store, config: ChangedCleanConfig) -> None:
        self._store, self._config = store, config
        self.planned = 0
        self.count: int | None = None
        self.count_source = ""
        self.verdict: str | None = None

    def check(self, planned: int) -> None:
        """Refuse (TooManyCandidates) a batch that takes the night over the fraction; a dry run
        records why and goes on."""
        self.planned += planned
        if planned == 0 or self._config.guards.force:
            return
        if self.count is None:
            self.count, self.count_source = directory_count(self._store, self._config.bucket)
        refusal = churn_fraction_refusal(self.planned, self.count, self._config.guards)
        if refusal is None:
            return
        if not self._config.dry_run:
            raise refusal
        self.verdict = self.verdict or str(refusal)


def directory_count(store: Store, bucket: str | None) -> tuple[int, str]:
    """The store's directories: as the last full night's sweep counted them, else the
    store's own count or estimate."""
    from dircleaner.pipeline.build import scope_of, swept_count_key

    recorded = store.get_state(swept_count_key(scope_of(store, bucket)))
    if recorded is not None and recorded.isdigit() and int(recorded) > 0:
        return int(recorded), "the last full night's sweep"
    estimate = store.estimate_directory_count(bucket)
    return estimate.count, estimate.method


def _add(totals: ChangedTotals, batch: JournalBatch, check: ChangedCheck, over_budget: int) -> None:
    totals.batches += 1
    totals.entries += batch.entries
    totals.journaled += check.journaled
    totals.parents += check.parents
    totals.with_objects += check.with_objects
    totals.with_subdirectories += check.with_subdirectories
    totals.empty += check.empty
    totals.already_gone += check.already_gone
    totals.deferred_tombstones += len(check.deferred)
    totals.deferred_unread += check.deferred_unread
    totals.deferred_budget += over_budget
    totals.reads = totals.reads + check.reads
    if totals.oldest_slot_with_rows is None:
        totals.oldest_slot_with_rows = batch.oldest_with_rows
