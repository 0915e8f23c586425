"""The audit log: its format, its writer and its reader (``dircleaner.restore`` replays it).

Every deleted directory entry is appended *before* its delete is issued, so nothing is ever
deleted without a record. The deleter writes a batch at a time (a group of its window, one
write each): a header line with what the batch's entries share — the store they belong to
(``scope``), the run (``generation``, ``run_started``), the delete timestamp and the time the
batch was issued — then one line per directory entry: its bucket, parent, name and how it went
(``via``). A log whose name ends in ``.gz`` is written compressed, each batch one complete gzip
member: members concatenate into one valid gzip stream (``zcat`` reads the log) and a batch is
still one write.

The logs of older versions (one self-contained line per entry, the run's fields and the
derivable ``dir`` repeated on each) are read as they are, alone or followed by batches.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from json.encoder import encode_basestring as _escape
from pathlib import Path
from typing import IO, Any

from dircleaner.errors import DircleanerError, UsageError
from dircleaner.model import ActionKind, DeleteAction
from dircleaner.paths import dir_of_row
from dircleaner.store.base import Store
from dircleaner.timeutil import format_utc

#: the batch format this version writes (a header line says it)
FORMAT = 2
#: how every entry line begins (inside a JSON string the quotes would be escaped, so a name can
#: never hold it), and how every batch header begins
RECORD_START = '{"bucket": '
HEADER_START = '{"format": '
#: a log file name ending so is written as gzip members, one per batch
COMPRESSED_SUFFIX = ".gz"
#: zlib level of a compressed log: the fastest (a level 6 member was 8% smaller and took 38%
#: more CPU to compress: docs/performance.md)
COMPRESS_LEVEL = 1
GZIP_MAGIC = b"\x1f\x8b\x08"
#: a batch's entry lines are made, encoded and compressed this many at a time
PIECE_LINES = 4096
#: bytes read from a log at a time, and handed to a member's decompressor at a time
READ_CHUNK = 1 << 20
FEED = 1 << 12


# -- writing ------------------------------------------------------------------------------------


class AuditLogFailed(DircleanerError):
    """The audit log could not be written; nothing more was deleted."""


def is_compressed_log(name: str | Path) -> bool:
    """Whether a log of this file name is written as gzip members."""
    return str(name).endswith(COMPRESSED_SUFFIX)


class AuditLog:
    """The deleter's batches, each a header and a line per directory entry it deletes.

    ``via`` says how the entry went: ``partition``, ``row``, ``range`` or ``rewrite`` (the
    partition was rewritten without it and deleted at the timestamp). Each line of a range
    delete also carries the range's bounds (``"range": [first, last]``, in clustering order), so
    that a reader can tell its lines apart from another range's and count each range delete
    once, at its cost of two tombstones.

    ``compressed`` None: by the stream's file name (``.gz``: gzip members).
    """

    def __init__(
        self,
        stream: IO[bytes],
        generation: str,
        timestamp_us: int,
        *,
        scope: str | None = None,
        run_started_us: int | None = None,
        clock: Callable[[], int] | None = None,
        compressed: bool | None = None,
    ) -> None:
        self._stream = stream
        #: stamps each batch with the time (µs) its deletes are issued
        self._clock = clock
        if compressed is None:
            compressed = is_compressed_log(str(getattr(stream, "name", "")))
        self._compressed = compressed
        run: dict[str, object] = {"delete_ts_us": timestamp_us, "generation": generation}
        if run_started_us is not None:
            run["run_started"] = format_utc(run_started_us)
        if scope is not None:
            run["scope"] = scope
        #: the header's fields after ``issued``, closing brace and newline included
        self._run = json.dumps(run, ensure_ascii=False)[1:] + "\n"

    def record(self, action: DeleteAction) -> None:
        self.record_many((action,))

    def record_many(self, actions: Iterable[DeleteAction]) -> None:
        """Write the batch of several actions with one write (stamped, given a clock, with the
        time their deletes are issued, in UTC)."""
        data = self.batch(actions)
        if data:
            self._stream.write(data)

    def batch(self, actions: Iterable[DeleteAction]) -> bytes:
        """The bytes of one batch: its header and entry lines (a gzip member when compressed);
        empty for no entry. Each line is what ``json.dumps(..., ensure_ascii=False)`` writes,
        built from constant parts and one C-level string escape per field.

        The lines are made and encoded ``PIECE_LINES`` at a time (compressed as they come): one
        partition deletion or rewrite may carry a quarter of a million entries, and a group of
        them millions, whose lines as strings once took most of a night's memory for a second."""
        pieces = self._pieces(actions)
        first = next(pieces, None)
        if first is None:
            return b""
        issued = "" if self._clock is None else f'"issued": "{format_utc(self._clock())}", '
        head = f"{HEADER_START}{FORMAT}, {issued}{self._run}".encode()
        if not self._compressed:
            return b"".join((head, first, *pieces))
        packer = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, 31)  # 31: a gzip member
        out = [packer.compress(head), packer.compress(first)]
        out.extend(packer.compress(piece) for piece in pieces)
        out.append(packer.flush())
        return b"".join(out)

    def _pieces(self, actions: Iterable[DeleteAction]) -> Iterator[bytes]:
        """The batch's entry lines, encoded, ``PIECE_LINES`` (or one action's rows) at a time."""
        escape = _escape
        tails = {kind: f', "via": {escape(kind.value)}}}\n' for kind in ActionKind}
        lines: list[str] = []
        for action in actions:
            tail = self._tail_of(action, tails)
            rows = action.rows
            for start in range(0, len(rows), PIECE_LINES):
                lines.extend(
                    f'{{"bucket": {escape(row.bucket)}, "parent": {escape(row.parent)}, '
                    f'"name": {escape(row.name)}{tail}'
                    for row in rows[start : start + PIECE_LINES]
                )
                if len(lines) >= PIECE_LINES:
                    yield "".join(lines).encode("utf-8")
                    lines = []
        if lines:
            yield "".join(lines).encode("utf-8")

    @staticmethod
    def _tail_of(action: DeleteAction, tails: dict[ActionKind, str]) -> str:
        """What follows the name on each of an action's lines."""
        if action.kind is not ActionKind.RANGE:
            return tails[action.kind]
        first, last = _escape(action.rows[0].name), _escape(action.rows[-1].name)
        return f', "via": "range", "range": [{first}, {last}]}}\n'

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


def open_audit_log(path: Path) -> IO[bytes]:
    """Open an audit log for appending (each batch one write: processes may share the file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("ab")


def audit_scope(store: Store) -> str:
    """The store an audit log's entries belong to: its tables (the scope stored filters carry)
    and where they live (a file, a cluster), so that two SQLite files are two stores."""
    return f"{store.scope_id()}@{store.location_id()}"


def audit_log_name(scope: str) -> str:
    """The default audit log's file name for a store: its scope, readable, and a hash of it (two
    scopes that read alike once made file-name-safe still get two files); compressed."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", scope).strip("_")[-120:]
    digest = hashlib.sha256(scope.encode("utf-8")).hexdigest()[:10]
    return f"audit-{readable}-{digest}.jsonl{COMPRESSED_SUFFIX}"


# -- reading ------------------------------------------------------------------------------------


class BadAuditLog(UsageError):
    """The audit log has a line that is not a directory entry we wrote."""


def read_audit_log(path: Path) -> Iterator[dict[str, Any]]:
    """Every entry of the audit log at ``path``, plain or compressed (``iter_audit_entries``)."""
    with path.open("rb") as stream:
        yield from iter_audit_entries(audit_log_lines(stream, str(path)))


def audit_log_lines(stream: IO[bytes], name: str = "the audit log") -> Iterator[str]:
    """The lines of an audit log read as bytes: plain JSON lines, or gzip members (told by the
    first bytes). A member torn by a killed process (cut short, or damaged and followed by
    another process's member) is skipped: the deletes it announced were never sent."""
    if _head(stream).startswith(GZIP_MAGIC[:2]):
        return decoded_lines(_member_lines(_gzip_members(stream)), name)
    return decoded_lines(stream, name)


def _head(stream: IO[bytes]) -> bytes:
    """The first bytes of ``stream``, left in it."""
    peek = getattr(stream, "peek", None)
    if peek is not None:
        return bytes(peek(len(GZIP_MAGIC))[: len(GZIP_MAGIC)])
    at = stream.tell()
    head = stream.read(len(GZIP_MAGIC))
    stream.seek(at)
    return head


def _member_lines(members: Iterable[bytes]) -> Iterator[bytes]:
    for member in members:
        lines = member.split(b"\n")
        last = lines.pop()  # empty: a member ends with its last line's newline
        for line in lines:
            yield line + b"\n"
        if last:
            yield last


def _gzip_members(stream: IO[bytes]) -> Iterator[bytes]:
    """The content of each whole gzip member of ``stream``. A member that does not decompress
    to its end and checksum is skipped: reading resumes at the next member header after its
    start (a member's checksum makes a header-like run of bytes inside a member harmless)."""
    buf = bytearray()
    start = 0  # where the member being read begins in ``buf``
    exhausted = False

    def more() -> bool:
        nonlocal exhausted
        if exhausted:
            return False
        chunk = stream.read(READ_CHUNK)
        if not chunk:
            exhausted = True
            return False
        buf.extend(chunk)
        return True

    while start < len(buf) or more():
        if start > READ_CHUNK:  # between members: drop what was read, a chunk at a time
            del buf[:start]
            start = 0
        unpacker = zlib.decompressobj(31)
        parts: list[bytes] = []
        fed = start
        whole = False
        while True:
            if fed == len(buf) and not more():
                break  # cut short: a torn last member
            end = min(len(buf), fed + FEED)  # what a member leaves over is copied: feed little
            with memoryview(buf) as view:
                try:
                    parts.append(unpacker.decompress(view[fed:end]))
                except zlib.error:
                    break
            fed = end
            if unpacker.eof:
                whole = True
                break
        if whole:
            start = fed - len(unpacker.unused_data)
            yield b"".join(parts)
            continue
        start = _next_member(buf, start + 1, more)
        if start < 0:
            return


def _next_member(buf: bytearray, after: int, more: Callable[[], bool]) -> int:
    """Where the next gzip member header begins at or after ``after`` (reading on as needed);
    -1 when the log ends first."""
    while True:
        found = buf.find(GZIP_MAGIC, after)
        if found >= 0:
            return found
        after = max(after, len(buf) - len(GZIP_MAGIC) + 1)
        if not more():
            return -1


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


def iter_audit_entries(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Every entry of an audit log, checked, with its batch's fields and its ``dir``; a bad
    line raises BadAuditLog naming it.

    The log is written ahead of the deletes, so a run killed mid-write can leave its final line
    torn (no newline, not JSON): that one line is skipped, as the delete it announced never ran.
    Worker processes append to one log, each batch with one write: a worker killed mid-write
    leaves a torn record that the next worker's batch continues on the same line. That
    fragment is skipped too, and the whole record after it is kept.
    """
    torn: BadAuditLog | None = None
    batch: dict[str, Any] | None = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if torn is not None:
            raise torn  # the unterminated line was not the last one after all
        try:
            record = _checked_record(number, line)
        except BadAuditLog as exc:
            if not line.endswith("\n"):
                torn = exc
                continue
            rest = max(line.rfind(RECORD_START, 1), line.rfind(HEADER_START, 1))
            if rest < 0 or not _a_record_begun(line[:rest]):
                raise
            record = _checked_record(number, line[rest:])
        if "format" in record:
            del record["format"]
            batch = record
            continue
        if record.get("dir") is None:
            record["dir"] = dir_of_row(record["parent"], record["name"])
        if batch is None or "generation" in record:
            yield record  # an older version's line: its own fields
        else:
            yield {**batch, **record}


def _a_record_begun(fragment: str) -> bool:
    """Whether ``fragment`` is the beginning of one of our records (cut anywhere)."""
    return any(fragment.startswith(mark) or mark.startswith(fragment) for mark in _MARKS)


_MARKS = (RECORD_START, HEADER_START)


def _checked_record(number: int, line: str) -> dict[str, Any]:
    """A batch header (with ``format``) or an entry, checked."""
    try:
        record: dict[str, Any] = json.loads(line)
        if isinstance(record, dict) and "format" in record:
            return _checked_header(number, record)
        bucket, parent, name = record["bucket"], record["parent"], record["name"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadAuditLog(f"audit log line {number}: not a dircleaner audit entry") from exc
    if not all(isinstance(v, str) for v in (bucket, parent, name)) or (
        record.get("dir") not in (None, dir_of_row(parent, name))
    ):
        raise BadAuditLog(f"audit log line {number}: inconsistent entry")
    if record.get("via") == "range" and not _within_range(name, record.get("range")):
        raise BadAuditLog(f"audit log line {number}: a range entry outside its range")
    return record


def _checked_header(number: int, header: dict[str, Any]) -> dict[str, Any]:
    version = header["format"]
    if version != FORMAT:
        raise BadAuditLog(
            f"audit log line {number}: a batch of format {version!r}, not {FORMAT}: a newer"
            " dircleaner wrote it; restore it with that version"
        )
    if not isinstance(header.get("generation"), str):
        raise BadAuditLog(f"audit log line {number}: a batch header without its generation")
    return header


def _within_range(name: str, bounds: object) -> bool:
    """Whether a range delete's entry names a directory between the range's two bounds."""
    if not isinstance(bounds, list) or len(bounds) != 2:
        return False
    first, last = bounds
    if not isinstance(first, str) or not isinstance(last, str):
        return False
    return min(first, last) <= name <= max(first, last)
