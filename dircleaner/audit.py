"""The audit log, in one place: its writer, its reader and the restore that replays it.

Every deleted directory entry is appended (JSON lines) *before* its delete is issued, so nothing
is ever deleted without a record; ``dircleaner restore`` reads the log back and writes the
entries again. Each record names its store (``audit_scope``) and its run (generation, start, the
time its batch was issued), so that a restore writes back only the entries of the store it is
pointed at.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _escape
from pathlib import Path
from typing import IO, Any

from dircleaner.errors import DircleanerError, UsageError
from dircleaner.model import ActionKind, DeleteAction
from dircleaner.paths import dir_of_row
from dircleaner.store.base import Store, index_writer
from dircleaner.timeutil import format_utc, parse_utc_time

RESTORE_BATCH = 1000
#: how every record of the log begins (inside a JSON string, the quotes would be escaped)
RECORD_START = '{"bucket": '


# -- writing ------------------------------------------------------------------------------------


class AuditLogFailed(DircleanerError):
    """The audit log could not be written; nothing more was deleted."""


class AuditLog:
    """JSON lines, one per deleted directory entry; ``dircleaner restore`` replays them.

    ``via`` says how the entry went: ``partition``, ``row``, ``range`` or ``rewrite`` (the
    partition was rewritten without it and deleted at the timestamp). Each line of a range
    delete also carries the range's bounds (``"range": [first, last]``, in clustering order), so
    that a resumed run can tell its lines apart from another range's and charge each range
    delete once, at its cost of two tombstones.
    """

    def __init__(
        self,
        stream: IO[str],
        generation: str,
        timestamp_us: int,
        *,
        scope: str | None = None,
        run_started_us: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._stream = stream
        #: stamps each batch with the time (µs) its deletes are issued
        self._clock = clock
        # Every line is the dict ``json.dumps(..., ensure_ascii=False)`` would write, built from
        # pre-encoded constant parts and one C-level string escape per field: a dict and an
        # encoder pass per line was most of the audit cost of large runs. Same bytes.
        run: dict[str, object] = {"delete_ts_us": timestamp_us, "generation": generation}
        if run_started_us is not None:
            run["run_started"] = format_utc(run_started_us)
        if scope is not None:
            run["scope"] = scope
        self._tail = json.dumps(run, ensure_ascii=False)[1:]

    def record(self, action: DeleteAction) -> None:
        self.record_many((action,))

    def record_many(self, actions: Iterable[DeleteAction]) -> None:
        """Write the lines of several actions with one write (stamped, given a clock, with the
        time their deletes are issued, in UTC)."""
        escape = _escape
        run = self._tail
        if self._clock is not None:
            run = f'"issued": "{format_utc(self._clock())}", {run}'
        tails = {kind: f'"via": {escape(kind.value)}, {run}\n' for kind in ActionKind}
        self._stream.write(
            "".join(
                f'{{"bucket": {escape(row.bucket)}, '
                f'"dir": {escape(dir_of_row(row.parent, row.name))}, '
                f'"parent": {escape(row.parent)}, "name": {escape(row.name)}, {tail}'
                for action in actions
                for tail in (self._tail_of(action, tails, run),)
                for row in action.rows
            )
        )

    @staticmethod
    def _tail_of(action: DeleteAction, tails: dict[ActionKind, str], run: str) -> str:
        """What follows the name on each of an action's lines."""
        if action.kind is not ActionKind.RANGE:
            return tails[action.kind]
        first, last = _escape(action.rows[0].name), _escape(action.rows[-1].name)
        return f'"via": "range", "range": [{first}, {last}], {run}\n'

    def flush(self) -> None:
        self._stream.flush()

    def write_ahead(self, actions: Sequence[DeleteAction]) -> None:
        """Record a batch before it is deleted; a failed write stops the run before it."""
        try:
            self.record_many(actions)
            self.flush()
        except OSError as exc:
            name = getattr(self._stream, "name", "the audit log")
            raise AuditLogFailed(
                f"cannot write the audit log {name}: {exc.strerror or exc}; nothing of this"
                " batch was deleted; free space (or give another --audit-log) and rerun: the"
                " next run resumes"
            ) from exc


def open_audit_log(path: Path) -> IO[str]:
    """Open an audit log for appending (one JSON object per line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a", encoding="utf-8")


# -- reading and restoring ---------------------------------------------------------------------


class BadAuditLog(UsageError):
    """The audit log has a line that is not a directory entry we wrote."""


@dataclass(frozen=True)
class RestoreResult:
    """What a restore wrote."""

    restored: int


def iter_audit_entries(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Every entry of an audit log, checked; a bad line raises BadAuditLog naming it.

    The log is written ahead of the deletes, so a run killed mid-write can leave its final line
    torn (no newline, not JSON): that one line is skipped, as the delete it announced never ran.
    Worker processes append to one log, each batch with one write: a worker killed mid-write
    leaves a torn record that the next worker's record continues on the same line. That
    fragment is skipped too, and the whole record after it is kept.
    """
    torn: BadAuditLog | None = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if torn is not None:
            raise torn  # the unterminated line was not the last one after all
        try:
            yield _checked_entry(number, line)
        except BadAuditLog as exc:
            if not line.endswith("\n"):
                torn = exc
                continue
            rest = line.rfind(RECORD_START, 1)
            if not line.startswith(RECORD_START) or rest < 0:
                raise
            yield _checked_entry(number, line[rest:])


def _checked_entry(number: int, line: str) -> dict[str, Any]:
    try:
        entry = json.loads(line)
        bucket, parent, name = entry["bucket"], entry["parent"], entry["name"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadAuditLog(f"audit log line {number}: not a dircleaner audit entry") from exc
    if not all(isinstance(v, str) for v in (bucket, parent, name)) or (
        entry.get("dir") not in (None, dir_of_row(parent, name))
    ):
        raise BadAuditLog(f"audit log line {number}: inconsistent entry")
    if entry.get("via") == "range" and not _within_range(name, entry.get("range")):
        raise BadAuditLog(f"audit log line {number}: a range entry outside its range")
    return dict(entry)


def _within_range(name: str, bounds: object) -> bool:
    """Whether a range delete's entry names a directory between the range's two bounds."""
    if not isinstance(bounds, list) or len(bounds) != 2:
        return False
    first, last = bounds
    if not isinstance(first, str) or not isinstance(last, str):
        return False
    return min(first, last) <= name <= max(first, last)


def decoded_lines(lines: Iterable[bytes], name: str) -> Iterator[str]:
    """The UTF-8 lines of an audit log read as bytes; BadAuditLog names a line that is not."""
    for number, raw in enumerate(lines, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadAuditLog(
                f"{name} line {number}: invalid UTF-8 at byte {exc.start}; an audit log is"
                " UTF-8 JSON lines written by dircleaner: is this the right file?"
            ) from exc


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


@dataclass(frozen=True)
class RestorePlan:
    """The entries a restore would write back, and how they had gone (``via``)."""

    #: each directory entry once
    rows: list[tuple[str, str, str]]
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


@dataclass
class _Picked:
    """The selected entries of one store, each directory entry once."""

    by_row: dict[tuple[str, str, str], str] = field(default_factory=dict)
    entries: int = 0
    generations: set[str] = field(default_factory=set)
    issued_range: tuple[int, int] | None = None

    def add(self, entry: dict[str, Any], generation: str, issued: int | None) -> None:
        self.entries += 1
        self.by_row[(entry["bucket"], entry["parent"], entry["name"])] = str(
            entry.get("via", "row")
        )
        self.generations.add(generation)
        if issued is not None:
            low, high = self.issued_range or (issued, issued)
            self.issued_range = (min(low, issued), max(high, issued))


def audit_scope(store: Store) -> str:
    """The store an audit log's entries belong to: its tables (the scope stored filters carry)
    and where they live (a file, a cluster), so that two SQLite files are two stores."""
    return f"{store.scope_id()}@{store.location_id()}"


def audit_log_name(scope: str) -> str:
    """The default audit log's file name for a store: its scope, readable, and a hash of it (two
    scopes that read alike once made file-name-safe still get two files)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", scope).strip("_")[-120:]
    digest = hashlib.sha256(scope.encode("utf-8")).hexdigest()[:10]
    return f"audit-{readable}-{digest}.jsonl"


def plan_restore(
    lines: Iterable[str],
    selection: AuditSelection,
    scope: str | None = None,
    *,
    force: bool = False,
    name: str = "the audit log",
    moved_from: Callable[[str], bool] | None = None,
) -> RestorePlan:
    """The selected entries of an audit log of the store ``scope``, validated before anything is
    written; RestoreRefused when none of the log is this store's (entries that record no store
    count as this store's only with ``force``), or ``selection.bucket`` is in none of it.

    With ``force``, a log that holds none of this store's entries but those of one store of the
    same tables elsewhere, which ``moved_from`` says this store may have been (an SQLite file
    whose old path holds no file any more), is taken as this store's (``adopted_scope``).
    ``scope`` None takes every entry, whatever store it records."""

    verdicts: dict[str, bool] = {}

    def movable_scope(other: str) -> bool:
        if other not in verdicts:  # once per store: moved_from may look at the filesystem
            verdicts[other] = (
                moved_from is not None and _same_tables(other, scope) and moved_from(other)
            )
        return verdicts[other]

    picked = _Picked()
    #: with ``force``: the selected entries of each other store of the same tables
    movable: dict[str, _Picked] = {}
    other_scopes: dict[str, int] = {}
    unscoped = 0
    tally = _LogTally()
    issued_cache: dict[object, int | None] = {}
    for entry in iter_audit_entries(lines):
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
        raw_issued = entry.get("issued")
        if raw_issued not in issued_cache:
            issued_cache[raw_issued] = _issued_us(raw_issued)
        issued = issued_cache[raw_issued]
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
                if force and movable_scope(str(recorded)):
                    movable.setdefault(str(recorded), _Picked()).add(entry, generation, issued)
            continue
        picked.add(entry, generation, issued)
    adopted = _adopted_scope(tally, movable_scope) if force else None
    if adopted is not None:
        picked = movable.get(adopted, _Picked())
        other_scopes.pop(adopted, None)
        tally.ours = tally.other_scopes.pop(adopted)
        tally.buckets = tally.other_buckets[adopted]
    _check_restorable(tally, selection, scope, name, _adopted_scope(tally, movable_scope))
    by_via: dict[str, int] = {}
    for via in picked.by_row.values():
        by_via[via] = by_via.get(via, 0) + 1
    return RestorePlan(
        rows=sorted(picked.by_row),
        by_via=by_via,
        generations=sorted(picked.generations),
        logged_generations=sorted(tally.generations),
        repeated=picked.entries - len(picked.by_row),
        other_scopes=other_scopes,
        unscoped=unscoped,
        issued_us=picked.issued_range,
        adopted_scope=adopted,
    )


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


def restore(store: Store, rows: list[tuple[str, str, str]], timestamp_us: int) -> RestoreResult:
    """Write the folder rows back (at ``timestamp_us``, newer than the deletes)."""
    unique = sorted(set(rows))
    writer = index_writer(store)
    for start in range(0, len(unique), RESTORE_BATCH):
        writer.write_folder_rows(unique[start : start + RESTORE_BATCH], timestamp_us)
    return RestoreResult(len(unique))
