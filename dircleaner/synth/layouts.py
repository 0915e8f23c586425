"""The five layout families (hex-root, hex-data, dates, users, ids) and the tmp/ tree."""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Sequence
from datetime import date, timedelta

from dircleaner.synth.writer import Writer

HEX1 = tuple("0123456789abcdef")
HEX2 = tuple(f"{i:02x}" for i in range(256))
HEX3 = tuple(f"{i:03x}" for i in range(4096))
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
LETTER_PAIRS = tuple(a + b for a in _LETTERS for b in _LETTERS)
HOURS = tuple(f"{h:02d}" for h in range(24))
#: The live day whose two-letter children are mostly deleted (the talk's ``11.04.2026/AA..ZZ``).
WIDE_DAY = date(2026, 4, 11)
WIDE_DAY_EMPTIED = 0.9
#: Children of the wide day emptied when the dataset has room for them all (fewer otherwise).
WIDE_CHILDREN = round(676 * WIDE_DAY_EMPTIED)
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
    w: Writer,
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
    t = w.target
    # How often each deletion is tried while the layout is short of empties: a whole shard, a
    # sub-shard, a single leaf; the larger the share asked for, the more whole shards.
    p_shard, p_sub, p_leaf = 0.002 + 0.2 * t * t, 0.01 + 0.5 * t * t, 0.3 + 0.7 * t
    for a in sorted(rng.sample(range(n), k)):
        if w.dirs >= budget and w.settled():
            return
        w.enter(alphabet[a], dead=rand() < p_shard and w.may_empty(k * k + k))
        for b in sorted(rng.sample(range(n), k)):
            if w.dirs >= budget and w.settled():
                break
            w.enter(alphabet[b], dead=rand() < p_sub and w.may_empty(k + 1))
            num = counter[0]
            for c in _spread(rng, n, max(1, min(n, k - 1 + int(rand() * 3)))):
                if rand() < p_leaf and w.may_drop():
                    leaf(alphabet[c], ())  # a scattered single deletion
                    continue
                r = rand()
                count = 1 if r < 0.7 else 2 if r < 0.9 else 3
                leaf(alphabet[c], [f"{prefix}{i}{suffix}" for i in range(num, num + count)])
                num += count
            counter[0] = num
            w.leave()
        w.leave()


def _layout_hex_root(w: Writer, rng: random.Random, budget: int) -> None:
    """Hex shards at the top of the bucket: ``a/1/b/image_1.jpg``, then ``3f/a2/9c/obj-7.bin``."""
    counter = [0]
    small = min(4096, max(1, budget // 4))
    _hex_tree(w, rng, HEX1, small, budget, counter, ("image_", ".jpg"))
    for alphabet in (HEX2, HEX3):
        if w.dirs >= budget:
            return
        leaves = int((budget - w.dirs) * 0.99)
        _hex_tree(w, rng, alphabet, leaves, budget, counter, ("obj-", ".bin"))


def _layout_hex_data(w: Writer, rng: random.Random, budget: int) -> None:
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


def wide_day_empties(budget: int, children: int = WIDE_CHILDREN) -> float:
    """Empty directories the mass-deleted wide day leaves in a dates layout of ``budget`` when
    ``children`` of its two-letter children are emptied (each with its hour directories)."""
    return children * _dir_per_child(_dates_shape(budget)[3])


def _log_files(w: Writer, rng: random.Random, name: str, p_empty: float) -> None:
    """A leaf of log parts; sometimes (when short of empties) its only part was deleted."""
    r = rng.random()
    if r < p_empty and w.may_drop():
        w.leaf(name, ())
    elif r < 0.5:
        w.leaf(name, ("part-00000.log.gz", "part-00001.log.gz"))
    else:
        w.leaf(name, ("part-00000.log.gz",))


def _log_day(
    w: Writer,
    rng: random.Random,
    name: str,
    children: int,
    hours: int,
    budget: int,
    *,
    expired: bool,
    wide_children: int | None,
) -> None:
    """One day of logs: its two-letter children (``AA``..``ZZ``), each with hour directories.

    ``wide_children``: the wide day, all 676 children, that many of them emptied at random and
    nothing else. Otherwise, while the layout is short of empties, the day may be one a lazy
    delete left behind: a contiguous run of most of its children emptied, the day kept live.
    """
    w.enter(name, dead=expired)
    run = range(0)
    emptied: set[int] = set()
    pace = w.pace
    if wide_children is not None:
        picks = list(range(676))
        emptied = set(rng.sample(picks, wide_children))
        w.put("_SUCCESS")  # the day stays live while ~600 of its children are emptied
        pace = 0.0
    else:
        picks = _spread(rng, 676, children)
        r = rng.random()
        share = 0.5 + 0.45 * rng.random()
        size = share * len(picks) * _dir_per_child(hours)
        if not expired and r < 0.5 * w.target**2 and w.may_empty(size):
            length = round(share * len(picks))
            start = int(rng.random() * (len(picks) - length + 1))
            run = range(start, start + length)
            w.put("_SUCCESS")
        elif rng.random() < 0.9:
            w.put("_SUCCESS")
    p_child, p_leaf = 0.02 + 0.6 * pace if pace else 0.0, 0.2 + 0.8 * pace if pace else 0.0
    per_child = _dir_per_child(hours)
    for i, j in enumerate(picks):
        if w.dirs >= budget and w.settled() and wide_children is None:
            break  # (the wide day is made whole: the layout set its directories aside)
        dead = j in emptied or i in run or (rng.random() < p_child and w.may_empty(per_child))
        if hours == 0:
            if dead:
                w.leaf(LETTER_PAIRS[j], ())
            else:
                _log_files(w, rng, LETTER_PAIRS[j], p_leaf)
            continue
        w.enter(LETTER_PAIRS[j], dead=dead)
        first = int(rng.random() * 24)
        for h in range(first, min(24, first + 1 + int(rng.random() * hours))):
            _log_files(w, rng, HOURS[h], p_leaf)
        w.leave()
    w.leave()


def _layout_dates(
    w: Writer, rng: random.Random, budget: int, empty_fraction: float, wide_children: int
) -> None:
    """``logs/<app>/YYYY/MM/DD/XX/HH/part-*.log.gz``; every fourth app uses the talk's
    ``DD.MM.YYYY/``. ``wide_children`` of the wide day's 676 children are emptied."""
    _apps, days, children, hours = _dates_shape(budget)
    day_size = 1 + children * _dir_per_child(hours)
    wide_dirs = 1 + 676 * _dir_per_child(hours)
    wide_empties = wide_day_empties(budget, wide_children)
    # Lifecycle: the oldest days of every stream expired, for ~2/3 of this layout's empty share
    # (more of it when most of the layout is to be empty). These and the wide day are made by
    # plan, set aside from the feedback, which makes the rest of the share in the other days.
    expired_share = 0.66 * empty_fraction + 0.2 * empty_fraction**2
    expired = max(0.0, expired_share * budget - wide_empties)
    covered = 0.0  # of the expired directories, those due so far: made, or left to the pace
    wide_made = False
    w.enter("logs")
    i = 0
    while w.dirs < budget:
        app = LOG_APPS[i] if i < len(LOG_APPS) else f"app-{i}"
        flat = i % 4 == 3
        w.enter(app)
        # Oldest first; ``days`` is a slight underestimate, so the budget cut lands in a later
        # stream and the wide day (second newest of the first stream) is always there.
        dates = [LAST_DAY - timedelta(days=d) for d in range(days - 1, -1, -1)]
        # Each stream its part of the expired days, in whole days (the stream cut by the budget
        # fewer); the pace of the rest counts what this stream and the later ones set aside,
        # and makes up for the part of a day this stream's whole days fall short by.
        wide_left = (0.0, 0.0) if wide_made or not wide_children else (wide_dirs, wide_empties)
        stream = days * day_size + (wide_left[0] - day_size if i == 0 else 0.0)
        due = expired * min(budget, w.dirs + stream) / budget
        fit = min(days - 2, (budget - w.dirs) // day_size)
        expired_days = max(0, min(fit, math.floor((due - covered) / day_size)))
        aside = expired_days * day_size + expired - due
        covered = due
        todo = empty_fraction * budget - w.aside_empties - aside - wide_left[1]
        left = budget - w.aside_dirs - aside - wide_left[0]
        w.set_pace(min(1.0, max(0.0, todo) / max(1.0, left)))
        open_ym: tuple[int, int] | None = None
        for d, day in enumerate(dates):
            if w.dirs >= budget and w.settled():
                break
            wide = i == 0 and day == WIDE_DAY
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
            wide_day = wide_children if wide and wide_children else None
            old = d < expired_days and not wide
            dirs, empties = w.dirs, w.empties
            _log_day(w, rng, name, children, hours, budget, expired=old, wide_children=wide_day)
            if old or wide_day is not None:
                w.aside_dirs += w.dirs - dirs
                w.aside_empties += w.empties - empties
                wide_made = wide_made or wide_day is not None
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
    w: Writer,
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
    t = w.target
    if children == 0:
        r = rng.random()
        if (deleting and w.want_empty()) or (r < 0.25 + 0.75 * t and w.may_drop()):
            w.leaf(name, ())
        elif r > 0.99:
            w.leaf(name, ("",))  # a console-created folder: only its marker keeps it
        else:
            w.leaf(name, _user_files(rng, _draw(rng, _FILES), counter))
        return
    w.enter(name)
    deleting = deleting or (depth in (4, 5) and rng.random() < 0.05 + 0.4 * t and w.want_empty())
    r = rng.random()
    if not (deleting and w.want_empty()):
        if r < 0.2:
            for f in _user_files(rng, _draw(rng, _FILES), counter):
                w.put(f)
        if r > 0.98:
            w.put("")
    for child in _user_names(rng, depth + 1, children):
        if w.dirs >= budget and w.settled():
            break
        _user_dir(w, rng, child, depth + 1, budget, counter, deleting)
    w.leave()


def _odd_corner(w: Writer, set_pieces: bool) -> None:
    """Each odd directory name once (with the set pieces, a third of them emptied); a folder
    kept by its marker only."""
    w.enter("odd names")
    for i, name in enumerate(ODD_DIR_NAMES):
        odd_file = f"{i}-{ODD_FILE_NAMES[i % len(ODD_FILE_NAMES)]}"
        w.leaf(name, () if i % 3 == 2 and set_pieces else (odd_file,))
    w.leaf("New folder", ("",))
    w.leave()


def _layout_users(w: Writer, rng: random.Random, budget: int, set_pieces: bool) -> None:
    """``users/u000042/photos/2024/trip-3/…``: Zipf fan-out, (partly) deleted users, deep chains.

    ``set_pieces``: the odd names' empties and user ``u000003``'s deep chain deleted whole.
    """
    counter = [0]
    w.enter("users")
    uid = 0
    p_user = 0.08 + 0.5 * w.target**2  # a user whose objects are being deleted
    while w.dirs < budget:
        deleting = uid != 1 and rng.random() < p_user and w.want_empty()
        w.enter(f"u{uid:06d}")
        if uid == 1:
            _odd_corner(w, set_pieces)
        for top in _user_names(rng, 3, _draw(rng, _FANOUT)):
            if w.dirs >= budget and w.settled():
                break
            _user_dir(w, rng, top, 3, budget, counter, deleting)
        if rng.random() < 0.004 or uid == 3:
            # A very deep chain, sometimes deleted whole: a deep empty subtree to collapse.
            length = rng.randint(12, 40)
            whole = rng.random() < 0.5 and w.may_empty(length + 1)
            dead = (uid == 3 and set_pieces) or whole
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


def _layout_ids(w: Writer, rng: random.Random, budget: int, empty_fraction: float) -> None:
    """``orders/000100123/{order.json,invoice.pdf,attachments/}``: sequential ids with gaps.

    Each root is one wide partition. Retention deleted its oldest ids whole: a contiguous run of
    thousands of empty directories under one live parent, as sequential keys make them.
    """
    i = 0
    # The retired run takes a larger part of the share the more of it there is to take; single
    # ids and attachments deleted here and there make up the rest.
    retired_share = (0.2 + 0.5 * empty_fraction) * empty_fraction
    rest = (empty_fraction - retired_share) / (1.0 - retired_share)
    p_id, p_attachments = min(0.97, 0.01 + 1.5 * rest), 0.1 + 0.15 * empty_fraction
    while w.dirs < budget:
        name = ID_ROOTS[i] if i < len(ID_ROOTS) else f"archive-{i}"
        planned = min(IDS_PER_ROOT, (budget - w.dirs) / 1.25)
        retired = round(retired_share * planned)
        w.enter(name)
        ident = 100_000 * (i + 1)
        n = 0
        while n < IDS_PER_ROOT and not (w.dirs >= budget and w.settled()):
            dead = n < retired or (rng.random() < p_id and w.want_empty())
            w.enter(f"{ident:09d}", dead=dead)
            w.put("order.json")
            r = rng.random()
            if r > 0.7:
                w.put("invoice.pdf")
            if r < 0.25:
                if r < p_attachments and w.want_empty():
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
#: the odd names emptied (a third of them) and the most directories user u000003's deep chain
#: (``deep-backup/`` and 12..40 levels) can have, when the set pieces are made
ODD_EMPTIES = sum(1 for i in range(len(ODD_DIR_NAMES)) if i % 3 == 2)
DEEP_CHAIN_MAX = 41


def _layout_tmp(w: Writer, set_pieces: bool) -> None:
    """``tmp/``: uploads put and deleted through the store protocol, ``tmp/.keep`` stays.

    With the set pieces every part is deleted (six empty directories); without, each upload
    keeps its last part.
    """
    w.enter("tmp")
    w.put(".keep")
    w.enter("uploads")
    for u in range(5):
        w.enter(f"upload-{u:04d}")
        w.put_deleted("part-0")
        if set_pieces:
            w.put_deleted("part-1")
        else:
            w.put("part-1")
        w.leave()
    w.leave()
    w.leave()


def write_layout(
    name: str,
    w: Writer,
    rng: random.Random,
    budget: int,
    empty_fraction: float,
    *,
    wide_children: int = WIDE_CHILDREN,
    set_pieces: bool = True,
) -> None:
    """Write layout ``name`` of about ``budget`` directories through ``w``, about
    ``empty_fraction`` of them empty; ``wide_children`` and ``set_pieces``: the fixed deletions
    (``dircleaner.synth.shares`` decides whether the dataset has room for them)."""
    if name == "tmp":
        w.protocol_keys = []
        _layout_tmp(w, set_pieces)
        return
    layouts: dict[str, Callable[[], None]] = {
        "hex-root": lambda: _layout_hex_root(w, rng, budget),
        "hex-data": lambda: _layout_hex_data(w, rng, budget),
        "dates": lambda: _layout_dates(w, rng, budget, empty_fraction, wide_children),
        "users": lambda: _layout_users(w, rng, budget, set_pieces),
        "ids": lambda: _layout_ids(w, rng, budget, empty_fraction),
    }
    if name not in layouts:
        raise ValueError(f"unknown layout {name!r}")
    layouts[name]()
