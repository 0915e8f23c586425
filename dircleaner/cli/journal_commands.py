"""``journal add``: journal the parents of objects deleted elsewhere, for ``clean --changed``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import click

from dircleaner.cli.context import TerminalProgress, emit, note, obj
from dircleaner.cli.keyfile import LineEndings, read_key_lines
from dircleaner.cli.options import bucket_option, json_option
from dircleaner.journal import record_deletes
from dircleaner.journal.events import BadEvent, parse_event_line
from dircleaner.paths import DEFAULT_BUCKET, validate_bucket

#: keys journaled as one request (merged per parent directory)
JOURNAL_BATCH = 5000


@dataclass
class JournalTally:
    """What ``journal add`` read and wrote."""

    keys: int = 0
    rows: int = 0
    other_events: int = 0
    rejected_lines: int = 0


@click.group()
def journal() -> None:
    """The journal of dirty directories: the parents of deleted objects, which the nightly
    'clean --changed' checks (delete-keys journals its own deletes).

    \b
    Example:
      dircleaner journal add --events removed-events.jsonl
    """


@journal.command("add")
@click.argument("path", type=click.File("rb"))
@click.option(
    "--events",
    is_flag=True,
    help="PATH holds S3 event notifications, one JSON message per line (AWS S3, MinIO or Ceph"
    " RGW): the objects of their ObjectRemoved and lifecycle-expiration records are journaled,"
    " in the bucket each record names; other events are skipped.",
)
@bucket_option(
    "Bucket the keys belong to (not with --events: each record names its own).", DEFAULT_BUCKET
)
@json_option
@click.pass_context
def journal_add(
    ctx: click.Context, path: BinaryIO, events: bool, bucket: str, as_json: bool
) -> None:
    """Journal the parent directory of each deleted key of PATH ('-' for stdin), as the
    metastore's delete path would: one row per directory per batch of keys, for the next
    'clean --changed'. Keys are one per line; with --events, S3 event notifications.

    \b
    Example:
      dircleaner --store sqlite:///meta.db journal add expired.txt
      kafka-console-consumer ... | dircleaner journal add --events -
    """
    validate_bucket(bucket)
    tally = JournalTally()
    progress = TerminalProgress()
    with obj(ctx).open(writes=True) as store:
        batches = _event_batches(path, tally) if events else _key_batches(path, bucket, tally)
        for batch_bucket, keys in batches:
            tally.rows += record_deletes(store, batch_bucket, keys)
            tally.keys += len(keys)
            progress("journal", tally.keys, None)
    progress.close()
    _report(tally, as_json)


def _key_batches(
    stream: BinaryIO, bucket: str, tally: JournalTally
) -> Iterator[tuple[str, list[str]]]:
    endings = LineEndings()
    batch: list[str] = []
    for line in read_key_lines(stream, endings):
        if line.key is None:
            tally.rejected_lines += 1
            click.echo(f"line {line.number}: {line.error}; skipped", err=True)
            continue
        batch.append(line.key)
        if len(batch) >= JOURNAL_BATCH:
            yield bucket, batch
            batch = []
    if batch:
        yield bucket, batch
    if endings.crlf:
        note(f"CRLF line endings: stripped the carriage return of {endings.stripped:,} lines")


def _event_batches(stream: BinaryIO, tally: JournalTally) -> Iterator[tuple[str, list[str]]]:
    pending: dict[str, list[str]] = {}
    held = 0
    for number, raw in enumerate(stream, start=1):
        text = raw.rstrip(b"\r\n")
        if not text.strip():
            continue
        try:
            parsed = parse_event_line(text.decode("utf-8"))
        except UnicodeDecodeError as exc:
            tally.rejected_lines += 1
            click.echo(f"line {number}: invalid UTF-8 at byte {exc.start}; skipped", err=True)
            continue
        except BadEvent as exc:
            tally.rejected_lines += 1
            click.echo(f"line {number}: {exc}; skipped", err=True)
            continue
        tally.other_events += parsed.other
        for bucket, key in parsed.removed:
            pending.setdefault(bucket, []).append(key)
            held += 1
        if held >= JOURNAL_BATCH:
            yield from pending.items()
            pending, held = {}, 0
    yield from pending.items()


def _report(tally: JournalTally, as_json: bool) -> None:
    """The summary (one line, or JSON); exit 1 if any line was rejected."""
    line = (
        f"journaled {tally.rows:,} directories of {tally.keys:,} deleted keys;"
        f" skipped {tally.other_events:,} records of other events;"
        f" rejected {tally.rejected_lines:,} lines"
    )
    summary: dict[str, object] = {
        "keys": tally.keys,
        "journaled_dirs": tally.rows,
        "other_events": tally.other_events,
        "rejected_lines": tally.rejected_lines,
    }
    if tally.rejected_lines:
        summary.update(error=f"rejected {tally.rejected_lines:,} lines (see stderr)", exit_code=1)
    emit(summary, [line], as_json, ok=not tally.rejected_lines)
    if tally.rejected_lines:
        sys.exit(1)
