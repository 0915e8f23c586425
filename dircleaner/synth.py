"""Deterministic synthetic metastores with a known ground truth, fast enough for 30M directories.

The dataset is the *end state* an S3 front-end leaves behind: a folder row for every directory ever
created and an object row for every object still alive; deleted objects are simply never written
(a small ``tmp/`` tree does go through ``put_objects``/``delete_objects`` to exercise that path).

Four layout families, taken from the key-design material in ``seeds/``, share the directories
(hex shards are two independent jobs):

========== ===== ===========================================================================
layout     share shape
========== ===== ===========================================================================
hex-root   15%   hex shards at the top of the bucket: ``a/1/b/image_1.jpg``, ``3f/a2/9c/obj-7.bin``
hex-data   20%   hex shards under named roots: ``data/3f/a2/9c/obj-123.bin``
dates      25%   ``logs/web/2026/04/11/AB/14/part-00000.log.gz``: 676 ``AA``..``ZZ`` per day
users      25%   ``users/u000042/photos/2024/trip-3/…``: Zipf fan-out, depth up to ~10, deep chains
ids        15%   ``orders/000100123/invoice.pdf``: sequential ids, wide partitions of ≤250k
========== ===== ===========================================================================

Deletes applied (all decided by the seed): lifecycle expiration of the oldest days of every log
stream (whole empty subtrees, depth 4), a mass delete in one live day (``2026/04/11``: ~90% of its
676 children emptied while the day keeps ``_SUCCESS``), deleted users and sub-trees, retention of
the oldest orders, and scattered single deletions (a leaf losing its only object). A feedback loop
keeps each layout's share of empty directories near ``SynthSpec.empty_fraction``.

How it is fast: the tree is generated depth-first, so a directory's emptiness is known when it is
left; rows are tokenised once per partition and spilled, bucketed by token range, to temp files;
the load then inserts one token bucket at a time, in near token order, so SQLite's B-trees grow at
their right edge. Layouts are independent jobs, generated in parallel processes; the output does
not depend on the number of workers.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import json
import marshal
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import IO, Any

import mmh3

from dircleaner.errors import UsageError
from dircleaner.gcpause import cyclic_gc_paused
from dircleaner.paths import validate_bucket
from dircleaner.store.base import Shard, Store
from dircleaner.store.sqlite import SqliteStore

Progress = Callable[[int], None]
#: An index row as ``SqliteStore.bulk_insert`` takes it: (token, bucket, parent, name, ts).
Row = tuple[int, str, str, str, int]

DAY_US = 86_400 * 1_000_000
#: Rows handed to one ``bulk_insert`` call (one transaction).
INSERT_BATCH = 50_000
#: Target rows per token bucket at load time; bounds the loader's memory.
BUCKET_ROWS = 400_000
#: Token slices per bucket: the loader inserts a slice of every chunk before the next slice.
SLICES = 64
#: Rows a generator buffers before spilling them to disk; bounds each worker's memory.
SPILL_ROWS = 1_000_000
#: Ground-truth paths a generator keeps in memory before writing a sorted run.
TRUTH_RUN = 2_000_000
PROGRESS_EVERY = 100_000
#: Below this many directories the generator runs in-process by default.
PARALLEL_MIN_DIRS = 300_000
_CHECK_EVERY = 1 << 14
_TOKEN_OFFSET = 1 << 63
_hash64 = mmh3.hash64

#: (layout, share of the directories). Each is generated as an independent job.
LAYOUT_MIX: tuple[tuple[str, float], ...] = (
    ("hex-root", 0.15),
    ("hex-data", 0.20),
    ("dates", 0.25),
    ("users", 0.25),
    ("ids", 0.15),
)

HEX1 = tuple("0123456789abcdef")
HEX2 = tuple(f"{i:02x}" for i in range(256))
HEX3 = tuple(f"{i:03x}" for i in range(4096))
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
LETTER_PAIRS = tuple(a + b for a in _LETTERS for b in _LETTERS)
HOURS = tuple(f"{h:02d}" for h in range(24))
#: The live day whose two-letter children are mostly deleted (the talk's ``11.04.2026/AA..ZZ``).
WIDE_DAY = date(2026, 4, 11)
WIDE_DAY_EMPTIED = 0.9
LAST_DAY = date(2026, 4, 12)
LOG_APPS = ("web", "api", "billing", "search", "auth", "cdn", "mail", "batch")

#: Odd but valid directory names (a small share): unicode, spaces, quotes, a backslash, and the
#: empty segment that makes ``a//b``. Never ``/``, NUL or line breaks (truth is one path a line).
ODD_DIR_NAMES = (
    "фото",
    "写真",
    "Été 2024",
    "naïve café",
    "My Documents",
    " leading space",
    "trailing space ",
    "it's",
    'say "cheese"',
    "back\\slash",
    "",
    "emoji 📷",
    "Ñandú",
    "100% done",
    "semi;colon #1",
)
ODD_FILE_NAMES = (
    "résumé.pdf",
    "notes (1).txt",
    "it's here.txt",
    'the "best".jpg',
    "a\\b.txt",
    "Копия файла.docx",
    "報告.xlsx",
    "space .txt",
)
USER_TOPS = ("photos", "documents", "music", "projects", "backup", "Desktop", "Рабочий стол", "src")
USER_WORDS = ("trip", "raw", "edited", "album", "work", "old", "draft", "misc", "export", "v")
USER_FILES = (
    ("IMG_", ".jpg"),
    ("doc-", ".pdf"),
    ("track-", ".mp3"),
    ("file-", ".txt"),
    ("data-", ".csv"),
)


#: bump whenever the same spec would generate a different dataset (benchmarks key caches on it)
GENERATOR_VERSION = 2


@dataclass(frozen=True)
class SynthSpec:
    """What to generate: about ``dirs`` directories, a share of them empty, all from ``seed``."""

    dirs: int
    seed: int = 0
    bucket: str = "default"
    empty_fraction: float = 0.05
    #: Write time in µs; default now - 1 day, so ``--min-age`` never spares the dataset.
    timestamp_us: int | None = None

    def __post_init__(self) -> None:
        if self.dirs < 1:
            raise UsageError(f"dirs must be positive, got {self.dirs}")
        if not 0.0 <= self.empty_fraction < 1.0:
            raise UsageError(f"empty_fraction must be in [0, 1), got {self.empty_fraction}")
        validate_bucket(self.bucket)


@dataclass(frozen=True)
class LayoutStats:
    """What one layout contributed."""

    name: str
    dirs: int
    empty_dirs: int
    objects: int


@dataclass(frozen=True)
class SynthResult:
    """What was generated, exactly (``dirs`` is the folder-row count, not the target)."""

    dirs: int
    empty_dirs: int
    objects: int
    seconds: float
    generate_seconds: float = 0.0
    load_seconds: float = 0.0
    layouts: tuple[LayoutStats, ...] = ()
    timestamp_us: int = 0
    truth_path: Path | None = None

    @property
    def empty_fraction(self) -> float:
        """Share of the directories that are empty."""
        return self.empty_dirs / self.dirs if self.dirs else 0.0


# -- the depth-first writer -------------------------------------------------------------------


class _Spill:
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

    def close(self) -> _SpillRef:
        """Flush and describe where every bucket's rows are."""
        self.flush()
        if self._file is not None:
            self._file.close()
        return _SpillRef(str(self.path), self.index)


@dataclass(frozen=True)
class _SpillRef:
    path: str
    index: list[list[tuple[int, int]]]

    def read_bucket(self, bucket: int, handle: IO[bytes]) -> Iterator[list[list[Row]]]:
        """Each spilled chunk of ``bucket``: its SLICES lists of rows, in token-slice order."""
        for offset, size in self.index[bucket]:
            handle.seek(offset)
            group: list[list[Row]] = marshal.loads(handle.read(size))
            yield group


class _Writer:
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
        "dirs",
        "empties",
        "objects",
        "protocol_keys",
        "reserved",
        "truth_runs",
    )

    def __init__(
        self,
        bucket: str,
        timestamp_us: int,
        folders: _Spill,
        objects: _Spill,
        shift: int,
        empty_fraction: float,
        truth_dir: Path,
        tag: str,
        tick: Callable[[int], None] | None = None,
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
        self.dirs = 0
        self.empties = 0
        self.objects = 0
        #: empties a layout knows it will still make (want_empty counts them as made already)
        self.reserved = 0.0
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

    def want_empty(self) -> bool:
        """Whether this layout is short of empty directories (the feedback that sets the mix)."""
        return self.empties + self.reserved < self._target * self.dirs

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


# -- layouts ------------------------------------------------------------------------------------


def _zipf_table(size: int, exponent: float) -> list[float]:
    weights = [k**-exponent for k in range(1, size + 1)]
    total = sum(weights)
    acc = 0.0
    table = []
    for weight in weights:
        acc += weight
        table.append(acc / total)
    table[-1] = 1.0
    return table


_FANOUT = _zipf_table(120, 2.0)  # P(k children) ∝ 1/k², k = 1..120: mean ≈ 3, a long tail
_FILES = _zipf_table(40, 2.6)  # files per leaf: mean ≈ 1.7


def _draw(rng: random.Random, table: list[float]) -> int:
    return bisect.bisect_left(table, rng.random()) + 1


def _spread(rng: random.Random, n: int, k: int) -> list[int]:
    """``k`` of ``0..n-1`` evenly spread from a random offset: a cheap stand-in for a sample."""
    if k >= n:
        return list(range(n))
    start = int(rng.random() * n)
    return sorted((start + i * n // k) % n for i in range(k))


def _hex_tree(
    w: _Writer,
    rng: random.Random,
    alphabet: Sequence[str],
    leaves: int,
    budget: int,
    counter: list[int],
    pattern: tuple[str, str],
) -> None:
    """Three levels of hex shards under the current directory, about ``leaves`` leaf dirs."""
    n = len(alphabet)
    k = max(1, min(n, math.ceil(leaves ** (1 / 3))))
    prefix, suffix = pattern
    leaf = w.leaf
    rand = rng.random
    for a in sorted(rng.sample(range(n), k)):
        if w.dirs >= budget:
            return
        w.enter(alphabet[a], dead=w.want_empty() and rand() < 0.002)
        for b in sorted(rng.sample(range(n), k)):
            if w.dirs >= budget:
                break
            w.enter(alphabet[b], dead=w.want_empty() and rand() < 0.01)
            num = counter[0]
            for c in _spread(rng, n, max(1, min(n, k - 1 + int(rand() * 3)))):
                if rand() < 0.3 and w.want_empty():
                    leaf(alphabet[c], ())  # a scattered single deletion
                    continue
                r = rand()
                count = 1 if r < 0.7 else 2 if r < 0.9 else 3
                leaf(alphabet[c], [f"{prefix}{i}{suffix}" for i in range(num, num + count)])
                num += count
            counter[0] = num
            w.leave()
        w.leave()


def _layout_hex_root(w: _Writer, rng: random.Random, budget: int) -> None:
    """Hex shards at the top of the bucket: ``a/1/b/image_1.jpg``, then ``3f/a2/9c/obj-7.bin``."""
    counter = [0]
    small = min(4096, max(1, budget // 4))
    _hex_tree(w, rng, HEX1, small, budget, counter, ("image_", ".jpg"))
    for alphabet in (HEX2, HEX3):
        if w.dirs >= budget:
            return
        leaves = int((budget - w.dirs) * 0.99)
        _hex_tree(w, rng, alphabet, leaves, budget, counter, ("obj-", ".bin"))


def _layout_hex_data(w: _Writer, rng: random.Random, budget: int) -> None:
    """Hex shards under named roots: ``data/3f/a2/9c/obj-123.bin``; a marker on ``data/``."""
    counter = [0]
    roots = max(1, min(3, budget // 50_000))
    per_root = budget / roots
    i = 0
    while w.dirs < budget:
        name = ("data", "blobs", "thumbs")[i] if i < 3 else f"shard-{i}"
        w.enter(name)
        if i == 0:
            w.put("")  # created in a console: the directory marker ``data/``
        left = min(per_root, budget - w.dirs) if i < roots - 1 else budget - w.dirs
        _hex_tree(w, rng, HEX2, max(1, int(left * 0.99)), budget, counter, ("obj-", ".bin"))
        w.leave()
        i += 1


def _dates_shape(budget: int) -> tuple[int, int, int, int]:
    """(apps, days per app, two-letter children per normal day, max hour dirs per child)."""
    hours = 3 if budget >= 100_000 else 1 if budget >= 25_000 else 0
    per_child = _dir_per_child(hours)
    wide = 1 + 676 * per_child
    apps = max(1, min(len(LOG_APPS), budget // 400_000))
    per_app = max(1.0, (budget - wide) / apps)
    children = int(min(676, max(4, per_app / (60 * per_child))))
    days = max(2, math.floor(per_app / (1 + children * per_child) * 0.97))
    return apps, days, children, hours


def _dir_per_child(hours: int) -> float:
    """Expected directories per two-letter child: itself and 1..hours hour dirs."""
    return 1 + (hours + 1) / 2 if hours else 1.0


def _wide_day_empties(budget: int) -> float:
    """Empty directories the mass-deleted wide day leaves in a dates layout of ``budget``."""
    return round(676 * WIDE_DAY_EMPTIED) * _dir_per_child(_dates_shape(budget)[3])


def _log_files(w: _Writer, rng: random.Random, name: str) -> None:
    """A leaf of log parts; sometimes (when short of empties) its only part was deleted."""
    r = rng.random()
    if w.want_empty() and r < 0.2:
        w.leaf(name, ())
    elif r < 0.5:
        w.leaf(name, ("part-00000.log.gz", "part-00001.log.gz"))
    else:
        w.leaf(name, ("part-00000.log.gz",))


def _log_day(
    w: _Writer,
    rng: random.Random,
    name: str,
    children: int,
    hours: int,
    budget: int,
    *,
    expired: bool,
    wide: bool,
) -> None:
    w.enter(name, dead=expired)
    if wide:
        picks = list(range(676))
        emptied = set(rng.sample(picks, round(676 * WIDE_DAY_EMPTIED)))
        w.put("_SUCCESS")  # the day stays live while ~600 of its children are emptied
    else:
        picks = _spread(rng, 676, children)
        emptied = set()
        if rng.random() < 0.9:
            w.put("_SUCCESS")
    for j in picks:
        if w.dirs >= budget:
            break
        dead = j in emptied or (w.want_empty() and rng.random() < 0.02)
        if hours == 0:
            if dead:
                w.leaf(LETTER_PAIRS[j], ())
            else:
                _log_files(w, rng, LETTER_PAIRS[j])
            continue
        w.enter(LETTER_PAIRS[j], dead=dead)
        first = int(rng.random() * 24)
        for h in range(first, min(24, first + 1 + int(rng.random() * hours))):
            _log_files(w, rng, HOURS[h])
        w.leave()
    w.leave()


def _layout_dates(w: _Writer, rng: random.Random, budget: int, empty_fraction: float) -> None:
    """``logs/<app>/YYYY/MM/DD/XX/HH/part-*.log.gz``; one app uses the talk's ``DD.MM.YYYY/``."""
    apps, days, children, hours = _dates_shape(budget)
    day_size = 1 + children * _dir_per_child(hours)
    wide_empties = _wide_day_empties(budget)
    # Lifecycle: the oldest days of every stream expired, for ~2/3 of this layout's empty share.
    # They come first, so the feedback then holds back scattered deletions until the total fits.
    expired_days = round(max(0.0, 0.66 * empty_fraction * budget - wide_empties) / day_size / apps)
    expired_days = min(expired_days, days - 2)
    w.reserved = wide_empties
    w.enter("logs")
    i = 0
    while w.dirs < budget:
        app = LOG_APPS[i] if i < len(LOG_APPS) else f"app-{i}"
        flat = i % 4 == 3
        w.enter(app)
        # Oldest first; ``days`` is a slight underestimate, so the budget cut lands in a later
        # stream and the wide day (second newest of the first stream) is always there.
        dates = [LAST_DAY - timedelta(days=d) for d in range(days - 1, -1, -1)]
        open_ym: tuple[int, int] | None = None
        for d, day in enumerate(dates):
            if w.dirs >= budget:
                break
            wide = i == 0 and day == WIDE_DAY
            if wide:
                w.reserved = 0.0
            if flat:
                name = day.strftime("%d.%m.%Y")
            else:
                if open_ym is None or open_ym[0] != day.year:
                    if open_ym is not None:
                        w.leave()
                        w.leave()
                    w.enter(f"{day.year:04d}")
                    w.enter(f"{day.month:02d}")
                elif open_ym[1] != day.month:
                    w.leave()
                    w.enter(f"{day.month:02d}")
                open_ym = (day.year, day.month)
                name = f"{day.day:02d}"
            expired = d < expired_days and not wide
            _log_day(w, rng, name, children, hours, budget, expired=expired, wide=wide)
        if open_ym is not None:
            w.leave()
            w.leave()
        w.leave()
        i += 1
    w.leave()


def _user_names(rng: random.Random, depth: int, count: int) -> list[str]:
    """``count`` distinct child names for a user directory at ``depth``; rarely an odd one."""
    if depth == 3:
        names = [USER_TOPS[i] if i < len(USER_TOPS) else f"folder-{i}" for i in range(count)]
        rng.shuffle(names)
    elif depth == 4:
        names = [str(2026 - i) if i < 12 else f"archive-{i}" for i in range(count)]
    else:
        base = int(rng.random() * len(USER_WORDS))
        names = [f"{USER_WORDS[(base + i) % len(USER_WORDS)]}-{i}" for i in range(count)]
    if rng.random() < 0.02:
        names[0] = ODD_DIR_NAMES[int(rng.random() * len(ODD_DIR_NAMES))]
    return names


def _user_files(rng: random.Random, count: int, counter: list[int]) -> list[str]:
    prefix, suffix = USER_FILES[int(rng.random() * len(USER_FILES))]
    n = counter[0]
    counter[0] = n + count
    files = [f"{prefix}{i}{suffix}" for i in range(n, n + count)]
    if rng.random() < 0.01:
        files[0] = f"{n}-{ODD_FILE_NAMES[int(rng.random() * len(ODD_FILE_NAMES))]}"
    return files


_BRANCH = (1.0, 1.0, 1.0, 0.95, 0.7, 0.45, 0.33, 0.28, 0.25, 0.2, 0.0)  # by depth


def _user_dir(
    w: _Writer,
    rng: random.Random,
    name: str,
    depth: int,
    budget: int,
    counter: list[int],
    deleting: bool,
) -> None:
    """One directory of a user tree (``depth`` is its own depth) and its subtree.

    ``deleting``: a mass delete is under way here; it drops objects only while the layout is short
    of empties, so a huge tree (the fan-out is heavy-tailed) is emptied only as far as needed.
    """
    branch = _BRANCH[depth] if depth < len(_BRANCH) else 0.0
    children = _draw(rng, _FANOUT) if rng.random() < branch else 0
    if children == 0:
        r = rng.random()
        if (deleting or r < 0.25) and w.want_empty():
            w.leaf(name, ())
        elif r > 0.99:
            w.leaf(name, ("",))  # a console-created folder: only its marker keeps it
        else:
            w.leaf(name, _user_files(rng, _draw(rng, _FILES), counter))
        return
    w.enter(name)
    deleting = deleting or (depth in (4, 5) and w.want_empty() and rng.random() < 0.05)
    r = rng.random()
    if not (deleting and w.want_empty()):
        if r < 0.2:
            for f in _user_files(rng, _draw(rng, _FILES), counter):
                w.put(f)
        if r > 0.98:
            w.put("")
    for child in _user_names(rng, depth + 1, children):
        if w.dirs >= budget:
            break
        _user_dir(w, rng, child, depth + 1, budget, counter, deleting)
    w.leave()


def _odd_corner(w: _Writer) -> None:
    """Each odd directory name once (a third of them emptied); a folder kept by its marker only."""
    w.enter("odd names")
    for i, name in enumerate(ODD_DIR_NAMES):
        odd_file = f"{i}-{ODD_FILE_NAMES[i % len(ODD_FILE_NAMES)]}"
        w.leaf(name, () if i % 3 == 2 else (odd_file,))
    w.leaf("New folder", ("",))
    w.leave()


def _layout_users(w: _Writer, rng: random.Random, budget: int) -> None:
    """``users/u000042/photos/2024/trip-3/…``: Zipf fan-out, (partly) deleted users, deep chains."""
    counter = [0]
    w.enter("users")
    uid = 0
    while w.dirs < budget:
        deleting = uid != 1 and w.want_empty() and rng.random() < 0.08
        w.enter(f"u{uid:06d}")
        if uid == 1:
            _odd_corner(w)
        for top in _user_names(rng, 3, _draw(rng, _FANOUT)):
            if w.dirs >= budget:
                break
            _user_dir(w, rng, top, 3, budget, counter, deleting)
        if rng.random() < 0.004 or uid == 3:
            # A very deep chain, sometimes deleted whole: a deep empty subtree to collapse.
            length = rng.randint(12, 40)
            dead = uid == 3 or (w.want_empty() and rng.random() < 0.5)
            w.enter("deep-backup", dead=dead)
            for level in range(length):
                w.enter(f"n{level:02d}")
            w.put("snapshot.tar")
            for _ in range(length):
                w.leave()
            w.leave()
        w.leave()
        uid += 1
    w.leave()


ID_ROOTS = (
    "orders",
    "tickets",
    "invoices",
    "shipments",
    "payments",
    "refunds",
    "returns",
    "quotes",
)
#: Ids per root: each root is one wide partition of sequential ids.
IDS_PER_ROOT = 250_000


def _layout_ids(w: _Writer, rng: random.Random, budget: int, empty_fraction: float) -> None:
    """``orders/000100123/{order.json,invoice.pdf,attachments/}``: sequential ids with gaps.

    Each root is one wide partition. Retention deleted its oldest ids whole: a contiguous run of
    thousands of empty directories under one live parent, as sequential keys make them.
    """
    i = 0
    while w.dirs < budget:
        name = ID_ROOTS[i] if i < len(ID_ROOTS) else f"archive-{i}"
        planned = min(IDS_PER_ROOT, (budget - w.dirs) / 1.25)
        retired = round(0.2 * empty_fraction * planned)
        w.enter(name)
        ident = 100_000 * (i + 1)
        n = 0
        while n < IDS_PER_ROOT and w.dirs < budget:
            dead = n < retired or (w.want_empty() and rng.random() < 0.01)
            w.enter(f"{ident:09d}", dead=dead)
            w.put("order.json")
            r = rng.random()
            if r > 0.7:
                w.put("invoice.pdf")
            if r < 0.25:
                if w.want_empty() and r < 0.1:
                    w.leaf("attachments", ())
                else:
                    scans = 1 + int(rng.random() * 3)
                    w.leaf("attachments", [f"scan-{k}.pdf" for k in range(scans)])
            w.leave()
            n += 1
            r = rng.random()
            ident += 1 if r < 0.95 else 2 + int((r - 0.95) * 980)  # a gap of up to 50
        w.leave()
        i += 1


TMP_DIRS = 7
TMP_EMPTIES = 6
DEEP_CHAIN_EMPTIES = 26  # the always-deleted chain of user u000003: 13..41 directories


def _layout_tmp(w: _Writer) -> None:
    """``tmp/``: uploads put and deleted through the store protocol, ``tmp/.keep`` stays."""
    w.enter("tmp")
    w.put(".keep")
    w.enter("uploads")
    for u in range(5):
        w.enter(f"upload-{u:04d}")
        for part in range(2):
            w.put_deleted(f"part-{part}")
        w.leave()
    w.leave()
    w.leave()


# -- jobs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    layout: str
    budget: int
    seed: int
    bucket: str
    empty_fraction: float
    buckets: int
    workdir: str
    timestamp_us: int


@dataclass(frozen=True)
class _JobOutput:
    stats: LayoutStats
    folders: _SpillRef
    objects: _SpillRef
    truth_runs: list[str]
    protocol_keys: list[tuple[str, bool]] | None = field(default=None)


def _run_job(job: _Job, tick: Callable[[int], None] | None = None) -> _JobOutput:
    """Generate one layout into spill files and sorted truth runs."""
    with cyclic_gc_paused():
        return _generate_layout(job, tick)


def _generate_layout(job: _Job, tick: Callable[[int], None] | None) -> _JobOutput:
    workdir = Path(job.workdir)
    shift = 64 - ((job.buckets * SLICES).bit_length() - 1)
    folders = _Spill(workdir / f"{job.layout}.folders", job.buckets)
    objects = _Spill(workdir / f"{job.layout}.objects", job.buckets)
    w = _Writer(
        job.bucket,
        job.timestamp_us,
        folders,
        objects,
        shift,
        job.empty_fraction,
        workdir,
        job.layout,
        tick,
    )
    rng = random.Random(f"dircleaner-synth:{job.seed}:{job.layout}")
    if job.layout == "hex-root":
        _layout_hex_root(w, rng, job.budget)
    elif job.layout == "hex-data":
        _layout_hex_data(w, rng, job.budget)
    elif job.layout == "dates":
        _layout_dates(w, rng, job.budget, job.empty_fraction)
    elif job.layout == "users":
        _layout_users(w, rng, job.budget)
    elif job.layout == "ids":
        _layout_ids(w, rng, job.budget, job.empty_fraction)
    elif job.layout == "tmp":
        w.protocol_keys = []
        _layout_tmp(w)
    else:
        raise ValueError(f"unknown layout {job.layout!r}")
    w.finish()
    return _JobOutput(
        LayoutStats(job.layout, w.dirs, w.empties, w.objects),
        folders.close(),
        objects.close(),
        w.truth_runs,
        w.protocol_keys,
    )


def _token_buckets(dirs: int) -> int:
    """A power of two such that one token bucket of one table holds about BUCKET_ROWS rows."""
    want = max(1, math.ceil(dirs * 1.6 / BUCKET_ROWS))
    return min(1 << 16, 1 << (want - 1).bit_length())


def plan_jobs(spec: SynthSpec, workdir: Path, timestamp_us: int = 0) -> list[_Job]:
    """The independent layout jobs for ``spec`` (their budgets add up to ``spec.dirs``)."""
    buckets = _token_buckets(spec.dirs)
    total = max(0, spec.dirs - TMP_DIRS)
    budgets = {name: int(total * share) for name, share in LAYOUT_MIX}
    budgets["ids"] += total - sum(budgets.values())
    # The fixed scenarios (the wide day, tmp/, a deep chain) leave empties at any scale; at small
    # scale they exceed their layout's share, so the other layouts aim lower to keep the total.
    fixed = max(spec.empty_fraction * budgets["dates"], _wide_day_empties(budgets["dates"]))
    fixed += TMP_EMPTIES + DEEP_CHAIN_EMPTIES
    others = total - budgets["dates"]
    other_fraction = max(0.0, spec.empty_fraction * spec.dirs - fixed) / max(1, others)
    layouts = [*budgets.items(), ("tmp", TMP_DIRS)]
    return [
        _Job(
            layout=name,
            budget=budget,
            seed=spec.seed,
            bucket=spec.bucket,
            empty_fraction=spec.empty_fraction if name == "dates" else other_fraction,
            buckets=buckets,
            workdir=str(workdir),
            timestamp_us=timestamp_us,
        )
        for name, budget in layouts
        if budget > 0
    ]


def iter_layout_keys(spec: SynthSpec) -> Iterator[tuple[str, str, bool]]:
    """Every (layout, key, alive) of the dataset, layout by layout, in token-bucket order.

    Alive keys are the object rows the store ends up with (a marker is its ``dir/`` key); dead
    keys are the few put and then deleted through the store protocol. Streams from spill files.
    """
    with tempfile.TemporaryDirectory(prefix="dircleaner-synth-") as tmp:
        for job in plan_jobs(spec, Path(tmp)):
            out = _run_job(job, tick=lambda _n: None)
            if out.protocol_keys is not None:
                for key, alive in out.protocol_keys:
                    yield job.layout, key, alive
                continue
            if not Path(out.objects.path).exists():
                continue
            with open(out.objects.path, "rb") as handle:
                for bucket in range(job.buckets):
                    for group in out.objects.read_bucket(bucket, handle):
                        for rows in group:
                            for _tok, _bucket, parent, name, _ts in rows:
                                yield job.layout, parent + name, True


# -- the load -----------------------------------------------------------------------------------


def _default_workers(dirs: int) -> int:
    """One process for small specs (a worker costs ~0.2 s to start), else one per CPU."""
    if dirs < PARALLEL_MIN_DIRS:
        return 1
    return max(1, min(len(LAYOUT_MIX), os.cpu_count() or 1))


def _save_output(out: _JobOutput, path: Path) -> None:
    data = {
        "stats": (out.stats.name, out.stats.dirs, out.stats.empty_dirs, out.stats.objects),
        "folders": (out.folders.path, out.folders.index),
        "objects": (out.objects.path, out.objects.index),
        "truth_runs": out.truth_runs,
    }
    path.write_bytes(marshal.dumps(data))


def _read_output(path: Path) -> _JobOutput:
    data = marshal.loads(path.read_bytes())
    return _JobOutput(
        LayoutStats(*data["stats"]),
        _SpillRef(*data["folders"]),
        _SpillRef(*data["objects"]),
        data["truth_runs"],
    )


def _worker_main() -> None:
    """A generator subprocess: one job as JSON on stdin, progress deltas as lines on stdout."""
    job = _Job(**json.loads(sys.stdin.read()))

    def tick(delta: int) -> None:
        sys.stdout.write(f"{delta}\n")
        sys.stdout.flush()

    _save_output(_run_job(job, tick), Path(job.workdir) / f"{job.layout}.out")


_WORKER_CODE = "from dircleaner.synth import _worker_main; _worker_main()"


def _run_in_subprocess(job: _Job, tick: Callable[[int], None]) -> _JobOutput:
    """Run one job in a fresh interpreter (no fork, no re-import of the caller's ``__main__``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    workdir = Path(job.workdir)
    with (workdir / f"{job.layout}.stderr").open("w+", encoding="utf-8") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_CODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(dataclasses.asdict(job)))
        proc.stdin.close()
        for line in proc.stdout:
            tick(int(line))
        code = proc.wait()
        if code != 0:
            err.seek(0)
            tail = err.read()[-2000:].strip()
            raise RuntimeError(f"generator worker for layout {job.layout!r} exited {code}: {tail}")
    return _read_output(workdir / f"{job.layout}.out")


def _run_jobs(jobs: list[_Job], workers: int, progress: Progress | None) -> list[_JobOutput]:
    """Run the jobs: in this process for 1 worker, else largest first in ``workers`` processes."""
    lock = threading.Lock()
    done = [0]
    reported = [0]

    def tick(delta: int) -> None:
        with lock:
            done[0] += delta

    def report() -> None:
        if progress is not None and done[0] - reported[0] >= PROGRESS_EVERY:
            reported[0] = done[0]
            progress(done[0])

    if workers <= 1:

        def tick_and_report(delta: int) -> None:
            tick(delta)
            report()

        serial = [_run_job(job, tick_and_report) for job in jobs]
        if progress is not None and done[0] > reported[0]:
            progress(done[0])
        return serial
    outputs: dict[int, _JobOutput] = {}
    local = [i for i, job in enumerate(jobs) if job.layout == "tmp"]
    remote = sorted((i for i in range(len(jobs)) if i not in local), key=lambda i: -jobs[i].budget)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(_run_in_subprocess, jobs[i], tick): i for i in remote}
        for i in local:
            outputs[i] = _run_job(jobs[i], tick)
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
            for future in finished:
                outputs[futures[future]] = future.result()
            report()
    if progress is not None and done[0] > reported[0]:
        progress(done[0])
    return [outputs[i] for i in range(len(jobs))]


def _load(
    store: Store, outputs: list[_JobOutput], buckets: int, bucket: str, timestamp_us: int
) -> None:
    """Insert every spilled row, one token bucket at a time, slice by slice (near token order)."""
    sqlite = store if isinstance(store, SqliteStore) else None
    # The protocol job's rows reach the store through put_objects, not through the spill.
    outputs = [out for out in outputs if out.protocol_keys is None]
    with ExitStack() as stack:
        handles: dict[str, IO[bytes]] = {}
        for out in outputs:
            for ref in (out.folders, out.objects):
                if Path(ref.path).exists():
                    handles[ref.path] = stack.enter_context(open(ref.path, "rb"))
        if sqlite is not None:
            stack.enter_context(sqlite.bulk_loading())
        stack.enter_context(cyclic_gc_paused())
        for b in range(buckets):
            for table in ("folders", "objects"):
                chunks: list[list[list[Row]]] = []
                for out in outputs:
                    ref = out.folders if table == "folders" else out.objects
                    handle = handles.get(ref.path)
                    if handle is not None:
                        chunks.extend(ref.read_bucket(b, handle))
                slices = (chunk[i] for i in range(SLICES) for chunk in chunks if chunk[i])
                for part in _batches(slices, INSERT_BATCH):
                    if sqlite is not None:
                        sqlite.bulk_insert(table, part)
                    elif table == "folders":
                        store.write_folder_rows([r[1:4] for r in part], timestamp_us)
                    else:
                        store.write_object_rows([r[1:4] for r in part], timestamp_us)


def _batches(pieces: Iterable[list[Row]], size: int) -> Iterator[list[Row]]:
    """Regroup lists of rows into lists of about ``size`` rows."""
    batch: list[Row] = []
    for piece in pieces:
        batch.extend(piece)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _merge_truth(runs: list[str], out_path: Path) -> None:
    """Merge sorted runs into the sorted truth file (bounded memory)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        files = [stack.enter_context(open(run, encoding="utf-8", newline="\n")) for run in runs]
        streams = [(line[:-1] for line in f) for f in files]
        tmp = out_path.with_name(out_path.name + ".partial")
        with tmp.open("w", encoding="utf-8", newline="\n") as out:
            out.writelines(p + "\n" for p in heapq.merge(*streams))
        tmp.replace(out_path)


def _ensure_fresh(store: Store, bucket: str) -> None:
    for batch in store.scan_folder_rows(Shard(), bucket):
        if batch:
            raise UsageError(
                f"the store already holds directories of bucket {bucket!r}; generate into a new"
                " store or another bucket"
            )
        break


def generate(
    store: Store,
    spec: SynthSpec,
    truth_path: Path | None,
    progress: Progress | None = None,
    *,
    workers: int | None = None,
    spill_dir: Path | None = None,
) -> SynthResult:
    """Fill an empty bucket of ``store`` with the dataset of ``spec``; write its ground truth.

    The truth file lists every empty directory (full path ending in ``/``), sorted, one per line.
    ``progress`` is called with the number of directories generated so far, every ~100k; the bulk
    load follows generation. ``workers`` processes generate layouts in parallel (default: CPUs);
    the dataset does not depend on it. Spill files go to ``spill_dir`` (default: the temp dir).
    """
    started = time.perf_counter()
    _ensure_fresh(store, spec.bucket)
    timestamp_us = (
        spec.timestamp_us if spec.timestamp_us is not None else time.time_ns() // 1000 - DAY_US
    )
    workers = _default_workers(spec.dirs) if workers is None else max(1, workers)
    with tempfile.TemporaryDirectory(prefix="dircleaner-synth-", dir=spill_dir) as tmp:
        jobs = plan_jobs(spec, Path(tmp), timestamp_us)
        outputs = _run_jobs(jobs, workers, progress)
        generated = time.perf_counter()
        _load(store, outputs, jobs[0].buckets, spec.bucket, timestamp_us)
        protocol = [key for out in outputs for key in out.protocol_keys or ()]
        if protocol:
            store.put_objects(spec.bucket, [key for key, _ in protocol], timestamp_us)
            store.delete_objects(
                spec.bucket, [key for key, alive in protocol if not alive], timestamp_us
            )
        loaded = time.perf_counter()
        if truth_path is not None:
            _merge_truth([run for out in outputs for run in out.truth_runs], truth_path)
    stats = tuple(out.stats for out in outputs)
    return SynthResult(
        dirs=sum(s.dirs for s in stats),
        empty_dirs=sum(s.empty_dirs for s in stats),
        objects=sum(s.objects for s in stats),
        seconds=time.perf_counter() - started,
        generate_seconds=generated - started,
        load_seconds=loaded - generated,
        layouts=stats,
        timestamp_us=timestamp_us,
        truth_path=truth_path,
    )


__all__ = [
    "LAYOUT_MIX",
    "LayoutStats",
    "SynthResult",
    "SynthSpec",
    "generate",
    "iter_layout_keys",
    "plan_jobs",
]
