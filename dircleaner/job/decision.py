"""The parent's part of a clean between its two phases: the decision on every slice's sweep.

``decide_clean`` (pure) is the whole decision: it applies the guards to the slices' totals,
pools their non-empty finds and tells the second phases what to do (``Decision.go``):

- delete, the normal night;
- plan only, as a dry run would: a real run over ``--max-delete-fraction`` is refused, but only
  once its slices have planned, so that the refusal says what clearing the backlog would take
  (``pipeline.backlog.explain``), with the sample of its candidates the slices re-checked;
- nothing at all: the night's deadline passed before the deletes, and the slices let their
  candidates go unplanned.

``Checkpoints`` records the clean's progress: the decision before any delete, then each slice
as it finishes its deletes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from dircleaner.errors import GuardRefused, TooManyCandidates
from dircleaner.job.resume import MAX_CHECKPOINTED_NONEMPTY, CleanCheckpoint, CleanProgress
from dircleaner.model import BucketDir
from dircleaner.pipeline.backlog import SampleFigures, add_samples
from dircleaner.pipeline.guards import GuardConfig, check_sweep
from dircleaner.pipeline.slice import SliceCleaned, SliceSwept
from dircleaner.pipeline.sweep import SweepTotals

if TYPE_CHECKING:
    from dircleaner.filter.format import FilterHeader


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
    """What the parent decided on every slice's sweep (``decide_clean``), each thing once."""

    #: the clean's progress once decided (what a resumed run starts from), with every non-empty
    #: find pooled: the directories every slice keeps (with their ancestors)
    progress: CleanProgress
    #: a dry run's verdict: why a real run would be refused (None: it would go ahead)
    verdict: str | None = None
    #: the fraction guard's refusal (a real run's is raised once the slices have planned; a
    #: dry run's verdict is explained with the plan too)
    refusal: TooManyCandidates | None = None
    #: every slice's sample of its candidates, re-checked
    sample: SampleFigures = field(default_factory=SampleFigures)
    #: the slices delete (else only plan, as a dry run does)
    deletes: bool = True
    #: the slices plan (else they let their candidates go: the deadline passed first)
    plans: bool = True

    @property
    def go(self) -> Go:
        """The word to every slice's second phase."""
        return Go(self.progress.nonempty, deletes=self.deletes, plans=self.plans)

    @property
    def recorded(self) -> bool:
        """Whether the decision is checkpointed: all but a refused night's."""
        return self.refusal is None or self.deletes

    @property
    def stopped_before_deletes(self) -> bool:
        """The deadline had passed when the sweep ended: nothing was planned or deleted."""
        return not self.plans


def add_totals(parts: Sequence[SweepTotals]) -> SweepTotals:
    """The sweep totals of several slices as one."""
    return SweepTotals(
        swept_rows=sum(p.swept_rows for p in parts),
        partitions=sum(p.partitions for p in parts),
        candidates=sum(p.candidates for p in parts),
        seconds=max((p.seconds for p in parts), default=0.0),
    )


def decide_clean(
    tallies: Sequence[SliceSwept],
    header: FilterHeader,
    guards: GuardConfig,
    previous: CleanProgress,
    *,
    dry_run: bool,
    past_deadline: bool = False,
) -> Decision:
    """The whole decision between the phases, on every slice's tally: refuse the whole clean
    if the sweep fails a guard (GuardRefused at once; the fraction guard's in ``refusal``, the
    slices only planning, for the caller to raise once they have; a dry run records why and
    plans on); else pool every slice's non-empty finds with the interrupted attempt's, and
    delete, unless the night's deadline has passed (then nothing is planned)."""
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
    decided = Decision(
        replace(previous, nonempty=nonempty),
        verdict,
        refusal,
        add_samples([t.sample for t in tallies]),
    )
    if refusal is not None and not dry_run:
        # Refused: nothing recorded, and the slices only plan, for the refusal to say what
        # clearing the backlog on purpose would take.
        return replace(decided, deletes=False)
    if past_deadline and not dry_run:
        return replace(decided, deletes=False, plans=False)
    return decided


def worth_checkpointing(progress: CleanProgress) -> bool:
    """Whether to record ``progress``: not when there are too many non-empty finds to store (a
    resumed run then cleans every slice again)."""
    return len(progress.nonempty) <= MAX_CHECKPOINTED_NONEMPTY


class Checkpoints:
    """What the parent records of the clean: the decision before any delete (unless refused),
    then each slice as it finishes its deletes (a slice the deadline stopped did not finish);
    a dry run records nothing."""

    def __init__(
        self, checkpoint: CleanCheckpoint | None, todo: list[int], *, dry_run: bool
    ) -> None:
        self._checkpoint = None if dry_run else checkpoint
        self._todo = todo
        #: the decision, once taken
        self.decision: Decision | None = None
        #: the clean's progress as it goes (what a resumed run starts from)
        self._progress: CleanProgress | None = None

    def decided(self, decision: Decision) -> None:
        self.decision = decision
        self._progress = decision.progress
        if decision.recorded:
            self._save()

    def slice_done(self, position: int, cleaned: SliceCleaned) -> None:
        """Record that the ``position``-th slice still to do finished its deletes (one the
        deadline stopped did not: the next run does it again)."""
        if cleaned.stopped or self._progress is None:
            return
        done = self._progress.done | {self._todo[position]}
        self._progress = replace(self._progress, done=done)
        self._save()

    def _save(self) -> None:
        progress = self._progress
        if self._checkpoint and progress is not None and worth_checkpointing(progress):
            self._checkpoint.save(progress)
