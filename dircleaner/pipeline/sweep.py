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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dircleaner.model import FolderRow, PartitionFacts, PartitionKey, unchecked_facts
from dircleaner.progress import Progress, no_progress

if TYPE_CHECKING:
    import numpy as np

    from dircleaner.store.packed import FolderKeys

# numpy is imported in the functions that use it: the commands that never sweep (``clean
# --prefix``, the data commands) then start without it.


class MembershipFilter(Protocol):
    """The part of a Bloom filter the sweep needs."""

    def contains_many(self, keys: list[bytes]) -> np.ndarray: ...


class FactSink(Protocol):
    """Where the sweep puts each partition's facts (a list, or a clean's ``Candidates``)."""

    def append(self, fact: PartitionFacts, /) -> None: ...


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

    __slots__ = ("absent", "candidates", "key", "ordinals", "packed", "parent_absent", "total")

    def __init__(
        self, key: PartitionKey, absent: bool, parent_absent: bool, packed: tuple[int, bytes]
    ) -> None:
        self.key = key
        self.absent = absent
        self.parent_absent = parent_absent
        #: the token and partition key's bytes, which the next batch's first row is compared to
        self.packed = packed
        #: rows seen so far (the ordinal of the next batch's first row of this partition)
        self.total = 0
        self.candidates: list[FolderRow] = []
        self.ordinals: list[int] = []

    def facts(self, shared: dict[tuple[int, ...], tuple[int, ...]]) -> PartitionFacts | None:
        if not self.candidates and not self.absent:
            return None
        return unchecked_facts(
            self.key,
            self.total,
            tuple(self.candidates),
            self.absent,
            _shared_ordinals(self.ordinals, shared),
            self.parent_absent,
        )


def _shared_ordinals(
    ordinals: list[int], shared: dict[tuple[int, ...], tuple[int, ...]]
) -> tuple[int, ...]:
    """``ordinals`` as a tuple, one tuple for all the partitions with the same common shape: a
    lone candidate (``(k,)``), two, or every row from the first (``0 … n-1``: an absent
    partition's). Candidates are kept until the deletes, and most partitions have one of these."""
    ords = tuple(ordinals)
    if len(ords) <= 2 or ords[-1] == len(ords) - 1:
        return shared.setdefault(ords, ords)
    return ords


def sweep(
    batches: Iterable[FolderKeys | list[FolderRow]],
    filt: MembershipFilter,
    progress: Progress = no_progress,
    into: FactSink | None = None,
) -> SweepResult:
    """Test every folder row (and every partition's own directory) against the filter.

    The facts go to ``into`` when given (the result's ``facts`` is then empty), else to the
    result.

    The rows come packed (``Store.scan_folder_keys``: the keys laid out as one buffer by the
    store) or as rows. Keys, partition boundaries, the rows of absent partitions, the grouping
    of candidates and their ordinals are batch operations (the compiled kernels, numpy:
    ``_segments``), and Python only touches the partitions with candidates and the candidates (a
    few per cent of the rows: ``_candidate_rows``). A measured hot loop (docs/performance.md
    says what it costs against its scan): its steps are calls per batch, never per row.
    """
    from dircleaner.filter.bloom import load_kernels
    from dircleaner.store.packed import FolderKeys

    load_kernels()  # loaded already in a job's processes; the mmh3 path where unavailable
    started = time.monotonic()
    kept: list[PartitionFacts] = []
    state = _Sweep(filt, kept if into is None else into)
    swept = 0
    for batch in batches:
        if not isinstance(batch, FolderKeys):
            batch = FolderKeys.of_rows(batch)
        if len(batch):
            state.take(batch)
            swept += len(batch)
            progress("sweep", swept, None)
    state.close_run()
    return SweepResult(kept, swept, state.partitions, time.monotonic() - started)


class _Sweep:
    """What the sweep carries from batch to batch: the partition still open at a batch's end,
    where the facts go, how many partitions ended, and the strings and ordinal tuples the facts
    share."""

    def __init__(self, filt: MembershipFilter, facts: FactSink) -> None:
        self._filt = filt
        self._facts = facts
        self.partitions = 0
        self._run: _PartitionRun | None = None
        self._buckets: dict[str, str] = {}
        self._shared: dict[tuple[int, ...], tuple[int, ...]] = {}

    def take(self, batch: FolderKeys) -> None:
        """Sweep one non-empty batch: the open partition goes on or ends, the partitions
        strictly inside the batch end, its last one stays open."""
        segs = _segments(batch, self._filt)
        raw = batch.buf.tobytes()
        run = self._run
        # The open partition may go on in this batch: its rows here follow the ones seen before.
        goes_on = run if run is not None and run.packed == _packed_key(batch, raw, 0) else None
        key_of = _SegmentKeys(
            batch, raw, segs.starts, self._buckets, goes_on.key if goes_on else None
        ).key
        found = _candidate_rows(batch, raw, segs, key_of, goes_on.total if goes_on else 0)
        first = 0
        if goes_on is not None:
            goes_on.total += segs.lengths[0]
            goes_on.candidates.extend(found.rows.pop(0, ()))
            goes_on.ordinals.extend(found.ordinals.pop(0, ()))
            first = 1
        last = len(segs.lengths) - 1
        if run is not None and (first == 0 or last > 0):
            self.close_run()
        if first > last:
            return
        # Whole partitions strictly inside the batch: only those with candidates matter.
        self.partitions += max(0, last - first)
        for seg in sorted(found.rows):
            if first <= seg < last:
                self._facts.append(
                    unchecked_facts(
                        found.keys[seg],
                        segs.lengths[seg],
                        tuple(found.rows[seg]),
                        not segs.dir_present[seg],
                        _shared_ordinals(found.ordinals[seg], self._shared),
                        not segs.parent_present[seg],
                    )
                )
        self._run = _PartitionRun(
            key_of(last),
            not segs.dir_present[last],
            not segs.parent_present[last],
            _packed_key(batch, raw, int(segs.starts[last])),
        )
        self._run.total = segs.lengths[last]
        self._run.candidates.extend(found.rows.get(last, ()))
        self._run.ordinals.extend(found.ordinals.get(last, ()))

    def close_run(self) -> None:
        """The open partition ends: its facts, if it has any."""
        if self._run is not None:
            self.partitions += 1
            if (done := self._run.facts(self._shared)) is not None:
                self._facts.append(done)
            self._run = None


@dataclass(frozen=True)
class _Segments:
    """A batch's partitions (its segments) and its candidate rows."""

    #: the row each segment starts at
    starts: np.ndarray
    #: ``starts``, then the batch's length
    bounds: np.ndarray
    #: each segment's number of rows
    lengths: list[int]
    #: whether each segment's own directory, and its parent directory, are in the filter
    dir_present: np.ndarray
    parent_present: np.ndarray
    #: the candidate rows' indices, in order
    candidates: np.ndarray


def _segments(batch: FolderKeys, filt: MembershipFilter) -> _Segments:
    """The batch operations: partition boundaries, which rows and directories the filter holds.

    Candidates: rows absent from the filter, and every row of a partition whose own directory is
    absent (a non-empty child would have made it present)."""
    import numpy as np

    buf, offsets = batch.buf, batch.offsets
    row_present = _contains(filt, buf, offsets[:-1], offsets[1:])
    starts = _partition_starts(batch)
    bounds = np.append(starts, len(batch))
    lengths = np.diff(bounds)
    dir_present, parent_present = _partition_dirs_present(
        filt, buf, offsets[starts], batch.prefix_ends[starts]
    )
    candidate = ~row_present
    if not dir_present.all():
        candidate |= np.repeat(~dir_present, lengths)
    return _Segments(
        starts, bounds, lengths.tolist(), dir_present, parent_present, np.flatnonzero(candidate)
    )


@dataclass(frozen=True)
class _Found:
    """A batch's candidates by segment: their rows, their partition's key, their ordinals."""

    rows: dict[int, list[FolderRow]]
    keys: dict[int, PartitionKey]
    ordinals: dict[int, list[int]]


def _candidate_rows(
    batch: FolderKeys,
    raw: bytes,
    segs: _Segments,
    key_of: Callable[[int], PartitionKey],
    carried: int,
) -> _Found:
    """The candidates as rows, by segment; segment 0's ordinals follow the ``carried`` rows its
    partition had in earlier batches. The only loop over rows in Python: the candidates'."""
    import numpy as np

    found = _Found({}, {}, {})
    cand_idx = segs.candidates
    if not cand_idx.size:
        return found
    seg_of = np.searchsorted(segs.bounds, cand_idx, side="right") - 1
    found.ordinals.update(_ordinals(cand_idx, seg_of, segs.bounds, carried))
    name_lo = batch.prefix_ends[cand_idx].tolist()
    name_hi = (batch.offsets[cand_idx + 1] - 1).tolist()
    seg_rows, seg_keys, new_row = found.rows, found.keys, tuple.__new__
    rows: list[FolderRow] = []
    token, bucket, parent = 0, "", ""
    for seg, lo, hi in zip(seg_of.tolist(), name_lo, name_hi, strict=True):
        if seg not in seg_rows:
            token, bucket, parent = seg_keys[seg] = key_of(seg)
            rows = seg_rows[seg] = []
        # FolderRow(...) without the named tuple's Python-level __new__
        rows.append(new_row(FolderRow, (token, bucket, parent, raw[lo:hi].decode())))
    return found


class _SegmentKeys:
    """The partition keys of a batch's segments, decoded once each, when first needed."""

    def __init__(
        self,
        batch: FolderKeys,
        raw: bytes,
        starts: np.ndarray,
        buckets: dict[str, str],
        going_on: PartitionKey | None,
    ) -> None:
        self._raw = raw
        self._tokens = batch.tokens[starts].tolist()
        self._lo = batch.offsets[starts].tolist()
        self._hi = batch.prefix_ends[starts].tolist()
        self._buckets = buckets
        self._keys = {0: going_on} if going_on is not None else {}

    def key(self, seg: int) -> PartitionKey:
        if (key := self._keys.get(seg)) is None:
            # Candidates are kept until the deletes: they share their partition's strings (and
            # one bucket string) instead of holding a copy each.
            bucket, _, parent = self._raw[self._lo[seg] : self._hi[seg]].decode().partition("\0")
            bucket = self._buckets.setdefault(bucket, bucket)
            # PartitionKey(...) without the named tuple's Python-level __new__
            key = tuple.__new__(PartitionKey, (self._tokens[seg], bucket, parent))
            self._keys[seg] = key
        return key


def _packed_key(batch: FolderKeys, raw: bytes, row: int) -> tuple[int, bytes]:
    """Row ``row``'s partition as its token and its partition key's bytes."""
    lo, hi = int(batch.offsets[row]), int(batch.prefix_ends[row])
    return int(batch.tokens[row]), raw[lo:hi]


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


def _contains(
    filt: MembershipFilter, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """Membership of the keys ``buf[starts[i]:ends[i]]``: in one kernel call where the filter
    takes packed keys, else as bytes."""
    ranges = getattr(filt, "contains_ranges", None)
    if ranges is not None:
        found: np.ndarray = ranges(buf, starts, ends)
        return found
    from dircleaner.filter.bloom import slices

    return filt.contains_many(slices(buf, starts, ends))


def _partition_starts(batch: FolderKeys) -> np.ndarray:
    """Rows where a new partition starts in a batch in (token, clustering) order: where the
    token or the partition key changes. Rows of one partition are always contiguous."""
    import numpy as np

    from dircleaner.filter.bloom import compiled

    kernels = compiled()
    if kernels is not None:
        found: np.ndarray = kernels.partition_starts(
            batch.tokens, batch.buf, batch.offsets, batch.prefix_ends
        )
        return found
    raw = batch.buf.tobytes()
    keys = [
        (token, raw[lo:hi])
        for token, lo, hi in zip(
            batch.tokens.tolist(), batch.offsets.tolist(), batch.prefix_ends.tolist(), strict=False
        )
    ]
    new = [i for i in range(len(keys)) if i == 0 or keys[i] != keys[i - 1]]
    return np.array(new, dtype=np.int64)


def _key_shapes(buf: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of each filter key ``buf[lo[i]:hi[i]]``: where its directory starts (after the bucket's
    NUL) and where its parent directory's key ends (after the last "/" before the key's last
    byte, in the directory: "/" is one byte in UTF-8 that no other character's encoding
    contains), or ``lo[i]`` when the parent is the root."""
    import numpy as np

    from dircleaner.filter.bloom import compiled

    kernels = compiled()
    if kernels is not None:
        shapes: tuple[np.ndarray, np.ndarray] = kernels.key_shapes(buf, lo, hi)
        return shapes
    raw = buf.tobytes()
    dirs, parents = [], []
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        d = raw.index(b"\0", a, b) + 1
        dirs.append(d)
        parents.append(raw.rfind(b"/", d, b - 1) + 1 or a)
    return np.array(dirs, dtype=np.int64), np.array(parents, dtype=np.int64)


def _partition_dirs_present(
    filt: MembershipFilter, buf: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Whether each partition's own directory, and its parent directory, are in the filter (the
    root always counts as in).

    Partition ``i``'s key, the filter key of its directory, is ``buf[lo[i]:hi[i]]``; its
    parent's key is a prefix of it (``_key_shapes``).
    """
    import numpy as np

    n = len(lo)
    present = np.ones(n, dtype=np.bool_)
    parent_present = np.ones(n, dtype=np.bool_)
    dir_starts, parent_ends = _key_shapes(buf, lo, hi)
    probe = np.flatnonzero(dir_starts < hi)  # the root partition has no key
    if probe.size:
        present[probe] = _contains(filt, buf, lo[probe], hi[probe])
        deeper = probe[parent_ends[probe] > lo[probe]]  # the others' parent is the root
        if deeper.size:
            parent_present[deeper] = _contains(filt, buf, lo[deeper], parent_ends[deeper])
    return present, parent_present
