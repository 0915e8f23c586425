"""Telling a backlog from a broken filter, and what clearing the backlog on purpose takes.

When more than ``--max-delete-fraction`` of the directories would go, the guard refuses: a
filter that misses directories (built for another dataset, damaged, a wrong mapping of the
objects table) makes every directory it misses a candidate, and without the guard the night
would delete them. But a store can also really be that empty: lazy deletes pile up (the seed's
backlog, 16M empty of 25M). The refusal tells the two apart with a sample:

- each slice keeps a uniform random sample of its candidate rows as the sweep finds them
  (``CandidateSample``: a reservoir, Li's algorithm L, which skips ahead instead of drawing a
  number per candidate), ``SAMPLE_SIZE`` over all slices;
- the sample is re-checked at the re-check's quorum: with the re-check on, its finds already
  say which sample members hold an object (the same reads); without it (``--no-verify``) the
  sample alone is read (``store.nonempty_object_partitions``);
- a sound filter has no false negatives: no candidate held an object when the build scanned,
  so a sample member holding one means a write raced the night (rare, and safe: the timestamp
  rule keeps it), while a broken filter's candidates are the directories it misses, many of
  them holding objects. ``judge`` says which it looks like.

The sample never lets a run through: the guard refuses all the same, and the refusal says what
it looks like, what the plan would do (the slices plan as a dry run would) and what to run to
clear it on purpose (``explain``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dircleaner.errors import GuardRefused, TooManyCandidates
from dircleaner.model import BucketDir, FolderRow, PartitionFacts
from dircleaner.pipeline.plan import PlanSummary
from dircleaner.pipeline.sweep import FactSink
from dircleaner.timeutil import format_duration

#: candidates sampled over all the slices of a night
SAMPLE_SIZE = 4096
#: a sample with at most this share holding objects looks like a backlog
BACKLOG_AT_MOST = 0.001
#: a sample with at least this share (and BROKEN_AT_LEAST_FOUND of them) looks like a broken filter
BROKEN_AT_LEAST = 0.01
BROKEN_AT_LEAST_FOUND = 3
#: the window the refusal suggests for clearing a backlog a night at a time (--max-run-time)
SUGGESTED_WINDOW = "5h"
SUGGESTED_WINDOW_S = 5 * 3600.0
#: how far above the night's share of candidates the suggested --max-delete-fraction goes
FRACTION_MARGIN = 0.02

BACKLOG = "backlog"
BROKEN = "broken filter"
UNCLEAR = "unclear"


def sample_sizes(total: int, slices: int) -> int:
    """Each slice's part of a night's sample of ``total`` candidates."""
    return max(1, math.ceil(total / max(1, slices)))


class CandidateSample:
    """A sweep's sink that passes every partition's facts on to ``into`` and keeps a uniform
    random sample of ``size`` of their candidate rows (reservoir sampling, algorithm L)."""

    def __init__(self, into: FactSink, size: int, rng: random.Random | None = None) -> None:
        self._into = into
        self._size = size
        self._rng = rng or random.Random()
        self.seen = 0
        self.sample: list[BucketDir] = []
        # Algorithm L: the index of the next candidate to take once the reservoir is full.
        self._w = 1.0
        self._next = size

    def append(self, fact: PartitionFacts, /) -> None:
        self._into.append(fact)
        rows = fact.candidates
        start, self.seen = self.seen, self.seen + len(rows)
        if not self._size:
            return
        # Until the reservoir is full every candidate goes in; then only those the skips land on.
        while len(self.sample) < min(self._size, self.seen):
            self._take(rows[len(self.sample) - start], None)
            if len(self.sample) == self._size:
                self._w = math.exp(math.log(self._uniform()) / self._size)
                self._next = self._size + self._skip()
        while self._next < self.seen:
            self._take(rows[self._next - start], self._rng.randrange(self._size))
            self._w *= math.exp(math.log(self._uniform()) / self._size)
            self._next += 1 + self._skip()

    def _take(self, row: FolderRow, slot: int | None) -> None:
        directory = (row.bucket, row.parent + row.name + "/")
        if slot is None:
            self.sample.append(directory)
        else:
            self.sample[slot] = directory

    def _uniform(self) -> float:
        """A number in (0, 1]: its logarithm is defined."""
        return 1.0 - self._rng.random()

    def _skip(self) -> int:
        """How many candidates to pass over before the next one the reservoir takes."""
        return int(math.log(self._uniform()) / math.log1p(-self._w))

    def figures(self, holding: Iterable[BucketDir]) -> SampleFigures:
        """The sample's figures, given which of its members hold an object."""
        found = set(holding)
        return SampleFigures(self.seen, len(self.sample), sum(d in found for d in self.sample))


@dataclass(frozen=True)
class SampleFigures:
    """A sample of candidates re-checked: of how many candidates, how many sampled, how many of
    those hold an object (one slice's, or several added up)."""

    candidates: int = 0
    sampled: int = 0
    holding: int = 0
    #: the candidates' estimated share holding an object (each slice's share weighted by its
    #: candidates: the slices' samples are of unequal parts of their candidates)
    estimated_share: float = 0.0

    @property
    def share(self) -> float:
        return self.holding / self.sampled if self.sampled else 0.0

    def summary(self) -> dict[str, object]:
        return {
            "candidates": self.candidates,
            "sampled": self.sampled,
            "holding_objects": self.holding,
            "estimated_share_holding_objects": round(self.estimated(), 6),
            "looks_like": judge(self),
        }

    def estimated(self) -> float:
        return self.estimated_share if self.estimated_share else self.share


def add_samples(parts: Sequence[SampleFigures]) -> SampleFigures:
    """Several slices' samples as one (the share estimated per slice, weighted)."""
    candidates = sum(p.candidates for p in parts)
    weighted = sum(p.share * p.candidates for p in parts)
    return SampleFigures(
        candidates,
        sum(p.sampled for p in parts),
        sum(p.holding for p in parts),
        weighted / candidates if candidates else 0.0,
    )


def judge(sample: SampleFigures) -> str:
    """What a sample's candidates holding objects look like: ``BACKLOG`` (almost none, as a
    sound filter's), ``BROKEN`` (many, as a filter missing directories makes), else
    ``UNCLEAR``."""
    if sample.holding == 0 or sample.share <= BACKLOG_AT_MOST:
        return BACKLOG
    if sample.share >= BROKEN_AT_LEAST and sample.holding >= BROKEN_AT_LEAST_FOUND:
        return BROKEN
    return UNCLEAR


def suggested_fraction(fraction: float) -> float:
    """A ``--max-delete-fraction`` a little above ``fraction`` (the candidates may grow a
    little by the next night): the 0.05 step above it plus ``FRACTION_MARGIN``, at most 1."""
    return min(1.0, round(math.ceil((fraction + FRACTION_MARGIN) / 0.05) * 0.05, 2))


def estimated_delete_s(plan: PlanSummary, rate: float) -> float | None:
    """How long the plan's deletes take at ``rate`` (the unit ``--rate`` counts: partition, row
    and range deletes and rewrites); None when unthrottled."""
    return plan.tombstones / rate if rate else None


def explain(
    refusal: GuardRefused, sample: SampleFigures, plan: PlanSummary, rate: float
) -> TooManyCandidates:
    """The fraction guard's refusal with what it looks like, the plan's size and what to run
    to clear the backlog on purpose (and all of it in its details, for ``--json`` and the
    metrics)."""
    details = dict(refusal.details)
    swept, candidates = _count(details, "swept_dirs"), _count(details, "candidates")
    fraction = candidates / swept if swept else 0.0
    verdict = judge(sample)
    eta = estimated_delete_s(plan, rate)
    found = (
        f"{sample.holding:,} of {sample.sampled:,} candidates sampled hold an object (a sound"
        " filter's hold almost none, a broken filter's many)"
    )
    taking = f"about {format_duration(eta)} at --rate {rate:g}" if eta else "unthrottled"
    planned = (
        f"The plan: {plan.directories:,} directories in {plan.tombstones:,} deletes"
        f" ({plan.deletes.partition:,} partition, {plan.deletes.row:,} row,"
        f" {plan.deletes.range:,} range, {plan.deletes.rewrite:,}"
        f" rewrite{'' if plan.deletes.rewrite == 1 else 's'}), {taking}"
    )
    suggested = None if verdict == BROKEN else suggested_fraction(fraction)
    if verdict == BROKEN:
        verdict_text = f"It looks like a broken filter, not a backlog: {found}"
        advice = (
            "Do not raise --max-delete-fraction for this: check the objects table's mapping"
            " and rebuild the filter ('dircleaner build'), then run again"
        )
    else:
        verdict_text = (
            f"It looks like a backlog, not a broken filter: {found}"
            if verdict == BACKLOG
            else f"It may be a backlog with writes racing the night, or a filter that misses"
            f" some directories (check before clearing it): {found}"
        )
        nights = math.ceil(eta / SUGGESTED_WINDOW_S) if eta else 1
        advice = (
            f"To clear it on purpose: rerun with --max-delete-fraction {suggested:g} and the"
            f" night's window, e.g. --max-run-time {SUGGESTED_WINDOW}"
            f" ({'one night' if nights <= 1 else f'about {nights} nights'} at this rate; each"
            " night resumes where the last one stopped)"
        )
    details.update(
        {
            "sample": sample.summary(),
            "looks_like": verdict,
            "plan": {
                "directories": plan.directories,
                "deletes": plan.tombstones,
                "partition_deletes": plan.deletes.partition,
                "row_deletes": plan.deletes.row,
                "range_deletes": plan.deletes.range,
                "rewrites": plan.deletes.rewrite,
                "deferred": plan.deferred,
            },
            "estimated_delete_seconds": None if eta is None else round(eta, 1),
            "rate": rate,
            "suggested_max_delete_fraction": suggested,
        }
    )
    limit = details.get("max_delete_fraction", 0.0)
    head = (
        f"{candidates:,} of {swept:,} directories ({fraction:.1%}) would be deleted, over"
        f" --max-delete-fraction {limit:g}"
    )
    return TooManyCandidates(f"{head}. {verdict_text}. {planned}. {advice}", details=details)


def _count(details: dict[str, object], key: str) -> int:
    value = details.get(key)
    return value if isinstance(value, int) else 0
