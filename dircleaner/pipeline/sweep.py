"""Pass 2 — sweep: stream the folders index; directories absent from the filter are candidates.

A Bloom filter has no false negatives, so "absent" means "no object under it at build time". Rows
arrive partition by partition; when a partition's own directory is absent from the filter, every
row in it is a candidate too (a non-empty child would have made its parent non-empty), which
catches children that a false positive would otherwise have hidden.

Each candidate also gets its ordinal: its position among all its partition's rows in the order
the scan returned them (clustering order). Candidates with consecutive ordinals had no other row
between them when the partition was read, which is what lets the planner delete them as a range.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Protocol

from dircleaner.model import FolderRow, PartitionFacts, PartitionKey
from dircleaner.progress import Progress, no_progress

if TYPE_CHECKING:
    import numpy as np

# numpy is imported in the functions that use it: the commands that never sweep (``clean
# --prefix``, the data commands) then start without it.


class MembershipFilter(Protocol):
    """The part of a Bloom filter the sweep needs."""

    def contains_many(self, keys: list[bytes]) -> np.ndarray: ...


@dataclass(frozen=True)
class SweepTotals:
    """What a sweep counted (of one shard, or several added up)."""

    swept_rows: int
    partitions: int
    candidates: int
    seconds: float


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

    def totals(self) -> SweepTotals:
        return SweepTotals(self.swept_rows, self.partitions, self.candidates, self.seconds)

    def candidate_rows(self) -> Iterator[FolderRow]:
        for fact in self.facts:
            yield from fact.candidates


class _PartitionRun:
    """Accumulates one partition's rows while they stream past (it may span batches)."""

    __slots__ = ("absent", "candidates", "key", "ordinals", "parent_absent", "total")

    def __init__(self, key: PartitionKey, absent: bool, parent_absent: bool) -> None:
        self.key = key
        self.absent = absent
        self.parent_absent = parent_absent
        #: rows seen so far (the ordinal of the next batch's first row of this partition)
        self.total = 0
        self.candidates: list[FolderRow] = []
        self.ordinals: list[int] = []

    def facts(self) -> PartitionFacts | None:
        if not self.candidates and not self.absent:
            return None
        return PartitionFacts(
            self.key,
            self.total,
            tuple(self.candidates),
            self.absent,
            tuple(self.ordinals),
            self.parent_absent,
        )


def sweep(
    batches: Iterable[list[FolderRow]],
    filt: MembershipFilter,
    progress: Progress = no_progress,
) -> SweepResult:
    """Test every folder row (and every partition's own directory) against the filter.

    Per-row work is kept to building the filter key; partition boundaries, the rows of absent
    partitions, the grouping of candidates and their ordinals are numpy operations, and Python
    only touches the partitions and the candidates (a few per cent of the rows). A measured hot
    loop, kept in one piece (docs/performance.md says what it costs against its scan).
    """
    import numpy as np

    started = time.monotonic()
    facts: list[PartitionFacts] = []
    swept = partitions = 0
    run: _PartitionRun | None = None
    buckets: dict[str, str] = {}
    for batch in batches:
        n = len(batch)
        if not n:
            continue
        # filter_key(bucket, parent + name + "/"), inlined: this is the one per-row step.
        row_present = filt.contains_many([f"{b}\0{p}{nm}/".encode() for _, b, p, nm in batch])
        starts = _partition_starts(batch)
        nseg = len(starts)
        bounds = np.array([*starts, n], dtype=np.int64)
        lengths = np.diff(bounds)
        heads = [batch[i] for i in starts]
        dir_present, parent_present = _partition_dirs_present(filt, heads)
        # Candidates: rows absent from the filter, and every row of a partition whose own
        # directory is absent (a non-empty child would have made it present).
        candidate = ~row_present
        if not dir_present.all():
            candidate |= np.repeat(~dir_present, lengths)
        seg_rows: dict[int, list[FolderRow]] = {}
        seg_ords: dict[int, list[int]] = {}
        cand_idx = np.flatnonzero(candidate)
        head = batch[0]
        # The open partition may go on in this batch: its rows here follow the ones seen before.
        goes_on = (
            run if run is not None and run.key == (head.token, head.bucket, head.parent) else None
        )
        if cand_idx.size:
            segs = np.searchsorted(bounds, cand_idx, side="right") - 1
            seg_ords = _ordinals(cand_idx, segs, bounds, goes_on.total if goes_on else 0)
            rows: list[FolderRow] = []
            for i, seg in zip(cand_idx.tolist(), segs.tolist(), strict=True):
                if seg not in seg_rows:
                    head = batch[starts[seg]]
                    head = head._replace(bucket=buckets.setdefault(head.bucket, head.bucket))
                    rows = seg_rows[seg] = []
                # Candidates are kept until the deletes: they share their partition's strings
                # (and one bucket string) instead of holding a copy each.
                rows.append(FolderRow(head.token, head.bucket, head.parent, batch[i].name))
        lens = lengths.tolist()
        first = 0
        if run is not None:
            if goes_on is not None:
                run.total += lens[0]
                run.candidates.extend(seg_rows.pop(0, ()))
                run.ordinals.extend(seg_ords.pop(0, ()))
                first = 1
            if first == 0 or nseg > 1:
                partitions += 1
                if (done := run.facts()) is not None:
                    facts.append(done)
                run = None
        if first < nseg:
            last = nseg - 1
            # Whole partitions strictly inside the batch: only those with candidates matter.
            partitions += max(0, last - first)
            for seg in sorted(seg_rows):
                if first <= seg < last:
                    row = batch[starts[seg]]
                    facts.append(
                        PartitionFacts(
                            PartitionKey(row.token, row.bucket, row.parent),
                            lens[seg],
                            tuple(seg_rows[seg]),
                            not dir_present[seg],
                            tuple(seg_ords[seg]),
                            not parent_present[seg],
                        )
                    )
            row = batch[starts[last]]
            run = _PartitionRun(
                PartitionKey(row.token, row.bucket, row.parent),
                not dir_present[last],
                not parent_present[last],
            )
            run.total = lens[last]
            run.candidates.extend(seg_rows.get(last, ()))
            run.ordinals.extend(seg_ords.get(last, ()))
        swept += n
        progress("sweep", swept, None)
    if run is not None:
        partitions += 1
        if (done := run.facts()) is not None:
            facts.append(done)
    return SweepResult(facts, swept, partitions, time.monotonic() - started)


def _ordinals(
    cand_idx: np.ndarray, segs: np.ndarray, bounds: np.ndarray, carried: int
) -> dict[int, list[int]]:
    """Each segment's candidate ordinals: index in the batch minus the segment's start, plus, for
    segment 0, the ``carried`` rows its partition had in earlier batches."""
    import numpy as np

    ords = cand_idx - bounds[segs]
    if carried and segs[0] == 0:
        ords[: int(np.searchsorted(segs, 1))] += carried
    # Candidates come sorted by index, so each segment's are one slice.
    cuts = (np.flatnonzero(segs[1:] != segs[:-1]) + 1).tolist()
    firsts = [0, *cuts]
    values = ords.tolist()
    return {
        seg: values[lo:hi]
        for seg, lo, hi in zip(segs[firsts].tolist(), firsts, [*cuts, len(values)], strict=True)
    }


def _partition_starts(batch: list[FolderRow]) -> list[int]:
    """Indexes where a new partition starts in a batch of rows in (token, clustering) order.

    Boundaries are token changes (numpy); a token shared by several partitions (a collision) is
    split row by row. Rows of one partition are always contiguous.
    """
    import numpy as np

    n = len(batch)
    tokens = np.fromiter(map(itemgetter(0), batch), dtype=np.int64, count=n)
    cuts = np.flatnonzero(tokens[1:] != tokens[:-1]) + 1
    starts: list[int] = [0, *cuts.tolist()]
    # Only a token's run of two rows or more can hold two partitions: check those alone.
    firsts = np.concatenate(([0], cuts))
    lasts = np.concatenate((cuts, [n])) - 1
    wide = np.flatnonzero(lasts > firsts)
    split = [
        (lo, hi + 1)
        for lo, hi in zip(firsts[wide].tolist(), lasts[wide].tolist(), strict=True)
        if batch[lo].parent != batch[hi].parent or batch[lo].bucket != batch[hi].bucket
    ]
    if not split:
        return starts
    extra = [
        i
        for lo, hi in split
        for i in range(lo + 1, hi)
        if batch[i].parent != batch[i - 1].parent or batch[i].bucket != batch[i - 1].bucket
    ]
    return sorted([*starts, *extra])


def _partition_dirs_present(
    filt: MembershipFilter, heads: list[FolderRow]
) -> tuple[np.ndarray, np.ndarray]:
    """Whether each partition's own directory, and its parent directory, are in the filter (the
    root always counts as in).

    ``heads`` holds one row of each partition. A parent's filter key is a prefix of its child's
    (up to the child's second-to-last "/", one byte in UTF-8 that no other character's encoding
    contains, after the bucket's "\\0"), so it is sliced from the child's encoded key.
    """
    import numpy as np

    n = len(heads)
    present = np.ones(n, dtype=np.bool_)
    parent_present = np.ones(n, dtype=np.bool_)
    probe = [i for i, row in enumerate(heads) if row.parent]
    if probe:
        keys = [f"{heads[i].bucket}\0{heads[i].parent}".encode() for i in probe]
        present[probe] = filt.contains_many(keys)
        # parent_of_dir on the bytes: the last "/" before the key's last byte, after the bucket.
        cuts = [key.rfind(b"/", key.index(b"\0") + 1, -1) + 1 for key in keys]
        deeper = [j for j, cut in enumerate(cuts) if cut]  # the others' parent is the root
        if deeper:
            parent_present[[probe[j] for j in deeper]] = filt.contains_many(
                [keys[j][: cuts[j]] for j in deeper]
            )
    return present, parent_present
