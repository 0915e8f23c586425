"""The churn night's check: the exact emptiness of the journaled directories, and of the parents
of those found empty, described as plan input.

The journal names directories that lost an object; each is checked, deepest first and a level
at a time, so that a parent is checked after every child this night found empty:

1. its objects partition, ``LIMIT 1`` at the re-check's consistency
   (``probe_object_partitions``): a live row keeps it. A partition whose read meets more
   tombstones than the limit (the objects just deleted) is deferred to a later night, and so,
   without being read, is one the journal says lost more objects than that;
2. its folders partition's first k + 1 rows, k the children this night found empty
   (``folder_partition_heads``): any row that is not one of them (a subdirectory not found
   empty) keeps it;
3. found empty, it makes its parent a candidate of the next level up: the cascade, to the root.

Then the rows to delete: an empty directory whose parent is empty too goes with the parent's
partition (a dead partition: step 2 read every row of it, all of them this night's empty
children); one whose parent holds something is deleted by a row delete in the parent's
partition once a point read finds its row (``rows_listing``). A directory whose row is not
there (a spurious journal row, or a night killed after deleting it) has nothing to delete, but
its parent is checked all the same, so a resumed night finishes the cascade.

Cost: one objects probe per directory checked; a folders read and, where the parent is live, a
row read per directory found without objects. A directory the journal missed is never checked:
it waits for the full night, and a parent with such a child keeps it (step 2 sees its row).

Deletes go at T, chosen by the caller before any of these reads: a directory that gains an
object during the check has every ancestor's folder row rewritten after T, and survives.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from dircleaner.model import BucketDir, FolderRow, PartitionFacts, PartitionKey
from dircleaner.paths import SEP, parent_of_dir
from dircleaner.pipeline.budget import DEFAULT_WARN_THRESHOLD
from dircleaner.progress import Progress, no_progress
from dircleaner.store.base import Store


@dataclass(frozen=True)
class CheckReads:
    """What the check read: partitions and rows, by kind."""

    #: objects partitions probed (``LIMIT 1``)
    objects: int = 0
    #: folders partitions whose first rows were read
    folders: int = 0
    #: folder rows read by point reads
    rows: int = 0

    @property
    def total(self) -> int:
        return self.objects + self.folders + self.rows

    def __add__(self, other: CheckReads) -> CheckReads:
        return CheckReads(
            self.objects + other.objects, self.folders + other.folders, self.rows + other.rows
        )


@dataclass(frozen=True)
class ChangedCheck:
    """What the check found, ready for the planner."""

    #: partitions holding directories to delete, as the sweep would describe them
    facts: list[PartitionFacts]
    #: distinct directories the journal named (the root is none), and the parents the cascade
    #: added that it did not name
    journaled: int
    parents: int
    #: of the directories checked: holding an object, holding a subdirectory not found empty,
    #: found empty (of those, whose row was already gone)
    with_objects: int
    with_subdirectories: int
    empty: int
    already_gone: int
    #: directories left for a later night: their objects partition is (or, by the journal's
    #: count, would be) read through more tombstones than the limit
    deferred: frozenset[BucketDir]
    #: of ``deferred``, those the journal's count deferred without a read
    deferred_unread: int
    #: levels of the tree the check went through
    levels: int
    reads: CheckReads
    seconds: float

    @property
    def checked(self) -> int:
        return self.journaled + self.parents


def read_tombstone_limit(store: Store) -> int:
    """The most tombstones the check lets one read of an objects partition meet: half the
    cluster's lowest tombstone warning (or Cassandra's default 1000), so that the journal's
    count, which can fall short, leaves a margin before a read crosses the warning."""
    threshold = store.tombstone_warn_threshold()
    return max(1, (threshold[0] if threshold else DEFAULT_WARN_THRESHOLD) // 2)


def depth_of(directory: str) -> int:
    """Levels below the root: ``a/b/`` is 2."""
    return directory.count(SEP)


def is_empty(head: Sequence[FolderRow], empty_children: Collection[str]) -> bool:
    """Whether a directory without objects is empty, from the first k + 1 rows of its folders
    partition (k = ``len(empty_children)``): every row read is one of its children found
    empty (so there are at most k: none other). Pure."""
    return len(head) <= len(empty_children) and all(row.name in empty_children for row in head)


def deferred_unread(hints: Mapping[BucketDir, int], limit: int) -> set[BucketDir]:
    """The directories the journal says lost more objects than ``limit``: their objects
    partition holds at least that many tombstones, so it is not read tonight. Pure."""
    return {key for key, deleted in hints.items() if deleted > limit}


def check_changed(
    store: Store,
    hints: Mapping[BucketDir, int],
    tombstone_limit: int,
    progress: Progress = no_progress,
) -> ChangedCheck:
    """Check the journaled directories (``hints``: each with the objects the journal says it
    lost) and the parents of those found empty; the plan's facts."""
    started = time.monotonic()
    named = {key: deleted for key, deleted in hints.items() if key[1]}
    levels: dict[int, set[BucketDir]] = defaultdict(set)
    for key in named:
        levels[depth_of(key[1])].add(key)
    empty_children: dict[BucketDir, set[str]] = defaultdict(set)
    heads: dict[BucketDir, list[FolderRow]] = {}
    tally = _Tally()
    skipped = deferred_unread(named, tombstone_limit)
    depth = max(levels, default=0)
    passed = 0
    while depth > 0:
        level = sorted(levels.pop(depth, ()))
        if level:
            passed += 1
            empty = _check_level(
                store, level, skipped, empty_children, heads, tombstone_limit, tally
            )
            for bucket, directory in empty:
                parent = parent_of_dir(directory)
                if parent:
                    empty_children[(bucket, parent)].add(directory[len(parent) : -1])
                    levels[depth - 1].add((bucket, parent))
            progress("check", tally.checked, None)
        depth -= 1
    facts, gone, rows_read = _facts(store, heads)
    return ChangedCheck(
        facts=facts,
        journaled=len(named),
        parents=tally.checked - len(named),
        with_objects=tally.with_objects,
        with_subdirectories=tally.with_subdirectories,
        empty=len(heads),
        already_gone=gone,
        deferred=frozenset(tally.deferred),
        deferred_unread=len(skipped),
        levels=passed,
        reads=CheckReads(tally.objects_read, tally.folders_read, rows_read),
        seconds=time.monotonic() - started,
    )


class _Tally:
    """Counts of the check as it goes."""

    def __init__(self) -> None:
        self.checked = self.with_objects = self.with_subdirectories = 0
        self.objects_read = self.folders_read = 0
        self.deferred: set[BucketDir] = set()


def _check_level(
    store: Store,
    level: list[BucketDir],
    skipped: set[BucketDir],
    empty_children: Mapping[BucketDir, set[str]],
    heads: dict[BucketDir, list[FolderRow]],
    limit: int,
    tally: _Tally,
) -> list[BucketDir]:
    """Steps 1 and 2 for one level; the directories found empty (their heads recorded)."""
    tally.checked += len(level)
    tally.deferred.update(key for key in level if key in skipped)
    probed = [key for key in level if key not in skipped]
    probe = store.probe_object_partitions(probed, limit)
    tally.objects_read += len(probed)
    tally.with_objects += len(probe.nonempty)
    tally.deferred.update(probe.tombstone_heavy)
    bare = [k for k in probed if k not in probe.nonempty and k not in probe.tombstone_heavy]
    by_rows: dict[int, list[BucketDir]] = defaultdict(list)
    for key in bare:
        by_rows[len(empty_children.get(key, ())) + 1].append(key)
    read: dict[BucketDir, list[FolderRow]] = {}
    for rows, keys in sorted(by_rows.items()):
        read.update(store.folder_partition_heads(keys, rows))
    tally.folders_read += len(bare)
    empty = []
    for key in bare:
        head = read.get(key, [])
        if is_empty(head, empty_children.get(key, ())):
            heads[key] = head
            empty.append(key)
        else:
            tally.with_subdirectories += 1
    return empty


def _facts(
    store: Store, heads: Mapping[BucketDir, list[FolderRow]]
) -> tuple[list[PartitionFacts], int, int]:
    """The plan's facts: each empty directory's own partition (dead: every row in it is an
    empty child), and the rows of empty directories in live parents. Also how many empty
    directories had no row to delete, and the rows read to know."""
    facts = [
        PartitionFacts(
            PartitionKey(rows[0].token, bucket, directory),
            len(rows),
            tuple(rows),
            dir_absent=True,
        )
        for (bucket, directory), rows in sorted(heads.items())
        if rows
    ]
    in_dead = [key for key in heads if (key[0], parent_of_dir(key[1])) in heads]
    gone = sum(1 for key in in_dead if not _listed_in(heads[(key[0], parent_of_dir(key[1]))], key))
    in_live = sorted(key for key in heads if (key[0], parent_of_dir(key[1])) not in heads)
    listing = store.rows_listing(in_live) if in_live else {}
    gone += len(in_live) - len(listing)
    facts.extend(live_partition_facts(listing.values()))
    return facts, gone, len(in_live)


def _listed_in(parent_rows: Iterable[FolderRow], key: BucketDir) -> bool:
    _bucket, directory = key
    name = directory[len(parent_of_dir(directory)) : -1]
    return any(row.name == name for row in parent_rows)


def live_partition_facts(rows: Iterable[FolderRow]) -> list[PartitionFacts]:
    """The rows of empty directories, one fact per live parent partition (pure).

    The partition's other rows were not read: its row count is given as its candidates' (what
    the planner needs of it: the partition is never dead, its own directory holding something,
    and the churn night never rewrites), and no two candidates count as adjacent (no ordinals,
    so no range delete spans a row the check did not see)."""
    by_partition: dict[tuple[str, str], list[FolderRow]] = defaultdict(list)
    for row in rows:
        by_partition[(row.bucket, row.parent)].append(row)
    return [
        PartitionFacts(
            PartitionKey(members[0].token, bucket, parent),
            len(members),
            tuple(sorted(members, key=lambda r: r.name)),
        )
        for (bucket, parent), members in sorted(by_partition.items())
    ]
