"""The re-check: before anything is deleted, ask the objects table again about every candidate.

A candidate had no object when the build scanned; one may have been put since. Each candidate
directory's objects partition is read with ``LIMIT 1`` (batched by the store: ``IN`` reads on
Cassandra, a temporary table join on SQLite); a directory that turns out non-empty is dropped
from the plan together with all its ancestors (``plan.drop_nonempty``).

These are reads the cluster bears as it bears the scans': a throttle at the slice's share of
``--scan-rate`` paces them (each batch is paid for as a scan's page is), and counts them, so
the summary reports their rate. Batches are cut to about a quarter of a second of the cap, so
the pace is even; uncapped, they are ``RECHECK_BATCH`` directories.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dircleaner.model import BucketDir, PartitionFacts
from dircleaner.pipeline.spill import Candidates
from dircleaner.progress import Progress, no_progress
from dircleaner.scanrate import ScanThrottle
from dircleaner.store.base import Store

#: candidate directories handed to the store's re-check at once
RECHECK_BATCH = 100_000
#: under a cap, a batch is this many seconds of it (at least MIN_CAPPED_BATCH directories)
CAPPED_BATCH_S = 0.25
MIN_CAPPED_BATCH = 100


@dataclass(frozen=True)
class Rechecked:
    """What the re-check found, and what it read."""

    nonempty: set[BucketDir]
    #: candidate rows re-checked
    candidates: int
    #: directories re-checked besides: partitions' own directories found empty whose row is
    #: not a candidate here (another slice sweeps it, or the index lacks it)
    parents: int

    @property
    def checked(self) -> int:
        return self.candidates + self.parents


def find_nonempty(
    store: Store,
    facts: Sequence[PartitionFacts] | Candidates,
    throttle: ScanThrottle | None = None,
    progress: Progress = no_progress,
) -> Rechecked:
    """Re-check every empty directory's objects partition: the non-empty ones, what was checked.

    Streams the directories in chunks rather than building one set of them all: each candidate
    row is a distinct directory, and an absent partition's own directory is almost always also a
    candidate row of its parent partition, so only the few that are not are kept aside (in a
    slice, its parent partition may be in another slice: then it is checked here too). Spilled
    candidates are read back once, the absent partitions' directories kept aside as digests
    (``spill.AbsentDirs``). Each chunk goes through ``throttle`` (its reads paced and counted)
    and is reported to ``progress`` (phase ``verify``: directories done of the total).
    """
    if isinstance(facts, Candidates):
        if facts.spilled:
            return _find_in_spill(store, facts, _Reads(store, throttle, progress, facts.candidates))
        facts = list(facts)
    orphans = {(f.key.bucket, f.key.parent) for f in facts if f.dir_absent}
    candidates = sum(len(f.candidates) for f in facts)
    # the total: an upper bound until the orphans no candidate row names are known
    reads = _Reads(store, throttle, progress, candidates + len(orphans))
    chunk: list[BucketDir] = []
    for fact in facts:
        for row in fact.candidates:
            directory = (row.bucket, row.parent + row.name + "/")
            orphans.discard(directory)
            chunk.append(directory)
            if len(chunk) >= reads.size:
                reads.check(chunk)
                chunk = []
    reads.total = candidates + len(orphans)
    chunk.extend(sorted(orphans))
    for start in range(0, len(chunk), reads.size):
        reads.check(chunk[start : start + reads.size])
    return Rechecked(reads.nonempty, candidates, reads.checked - candidates)


def _find_in_spill(store: Store, held: Candidates, reads: _Reads) -> Rechecked:
    """``find_nonempty`` on spilled candidates, streamed: the same directories checked."""
    absent = held.absent_dirs()
    for chunk in _batched(held.candidate_dirs(), reads.size):
        absent.saw(chunk)
        reads.check(chunk)
    candidates = reads.checked
    for chunk in _batched(absent.unseen(), reads.size):
        reads.check(sorted(chunk))
    return Rechecked(reads.nonempty, candidates, reads.checked - candidates)


def _batched(dirs: Iterable[BucketDir], size: int) -> Iterable[list[BucketDir]]:
    chunk: list[BucketDir] = []
    for directory in dirs:
        chunk.append(directory)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def batch_size(throttle: ScanThrottle | None) -> int:
    """Directories read at once: a quarter of a second of the cap, or RECHECK_BATCH."""
    cap = 0.0 if throttle is None else throttle.config.cap
    if not cap:
        return RECHECK_BATCH
    return max(MIN_CAPPED_BATCH, min(RECHECK_BATCH, round(cap * CAPPED_BATCH_S)))


class _Reads:
    """The re-check's reads: a chunk at a time, counted by the throttle and paid for once read
    (the wait comes after a chunk, the last one's too, so over the re-check the reads per
    second stay within the cap, not a first chunk above it), and reported as done of the
    total (raised if more were read: a spilled slice's orphans are counted as they come)."""

    def __init__(
        self, store: Store, throttle: ScanThrottle | None, progress: Progress, total: int
    ) -> None:
        self._store = store
        self._throttle = throttle
        self._progress = progress
        self.size = batch_size(throttle)
        self.total = total
        self.checked = 0
        self.nonempty: set[BucketDir] = set()
        progress("verify", 0, total)

    def check(self, chunk: list[BucketDir]) -> None:
        throttle = self._throttle
        if throttle is None:
            self.nonempty |= self._store.nonempty_object_partitions(chunk)
        else:
            began = throttle.now()
            self.nonempty |= self._store.nonempty_object_partitions(chunk)
            throttle.page(len(chunk), throttle.now() - began)
        self.checked += len(chunk)
        self.total = max(self.total, self.checked)
        self._progress("verify", self.checked, self.total)
