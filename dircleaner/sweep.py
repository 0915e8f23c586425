"""Pass 2 — sweep: stream the folders index; directories absent from the filter are candidates.

A Bloom filter has no false negatives, so "absent" means "no object under it at build time". Rows
arrive partition by partition; when a partition's own directory is absent from the filter, every
row in it is a candidate too (a non-empty child would have made its parent non-empty), which
catches children that a false positive would otherwise have hidden.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from dircleaner.paths import filter_key
from dircleaner.plan import PartitionFacts
from dircleaner.progress import Progress, no_progress
from dircleaner.store.base import FolderRow, PartitionKey


class MembershipFilter(Protocol):
    """The part of a Bloom filter the sweep needs."""

    def contains_many(self, keys: list[bytes]) -> np.ndarray: ...


@dataclass(frozen=True)
class SweepResult:
    """Candidates, grouped by partition, and what the sweep counted."""

    facts: list[PartitionFacts]
    swept_rows: int
    partitions: int
    seconds: float

    @property
    def candidates(self) -> int:
        return sum(len(f.candidates) for f in self.facts)

    def candidate_rows(self) -> Iterator[FolderRow]:
        for fact in self.facts:
            yield from fact.candidates


class _PartitionRun:
    """Accumulates one partition's rows while they stream past."""

    __slots__ = ("absent", "candidates", "key", "total")

    def __init__(self, key: PartitionKey, absent: bool) -> None:
        self.key = key
        self.absent = absent
        self.total = 0
        self.candidates: list[FolderRow] = []

    def facts(self) -> PartitionFacts | None:
        if not self.candidates and not self.absent:
            return None
        return PartitionFacts(self.key, self.total, tuple(self.candidates), self.absent)


def sweep(
    batches: Iterable[list[FolderRow]],
    filt: MembershipFilter,
    progress: Progress = no_progress,
) -> SweepResult:
    """Test every folder row (and every partition's own directory) against the filter."""
    started = time.monotonic()
    facts: list[PartitionFacts] = []
    swept = partitions = 0
    run: _PartitionRun | None = None
    for batch in batches:
        if not batch:
            continue
        row_present = filt.contains_many(
            [filter_key(r.bucket, r.parent + r.name + "/") for r in batch]
        )
        # Partition boundaries within the batch, and each partition's own directory.
        starts = [0]
        starts.extend(
            i
            for i in range(1, len(batch))
            if batch[i].parent != batch[i - 1].parent
            or batch[i].bucket != batch[i - 1].bucket
            or batch[i].token != batch[i - 1].token
        )
        keys = [PartitionKey(batch[i].token, batch[i].bucket, batch[i].parent) for i in starts]
        dir_present = _partition_dirs_present(filt, keys)
        missing = set(np.flatnonzero(~row_present).tolist())
        bounds = [*starts, len(batch)]
        for seg, key in enumerate(keys):
            if run is None or run.key != key:
                if run is not None:
                    partitions += 1
                    if (done := run.facts()) is not None:
                        facts.append(done)
                run = _PartitionRun(key, not dir_present[seg])
            lo, hi = bounds[seg], bounds[seg + 1]
            run.total += hi - lo
            if run.absent:
                run.candidates.extend(batch[lo:hi])
            elif missing:
                run.candidates.extend(batch[i] for i in range(lo, hi) if i in missing)
        swept += len(batch)
        progress("sweep", swept, None)
    if run is not None:
        partitions += 1
        if (done := run.facts()) is not None:
            facts.append(done)
    return SweepResult(facts, swept, partitions, time.monotonic() - started)


def _partition_dirs_present(filt: MembershipFilter, keys: list[PartitionKey]) -> list[bool]:
    """Whether each partition's own directory is in the filter (the root always counts as in)."""
    present = [True] * len(keys)
    probe = [i for i, key in enumerate(keys) if key.parent]
    if probe:
        answers = filt.contains_many([filter_key(keys[i].bucket, keys[i].parent) for i in probe])
        for i, answer in zip(probe, answers.tolist(), strict=True):
            present[i] = bool(answer)
    return present
