"""The parent's part of a clean between its two phases: the decision on every slice's sweep.

``decide_sweep`` (pure) applies the guards to the slices' totals and pools their non-empty
finds; ``CleanDecision`` takes it once every first phase is in, records the clean's progress
(before any delete, then as each slice finishes its deletes) and tells the second phases what
to do (``Go``):

- delete, the normal night;
- plan only, as a dry run would: a real run over ``--max-delete-fraction`` is refused, but only
  once its slices have planned, so that the refusal says what clearing the backlog would take
  (``pipeline.backlog.explain``), with the sample of its candidates the slices re-checked;
- nothing at all: the night's deadline passed before the deletes (``deadline``), and the
  slices let their candidates go unplanned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dircleaner.deadline import Deadline
from dircleaner.errors import GuardRefused, TooManyCandidates
from dircleaner.job.resume import MAX_CHECKPOINTED_NONEMPTY, CleanProgress
from dircleaner.model import BucketDir
from dircleaner.pipeline.backlog import SampleFigures, add_samples
from dircleaner.pipeline.guards import GuardConfig, check_sweep
from dircleaner.pipeline.slice import ShardCleaned, ShardSwept
from dircleaner.pipeline.sweep import SweepTotals

if TYPE_CHECKING:
    from dircleaner.filter.format import FilterHeader
    from dircleaner.job.clean import CleanCheckpoint


@dataclass(frozen=True)
class Go:
    """The parent's word to every slice's second phase."""

    #: the directories every slice keeps (with their ancestors): every non-empty find
    nonempty: frozenset[BucketDir]
    #: delete (else only plan, as a dry run does)
    deletes: bool = True
    #: plan (else let the candidates go unplanned: the deadline passed before the deletes)
    plans: bool = True


@dataclass(frozen=True)
class Decision:
    """What the parent decided on every slice's sweep."""

    #: the directories every slice keeps (with their ancestors): every non-empty find
    nonempty: frozenset[BucketDir]
    #: the clean's progress once decided (what a resumed run starts from)
    progress: CleanProgress
    #: a dry run's verdict: why a real run would be refused (None: it would go ahead)
    verdict: str | None
    #: the fraction guard's refusal (a real run's is raised once the slices have planned; a
    #: dry run's verdict is explained with the plan too)
    refusal: TooManyCandidates | None = None


def add_totals(parts: Sequence[SweepTotals]) -> SweepTotals:
    """The sweep totals of several slices as one."""
    return SweepTotals(
        swept_rows=sum(p.swept_rows for p in parts),
        partitions=sum(p.partitions for p in parts),
        candidates=sum(p.candidates for p in parts),
        seconds=max((p.seconds for p in parts), default=0.0),
    )


def decide_sweep(
    tallies: Sequence[ShardSwept],
    header: FilterHeader,
    guards: GuardConfig,
    previous: CleanProgress,
    *,
    dry_run: bool,
) -> Decision:
    """Refuse the whole clean if the sweep fails a guard (GuardRefused at once; the fraction
    guard's in ``refusal``, for the caller to raise once the slices planned; a dry run records
    why and plans on); else pool every slice's non-empty finds with the interrupted attempt's."""
    totals = add_totals([t.totals for t in tallies])
    verdict = None
    refusal = None
    # Nothing is deleted anywhere unless the whole sweep passes the guards. A dry run deletes
    # nothing anyway: it plans on, and reports what a real run would meet.
    try:
        check_sweep(header, totals.swept_rows, totals.candidates, guards)
    except GuardRefused as exc:
        # What the sweep found stays visible behind the refusal (--json, the metrics).
        exc.details.setdefault("swept_dirs", totals.swept_rows)
        exc.details.setdefault("candidates", totals.candidates)
        exc.details.setdefault("verified_nonempty", sum(len(t.nonempty) for t in tallies))
        if isinstance(exc, TooManyCandidates):
            refusal = exc
        elif not dry_run:
            raise
        verdict = str(exc) if dry_run else None
    # A directory with an object keeps its ancestors, whichever slice lists them: every slice
    # drops every slice's finds (and their ancestors) from its candidates, and so do the slices
    # an interrupted attempt left for this one.
    nonempty = previous.nonempty.union(*(t.nonempty for t in tallies))
    return Decision(nonempty, replace(previous, nonempty=nonempty), verdict, refusal)


def worth_checkpointing(progress: CleanProgress, dry_run: bool) -> bool:
    """Whether to record ``progress``: never for a dry run; not when there are too many
    non-empty finds to store (a resumed run then cleans every slice again)."""
    return not dry_run and len(progress.nonempty) <= MAX_CHECKPOINTED_NONEMPTY


class CleanDecision:
    """The parent's part between the phases: ``decide_sweep``, the night's deadline, and the
    checkpoint the decision and each finished slice write (before any delete, then as slices
    finish; a slice the deadline stopped is not finished)."""

    def __init__(
        self,
        header: FilterHeader,
        guards: GuardConfig,
        previous: CleanProgress,
        todo: list[int],
        checkpoint: CleanCheckpoint | None,
        *,
        dry_run: bool,
        deadline: Deadline | None = None,
    ) -> None:
        self._header = header
        self._guards = guards
        self._dry_run = dry_run
        self._deadline = deadline
        self._previous = previous
        self._todo = todo
        self._checkpoint = checkpoint
        #: the clean's progress as it goes (what a resumed run starts from)
        self.progress = previous
        #: a dry run's verdict: why a real run would be refused (None: it would go ahead)
        self.verdict: str | None = None
        #: the fraction guard's refusal, to raise (or, in a dry run, explain) with the plan
        self.refusal: TooManyCandidates | None = None
        #: every slice's sample of its candidates, re-checked
        self.sample = SampleFigures()
        #: the deadline had passed when the sweep ended: nothing was planned or deleted
        self.stopped_before_deletes = False

    def decide(self, tallies: list[ShardSwept]) -> Go:
        """The decision on every slice's tally, recorded before any delete."""
        decided = decide_sweep(
            tallies, self._header, self._guards, self._previous, dry_run=self._dry_run
        )
        self.verdict, self.progress = decided.verdict, decided.progress
        self.refusal = decided.refusal
        self.sample = add_samples([t.sample for t in tallies])
        if self.refusal is not None and not self._dry_run:
            # Refused: nothing recorded, and the slices only plan, for the refusal to say
            # what clearing the backlog on purpose would take.
            return Go(decided.nonempty, deletes=False)
        self._save()
        if self._deadline is not None and not self._dry_run and self._deadline.reached():
            self.stopped_before_deletes = True
            return Go(decided.nonempty, deletes=False, plans=False)
        return Go(decided.nonempty)

    def slice_done(self, position: int, cleaned: ShardCleaned) -> None:
        """Record that the ``position``-th slice still to do finished its deletes (one the
        deadline stopped did not: the next run does it again)."""
        if cleaned.stopped:
            return
        self.progress = replace(self.progress, done=self.progress.done | {self._todo[position]})
        self._save()

    def _save(self) -> None:
        if self._checkpoint and worth_checkpointing(self.progress, self._dry_run):
            self._checkpoint.save(self.progress)
