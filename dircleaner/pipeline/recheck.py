"""The re-check: before anything is deleted, ask the store again about every candidate.

A candidate had no object when the build scanned; one may have been put since. Each candidate
directory's objects partition is read with ``LIMIT 1`` (batched by the store: ``IN`` reads on
Cassandra, a temporary table join on SQLite); a directory that turns out non-empty is dropped
from the plan together with all its ancestors (``plan.drop_nonempty``).

A candidate the filter holds is one only because its parent is absent (the sweep's cascade):
the filter does not vouch for it, and its own objects partition says nothing of the objects
further down. If the filter wrongly misses the parent (a broken filter forced through), such a
directory may hold a subdirectory with objects that is no candidate at all. So it is checked as
the churn night checks a directory, through its folders partition too: the first
``CASCADE_HEAD_ROWS`` rows (``Store.folder_partition_heads``, at the re-check's consistency).
A row the filter holds is a child that is no candidate (its parent being in the filter, only
its own absence would make it one), and a partition that fills the read may hold one further
on: either keeps the directory, with its ancestors, as an object would. A child the filter
lacks is a candidate of this night, re-checked in turn (in whichever slice sweeps it), and a
kept one keeps its ancestors. On a sound filter these are its false positives under an absent
directory: a fraction (the filter's false positive rate) of the cascade's candidates.

These are reads the cluster bears as it bears the scans': a throttle at the slice's share of
``--scan-rate`` paces them (each batch is paid for as a scan's page is, a folders read as one
row), and counts them, so the summary reports their rate. Batches are cut to about a quarter of
a second of the cap, so the pace is even; uncapped, they are ``RECHECK_BATCH`` directories.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dircleaner.model import BucketDir, FolderRow, PartitionFacts
from dircleaner.paths import dir_of_row, filter_key
from dircleaner.pipeline.spill import Candidates
from dircleaner.pipeline.sweep import MembershipFilter
from dircleaner.progress import Progress, no_progress
from dircleaner.scanrate import ScanThrottle
from dircleaner.store.base import Store

#: candidate directories handed to the store's re-check at once
RECHECK_BATCH = 100_000
#: under a cap, a batch is this many seconds of it (at least MIN_CAPPED_BATCH directories)
CAPPED_BATCH_S = 0.25
MIN_CAPPED_BATCH = 100
#: rows of a cascade candidate's folders partition read: as many keep it (more may follow)
CASCADE_HEAD_ROWS = 16


@dataclass(frozen=True)
class Rechecked:
    """What the re-check found, and what it read."""

    nonempty: set[BucketDir]
    #: candidate rows re-checked
    candidates: int
    #: directories re-checked besides: partitions' own directories found empty whose row is
    #: not a candidate here (another slice sweeps it, or the index lacks it)
    parents: int
    #: candidates the filter holds (the cascade's) found without objects, whose folders
    #: partition was read; of those, the ones kept for a child that is no candidate (in
    #: ``nonempty`` too)
    cascade_read: int = 0
    cascade_kept: int = 0

    @property
    def checked(self) -> int:
        return self.candidates + self.parents


def find_nonempty(
    store: Store,
    facts: Sequence[PartitionFacts] | Candidates,
    filt: MembershipFilter,
    throttle: ScanThrottle | None = None,
    progress: Progress = no_progress,
) -> Rechecked:
    """Re-check every empty directory's objects partition, and the folders partition of those
    ``filt`` (the filter the sweep used) holds: the ones to keep, what was checked.

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
            reads = _Reads(store, filt, throttle, progress, facts.candidates)
            return _find_in_spill(facts, reads)
        facts = list(facts)
    orphans = {(f.key.bucket, f.key.parent) for f in facts if f.dir_absent}
    candidates = sum(len(f.candidates) for f in facts)
    # the total: an upper bound until the orphans no candidate row names are known
    reads = _Reads(store, filt, throttle, progress, candidates + len(orphans))
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
    return reads.found(candidates)


def _find_in_spill(held: Candidates, reads: _Reads) -> Rechecked:
    """``find_nonempty`` on spilled candidates, streamed: the same directories checked."""
    absent = held.absent_dirs()
    for chunk in _batched(held.candidate_dirs(), reads.size):
        absent.saw(chunk)
        reads.check(chunk)
    candidates = reads.checked
    for chunk in _batched(absent.unseen(), reads.size):
        reads.check(sorted(chunk))
    return reads.found(candidates)


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


def keeps_cascade_candidate(head: Sequence[FolderRow], held: Sequence[bool]) -> bool:
    """Whether a cascade candidate without objects of its own is kept, from the first
    ``CASCADE_HEAD_ROWS`` rows of its folders partition (``head``) and which of them the
    filter holds (``held``): a child the filter holds is no candidate, and a full read may
    hide one. Pure."""
    return len(head) >= CASCADE_HEAD_ROWS or any(held)


class _Reads:
    """The re-check's reads: a chunk at a time, counted by the throttle and paid for once read
    (the wait comes after a chunk, the last one's too, so over the re-check the reads per
    second stay within the cap, not a first chunk above it), and reported as done of the
    total (raised if more were read: a spilled slice's orphans are counted as they come)."""

    def __init__(
        self,
        store: Store,
        filt: MembershipFilter,
        throttle: ScanThrottle | None,
        progress: Progress,
        total: int,
    ) -> None:
        self._store = store
        self._filt = filt
        self._throttle = throttle
        self._progress = progress
        self.size = batch_size(throttle)
        self.total = total
        self.checked = 0
        self.cascade_read = 0
        self.nonempty: set[BucketDir] = set()
        self.cascade_kept: set[BucketDir] = set()
        progress("verify", 0, total)

    def check(self, chunk: list[BucketDir]) -> None:
        throttle = self._throttle
        began = 0.0 if throttle is None else throttle.now()
        found = self._store.nonempty_object_partitions(chunk)
        self.nonempty |= found
        cascade = self._cascade([key for key in chunk if key not in found])
        if cascade:
            kept = self._with_subdirectories(cascade)
            self.cascade_kept |= kept
            self.nonempty |= kept
        if throttle is not None:
            throttle.page(len(chunk) + len(cascade), throttle.now() - began)
        self.checked += len(chunk)
        self.total = max(self.total, self.checked)
        self._progress("verify", self.checked, self.total)

    def _cascade(self, bare: list[BucketDir]) -> list[BucketDir]:
        """Of the directories found without objects, those the filter holds."""
        if not bare:
            return []
        held = self._filt.contains_many([filter_key(bucket, d) for bucket, d in bare])
        return [key for key, present in zip(bare, held.tolist(), strict=True) if present]

    def _with_subdirectories(self, cascade: list[BucketDir]) -> set[BucketDir]:
        """Of the cascade's candidates, those their folders partition keeps."""
        heads = self._store.folder_partition_heads(cascade, CASCADE_HEAD_ROWS)
        self.cascade_read += len(cascade)
        rows = [row for head in heads.values() for row in head]
        if not rows:
            return set()
        held = self._filt.contains_many(
            [filter_key(row.bucket, dir_of_row(row.parent, row.name)) for row in rows]
        ).tolist()
        kept: set[BucketDir] = set()
        at = 0
        for key, head in heads.items():
            if keeps_cascade_candidate(head, held[at : at + len(head)]):
                kept.add(key)
            at += len(head)
        return kept

    def found(self, candidates: int) -> Rechecked:
        """What the re-check found, ``candidates`` of the directories read candidate rows."""
        return Rechecked(
            self.nonempty,
            candidates,
            self.checked - candidates,
            self.cascade_read,
            len(self.cascade_kept),
        )
