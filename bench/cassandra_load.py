"""Loading a synthetic dataset into Cassandra: the driver's inserts against the bulk loader.

Usage::

    .venv/bin/python bench/cassandra_load.py --dirs 1000000 --out load-1m.json
    .venv/bin/python bench/cassandra_load.py --dirs 30000000 --paths bulk \\
        --keyspace-prefix bench30m --keep --out load-30m.json

Each path runs in a fresh interpreter of its own (so each process's peak memory is its own),
one after the other, into a keyspace of its own (``<prefix>_driver``, ``<prefix>_bulk``; with
one path and ``--keep``, exactly ``<prefix>``), dropped first: the same dataset (``--dirs``,
``--seed``, today's generator default shape), generated, then inserted:

* **driver** — ``generate(store, spec)``: the store's write path (unlogged single-partition
  batches through the driver), as ``bench/cassandra_e2e.py --load driver`` loads.
* **bulk** — ``generate(store, spec, bulk=CassandraBulkLoad(...))``: the rows streamed to
  Cassandra's ``CQLSSTableWriter`` in the Java helper, the sstables loaded ``--via``
  ``nodetool-import`` (this machine's node adopts them) or ``sstableloader``.

Figures per path: ``generate_s`` (the layouts, in parallel processes), ``insert_s`` (from the
first row sent until every row is in the node: for bulk, the JVM's start, the sstable writes
and the import), ``rows_per_s`` = rows / ``insert_s``, ``total_s``; peak RSS of the loading
Python process (``ru_maxrss``), of its largest child (the generator's workers, the Java helper:
``RUSAGE_CHILDREN``) and of the Java helper alone (its own ``VmHWM``); for bulk the sstables'
count and bytes. ``speedup`` = bulk rows/s ÷ driver rows/s. Load averages are recorded: the
node shares the machine's cores with everything else.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BASE = "cassandra://127.0.0.1:9042"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def drop_keyspace(base: str, keyspace: str) -> None:
    """Drop the keyspace and the snapshot Cassandra takes of a dropped one (its disk)."""
    from cassandra.cluster import Cluster

    from dircleaner.store.cassandra.config import parse_cassandra_url

    parts = parse_cassandra_url(base + "/x")
    cluster = Cluster(list(parts.hosts), port=parts.port)
    try:
        cluster.connect().execute(f'DROP KEYSPACE IF EXISTS "{keyspace}"', timeout=600)
    finally:
        cluster.shutdown()
    subprocess.run(
        [str(REPO / "scripts" / "cassandra"), "nodetool", "clearsnapshot", "--all", "--", keyspace],
        capture_output=True,
        timeout=300,
    )


def load_once(args: argparse.Namespace) -> dict[str, Any]:
    """One path, in this process: drop, create, generate and insert; the figures."""
    from dircleaner.store import open_store
    from dircleaner.store.cassandra.bulkload import CassandraBulkLoad
    from dircleaner.store.cassandra.store import CassandraStore
    from dircleaner.synth import SynthSpec, generate

    drop_keyspace(args.base, args.keyspace)
    store = open_store(f"{args.base}/{args.keyspace}", create=True)
    assert isinstance(store, CassandraStore)
    spec = SynthSpec(dirs=args.dirs, seed=args.seed)
    bulk = None
    if args.child == "bulk":
        keep = args.keep_sstables / args.keyspace if args.keep_sstables else None
        bulk = CassandraBulkLoad(
            store.config, store.requests.cluster.metadata, via=args.via, sstable_dir=keep
        )
    last = [0.0]

    def progress(done: int) -> None:
        if time.monotonic() - last[0] > 30:
            last[0] = time.monotonic()
            log(f"  {args.child}: generated {done:,} dirs")

    load_before = os.getloadavg()
    started = time.perf_counter()
    work = args.work_dir / args.keyspace
    work.mkdir(parents=True, exist_ok=True)
    result = generate(store, spec, work / "truth.txt", progress, spill_dir=work, bulk=bulk)
    total_s = time.perf_counter() - started
    store.close()
    rows = result.dirs + result.objects
    out: dict[str, Any] = {
        "path": args.child,
        "keyspace": args.keyspace,
        "dirs": result.dirs,
        "empty_dirs": result.empty_dirs,
        "objects": result.objects,
        "rows": rows,
        "generate_s": round(result.generate_seconds, 1),
        "insert_s": round(result.load_seconds, 1),
        "total_s": round(total_s, 1),
        "rows_per_s": round(rows / result.load_seconds),
        "python_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "largest_child_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    if bulk is not None:
        report = bulk.report
        out.update(
            via=report.via,
            bulk_rows=report.rows,
            sstables=report.write.sstables,
            sstable_mb=round(report.write.sstable_bytes / 2**20, 1),
            write_s=round(report.write.seconds, 1),
            import_s=round(report.load_seconds, 1),
            java_peak_rss_mb=(report.write.peak_rss or 0) // 2**20,
        )
    return out


def markdown(results: list[dict[str, Any]]) -> str:
    head = (
        "| path | rows | generate s | insert s | rows/s | total s | Python peak RSS"
        " | largest child |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(
            f"| {r['path']}{' (' + r['via'] + ')' if 'via' in r else ''} | {r['rows']:,}"
            f" | {r['generate_s']} | {r['insert_s']} | {r['rows_per_s']:,} | {r['total_s']}"
            f" | {r['python_peak_rss_mb']} MB | {r['largest_child_peak_rss_mb']} MB |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dirs", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--base", default=DEFAULT_BASE, help="cassandra://host:port (no keyspace)")
    ap.add_argument("--keyspace-prefix", default="benchload")
    ap.add_argument("--paths", default="driver,bulk", help="comma-separated: driver, bulk")
    ap.add_argument(
        "--via", default="nodetool-import", choices=("nodetool-import", "sstableloader")
    )
    ap.add_argument("--keep", action="store_true", help="keep the keyspaces loaded (else dropped)")
    ap.add_argument("--keep-sstables", type=Path, help="keep the bulk path's sstables here")
    ap.add_argument(
        "--work-dir",
        type=Path,
        default=Path(__file__).resolve().parent / ".cache" / "cassandra-load",
        help="spill files and truth (bench/.cache/, git-ignored)",
    )
    ap.add_argument("--child", choices=("driver", "bulk"), help=argparse.SUPPRESS)
    ap.add_argument("--keyspace", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(load_once(args)))
        return 0
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    results = []
    for path in paths:
        keyspace = (
            args.keyspace_prefix
            if len(paths) == 1 and args.keep
            else f"{args.keyspace_prefix}_{path}"
        )
        log(f"{path}: loading {args.dirs:,} dirs into {keyspace}")
        command = [
            sys.executable,
            __file__,
            "--child",
            path,
            "--keyspace",
            keyspace,
            "--dirs",
            str(args.dirs),
            "--seed",
            str(args.seed),
            "--base",
            args.base,
            "--via",
            args.via,
            "--work-dir",
            str(args.work_dir),
        ]
        if args.keep_sstables:
            command += ["--keep-sstables", str(args.keep_sstables)]
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        log(f"  {json.dumps(results[-1])}")
        if not args.keep:
            drop_keyspace(args.base, keyspace)
    by_path = {r["path"]: r for r in results}
    summary: dict[str, Any] = {"dirs": args.dirs, "results": results}
    if "driver" in by_path and "bulk" in by_path:
        summary["speedup"] = round(
            by_path["bulk"]["rows_per_s"] / by_path["driver"]["rows_per_s"], 1
        )
    print(markdown(results))
    if "speedup" in summary:
        print(f"\nbulk rows/s ÷ driver rows/s: {summary['speedup']}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
