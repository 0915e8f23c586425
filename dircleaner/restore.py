"""Restore: which entries of an audit log to write back, and writing them.

``plan_restore`` reads the whole log once, validating every line and tallying what it holds,
before anything is written; the selected entries go through an external sort
(``EntrySort``), so its memory does not grow with the log however many nights it holds, and
each directory entry is written back once, counted by how its last entry says it went.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass, field
from typing import Any

from dircleaner.audit import iter_audit_entries
from dircleaner.entrysort import EntrySort, Row
from dircleaner.errors import DircleanerError, UsageError
from dircleaner.progress import Progress, no_progress
from dircleaner.store.base import Store
from dircleaner.store.capabilities import index_writer
from dircleaner.timeutil import parse_utc_time

RESTORE_BATCH = 1000


@dataclass(frozen=True)
class RestoreResult:
    """What a restore wrote."""

    restored: int


@dataclass(frozen=True)
class AuditSelection:
    """Which entries of an (appended, many-night) audit log to restore; None means any."""

    generation: str | None = None
    #: entries whose deletes were issued (wall clock) at or after this time (µs), before
    #: ``until_us``
    since_us: int | None = None
    until_us: int | None = None
    bucket: str | None = None

    def selects(self, entry: dict[str, Any], issued_us: int | None) -> bool:
        if self.generation is not None and entry.get("generation") != self.generation:
            return False
        if self.bucket is not None and entry["bucket"] != self.bucket:
            return False
        if self.since_us is not None and not (issued_us is not None and issued_us >= self.since_us):
            return False
        return self.until_us is None or (issued_us is not None and issued_us < self.until_us)


class RestoreRefused(DircleanerError):
    """The audit log is not this store's (or cannot tell): nothing was restored."""

    exit_code = 3


class RestoreRows:
    """The rows a restore writes: each directory entry once, sorted; iterable again and again
    (read back from the sort's files), ``len`` their number."""

    def __init__(self, entries: EntrySort, count: int) -> None:
        self._entries = entries
        self._count = count

    def __iter__(self) -> Iterator[Row]:
        for row, _via in self._entries:
            yield row

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        self._entries.close()


@dataclass(frozen=True)
class RestorePlan:
    """The entries a restore would write back, and how they had gone (``via``). Holds the
    sort's temporary files until closed (a context manager)."""

    #: each directory entry once
    rows: RestoreRows
    #: the rows by how each had gone (its last entry's ``via``): the parts add up to ``rows``
    by_via: dict[str, int]
    generations: list[str]
    #: every generation in the log, selected or not (to say what a selection could have named)
    logged_generations: list[str]
    #: selected entries naming a directory another selected entry already named
    repeated: int = 0
    #: selected entries of other stores, by store scope (skipped)
    other_scopes: dict[str, int] = field(default_factory=dict)
    #: selected entries that record no store (restored only with ``force``)
    unscoped: int = 0
    #: when the selected deletes were issued, first and last (µs); None if no entry says
    issued_us: tuple[int, int] | None = None
    #: with ``force``, the store (same tables, another location: a moved SQLite file) whose
    #: entries were taken as this store's, the log holding none of this store's own
    adopted_scope: str | None = None

    @property
    def skipped(self) -> int:
        return sum(self.other_scopes.values()) + self.unscoped

    def close(self) -> None:
        self.rows.close()

    def __enter__(self) -> RestorePlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _LogTally:
    """What the whole log holds, selected or not (to refuse, or to say what exists)."""

    generations: set[str] = field(default_factory=set)
    #: entries of this store (or, with ``force``, recording none) in the whole log
    ours: int = 0
    other_scopes: dict[str, int] = field(default_factory=dict)
    unscoped: int = 0
    buckets: set[str] = field(default_factory=set)
    other_buckets: dict[str, set[str]] = field(default_factory=dict)

    def adoptable(self) -> bool:
        """Whether the log may still turn out to be one other store's only (a moved store)."""
        return not self.ours and not self.unscoped and len(self.other_scopes) <= 1


@dataclass
class _Picked:
    """The selected entries of one store (sorted on disk past a chunk)."""

    entries: EntrySort = field(default_factory=EntrySort)
    count: int = 0
    generations: set[str] = field(default_factory=set)
    issued_range: tuple[int, int] | None = None

    def add(self, entry: dict[str, Any], generation: str, issued: int | None) -> None:
        self.count += 1
        via = str(entry.get("via", "row"))
        self.entries.add(entry["bucket"], entry["parent"], entry["name"], via)
        self.generations.add(generation)
        if issued is not None:
            low, high = self.issued_range or (issued, issued)
            self.issued_range = (min(low, issued), max(high, issued))


def plan_restore(
    lines: Iterable[str],
    selection: AuditSelection,
    scope: str | None = None,
    *,
    force: bool = False,
    name: str = "the audit log",
    moved_from: Callable[[str], bool] | None = None,
    chunk_entries: int | None = None,
    progress: Progress = no_progress,
) -> RestorePlan:
    """The selected entries of an audit log of the store ``scope``, validated before anything is
    written; RestoreRefused when none of the log is this store's (entries that record no store
    count as this store's only with ``force``), or ``selection.bucket`` is in none of it.

    With ``force``, a log that holds none of this store's entries but those of one store of the
    same tables elsewhere, which ``moved_from`` says this store may have been (an SQLite file
    whose old path holds no file any more), is taken as this store's (``adopted_scope``).
    ``scope`` None takes every entry, whatever store it records. ``chunk_entries``: entries the
    sort holds in memory (its default otherwise). Close the plan when done with its rows.
    ``progress`` hears of the entries read ("read") and of the sorted ones counted ("sort")
    every ``RESTORE_BATCH``: where a signal stops a long log's plan."""

    def sorter() -> EntrySort:
        return EntrySort() if chunk_entries is None else EntrySort(chunk_entries)

    picked = _Picked(sorter())
    movable_scope = _cached(moved_from, scope)
    #: with ``force``: the selected entries of the one other store of the same tables
    movable: tuple[str, _Picked] | None = None
    try:
        tally, movable, other_scopes, unscoped = _read_log(
            lines, selection, scope, force, movable_scope, picked, sorter, progress
        )
        adopted = _adopted_scope(tally, movable_scope) if force else None
        if adopted is not None:
            empty, picked = picked, movable[1] if movable else _Picked(sorter())
            empty.entries.close()
            other_scopes.pop(adopted, None)
            tally.ours = tally.other_scopes.pop(adopted)
            tally.buckets = tally.other_buckets[adopted]
        _check_restorable(tally, selection, scope, name, _adopted_scope(tally, movable_scope))
        by_via: dict[str, int] = {}
        unique = 0
        for _row, via in picked.entries:
            unique += 1
            by_via[via] = by_via.get(via, 0) + 1
            if not unique % RESTORE_BATCH:
                progress("sort", unique, None)
    except BaseException:
        picked.entries.close()
        if movable is not None:
            movable[1].entries.close()
        raise
    if movable is not None and movable[1] is not picked:
        movable[1].entries.close()
    return RestorePlan(
        rows=RestoreRows(picked.entries, unique),
        by_via=by_via,
        generations=sorted(picked.generations),
        logged_generations=sorted(tally.generations),
        repeated=picked.count - unique,
        other_scopes=other_scopes,
        unscoped=unscoped,
        issued_us=picked.issued_range,
        adopted_scope=adopted,
    )


def _read_log(
    lines: Iterable[str],
    selection: AuditSelection,
    scope: str | None,
    force: bool,
    movable_scope: Callable[[str], bool],
    picked: _Picked,
    sorter: Callable[[], EntrySort],
    progress: Progress,
) -> tuple[_LogTally, tuple[str, _Picked] | None, dict[str, int], int]:
    """One pass over the log: the tally of all of it, this store's selected entries into
    ``picked``, and (with ``force``) the selected entries of the one other store that may be
    this one moved, while the log may still turn out to hold only that store's."""
    movable: tuple[str, _Picked] | None = None
    other_scopes: dict[str, int] = {}
    unscoped = 0
    tally = _LogTally()
    #: the last ``issued`` read and its value (a batch's entries share it)
    issued_raw: object = None
    issued_at: int | None = None
    for read, entry in enumerate(iter_audit_entries(lines), start=1):
        if not read % RESTORE_BATCH:
            progress("read", read, None)
        generation = str(entry.get("generation", "?"))
        tally.generations.add(generation)
        recorded = entry.get("scope")
        ours = scope is None or recorded == scope or (recorded is None and force)
        if ours:
            tally.ours += 1
            tally.buckets.add(entry["bucket"])
        elif recorded is None:
            tally.unscoped += 1
        else:
            tally.other_scopes[str(recorded)] = tally.other_scopes.get(str(recorded), 0) + 1
            tally.other_buckets.setdefault(str(recorded), set()).add(entry["bucket"])
        if movable is not None and not tally.adoptable():
            movable[1].entries.close()  # another store's entries for good: not needed
            movable = None
        raw_issued = entry.get("issued")
        if raw_issued != issued_raw:
            issued_raw, issued_at = raw_issued, _issued_us(raw_issued)
        issued = issued_at
        if issued is None:  # written before the issue time was recorded: T is what is known
            ts = entry.get("delete_ts_us")
            issued = ts if isinstance(ts, int) else None
        if not selection.selects(entry, issued):
            continue
        if not ours:
            if recorded is None:
                unscoped += 1
            else:
                other_scopes[str(recorded)] = other_scopes.get(str(recorded), 0) + 1
                if force and tally.adoptable() and movable_scope(str(recorded)):
                    if movable is None:
                        movable = (str(recorded), _Picked(sorter()))
                    movable[1].add(entry, generation, issued)
            continue
        picked.add(entry, generation, issued)
    return tally, movable, other_scopes, unscoped


def _cached(moved_from: Callable[[str], bool] | None, scope: str | None) -> Callable[[str], bool]:
    """Whether another store may be this one before it moved, asked once per store
    (``moved_from`` may look at the filesystem)."""
    verdicts: dict[str, bool] = {}

    def movable(other: str) -> bool:
        if other not in verdicts:
            verdicts[other] = (
                moved_from is not None and _same_tables(other, scope) and moved_from(other)
            )
        return verdicts[other]

    return movable


def _same_tables(recorded: str, scope: str | None) -> bool:
    """Whether two audit scopes (``tables@location``) name the same tables at two locations."""
    if scope is None or "@" not in recorded or "@" not in scope:
        return False
    return recorded.partition("@")[0] == scope.partition("@")[0] and recorded != scope


def _adopted_scope(tally: _LogTally, movable: Callable[[str], bool]) -> str | None:
    """The one other store, this one before it moved, a log of none of this store's entries
    holds."""
    if tally.ours or tally.unscoped or len(tally.other_scopes) != 1:
        return None
    (other,) = tally.other_scopes
    return other if movable(other) else None


def _issued_us(raw: object) -> int | None:
    if not isinstance(raw, str):
        return None
    try:
        return parse_utc_time(raw)
    except UsageError:
        return None


def _check_restorable(
    tally: _LogTally,
    selection: AuditSelection,
    scope: str | None,
    name: str,
    moved_from: str | None,
) -> None:
    """Refuse a log none of which is this store's (saying when ``--force`` would take it:
    ``moved_from``, this store before it moved), and a --bucket none of it names."""
    if not tally.ours and tally.other_scopes:
        others = sorted(tally.other_scopes, key=lambda s: -tally.other_scopes[s])
        more = f" (and {len(others) - 1:,} more stores)" if len(others) > 1 else ""
        moved = ""
        if moved_from is not None:
            moved = "; if this store was moved from there, rerun with --force"
        raise RestoreRefused(
            f"{name} holds the deletes of store {others[0]!r}{more}, not of this store"
            f" {scope!r}: restored nothing; give this store's audit log, or --store the one"
            f" it was written for{moved}"
        )
    if not tally.ours and tally.unscoped:
        raise RestoreRefused(
            f"{name} does not record its store (an older dircleaner wrote it): it may hold"
            f" another store's deletes; restored nothing; if it is this store's ({scope!r}),"
            " rerun with --force"
        )
    if selection.bucket is not None and tally.ours and selection.bucket not in tally.buckets:
        shown = sorted(tally.buckets)
        listed = ", ".join(repr(b) for b in shown[:10]) + (
            f" (and {len(shown) - 10:,} more)" if len(shown) > 10 else ""
        )
        raise RestoreRefused(
            f"--bucket {selection.bucket!r} is in no entry of {name} for this store;"
            f" its buckets: {listed}; restored nothing"
        )


def restore(
    store: Store, rows: Iterable[Row], timestamp_us: int, progress: Progress = no_progress
) -> RestoreResult:
    """Write the folder rows back (at ``timestamp_us``, newer than the deletes), in batches as
    they stream: ``rows`` are a plan's, each directory entry once. ``progress`` hears of each
    batch written ("restore": where a signal stops it)."""
    writer = index_writer(store)
    total = len(rows) if isinstance(rows, Sized) else None
    batch: list[Row] = []
    written = 0
    for row in rows:
        batch.append(row)
        if len(batch) >= RESTORE_BATCH:
            writer.write_folder_rows(batch, timestamp_us)
            written += len(batch)
            batch = []
            progress("restore", written, total)
    if batch:
        writer.write_folder_rows(batch, timestamp_us)
        written += len(batch)
        progress("restore", written, total)
    return RestoreResult(written)
