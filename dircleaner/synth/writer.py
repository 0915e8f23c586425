"""The depth-first writer: rows tokenised once per partition, spilled by token bucket."""

from __future__ import annotations

import marshal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import mmh3

from dircleaner.synth.spec import Row

#: Token slices per bucket: the loader inserts a slice of every chunk before the next slice.
SLICES = 64
#: Rows a generator buffers before spilling them to disk; bounds each worker's memory.
SPILL_ROWS = 1_000_000
#: Ground-truth paths a generator keeps in memory before writing a sorted run.
TRUTH_RUN = 500_000
PROGRESS_EVERY = 100_000
#: Below this share of empties, a single deletion never takes its parent with it.
SMALL_SHARE = 0.01
_CHECK_EVERY = 1 << 14
_TOKEN_OFFSET = 1 << 63
_hash64 = mmh3.hash64

# -- the depth-first writer -------------------------------------------------------------------


class Spill:
    """Rows of one table, bucketed by token range; in memory until flushed to a temp file.

    Each of the ``buckets`` token buckets (what the loader holds at once) is cut into
    ``SLICES`` finer token slices; the loader inserts slice by slice, so consecutive inserts stay
    within a few hundred B-tree pages without anyone sorting rows.
    """

    def __init__(self, path: Path, buckets: int) -> None:
        self.path = path
        self.buckets = buckets
        self.lists: list[list[Row]] = [[] for _ in range(buckets * SLICES)]
        #: per bucket: (offset, size) of each marshalled chunk (a list of SLICES row lists).
        self.index: list[list[tuple[int, int]]] = [[] for _ in range(buckets)]
        self._file: IO[bytes] | None = None
        self._offset = 0

    def flush(self) -> None:
        """Append every non-empty bucket's slices to the spill file."""
        if self._file is None:
            self._file = self.path.open("wb")
        for bucket in range(self.buckets):
            group = self.lists[bucket * SLICES : (bucket + 1) * SLICES]
            if any(group):
                data = marshal.dumps(group)
                self._file.write(data)
                self.index[bucket].append((self._offset, len(data)))
                self._offset += len(data)
                for rows in group:
                    rows.clear()  # in place: the writer holds references to these lists

    def close(self) -> SpillRef:
        """Flush and describe where every bucket's rows are."""
        self.flush()
        if self._file is not None:
            self._file.close()
        return SpillRef(str(self.path), self.index)


@dataclass(frozen=True)
class SpillRef:
    path: str
    index: list[list[tuple[int, int]]]

    def read_bucket(self, bucket: int, handle: IO[bytes]) -> Iterator[list[list[Row]]]:
        """Each spilled chunk of ``bucket``: its SLICES lists of rows, in token-slice order."""
        for offset, size in self.index[bucket]:
            handle.seek(offset)
            group: list[list[Row]] = marshal.loads(handle.read(size))
            yield group


class Writer:
    """Builds a tree depth-first: emits rows and decides each directory's emptiness on leave.

    A directory is empty iff nothing live was put in its subtree. ``dead`` subtrees are ones whose
    objects were all deleted: puts into them are dropped, every directory in them is empty.
    """

    __slots__ = (
        "_bucket",
        "_check_at",
        "_empty",
        "_fl",
        "_fspill",
        "_ol",
        "_ospill",
        "_pace",
        "_prefix",
        "_reported",
        "_shift",
        "_spilled_at",
        "_stack",
        "_tag",
        "_target",
        "_tick",
        "_top",
        "_truth_dir",
        "_ts",
        "aside_dirs",
        "aside_empties",
        "budget",
        "dirs",
        "empties",
        "objects",
        "protocol_keys",
        "truth_runs",
    )

    def __init__(
        self,
        bucket: str,
        timestamp_us: int,
        folders: Spill,
        objects: Spill,
        shift: int,
        empty_fraction: float,
        truth_dir: Path,
        tag: str,
        tick: Callable[[int], None] | None = None,
        *,
        budget: int = 0,
    ) -> None:
        self._prefix = bucket + "\0"
        self._bucket = bucket
        self._ts = timestamp_us
        self._fspill = folders
        self._ospill = objects
        self._fl = folders.lists
        self._ol = objects.lists
        self._shift = shift
        self._target = empty_fraction
        self._pace = empty_fraction
        # One frame per open directory (a list, the cheapest thing to make in the hot path):
        # [path, token, folder-row list for its children, object-row list, live, dead]; the
        # token and row lists are filled in when first needed (an empty leaf never needs them).
        self._top: list[Any] = ["", 0, None, None, True, False]
        self._stack: list[list[Any]] = [self._top]
        self._empty: list[str] = []
        self._truth_dir = truth_dir
        self._tag = tag
        self.truth_runs: list[str] = []
        self._tick = tick
        self._reported = 0
        self._check_at = _CHECK_EVERY
        self._spilled_at = 0
        #: the directories the layout is to make (bounds how big one deletion may be)
        self.budget = budget
        self.dirs = 0
        self.empties = 0
        self.objects = 0
        #: directories (and how many of them are empty) a layout made by its own plan, apart
        #: from the feedback: whole days expired, the wide day
        self.aside_dirs = 0
        self.aside_empties = 0
        #: keys put through the store protocol (only the small tmp/ tree): (key, alive)
        self.protocol_keys: list[tuple[str, bool]] | None = None

    # -- tree building ------------------------------------------------------------------------
    def _tokenise(self, frame: list[Any]) -> None:
        tok = _hash64(self._prefix + frame[0], 0, True, True)[0]
        index = (tok + _TOKEN_OFFSET) >> self._shift
        frame[1] = tok
        frame[2] = self._fl[index]
        frame[3] = self._ol[index]

    def enter(self, name: str, dead: bool = False) -> None:
        """Create subdirectory ``name`` of the current directory and descend into it."""
        top = self._top
        if top[2] is None:
            self._tokenise(top)
        top[2].append((top[1], self._bucket, top[0], name, self._ts))
        dead = dead or top[5]
        top = [top[0] + name + "/", 0, None, None, False, dead]
        self._stack.append(top)
        self._top = top
        self.dirs += 1
        if dead:
            self.empties += 1

    def leave(self) -> None:
        """Close the current directory: empty unless something live was put below it."""
        stack = self._stack
        frame = stack.pop()
        top = self._top = stack[-1]
        if frame[4]:
            top[4] = True
        else:
            self._empty.append(frame[0])
            if not frame[5]:
                self.empties += 1
        if self.dirs >= self._check_at:
            self._maintain()

    def put(self, name: str) -> None:
        """Put live object ``name`` in the current directory (``""`` is the directory's marker)."""
        top = self._top
        if top[5]:
            return
        if self.protocol_keys is not None:
            self.protocol_keys.append((top[0] + name, True))
        else:
            if top[2] is None:
                self._tokenise(top)
            top[3].append((top[1], self._bucket, top[0], name, self._ts))
        self.objects += 1
        top[4] = True

    def put_deleted(self, name: str) -> None:
        """An object put and later deleted through the store protocol (small scale only)."""
        if self.protocol_keys is None:
            raise RuntimeError("put_deleted needs a protocol writer")
        self.protocol_keys.append((self._top[0] + name, False))

    def leaf(self, name: str, files: Sequence[str]) -> None:
        """``enter(name)``, put ``files`` (possibly none: an empty leaf), ``leave()``, fast."""
        top = self._top
        if top[2] is None:
            self._tokenise(top)
        bucket = self._bucket
        ts = self._ts
        parent = top[0]
        top[2].append((top[1], bucket, parent, name, ts))
        self.dirs += 1
        path = parent + name + "/"
        if files and not top[5]:
            if self.protocol_keys is None:
                tok = _hash64(self._prefix + path, 0, True, True)[0]
                rows = self._ol[(tok + _TOKEN_OFFSET) >> self._shift]
                for f in files:
                    rows.append((tok, bucket, path, f, ts))
            else:
                self.protocol_keys.extend((path + f, True) for f in files)
            self.objects += len(files)
            top[4] = True
        else:
            self._empty.append(path)
            self.empties += 1
        if self.dirs >= self._check_at:
            self._maintain()

    @property
    def target(self) -> float:
        """The share of this layout's directories to leave empty."""
        return self._target

    @property
    def pace(self) -> float:
        """The share of the directories not set aside the feedback aims at."""
        return self._pace

    def set_pace(self, pace: float) -> None:
        """Aim the feedback at ``pace`` of the directories not set aside: a layout that makes
        some of its subtrees by plan makes the rest of its empties at this pace."""
        self._pace = pace

    def _deficit(self) -> float:
        dirs = self.dirs - self.aside_dirs
        return self._pace * dirs - (self.empties - self.aside_empties)

    def want_empty(self) -> bool:
        """Whether this layout is short of empty directories (the feedback that sets the mix):
        by more than half of one, so that a share of a few directories in millions rounds."""
        dirs = self.dirs - self.aside_dirs  # (the deficit, inline: this is the hot path)
        return self._pace * dirs - self.empties + self.aside_empties > 0.5

    def may_drop(self) -> bool:
        """Whether to empty one more leaf here: while short of empties, and, while the share is
        small enough for one directory to count, only beside something live (so that its
        parent does not go empty with it)."""
        return self._deficit() > 0.5 and (self._pace >= SMALL_SHARE or self.settled())

    def may_empty(self, size: float) -> bool:
        """Whether to empty a whole subtree of about ``size`` directories now.

        Only while short of empties, and only if the overshoot it may cause can still be made
        up: each live directory the layout has yet to make lowers its share by the pace, so a
        deletion near the end of the budget, or one big against the target, waits (an overshoot
        of half a directory is rounding).
        """
        deficit = self._deficit()
        if deficit <= 0.5:
            return False
        pace = self._pace
        overshoot = size * (1.0 - pace) - deficit
        return overshoot <= max(0.5, 0.5 * pace * (self.budget - self.dirs - size))

    def settled(self) -> bool:
        """Whether the current directory holds something live or was deleted whole: a layout at
        its budget stops there without leaving an empty directory nobody planned."""
        top = self._top
        return bool(top[4] or top[5])

    # -- bookkeeping --------------------------------------------------------------------------
    def _maintain(self) -> None:
        self._check_at = self.dirs + _CHECK_EVERY
        if self.dirs + self.objects - self._spilled_at >= SPILL_ROWS:
            self._fspill.flush()
            self._ospill.flush()
            self._spilled_at = self.dirs + self.objects
        if len(self._empty) >= TRUTH_RUN:
            self._write_truth_run()
        if self._tick is not None and self.dirs - self._reported >= PROGRESS_EVERY:
            self._tick(self.dirs - self._reported)
            self._reported = self.dirs

    def _write_truth_run(self) -> None:
        self._empty.sort()
        path = self._truth_dir / f"truth-{self._tag}-{len(self.truth_runs)}.txt"
        with path.open("w", encoding="utf-8", newline="\n") as out:
            out.writelines(p + "\n" for p in self._empty)
        self.truth_runs.append(str(path))
        self._empty = []

    def finish(self) -> None:
        """Close the open directories (none should be left), flush the truth and progress."""
        if len(self._stack) != 1:
            raise RuntimeError(f"layout left {len(self._stack) - 1} directories open")
        if self._empty or not self.truth_runs:
            self._write_truth_run()
        if self._tick is not None and self.dirs > self._reported:
            self._tick(self.dirs - self._reported)
            self._reported = self.dirs
