"""A slice's candidates between the clean's two phases, and a spilled slice's plan: in memory
while the process's budget lasts, beyond it in a compact spill file (``spillfile``) read back as
a stream.

The sweep appends each partition's facts to ``Candidates``. Within the budget they stay Python
objects, as before; the first slice to outgrow it writes what it holds to its spill file and
sends the rest there block by block (``BLOCK_CANDIDATES`` at a time). The re-check streams the
candidates back (``candidate_dirs``), and so does the plan, a chunk of whole partitions at a time
(``chunks``): every slicing of the ring plans what one process plans, so a chunk plans as a
slice would. A chunked plan goes to a second spill file (``SpilledActions``) whose room on disk
is reserved when the sweep ends (``finish``), so that a full disk stops the run before the
decision, not after some slices deleted; the deletes read it back in the plan's order (every
rewrite, then every partition deletion, then the row and range deletes).

Facts block: counts, then per partition its token, row count, candidate count and flags, the
ordinals that are not implied (none known, or ``0 … n-1``), the partition keys and the names,
the strings joined by NUL (which no key holds; a block with one falls back to lengths).
"""

from __future__ import annotations

import hashlib
import struct
import weakref
from array import array
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from dircleaner.model import (
    ActionKind,
    BucketDir,
    DeleteAction,
    FolderRow,
    PartitionFacts,
    PartitionKey,
    unchecked_facts,
)
from dircleaner.pipeline.spillfile import (
    PROCESS_BUDGET,
    MemoryBudget,
    SpillConfig,
    SpillFile,
    spill_directory,
)

if TYPE_CHECKING:
    import numpy as np

    from dircleaner.pipeline.plan import DeletionPlan

#: facts of about this many candidates make one block of the candidates' spill file
BLOCK_CANDIDATES = 8192
#: the budget is asked for this many candidates at a time
_GRANT_STEP = 16384
#: what one candidate costs in memory as Python objects (its row, its name, its share of its
#: partition's facts), for a cluster's scheduler weighing where a slice's data is
_HELD_BYTES_PER_CANDIDATE = 350

_FACTS, _REWRITES, _PARTITIONS, _LIVE = 1, 2, 3, 4
#: a facts block's head: facts, key bytes, name bytes, explicit ordinals, string formats
_FACTS_HEAD = struct.Struct("<IIIIB")
#: an actions block's head: actions, partition keys, key bytes, name bytes, string formats
_ACTIONS_HEAD = struct.Struct("<IIIIB")
_ABSENT, _PARENT_ABSENT, _NO_ORDINALS, _FIRST_ORDINALS = 1, 2, 4, 8
_KINDS = (ActionKind.PARTITION, ActionKind.ROW, ActionKind.RANGE, ActionKind.REWRITE)
_KIND_CODE = {kind: code for code, kind in enumerate(_KINDS)}
#: what a chunk's plan (one block per kind of action, ``SpilledActions``) may take beyond the
#: chunk's facts, raw: per action its kind, partition and row count (9 bytes), per name the
#: lengths a NUL in a block makes it carry (4), per block its head; and zlib's worst case
_PLAN_ROOM_PER_CANDIDATE, _PLAN_ROOM_PER_CHUNK, _PLAN_ROOM_FIXED = 13, 3 * 64, 4096


class Candidates:
    """One slice's candidates, in the order the sweep found them (ring order), from the sweep
    to the plan: a list while the process's memory budget lasts, else a spill file."""

    def __init__(self, config: SpillConfig, budget: MemoryBudget = PROCESS_BUDGET) -> None:
        self.config = config
        #: partitions and candidates held
        self.partitions = 0
        self.candidates = 0
        self._budget = budget
        self._held: list[PartitionFacts] = []
        self._file: SpillFile | None = None
        self._plan: SpillFile | None = None
        self._pending: list[PartitionFacts] = []
        self._pending_candidates = 0
        #: when spilled, the digest of each partition whose own directory is absent
        self._absent = bytearray()
        # The budget this slice holds goes back when it is released, or dropped unreleased.
        self._granted = [0]
        weakref.finalize(self, _give_back, budget, self._granted)

    # -- the sweep's side --------------------------------------------------------------------------

    def append(self, fact: PartitionFacts) -> None:
        """One more partition's facts (the sweep's sink)."""
        n = len(fact.candidates)
        self.partitions += 1
        self.candidates += n
        if self._file is None:
            self._held.append(fact)
            if self.candidates > self._granted[0] and not self._grow():
                self._spill()
            return
        self._pending.append(fact)
        self._pending_candidates += n + 1
        if self._pending_candidates >= BLOCK_CANDIDATES:
            self._flush()

    def finish(self, plan_room: bool) -> None:
        """The sweep is over: write what is pending, and reserve the room a chunked plan needs
        (``plan_room``: the slice will delete)."""
        if self._file is None:
            return
        self._flush()
        if plan_room and self.chunked and self._plan is None:
            # A plan holds each partition's key once (each is in one chunk and one kind of
            # action) and each candidate's name at most once: no more than the facts held,
            # but for what its actions and blocks add.
            raw = self._file.raw_size + _PLAN_ROOM_PER_CANDIDATE * self.candidates
            chunks = self.candidates // self.config.plan_chunk + 1
            room = raw + raw // 64 + _PLAN_ROOM_PER_CHUNK * chunks + _PLAN_ROOM_FIXED
            self._plan = SpillFile(self._file.directory, reserve=room)

    # -- what the slice holds ---------------------------------------------------------------------

    @property
    def spilled(self) -> bool:
        return self._file is not None

    @property
    def spill_bytes(self) -> int:
        """The bytes of the candidates' spill file (0: held in memory)."""
        return self._file.size if self._file is not None else 0

    @property
    def chunked(self) -> bool:
        """Whether the plan goes a chunk at a time (spilled, more than one chunk's worth)."""
        return self._file is not None and self.candidates > self.config.plan_chunk

    @property
    def nbytes(self) -> int:
        """About what the slice holds, in memory or on disk."""
        if self._file is not None:
            return self._file.size + len(self._absent)
        return self.candidates * _HELD_BYTES_PER_CANDIDATE

    def __len__(self) -> int:
        return self.partitions

    def __iter__(self) -> Iterator[PartitionFacts]:
        if self._file is None:
            yield from self._held
            return
        self._flush()
        buckets: dict[str, str] = {}
        for raw in self._file.blocks(_FACTS):
            yield from _decode_facts(raw, buckets)

    def chunks(self) -> Iterator[list[PartitionFacts]]:
        """The facts in lists of whole partitions, each of at least ``plan_chunk`` candidates
        but the last."""
        if self._file is None:
            if self._held:
                yield self._held
            return
        size = self.config.plan_chunk
        chunk: list[PartitionFacts] = []
        count = 0
        for fact in self:
            chunk.append(fact)
            count += len(fact.candidates)
            if count >= size:
                yield chunk
                chunk, count = [], 0
        if chunk:
            yield chunk

    def candidate_dirs(self) -> Iterator[BucketDir]:
        """Every candidate's directory, in order."""
        if self._file is None:
            for fact in self._held:
                for row in fact.candidates:
                    yield row.bucket, row.parent + row.name + "/"
            return
        self._flush()
        for raw in self._file.blocks(_FACTS):
            yield from _decode_dirs(raw)

    def absent_dirs(self) -> AbsentDirs:
        """The partitions whose own directory is absent from the filter (spilled slices), for
        the one re-check: their digests go with it."""
        digests, self._absent = self._absent, bytearray()
        return AbsentDirs(digests, self._absent_keys)

    def plan_file(self) -> SpillFile:
        """The file a chunked plan goes to (reserved by ``finish``); the caller closes it."""
        plan, self._plan = self._plan, None
        if plan is None:
            assert self._file is not None, "only a spilled slice plans in chunks"
            plan = SpillFile(self._file.directory)
        return plan

    def release(self) -> None:
        """Let go of the candidates (planned): memory, budget, files."""
        self._held, self._pending = [], []
        self._absent = bytearray()
        for file in (self._file, self._plan):
            if file is not None:
                file.close()
        self._file = self._plan = None
        self.partitions = self.candidates = 0
        _give_back(self._budget, self._granted)

    # -- internals --------------------------------------------------------------------------------

    def _grow(self) -> bool:
        step = max(_GRANT_STEP, self.candidates - self._granted[0])
        if self._budget.take(step, self.config.memory_candidates):
            self._granted[0] += step
            return True
        return False

    def _spill(self) -> None:
        self._file = SpillFile(spill_directory(self.config))
        held, self._held = self._held, []
        _give_back(self._budget, self._granted)
        for fact in held:
            self._pending.append(fact)
            self._pending_candidates += len(fact.candidates) + 1
            if self._pending_candidates >= BLOCK_CANDIDATES:
                self._flush()

    def _flush(self) -> None:
        if not self._pending or self._file is None:
            return
        facts, self._pending, self._pending_candidates = self._pending, [], 0
        self._file.append(_FACTS, _encode_facts(facts))
        for fact in facts:
            if fact.dir_absent:
                self._absent += dir_digest(fact.key.bucket, fact.key.parent)

    def _absent_keys(self) -> Iterator[BucketDir]:
        if self._file is None:
            return
        for raw in self._file.blocks(_FACTS):
            yield from _decode_absent_keys(raw)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Carried to another process (a Dask worker fetching a lost or stolen task's data):
        # the file's blocks travel as bytes and land in a spill file of the receiving host.
        self._flush()
        if self._file is None:
            return _restore, (self.config, self.partitions, self.candidates, self._held, None)
        spilled = (self._file.contents(), self._file.raw_size, bytes(self._absent))
        plan_room = self._plan is not None
        return _restore, (self.config, self.partitions, self.candidates, plan_room, spilled)


def _restore(
    config: SpillConfig,
    partitions: int,
    candidates: int,
    held_or_room: list[PartitionFacts] | bool,
    spilled: tuple[bytes, int, bytes] | None,
) -> Candidates:
    out = Candidates(config)
    out.partitions, out.candidates = partitions, candidates
    if spilled is None:
        assert isinstance(held_or_room, list)
        out._held = held_or_room
        return out
    contents, raw_size, absent = spilled
    out._file = SpillFile.from_contents(spill_directory(config), contents, raw_size)
    out._absent = bytearray(absent)
    out.finish(plan_room=bool(held_or_room))
    return out


def _give_back(budget: MemoryBudget, granted: list[int]) -> None:
    if granted[0]:
        budget.give_back(granted[0])
        granted[0] = 0


def dir_digest(bucket: str, directory: str) -> bytes:
    """A directory's 128-bit digest: equal digests are taken for the same directory (two
    directories meet on one with a probability of about 2**-128 per pair)."""
    key = (bucket + "\0" + directory).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(key, digest_size=16).digest()


class AbsentDirs:
    """A spilled slice's partitions whose own directory is absent from the filter, as digests,
    marked as the candidates stream past: those never seen among the slice's candidate rows
    are re-checked on their own (their row is in another slice, or missing), as
    ``recheck.find_nonempty`` does with a set where the candidates are in memory.

    The digests are sorted by their first 64 bits and searched by them (numpy compares those
    as numbers, far faster than 16-byte strings), then matched on the other 64: two absent
    directories sharing their first 64 bits (about 2**-64 a pair) only cost the second an
    extra re-check, never one less.
    """

    def __init__(self, digests: bytearray, keys: Any) -> None:
        import numpy as np

        # Sorted where they lie (16 bytes each, the slice's largest array when it spills).
        pairs = np.frombuffer(digests, dtype=[("high", "<u8"), ("low", "<u8")])
        pairs.sort(order="high")
        self._high: np.ndarray = np.ascontiguousarray(pairs["high"])
        self._low: np.ndarray = pairs["low"]
        self._seen = np.zeros(len(pairs), dtype=np.bool_)
        self._keys = keys

    def saw(self, dirs: Sequence[BucketDir]) -> None:
        """Mark those of ``dirs`` that are absent partitions' directories."""
        if not len(self._high) or not dirs:
            return
        at, hit = self._find([dir_digest(b, d) for b, d in dirs])
        self._seen[at[hit]] = True

    def unseen(self) -> Iterator[BucketDir]:
        """The absent partitions' directories no candidate row named, in ring order."""
        if not len(self._high) or self._seen.all():
            return
        batch: list[BucketDir] = []
        for key in self._keys():
            batch.append(key)
            if len(batch) >= BLOCK_CANDIDATES:
                yield from self._unseen_of(batch)
                batch = []
        yield from self._unseen_of(batch)

    def _unseen_of(self, keys: list[BucketDir]) -> list[BucketDir]:
        if not keys:
            return []
        at, hit = self._find([dir_digest(b, d) for b, d in keys])
        seen = self._seen[at] & hit
        return [key for key, was in zip(keys, seen.tolist(), strict=True) if not was]

    def _find(self, digests: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        probe = np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 2)
        at = np.searchsorted(self._high, probe[:, 0])
        at[at == len(self._high)] = 0
        return at, (self._high[at] == probe[:, 0]) & (self._low[at] == probe[:, 1])


class SpilledActions:
    """A chunked plan's actions in a spill file, written chunk by chunk, read back as the plan's
    order: every rewrite, every partition deletion, then the row and range deletes."""

    def __init__(self, file: SpillFile) -> None:
        self._file = file

    def add(self, plan: DeletionPlan) -> None:
        """One chunk's plan (its actions in the planner's order): a block per kind of action,
        so that each partition's key is written once."""
        groups: dict[int, list[DeleteAction]] = {_REWRITES: [], _PARTITIONS: [], _LIVE: []}
        for action in plan.actions:
            groups[_group_of(action.kind)].append(action)
        for tag, actions in groups.items():
            if actions:
                self._file.append(tag, _encode_actions(actions))

    def actions(self) -> Iterator[DeleteAction]:
        buckets: dict[str, str] = {}
        for tag in (_REWRITES, _PARTITIONS, _LIVE):
            for raw in self._file.blocks(tag):
                yield from _decode_actions(raw, buckets)

    @property
    def spill_bytes(self) -> int:
        return self._file.size

    def close(self) -> None:
        self._file.close()


def _group_of(kind: ActionKind) -> int:
    if kind is ActionKind.REWRITE:
        return _REWRITES
    if kind is ActionKind.PARTITION:
        return _PARTITIONS
    return _LIVE


# -- the blocks' bytes -------------------------------------------------------------------------


def _pack_strings(strings: list[str]) -> tuple[bytes, int]:
    """``strings`` as bytes, and 1 where they had to go with their lengths (one holds a NUL)."""
    data = "\0".join(strings).encode("utf-8", "surrogatepass")
    if data.count(b"\0") == max(0, len(strings) - 1):
        return data, 0
    lengths = array("I", map(len, strings))
    return lengths.tobytes() + "".join(strings).encode("utf-8", "surrogatepass"), 1


def _unpack_strings(data: bytes, count: int, with_lengths: int) -> list[str]:
    if not count:
        return []
    if not with_lengths:
        return data.decode("utf-8", "surrogatepass").split("\0")
    lengths = array("I")
    lengths.frombytes(data[: 4 * count])
    text = data[4 * count :].decode("utf-8", "surrogatepass")
    out: list[str] = []
    at = 0
    for length in lengths:
        out.append(text[at : at + length])
        at += length
    return out


def _encode_facts(facts: list[PartitionFacts]) -> bytes:
    flags = bytearray()
    ordinals = array("I")
    for fact in facts:
        flag = _ABSENT * fact.dir_absent | _PARENT_ABSENT * fact.parent_dir_absent
        ords = fact.ordinals
        if not ords:
            flag |= _NO_ORDINALS
        elif ords[0] == 0 and ords[-1] == len(ords) - 1 and ords == tuple(range(len(ords))):
            flag |= _FIRST_ORDINALS
        else:
            ordinals.extend(ords)
        flags.append(flag)
    keys, keys_format = _pack_strings([s for f in facts for s in (f.key.bucket, f.key.parent)])
    names, names_format = _pack_strings([row.name for f in facts for row in f.candidates])
    head = _FACTS_HEAD.pack(
        len(facts), len(keys), len(names), len(ordinals), keys_format | names_format << 1
    )
    return b"".join(
        (
            head,
            array("q", [f.key.token for f in facts]).tobytes(),
            array("q", [f.total_rows for f in facts]).tobytes(),
            array("I", [len(f.candidates) for f in facts]).tobytes(),
            bytes(flags),
            ordinals.tobytes(),
            keys,
            names,
        )
    )


class _Reader:
    """Consecutive fields of a block."""

    def __init__(self, raw: bytes, at: int) -> None:
        self.raw, self.at = raw, at

    def ints(self, code: str, count: int) -> array[int]:
        out = array(code)
        end = self.at + out.itemsize * count
        out.frombytes(self.raw[self.at : end])
        self.at = end
        return out

    def take(self, length: int) -> bytes:
        out = self.raw[self.at : self.at + length]
        self.at += length
        return out


def _decode_facts(raw: bytes, buckets: dict[str, str]) -> list[PartitionFacts]:
    n, keys_len, names_len, explicit, formats = _FACTS_HEAD.unpack_from(raw)
    read = _Reader(raw, _FACTS_HEAD.size)
    tokens, totals, counts = read.ints("q", n), read.ints("q", n), read.ints("I", n)
    flags = read.take(n)
    ordinals = read.ints("I", explicit).tolist()
    keys = _unpack_strings(read.take(keys_len), 2 * n, formats & 1)
    names = _unpack_strings(read.take(names_len), sum(counts), formats >> 1 & 1)
    new_row = tuple.__new__
    firsts: dict[int, tuple[int, ...]] = {}
    out: list[PartitionFacts] = []
    at = ord_at = 0
    for i in range(n):
        token, count, flag = tokens[i], counts[i], flags[i]
        bucket = buckets.setdefault(keys[2 * i], keys[2 * i])
        parent = keys[2 * i + 1]
        rows = tuple(
            [new_row(FolderRow, (token, bucket, parent, name)) for name in names[at : at + count]]
        )
        at += count
        if flag & _NO_ORDINALS:
            ords: tuple[int, ...] = ()
        elif flag & _FIRST_ORDINALS:
            shared = firsts.get(count)
            ords = shared if shared is not None else firsts.setdefault(count, tuple(range(count)))
        else:
            ords = tuple(ordinals[ord_at : ord_at + count])
            ord_at += count
        key = new_row(PartitionKey, (token, bucket, parent))
        fact = unchecked_facts(
            key, totals[i], rows, bool(flag & _ABSENT), ords, bool(flag & _PARENT_ABSENT)
        )
        out.append(fact)
    return out


def _decode_dirs(raw: bytes) -> list[BucketDir]:
    """The directories of a facts block's candidates (without their rows' objects)."""
    n, keys_len, names_len, explicit, formats = _FACTS_HEAD.unpack_from(raw)
    read = _Reader(raw, _FACTS_HEAD.size + 16 * n)  # after the tokens and row counts
    counts = read.ints("I", n)
    read.take(n + 4 * explicit)  # flags, ordinals
    keys = _unpack_strings(read.take(keys_len), 2 * n, formats & 1)
    names = _unpack_strings(read.take(names_len), sum(counts), formats >> 1 & 1)
    out: list[BucketDir] = []
    at = 0
    for i, count in enumerate(counts):
        bucket, parent = keys[2 * i], keys[2 * i + 1]
        out += [(bucket, parent + name + "/") for name in names[at : at + count]]
        at += count
    return out


def _decode_absent_keys(raw: bytes) -> list[BucketDir]:
    """The keys of a facts block's partitions whose own directory is absent."""
    n, keys_len, _names_len, explicit, formats = _FACTS_HEAD.unpack_from(raw)
    read = _Reader(raw, _FACTS_HEAD.size)
    read.take(20 * n)  # tokens, row counts, candidate counts
    flags = read.take(n)
    if not any(flag & _ABSENT for flag in flags):
        return []
    read.take(4 * explicit)
    keys = _unpack_strings(read.take(keys_len), 2 * n, formats & 1)
    return [(keys[2 * i], keys[2 * i + 1]) for i in range(n) if flags[i] & _ABSENT]


def _encode_actions(actions: list[DeleteAction]) -> bytes:
    index: dict[PartitionKey, int] = {}
    for action in actions:
        index.setdefault(action.partition, len(index))
    keys, keys_format = _pack_strings([s for k in index for s in (k.bucket, k.parent)])
    names, names_format = _pack_strings([row.name for a in actions for row in a.rows])
    head = _ACTIONS_HEAD.pack(
        len(actions), len(index), len(keys), len(names), keys_format | names_format << 1
    )
    return b"".join(
        (
            head,
            array("q", [k.token for k in index]).tobytes(),
            bytes(_KIND_CODE[a.kind] for a in actions),
            array("I", [index[a.partition] for a in actions]).tobytes(),
            array("I", [len(a.rows) for a in actions]).tobytes(),
            keys,
            names,
        )
    )


def _decode_actions(raw: bytes, buckets: dict[str, str]) -> Iterator[DeleteAction]:
    n, k, keys_len, names_len, formats = _ACTIONS_HEAD.unpack_from(raw)
    read = _Reader(raw, _ACTIONS_HEAD.size)
    tokens = read.ints("q", k)
    kinds = read.take(n)
    where, counts = read.ints("I", n), read.ints("I", n)
    strings = _unpack_strings(read.take(keys_len), 2 * k, formats & 1)
    names = _unpack_strings(read.take(names_len), sum(counts), formats >> 1 & 1)
    new = tuple.__new__
    keys = [
        new(PartitionKey, (tokens[j], buckets.setdefault(strings[2 * j], strings[2 * j]), p))
        for j, p in enumerate(strings[1::2])
    ]
    at = 0
    # One at a time: a block is a chunk's actions of one kind, up to a chunk of candidates.
    for i in range(n):
        key, count = keys[where[i]], counts[i]
        token, bucket, parent = key
        rows = tuple([new(FolderRow, (token, bucket, parent, n)) for n in names[at : at + count]])
        at += count
        yield DeleteAction(_KINDS[kinds[i]], key, rows)
