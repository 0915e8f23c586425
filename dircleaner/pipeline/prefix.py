"""The prefix walk: the exact emptiness of every directory under one prefix, as plan input.

After a mass delete (``aws s3 rm --recursive s3://b/logs/2025/``) almost every directory under the
prefix is empty, so checking each one is the cheap, exact way to find them (the nightly job's
filter exists because, store-wide, almost every check would find objects). The walk

1. reads the folders partition of PREFIX, then of each child, breadth first: a wave of directories
   at a time, the store reading several partitions at once and paging the wide ones;
2. probes each walked directory's objects partition (``LIMIT 1`` reads, as the re-check's
   ``nonempty_object_partitions``), in the same ``read_directories`` call as the folders reads
   of step 1, so a store can overlap the two;
3. decides emptiness bottom-up: a directory is empty when its objects partition has no row and
   every child is empty (a marker object ``dir/`` lives in ``dir/``'s own objects partition, so it
   keeps its directory);
4. hands over the same ``PartitionFacts`` the sweep builds (rows in clustering order, each
   candidate's ordinal, ``dir_absent`` for a partition whose own directory is empty), plus, when
   PREFIX itself is empty, its row in its parent's partition (never the root: the root is no
   directory).

Cost: one partition read and one probe per directory under PREFIX, plus the parent's partition
when PREFIX is empty. Nothing store-wide is scanned or built.

A directory that gains an object during the walk is safe whatever the walk saw: the put rewrites
the folder row of every ancestor after the walk began, and the deletes are stamped before it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from dircleaner.errors import GuardRefused, UsageError
from dircleaner.model import FolderRow, PartitionFacts, PartitionKey
from dircleaner.paths import SEP, parent_of_dir, validate_bucket, validate_key
from dircleaner.progress import Progress, no_progress
from dircleaner.scanrate import ScanRate, ScanStats, ScanThrottle
from dircleaner.store.base import Store
from dircleaner.timeutil import now_us

#: levels below PREFIX the walk goes down at most: a key is at most 1024 UTF-8 bytes, so no real
#: directory is more than 512 levels deep ("a/" is two bytes)
MAX_DEPTH = 512
#: directories read and probed per wave (bounds the requests and results held at once)
WAVE_DIRS = 10_000


class PrefixNotFound(UsageError):
    """PREFIX is not a directory of the folder index."""


class TooManyDirectories(GuardRefused):
    """The subtree under PREFIX holds more directories than --max-deletes."""


class FolderIndexLooksCyclic(GuardRefused):
    """The folder index under PREFIX lists a directory twice or goes impossibly deep."""


def normalise_prefix(text: str) -> str:
    """The directory a ``--prefix`` names: ``logs/2025`` and ``logs/2025/`` both mean
    ``logs/2025/`` (a missing trailing ``/`` is added, never a prefix match of siblings).

    Refused: the empty prefix (the whole bucket is the nightly job's work) and a key S3 would not
    store.
    """
    if not text:
        raise UsageError(
            "empty --prefix: name a directory, e.g. logs/2025/ (whole buckets are for 'run')"
        )
    directory = text if text.endswith(SEP) else text + SEP
    validate_key(directory)
    return directory


@dataclass(frozen=True)
class PrefixWalk:
    """What the walk found under one prefix, ready for the planner."""

    bucket: str
    prefix: str
    #: when the walk began (µs): deletes go at this minus --min-age
    started_us: int
    #: partitions holding at least one empty directory, as the sweep would describe them
    facts: list[PartitionFacts]
    #: directories walked (PREFIX included), and of those the empty ones
    directories: int
    empty_directories: int
    #: folders partitions read (directories with children), and their rows
    partitions: int
    folder_rows: int
    #: directories whose objects partition holds a row
    with_objects: int
    #: levels below PREFIX (0: PREFIX has no child)
    depth: int
    #: PREFIX itself is empty (then its own row, in its parent's partition, is a candidate)
    prefix_empty: bool
    seconds: float
    #: how the walk's reads went (rows: folder rows read plus one probe per directory)
    scan: ScanStats = field(default_factory=ScanStats)


class _Tree:
    """What the walk has read: each directory's rows and subdirectories, the directories with
    objects, and every directory reached (a second arrival is a cycle)."""

    def __init__(self, prefix: str, max_directories: int) -> None:
        self.prefix, self.max_directories = prefix, max_directories
        self.rows_of: dict[str, list[FolderRow]] = {}
        #: each directory's subdirectories, parallel to its rows in rows_of
        self.children_of: dict[str, list[str]] = {}
        self.with_objects: set[str] = set()
        self.seen = {prefix}

    def add(self, directory: str, rows: list[FolderRow] | None) -> list[str]:
        """Record one directory's folder rows; its subdirectories, to read next."""
        if not rows:
            return []
        prefix = self.prefix
        self.rows_of[directory] = rows
        children = self.children_of[directory] = [directory + row.name + SEP for row in rows]
        # One partition's names are distinct (its clustering key): a repeat is a child reached
        # before, from another partition.
        if not self.seen.isdisjoint(children):
            twice = next(child for child in children if child in self.seen)
            raise FolderIndexLooksCyclic(
                f"the folder index lists {twice!r} twice under {prefix!r}; it looks"
                " cyclic or corrupt, nothing was deleted"
            )
        self.seen.update(children)
        if len(self.seen) > self.max_directories:
            raise TooManyDirectories(
                f"more than {self.max_directories:,} directories under {prefix!r}"
                " (--max-deletes); nothing was deleted: raise --max-deletes or leave it"
                " to the nightly 'run'"
            )
        return children


def walk_prefix(
    store: Store,
    bucket: str,
    prefix: str,
    *,
    max_directories: int = 1_000_000,
    max_depth: int = MAX_DEPTH,
    progress: Progress = no_progress,
    scan: ScanRate | None = None,
) -> PrefixWalk:
    """Walk the folder index under ``prefix`` (a normalised directory) and decide emptiness.

    Raises PrefixNotFound when the index does not list ``prefix``, TooManyDirectories once more
    than ``max_directories`` are found (before anything is planned), FolderIndexLooksCyclic when
    a directory is reached twice or the walk passes ``max_depth`` levels.
    """
    validate_bucket(bucket)
    throttle = ScanThrottle(scan or ScanRate())
    started = time.monotonic()
    started_us = now_us()
    if not store.has_folder_row(bucket, prefix):
        raise PrefixNotFound(
            f"{prefix!r} is not in the folder index of bucket {bucket!r} (check 'list-dirs')"
        )
    tree = _Tree(prefix, max_directories)
    order: list[str] = []
    level = [prefix]
    depth = walked = 0
    while level:
        if depth > max_depth:
            raise FolderIndexLooksCyclic(
                f"the folder index under {prefix!r} goes deeper than {max_depth} levels (e.g."
                f" {level[0][:120]!r}...); it looks cyclic or corrupt, nothing was deleted"
            )
        below: list[str] = []
        for wave in _chunks(level, WAVE_DIRS):
            asked = time.monotonic()
            read = store.read_directories([(bucket, directory) for directory in wave])
            rows_read = len(wave) + sum(len(rows) for rows in read.folder_rows.values())
            throttle.page(rows_read, time.monotonic() - asked)
            tree.with_objects.update(parent for _, parent in read.with_objects)
            for directory in wave:
                below.extend(tree.add(directory, read.folder_rows.get((bucket, directory))))
            walked += len(wave)
            progress("walk", walked, None)
        order.extend(level)
        level = below
        depth += 1
    rows_of, children_of, with_objects = tree.rows_of, tree.children_of, tree.with_objects
    empty = _empty_bottom_up(order, children_of, with_objects)
    facts = _facts(rows_of, children_of, empty)
    if prefix in empty:
        own = _own_row_fact(store, bucket, prefix)
        if own is not None:
            facts.append(own)
    return PrefixWalk(
        bucket=bucket,
        prefix=prefix,
        started_us=started_us,
        facts=facts,
        directories=len(order),
        empty_directories=len(empty),
        partitions=len(rows_of),
        folder_rows=sum(len(rows) for rows in rows_of.values()),
        with_objects=len(with_objects),
        depth=depth - 1,
        prefix_empty=prefix in empty,
        seconds=time.monotonic() - started,
        scan=throttle.stats(),
    )


def _empty_bottom_up(
    order: list[str], children_of: dict[str, list[str]], with_objects: set[str]
) -> set[str]:
    """The empty directories: no object row of their own and every child empty.

    ``order`` is breadth first, so every child comes after its parent: reversed, children are
    decided first.
    """
    empty: set[str] = set()
    for directory in reversed(order):
        if directory in with_objects:
            continue
        if all(child in empty for child in children_of.get(directory, ())):
            empty.add(directory)
    return empty


def _facts(
    rows_of: dict[str, list[FolderRow]], children_of: dict[str, list[str]], empty: set[str]
) -> list[PartitionFacts]:
    """One PartitionFacts per partition holding an empty directory, as the sweep builds them."""
    facts: list[PartitionFacts] = []
    for directory, rows in rows_of.items():
        ordinals = [i for i, child in enumerate(children_of[directory]) if child in empty]
        if not ordinals:
            continue
        head = rows[0]
        facts.append(
            PartitionFacts(
                PartitionKey(head.token, head.bucket, directory),
                len(rows),
                tuple(rows[i] for i in ordinals),
                dir_absent=directory in empty,
                ordinals=tuple(ordinals),
            )
        )
    return facts


def _own_row_fact(store: Store, bucket: str, prefix: str) -> PartitionFacts | None:
    """PREFIX's own row as a candidate of its parent's partition (read whole, for its true row
    count and the row's ordinal); None if the row went away meanwhile."""
    parent = parent_of_dir(prefix)
    name = prefix[len(parent) : -1]
    rows = [row for page in store.folder_partition_pages(bucket, parent) for row in page]
    for ordinal, row in enumerate(rows):
        if row.name == name:
            key = PartitionKey(row.token, bucket, parent)
            return PartitionFacts(key, len(rows), (row,), ordinals=(ordinal,))
    return None


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
