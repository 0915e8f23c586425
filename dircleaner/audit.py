"""The audit log, in one place: its writer, its reader and the restore that replays it.

Every deleted directory entry is appended (JSON lines) *before* its delete is issued, so nothing
is ever deleted without a record; ``dircleaner restore`` reads the log back and writes the
entries again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring as _escape
from pathlib import Path
from typing import IO, Any

from dircleaner.errors import DircleanerError, UsageError
from dircleaner.model import ActionKind, DeleteAction
from dircleaner.paths import dir_of_row
from dircleaner.store.base import Store

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

    def __init__(self, stream: IO[str], generation: str, timestamp_us: int) -> None:
        self._stream = stream
        self._generation = generation
        self._timestamp_us = timestamp_us
        # Every line is the dict ``json.dumps(..., ensure_ascii=False)`` would write, built from
        # pre-encoded constant parts and one C-level string escape per field: a dict and an
        # encoder pass per line was most of the audit cost of large runs. Same bytes.
        tail = json.dumps(
            {"delete_ts_us": timestamp_us, "generation": generation}, ensure_ascii=False
        )[1:]
        self._tail = tail
        self._tails = {kind: f'"via": {_escape(kind.value)}, {tail}\n' for kind in ActionKind}

    def record(self, action: DeleteAction) -> None:
        self.record_many((action,))

    def record_many(self, actions: Iterable[DeleteAction]) -> None:
        """Write the lines of several actions with one write."""
        escape = _escape
        self._stream.write(
            "".join(
                f'{{"bucket": {escape(row.bucket)}, '
                f'"dir": {escape(dir_of_row(row.parent, row.name))}, '
                f'"parent": {escape(row.parent)}, "name": {escape(row.name)}, {tail}'
                for action in actions
                for tail in (self._tail_of(action),)
                for row in action.rows
            )
        )

    def _tail_of(self, action: DeleteAction) -> str:
        """What follows the name on each of an action's lines."""
        if action.kind is not ActionKind.RANGE:
            return self._tails[action.kind]
        first, last = _escape(action.rows[0].name), _escape(action.rows[-1].name)
        return f'"via": "range", "range": [{first}, {last}], {self._tail}\n'

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
    #: entries deleted at or after this timestamp (µs), before ``until_us``
    since_us: int | None = None
    until_us: int | None = None

    def __contains__(self, entry: dict[str, Any]) -> bool:
        if self.generation is not None and entry.get("generation") != self.generation:
            return False
        ts = entry.get("delete_ts_us")
        if self.since_us is not None and not (isinstance(ts, int) and ts >= self.since_us):
            return False
        return self.until_us is None or (isinstance(ts, int) and ts < self.until_us)


@dataclass(frozen=True)
class RestorePlan:
    """The entries a restore would write back, and how they had gone (``via``)."""

    rows: list[tuple[str, str, str]]
    by_via: dict[str, int]
    generations: list[str]
    #: every generation in the log, selected or not (to say what a selection could have named)
    logged_generations: list[str]


def plan_restore(lines: Iterable[str], selection: AuditSelection) -> RestorePlan:
    """The selected entries of an audit log, validated before anything is written."""
    rows: list[tuple[str, str, str]] = []
    by_via: dict[str, int] = {}
    generations: set[str] = set()
    logged: set[str] = set()
    for entry in iter_audit_entries(lines):
        generation = str(entry.get("generation", "?"))
        logged.add(generation)
        if entry not in selection:
            continue
        rows.append((entry["bucket"], entry["parent"], entry["name"]))
        via = str(entry.get("via", "row"))
        by_via[via] = by_via.get(via, 0) + 1
        generations.add(generation)
    return RestorePlan(rows, by_via, sorted(generations), sorted(logged))


def read_audit_entries(lines: Iterable[str]) -> list[tuple[str, str, str]]:
    """Every ``(bucket, parent, name)`` of an audit log, validated before anything is written."""
    return [(e["bucket"], e["parent"], e["name"]) for e in iter_audit_entries(lines)]


def restore(store: Store, rows: list[tuple[str, str, str]], timestamp_us: int) -> RestoreResult:
    """Write the folder rows back (at ``timestamp_us``, newer than the deletes)."""
    unique = sorted(set(rows))
    for start in range(0, len(unique), RESTORE_BATCH):
        store.write_folder_rows(unique[start : start + RESTORE_BATCH], timestamp_us)
    return RestoreResult(len(unique))
