"""The re-check: before anything is deleted, ask the objects table again about every candidate.

A candidate had no object when the build scanned; one may have been put since. Each candidate
directory's objects partition is read with ``LIMIT 1`` (batched by the store: ``IN`` reads on
Cassandra, a temporary table join on SQLite); a directory that turns out non-empty is dropped
from the plan together with all its ancestors (``plan.drop_nonempty``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dircleaner.model import BucketDir, PartitionFacts
from dircleaner.pipeline.spill import Candidates
from dircleaner.store.base import Store

#: candidate directories handed to the store's re-check at once
RECHECK_BATCH = 100_000


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


def find_nonempty(store: Store, facts: Sequence[PartitionFacts] | Candidates) -> Rechecked:
    """Re-check every empty directory's objects partition: the non-empty ones, what was checked.

    Streams the directories in chunks rather than building one set of them all: each candidate
    row is a distinct directory, and an absent partition's own directory is almost always also a
    candidate row of its parent partition, so only the few that are not are kept aside (in a
    slice, its parent partition may be in another slice: then it is checked here too). Spilled
    candidates are read back once, the absent partitions' directories kept aside as digests
    (``spill.AbsentDirs``).
    """
    if isinstance(facts, Candidates):
        if facts.spilled:
            return _find_in_spill(store, facts)
        facts = list(facts)
    orphans = {(f.key.bucket, f.key.parent) for f in facts if f.dir_absent}
    nonempty: set[BucketDir] = set()
    checked = 0
    chunk: list[BucketDir] = []
    for fact in facts:
        for row in fact.candidates:
            directory = (row.bucket, row.parent + row.name + "/")
            orphans.discard(directory)
            chunk.append(directory)
        if len(chunk) >= RECHECK_BATCH:
            nonempty |= store.nonempty_object_partitions(chunk)
            checked += len(chunk)
            chunk = []
    candidates = checked + len(chunk)
    chunk.extend(sorted(orphans))
    if chunk:
        nonempty |= store.nonempty_object_partitions(chunk)
        checked += len(chunk)
    return Rechecked(nonempty, candidates, checked - candidates)


def _find_in_spill(store: Store, held: Candidates) -> Rechecked:
    """``find_nonempty`` on spilled candidates, streamed: the same directories checked."""
    absent = held.absent_dirs()
    nonempty: set[BucketDir] = set()
    checked = 0

    def check(chunk: list[BucketDir]) -> None:
        nonlocal nonempty, checked
        nonempty |= store.nonempty_object_partitions(chunk)
        checked += len(chunk)

    for chunk in _batched(held.candidate_dirs()):
        absent.saw(chunk)
        check(chunk)
    candidates = checked
    for chunk in _batched(absent.unseen()):
        check(sorted(chunk))
    return Rechecked(nonempty, candidates, checked - candidates)


def _batched(dirs: Iterable[BucketDir]) -> Iterable[list[BucketDir]]:
    chunk: list[BucketDir] = []
    for directory in dirs:
        chunk.append(directory)
        if len(chunk) >= RECHECK_BATCH:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
