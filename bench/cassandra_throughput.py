"""Delete throughput on Cassandra: the deleter against a bare ``execute_concurrent`` floor.

Usage::

    .venv/bin/python bench/cassandra_throughput.py --deletes 100000 --concurrency 32 \\
        [--store cassandra://127.0.0.1:9042/dcbench] [--shape row|range|partition] \\
        [--repeat 3] [--out result.json]

What it measures, in one process, against one node, in one run (only ratios taken in the same
run mean anything on a shared machine):

* **the data** — ``--deletes`` folders rows written through the store's write path: for
  ``--shape row``, ``--partitions`` partitions of equal size, deleted row by row, round-robin
  across the partitions (the order the planner spreads row deletes in); for ``--shape range``,
  the same rows deleted ``RANGE_ROWS`` adjacent rows per range delete, round-robin across the
  partitions (deletes/s counts rows); for ``--shape
  partition``, one row in each of ``--deletes`` partitions, each deleted with a partition
  deletion (the store groups those into ``IN`` requests), given to the deleter in the ring's
  token order, as the planner orders them. The rows are written again (newer
  timestamps) before every measured side, so each side deletes the same live rows.
* **the deleter** — ``execute_plan`` at ``--rate 0`` with ``--concurrency``, with what a real
  clean does around the deletes: the audit log (a scratch file) and the tombstone ledger's
  charges (a partition deletion costs none, so it charges nothing; `--no-charge` leaves the
  ledger out).
* **the floor** — the same delete statements with the same bound values, sent by a bare
  ``cassandra.concurrent.execute_concurrent_with_args`` (rows) or ``execute_concurrent`` (the
  store's own ``IN`` requests, which differ in size) with the same concurrency, in their
  fastest form (results as a list, not a generator the caller's thread is woken for), and
  nothing else: no audit, no ledger, no lease, no retries.

Beside each pair, where the deleter's wall clock went: ``deleter_charge_s`` (the ledger's
charges), ``deleter_audit_s`` (the audit log's writes ahead), both on the caller's thread
before a group is sent; the rest is the window itself and the driver.

``deleter_over_floor`` = deleter deletes/s ÷ floor deletes/s of the same pair, and
``deleter_over_floor_cpu`` = the floor's CPU seconds ÷ the deleter's (this process, every thread:
the client's cost per delete, which other work on the machine disturbs far less than the
wall clock); the pairs run back to back, ``--repeat`` times, alternating which side goes first.
Reported: every pair, and the median, min and max of both ratios. Other work shares the node
and the machine: the spread across pairs is part of the result.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cassandra.concurrent import (
    execute_concurrent,
    execute_concurrent_with_args,
)

from dircleaner.audit import AuditLog
from dircleaner.model import ActionKind, DeleteAction, FolderRow, PartitionKey
from dircleaner.pipeline.budget import ledger_charger
from dircleaner.pipeline.delete import ThrottleConfig, execute_plan
from dircleaner.pipeline.plan import DeletionPlan
from dircleaner.store.cassandra.deletes import PARTITION_DELETES_PER_REQUEST
from dircleaner.store.cassandra.mapping import partition_tokens
from dircleaner.store.cassandra.store import CassandraStore
from dircleaner.store.records import murmur_token
from dircleaner.timeutil import now_us

BUCKET = "bench"
#: rows per range delete of ``--shape range``
RANGE_ROWS = 4
DEFAULT_URL = "cassandra://127.0.0.1:9042/dcbench"


def folder_rows(shape: str, deletes: int, partitions: int) -> list[FolderRow]:
    """The rows every side deletes, in the order the deleter gets them."""
    if shape == "partition":
        return [
            FolderRow(murmur_token(BUCKET, f"tp/{i:07d}/"), BUCKET, f"tp/{i:07d}/", "d")
            for i in range(deletes)
        ]
    per = max(1, deletes // partitions)
    parents = [f"tr/{p:05d}/" for p in range(partitions)]
    # round-robin across partitions, as the planner spreads row deletes
    return [
        FolderRow(murmur_token(BUCKET, parent), BUCKET, parent, f"n{i:06d}")
        for i in range(per)
        for parent in parents
    ][:deletes]


def in_ring_order(store: CassandraStore, rows: list[FolderRow]) -> list[FolderRow]:
    """The rows with the store's own tokens, in token order: the order the planner gives the
    deleter partition deletions in (a scan's rows carry the cluster's tokens). In any other
    order a group's partitions spread over every ring range and its ``IN`` requests go part
    empty, which the floor (chunking every key at once) never pays."""
    keys = [(row.bucket, row.parent) for row in rows]
    tokens = {(b, p): t for b, t, _stored, p in partition_tokens(store.config, keys)}
    out = [FolderRow(tokens[(r.bucket, r.parent)], r.bucket, r.parent, r.name) for r in rows]
    return sorted(out, key=lambda r: r.token)


def actions_of(shape: str, rows: list[FolderRow]) -> tuple[DeleteAction, ...]:
    if shape == "range":
        return tuple(
            DeleteAction(ActionKind.RANGE, PartitionKey(run[0].token, BUCKET, run[0].parent), run)
            for run in ranges_of(rows)
        )
    kind = ActionKind.PARTITION if shape == "partition" else ActionKind.ROW
    return tuple(
        DeleteAction(kind, PartitionKey(row.token, row.bucket, row.parent), (row,)) for row in rows
    )


def ranges_of(rows: list[FolderRow]) -> list[tuple[FolderRow, ...]]:
    """``RANGE_ROWS`` adjacent rows of a partition per range, round-robin across partitions."""
    by_parent: dict[str, list[FolderRow]] = {}
    for row in rows:
        by_parent.setdefault(row.parent, []).append(row)
    runs = [
        [
            tuple(sorted(part, key=lambda r: r.name)[i : i + RANGE_ROWS])
            for i in range(0, len(part), RANGE_ROWS)
        ]
        for part in by_parent.values()
    ]
    return [run[i] for i in range(max(map(len, runs))) for run in runs if i < len(run)]


class TimedAudit(AuditLog):
    """The audit log, with the seconds its writes ahead took."""

    seconds = 0.0

    def write_ahead(self, actions: Any) -> None:
        started = time.perf_counter()
        super().write_ahead(actions)
        self.seconds += time.perf_counter() - started


def write_rows(store: CassandraStore, rows: list[FolderRow]) -> float:
    """Write (again) every row at a fresh timestamp; the seconds it took."""
    started = time.monotonic()
    ts = now_us()
    for start in range(0, len(rows), 20_000):
        part = rows[start : start + 20_000]
        store.write_folder_rows([(r.bucket, r.parent, r.name) for r in part], ts)
    return time.monotonic() - started


def run_deleter(
    store: CassandraStore,
    shape: str,
    rows: list[FolderRow],
    concurrency: int,
    scratch: Path,
    charged: bool,
) -> tuple[float, float, float, float]:
    """Seconds and CPU seconds, and the seconds of the charges and of the audit log."""
    plan = DeletionPlan(actions_of(shape, rows), ())
    ts = now_us()
    ledger = ledger_charger(store, "bench-gen", f"bench-{ts}", 3600.0) if charged else None
    charge_s = 0.0

    def charge(actions: Any) -> None:
        nonlocal charge_s
        started = time.perf_counter()
        assert ledger is not None
        ledger(actions)
        charge_s += time.perf_counter() - started

    with (scratch / "audit.jsonl.gz").open("wb") as stream:
        audit = TimedAudit(stream, "bench-gen", ts)
        started, cpu = time.monotonic(), time.process_time()
        stats = execute_plan(
            store,
            plan,
            ts,
            ThrottleConfig(rate=0.0, concurrency=concurrency),
            audit=audit,
            charge=charge if ledger is not None else None,
        )
        seconds, cpu_s = time.monotonic() - started, time.process_time() - cpu
    if stats.directories != len(rows) or stats.failures:
        raise SystemExit(f"the deleter did not delete every row: {stats}")
    return seconds, cpu_s, charge_s, audit.seconds


def run_floor(
    store: CassandraStore, shape: str, rows: list[FolderRow], concurrency: int
) -> tuple[float, float]:
    """Seconds and CPU seconds (this process, every thread) of the bare floor: mapping the
    keys to bound values is timed too, as the deleter has to do it."""
    session = store.requests.session
    ts = now_us()
    started, cpu = time.monotonic(), time.process_time()
    if shape in ("row", "range"):
        if shape == "row":
            statement = store.deletes.row_delete
            params = [(ts, *store.requests.key_values(r.bucket, r.parent), r.name) for r in rows]
        else:
            statement = store.deletes.range_delete
            params = [
                (
                    ts,
                    *store.requests.key_values(run[0].bucket, run[0].parent),
                    run[0].name,
                    run[-1].name,
                )
                for run in ranges_of(rows)
            ]
        results = execute_concurrent_with_args(
            session,
            statement,
            params,
            concurrency=concurrency,
            raise_on_first_error=True,
            execution_profile="delete",
        )
        for _ in results:
            pass
        return time.monotonic() - started, time.process_time() - cpu
    # The store's own IN requests: the same statements and values the deleter sends.
    keys = list(dict.fromkeys((r.bucket, r.parent) for r in rows))
    items: list[tuple[Any, tuple[object, ...]]] = []
    for bucket, chunk in store.requests.range_chunks(keys, PARTITION_DELETES_PER_REQUEST):
        in_keys, size = store.requests.in_keys(bucket, chunk, PARTITION_DELETES_PER_REQUEST)
        bound = store.deletes.partition_delete(size).bind((ts, *in_keys))
        bound.routing_token = chunk[0][0]
        items.append((bound, ()))
    for _ in execute_concurrent(
        session,
        items,
        concurrency=concurrency,
        raise_on_first_error=True,
        execution_profile="delete",
    ):
        pass
    return time.monotonic() - started, time.process_time() - cpu


def check_gone(store: CassandraStore, rows: list[FolderRow]) -> None:
    """A sample of the deleted rows' partitions is empty."""
    for parent in sorted({r.parent for r in rows})[:: max(1, len(rows) // 20)][:20]:
        left = store.requests.execute(
            store.reads.folder_partition_stmt, store.requests.key_values(BUCKET, parent), "sweep"
        )
        if list(left.current_rows):
            raise SystemExit(f"rows of {parent!r} survived a measured delete")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--store", default=os.environ.get("DIRCLEANER_CASSANDRA_URL", DEFAULT_URL))
    ap.add_argument("--deletes", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=1000, help="row shape: partitions")
    ap.add_argument("--shape", choices=("row", "range", "partition"), default="row")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--no-charge",
        action="store_true",
        help="the deleter without the tombstone ledger's charges (the audit log stays)",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    store = CassandraStore.open(args.store, create=True)
    # Every request the store sends for the deleter goes at this concurrency, as the floor's.
    store.requests.config = dataclasses.replace(store.config, concurrency=args.concurrency)
    rows = folder_rows(args.shape, args.deletes, args.partitions)
    if args.shape == "partition":
        rows = in_ring_order(store, rows)
    pairs: list[dict[str, float]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="dc-throughput-") as tmp:
            for i in range(args.repeat):
                pair: dict[str, float] = {}
                order = ("deleter", "floor") if i % 2 == 0 else ("floor", "deleter")
                for side in order:
                    pair[f"{side}_write_s"] = write_rows(store, rows)
                    if side == "deleter":
                        seconds, cpu, charge_s, audit_s = run_deleter(
                            store,
                            args.shape,
                            rows,
                            args.concurrency,
                            Path(tmp),
                            charged=not args.no_charge,
                        )
                        pair["deleter_charge_s"] = charge_s
                        pair["deleter_audit_s"] = audit_s
                    else:
                        seconds, cpu = run_floor(store, args.shape, rows, args.concurrency)
                    check_gone(store, rows)
                    pair[f"{side}_s"] = seconds
                    pair[f"{side}_cpu_s"] = cpu
                    pair[f"{side}_per_s"] = len(rows) / seconds
                pair["deleter_over_floor"] = pair["deleter_per_s"] / pair["floor_per_s"]
                # CPU per delete, which the other work on a shared machine disturbs far less
                pair["deleter_over_floor_cpu"] = pair["floor_cpu_s"] / pair["deleter_cpu_s"]
                pairs.append(pair)
                print(
                    f"pair {i + 1} ({order[0]} first): deleter {pair['deleter_per_s']:,.0f}/s,"
                    f" floor {pair['floor_per_s']:,.0f}/s,"
                    f" ratio {pair['deleter_over_floor']:.2f}"
                    f" (CPU: {pair['deleter_over_floor_cpu']:.2f});"
                    f" deleter {pair['deleter_s']:.2f}s of which charges"
                    f" {pair['deleter_charge_s']:.2f}s, audit {pair['deleter_audit_s']:.2f}s",
                    flush=True,
                )
    finally:
        store.close()
    ratios = [p["deleter_over_floor"] for p in pairs]
    cpu_ratios = [p["deleter_over_floor_cpu"] for p in pairs]
    result = {
        "shape": args.shape,
        "deletes": len(rows),
        "concurrency": args.concurrency,
        "charged": not args.no_charge,
        "pairs": pairs,
        "deleter_over_floor_median": statistics.median(ratios),
        "deleter_over_floor_min": min(ratios),
        "deleter_over_floor_max": max(ratios),
        "deleter_over_floor_cpu_median": statistics.median(cpu_ratios),
        "deleter_over_floor_cpu_min": min(cpu_ratios),
        "deleter_over_floor_cpu_max": max(cpu_ratios),
        "deleter_per_s_median": statistics.median(p["deleter_per_s"] for p in pairs),
        "floor_per_s_median": statistics.median(p["floor_per_s"] for p in pairs),
    }
    print(
        f"{args.shape} deletes, concurrency {args.concurrency}: deleter/floor median"
        f" {result['deleter_over_floor_median']:.2f}"
        f" (min {min(ratios):.2f}, max {max(ratios):.2f}); by CPU"
        f" {result['deleter_over_floor_cpu_median']:.2f}"
        f" (min {min(cpu_ratios):.2f}, max {max(cpu_ratios):.2f});"
        f" deleter {result['deleter_per_s_median']:,.0f}/s,"
        f" floor {result['floor_per_s_median']:,.0f}/s"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
