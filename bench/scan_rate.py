"""Scan-rate benchmark: the cap (--scan-rate) and the adaptive back-off, on a Cassandra node.

Usage::

    .venv/bin/python bench/scan_rate.py --store cassandra://127.0.0.1:9042/dcscan \\
        --dirs 200000 [--rates 10000,25000] [--workers 1,2] [--out result.json]

Two measurements, on one synthetic dataset (``dircleaner.synth``, loaded once into the keyspace
and reused while its parameters match):

* **the scan cap** — the build (``build_filter``) and the sweep (``run_sweep``) as the job runs
  them, uncapped and then at ``--scan-rate R`` for each R of ``--rates``, with each worker count
  of ``--workers``. Each pass reports the rows it read per second over its wall time; the target
  is R within ±10%. The uncapped rate is beside it: a cap above it cannot bind.
* **adaptive reads** — the sweep capped at the highest of ``--rates`` on the quiet node, then
  the same sweep while ``--loaders`` other processes write to the node as fast as they can
  (another keyspace), both with the same slow-page threshold (``--slow-page``; default: 4 × the
  quiet capped sweep's p99 page latency, at least 50 ms: a page that slow means the node is
  busier than when it was measured). Reported: back-offs, the rate each ended at, rows/s, mean
  and p99 page latency. (An uncapped scan's pages are slow from its own load: its threshold must
  sit above that, as the default 1 s does.)

Other processes share the node and the machine: every figure is noisy; run it twice.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dircleaner.job.sweep import SweepConfig, run_sweep
from dircleaner.model import Shard
from dircleaner.paths import DEFAULT_BUCKET
from dircleaner.pipeline.build import BuildConfig, build_filter
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.scanrate import ScanRate, ScanStats
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.capabilities import index_writer
from dircleaner.synth import SynthSpec, generate
from dircleaner.workers.base import LocalWorkers

STATE_KEY = "bench:scan_rate:dataset"
#: the write load: rows per request batch, requests in flight
LOAD_BATCH = 200
LOAD_IN_FLIGHT = 32


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ensure_dataset(store: Store, dirs: int, seed: int) -> dict[str, Any]:
    """The synthetic dataset in the keyspace: loaded unless the keyspace already holds it."""
    params = {"dirs": dirs, "seed": seed}
    raw = store.get_state(STATE_KEY)
    if raw and json.loads(raw).get("params") == params:
        meta: dict[str, Any] = json.loads(raw)
        log(f"dataset cached: {meta['dirs']:,} dirs, {meta['objects']:,} objects")
        return meta
    for batch in store.scan_folder_rows(Shard()):
        if batch:
            raise SystemExit("the keyspace holds another dataset: use a keyspace of your own")
        break
    log(f"loading {dirs:,} directories")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result = generate(
            store,
            SynthSpec(dirs=dirs, seed=seed, bucket=DEFAULT_BUCKET),
            Path(tmp) / "truth.txt",
            spill_dir=Path(tmp),
        )
    meta = {
        "params": params,
        "dirs": result.dirs,
        "objects": result.objects,
        "load_s": round(time.perf_counter() - started, 1),
    }
    store.put_state(STATE_KEY, json.dumps(meta))
    log(f"loaded in {meta['load_s']}s")
    return meta


def figures(scan: ScanStats) -> dict[str, Any]:
    return {
        "rows": scan.rows,
        "seconds": round(scan.seconds, 2),
        "rows_per_s": round(scan.rows_per_s),
        "cap": scan.cap,
        "final_rate": round(scan.final_rate),
        "mean_page_ms": round(scan.mean_latency_s * 1000, 1),
        "p99_page_ms": round(scan.p99_latency_s * 1000, 1),
        "backoffs": scan.backoffs,
        "errors": scan.errors,
    }


@dataclass
class Passes:
    build: ScanStats
    sweep: ScanStats


def both_passes(store: Store, workers: int, rate: ScanRate) -> Passes:
    pool = LocalWorkers(workers)
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
    return Passes(built.scan, swept.scan)


def sweep_only(store: Store, generation: str, rate: ScanRate) -> ScanStats:
    config = SweepConfig(generation=generation, guards=GuardConfig(force=True), scan=rate)
    return run_sweep(store, config).scan


def write_load(url: str, seconds: float) -> None:
    """The second process: writes folder rows as fast as the node takes them, for a while."""
    with open_store(url, create=True) as store:
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            rows = [("load", f"p{(n + i) % 5000}/", f"r{n + i}") for i in range(LOAD_BATCH * 8)]
            index_writer(store).write_folder_rows(rows, int(time.time() * 1e6))
            n += len(rows)


def cap_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| pass | workers | --scan-rate | rows | seconds | rows/s | vs cap | mean / p99 page |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        cap = r["cap"]
        versus = f"{r['rows_per_s'] / cap - 1:+.1%}" if cap else "uncapped"
        lines.append(
            f"| {r['pass']} | {r['workers']} | {cap or 0:g} | {r['rows']:,} | {r['seconds']}"
            f" | {r['rows_per_s']:,} | {versus} | {r['mean_page_ms']} / {r['p99_page_ms']} ms |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="cassandra://host:9042/keyspace (yours)")
    parser.add_argument("--dirs", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rates", default="10000,25000", help="caps to measure, rows/s")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--slow-page", type=float, help="the slow-page threshold, seconds")
    parser.add_argument("--loaders", type=int, default=2, help="write-load processes")
    parser.add_argument("--skip-cap", action="store_true", help="only the adaptive reads")
    parser.add_argument("--skip-adaptive", action="store_true", help="only the scan cap")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    worker_counts = [int(w) for w in args.workers.split(",")]
    load_url = args.store.rsplit("/", 1)[0] + "/" + args.store.rsplit("/", 1)[1] + "_load"
    result: dict[str, Any] = {"store": args.store, "argv": sys.argv[1:]}
    with open_store(args.store, create=True) as store:
        result["dataset"] = ensure_dataset(store, args.dirs, args.seed)
        caps: list[dict[str, Any]] = []
        for workers in [] if args.skip_cap else worker_counts:
            for cap in [0.0, *rates]:
                log(f"both passes, {workers} worker(s), --scan-rate {cap:g}")
                passes = both_passes(store, workers, ScanRate(cap))
                for name, scan in (("build", passes.build), ("sweep", passes.sweep)):
                    caps.append({"pass": name, "workers": workers, **figures(scan)})
                    log(f"  {name}: {caps[-1]}")
        result["scan_cap"] = caps
        if args.skip_adaptive:
            print(cap_table(caps))
            return 0
        generation = build_filter(store, BuildConfig()).generation
        cap = max(rates)
        quiet_probe = sweep_only(store, generation, ScanRate(cap, adaptive=False))
        slow = args.slow_page or max(0.05, 4 * quiet_probe.p99_latency_s)
        log(f"adaptive reads at --scan-rate {cap:g}: slow-page threshold {slow * 1000:.0f} ms")
        quiet = sweep_only(store, generation, ScanRate(cap, slow))
        log(f"  quiet: {figures(quiet)}")
        with open_store(load_url, create=True):
            pass  # the load's keyspace and tables exist before the loaders start
        spawn = multiprocessing.get_context("spawn")
        loaders = [
            spawn.Process(target=write_load, args=(load_url, 3 * quiet.seconds + 60))
            for _ in range(args.loaders)
        ]
        for loader in loaders:
            loader.start()
        try:
            time.sleep(5)  # the load is under way
            loaded = sweep_only(store, generation, ScanRate(cap, slow))
            log(f"  under load: {figures(loaded)}")
        finally:
            for loader in loaders:
                loader.kill()
                loader.join()
        result["adaptive"] = {
            "scan_rate": cap,
            "loaders": args.loaders,
            "slow_page_ms": round(slow * 1000),
            "quiet": figures(quiet),
            "under_write_load": figures(loaded),
        }
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(cap_table(result["scan_cap"]))
    print()
    print(json.dumps(result["adaptive"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
