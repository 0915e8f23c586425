"""The audit log's bytes and write cost per entry, by format, on a real night's deletes.

    python bench/audit_log.py AUDIT_LOG [--rounds 5] [--group 32]

Reads the entries of ``AUDIT_LOG`` (any format: a run's ``--audit-log``) and rebuilds the
deleter's batches from them: consecutive entries of one partition and kind are one action (a
row delete is one entry), ``--group`` actions a batch (the window's group at the default
``--concurrency`` on SQLite). Then each format writes every batch to memory, timed (the
fastest of ``--rounds``), and reads it back:

* ``previous``: one self-contained JSON line per entry, the run's fields and ``dir`` on each
  (the format before batches, kept here as the baseline, byte for byte as it was written);
* ``plain``: a header line per batch, a short line per entry (``AuditLog``, plain);
* ``gzip-1`` / ``gzip-6``: the same batches, each a gzip member at that zlib level (a log named
  ``.gz``; the writer uses level ``COMPRESS_LEVEL``).

Prints one JSON object: per format ``bytes_per_entry``, ``write_us_per_entry`` (encoding and
compressing a batch: what the deleter's thread pays ahead of each group) and
``read_us_per_entry`` (``iter_audit_entries`` over ``audit_log_lines``: what a restore pays).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
import zlib
from collections.abc import Callable, Iterable
from json.encoder import encode_basestring as escape
from pathlib import Path
from typing import Any

from dircleaner.audit import (
    COMPRESS_LEVEL,
    AuditLog,
    audit_log_lines,
    iter_audit_entries,
    read_audit_log,
)
from dircleaner.model import ActionKind, DeleteAction, FolderRow, PartitionKey
from dircleaner.paths import dir_of_row
from dircleaner.store.records import murmur_token
from dircleaner.timeutil import format_utc


def rebuilt_batches(entries: Iterable[dict[str, Any]], group: int) -> list[list[DeleteAction]]:
    actions: list[DeleteAction] = []
    for e in entries:
        kind = ActionKind(e.get("via", "row"))
        bucket, parent = e["bucket"], e["parent"]
        last = actions[-1] if actions else None
        same = (
            last is not None
            and kind is not ActionKind.ROW
            and last.kind is kind
            and (last.partition.bucket, last.partition.parent) == (bucket, parent)
            and (kind is not ActionKind.RANGE or e.get("range") == [last.rows[0].name, e["name"]])
        )
        token = murmur_token(bucket, parent)
        row = FolderRow(token, bucket, parent, e["name"])
        if same and last is not None:
            actions[-1] = DeleteAction(kind, last.partition, (*last.rows, row))
        else:
            actions.append(DeleteAction(kind, PartitionKey(token, bucket, parent), (row,)))
    return [actions[i : i + group] for i in range(0, len(actions), group)]


class PreviousFormat:
    """The format before batches: every line the whole record, as ``AuditLog`` wrote it."""

    def __init__(
        self, generation: str, ts: int, scope: str, started: int, clock: Callable[[], int]
    ):
        run = {"delete_ts_us": ts, "generation": generation, "run_started": format_utc(started)}
        run["scope"] = scope
        self._tail = json.dumps(run, ensure_ascii=False)[1:]
        self._clock = clock

    def batch(self, actions: Iterable[DeleteAction]) -> bytes:
        run = f'"issued": "{format_utc(self._clock())}", {self._tail}'
        tails = {kind: f'"via": {escape(kind.value)}, {run}\n' for kind in ActionKind}
        lines = []
        for action in actions:
            tail = tails[action.kind]
            if action.kind is ActionKind.RANGE:
                first, last = escape(action.rows[0].name), escape(action.rows[-1].name)
                tail = f'"via": "range", "range": [{first}, {last}], {run}\n'
            for row in action.rows:
                lines.append(
                    f'{{"bucket": {escape(row.bucket)}, '
                    f'"dir": {escape(dir_of_row(row.parent, row.name))}, '
                    f'"parent": {escape(row.parent)}, "name": {escape(row.name)}, {tail}'
                )
        return "".join(lines).encode("utf-8")


def measure(
    batch: Callable[[list[DeleteAction]], bytes],
    batches: list[list[DeleteAction]],
    rounds: int,
    entries: int,
) -> dict[str, float]:
    best = float("inf")
    data = b""
    for _ in range(rounds):
        began = time.perf_counter()
        data = b"".join(batch(b) for b in batches)
        best = min(best, time.perf_counter() - began)
    read = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        count = sum(1 for _ in iter_audit_entries(audit_log_lines(io.BytesIO(data))))
        read = min(read, time.perf_counter() - began)
    assert count == entries, (count, entries)
    return {
        "bytes_per_entry": round(len(data) / entries, 1),
        "write_us_per_entry": round(best / entries * 1e6, 3),
        "read_us_per_entry": round(read / entries * 1e6, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("audit_log", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--group", type=int, default=32)
    args = parser.parse_args()
    entries = list(read_audit_log(args.audit_log))
    first = entries[0]
    batches = rebuilt_batches(entries, args.group)
    generation, ts = str(first["generation"]), int(first["delete_ts_us"])
    scope = str(first.get("scope", "sqlite:objects,folders@/var/lib/dircleaner/meta.db"))
    started, clock = 1_795_786_000_000_000, (lambda: 1_795_786_018_000_000)

    def log(compressed: bool) -> AuditLog:
        return AuditLog(
            io.BytesIO(),
            generation,
            ts,
            scope=scope,
            run_started_us=started,
            clock=clock,
            compressed=compressed,
        )

    def at_level(level: int) -> Callable[[list[DeleteAction]], bytes]:
        if level == COMPRESS_LEVEL:
            return log(True).batch  # the writer itself
        plain = log(False).batch

        def packed(actions: list[DeleteAction]) -> bytes:
            packer = zlib.compressobj(level, zlib.DEFLATED, 31)
            return packer.compress(plain(actions)) + packer.flush()

        return packed

    formats: dict[str, Callable[[list[DeleteAction]], bytes]] = {
        "previous": PreviousFormat(generation, ts, scope, started, clock).batch,
        "plain": log(False).batch,
        "gzip-1": at_level(1),
        "gzip-6": at_level(6),
    }
    result: dict[str, object] = {
        "entries": len(entries),
        "batches": len(batches),
        "entries_per_batch": round(len(entries) / max(1, len(batches)), 1),
    }
    for name, batch in formats.items():
        result[name] = measure(batch, batches, args.rounds, len(entries))
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
