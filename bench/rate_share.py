"""--scan-rate and --rate with several workers: the rows read and the delete requests issued per
second, all workers together, against the cap.

    python bench/rate_share.py --dirs 1000000 --workers 1,2 --scan-rate 50000 --rate 1000

On a copy of one cached synthetic SQLite dataset (``e2e.ensure_dataset``), for each worker
count: the build and the sweep as the job runs them (``build_filter``, ``run_sweep``) at
``--scan-rate``, each pass's rows read per second over its wall time; then a clean of a fresh
copy at ``--rate`` (the scans uncapped, every guard forced), its delete requests (partition,
row and range deletes and rewrites: the unit ``--rate`` counts) per second of the delete phase.
Besides those ratios to the cap, the most delete requests the store applied in any one-second
window (from the SQLite store's tombstone record, ``written_us``: a range delete records one
entry per bound, so it counts twice here, which only overstates the window), against the cap:
the cap is a promise to the cluster, a window over it by more than a small burst breaks it.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from bisect import bisect_right
from pathlib import Path
from typing import Any

from e2e import DEFAULT_CACHE, copy_dataset, ensure_dataset, store_url

from dircleaner.filter.bloom import load_kernels
from dircleaner.job.clean import CleanConfig, run_clean
from dircleaner.job.sweep import SweepConfig, run_sweep
from dircleaner.pipeline.build import BuildConfig, build_filter
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.scanrate import ScanRate
from dircleaner.store import open_store
from dircleaner.synth import SynthSpec
from dircleaner.workers.base import LocalWorkers


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def scans(db: Path, workers: int, cap: float) -> list[dict[str, Any]]:
    """The build's and the sweep's rows per second at ``cap``."""
    rate = ScanRate(cap)
    pool = LocalWorkers(workers)
    with open_store(store_url(db)) as store:
        built = build_filter(store, BuildConfig(workers=workers, scan=rate), workers=pool)
        swept = run_sweep(
            store,
            SweepConfig(
                generation=built.generation,
                guards=GuardConfig(force=True),
                workers=workers,
                scan=rate,
            ),
            workers=pool,
        )
    out = []
    for name, scan in (("build", built.scan), ("sweep", swept.scan)):
        out.append(
            {
                "pass": name,
                "workers": workers,
                "cap": cap,
                "rows": scan.rows,
                "seconds": round(scan.seconds, 2),
                "rows_per_s": round(scan.rows_per_s),
                "of_cap": round(scan.rows_per_s / cap, 3),
            }
        )
    return out


def deletes(db: Path, workers: int, rate: float, audit: Path) -> dict[str, Any]:
    """A clean at ``rate``: its delete requests per second, and its busiest second."""
    pool = LocalWorkers(workers)
    with open_store(store_url(db)) as store:
        built = build_filter(store, BuildConfig(workers=workers), workers=pool)
        started_us = time.time_ns() // 1000
        report = run_clean(
            store,
            CleanConfig(
                sweep=SweepConfig(
                    generation=built.generation, guards=GuardConfig(force=True), workers=workers
                ),
                min_age_s=0,
                throttle=ThrottleConfig(rate=rate),
                audit_log=audit,
            ),
            workers=pool,
        )
    d = report.deleted
    assert d is not None
    requests = d.deletes.partition + d.deletes.row + d.deletes.range + d.deletes.rewrite
    seconds = report.phase_seconds["delete"]
    return {
        "workers": workers,
        "rate": rate,
        "requests": requests,
        "seconds": round(seconds, 2),
        "requests_per_s": round(requests / seconds, 1),
        "of_cap": round(requests / seconds / rate, 3),
        "busiest_second_of_cap": round(busiest_second(db, started_us) / rate, 3),
    }


def busiest_second(db: Path, since_us: int) -> int:
    """The most tombstones the store recorded within any one second (a sliding window)."""
    with sqlite3.connect(db) as conn:
        times = sorted(
            t
            for (t,) in conn.execute(
                "SELECT written_us FROM tombstones WHERE written_us >= ?", (since_us,)
            )
        )
    return max((bisect_right(times, t + 1_000_000 - 1) - i for i, t in enumerate(times)), default=0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dirs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--scan-rate", type=float, default=50_000.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--skip-scans", action="store_true")
    ap.add_argument("--skip-deletes", action="store_true")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    src_dir, _meta = ensure_dataset(args.cache_dir, SynthSpec(dirs=args.dirs, seed=args.seed))
    load_kernels()
    db = args.cache_dir / "rate-share.db"
    results: dict[str, Any] = {"argv": sys.argv[1:], "scans": [], "deletes": []}
    for _ in range(args.rounds):
        for workers in (int(w) for w in args.workers.split(",")):
            if not args.skip_scans:
                copy_dataset(src_dir / "meta.db", db)
                for row in scans(db, workers, args.scan_rate):
                    log(f"scan {row}")
                    results["scans"].append(row)
            if not args.skip_deletes:
                copy_dataset(src_dir / "meta.db", db)
                with tempfile.TemporaryDirectory() as tmp:
                    row = deletes(db, workers, args.rate, Path(tmp) / "audit.jsonl")
                log(f"deletes {row}")
                results["deletes"].append(row)
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
