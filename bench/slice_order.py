"""The clean's first phase with its slices in ring order and slowest first (a second night).

    python bench/slice_order.py --dirs 2000000 --workers 2 --rounds 4

On a copy of one cached synthetic SQLite dataset: builds a filter, then alternates dry-run
cleans (sweep + re-check, nothing deleted, so every round sees the same data) with no record
of the last run's slice times (ring order, a first night) and with the record the previous
clean left (slowest first, every night after). Prints each round's first-phase seconds and
the recorded seconds per slice, then the fastest and the mean of each order.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from e2e import DEFAULT_CACHE, copy_dataset, ensure_dataset, store_url

from dircleaner.filter.bloom import load_kernels
from dircleaner.job.clean import CleanConfig, run_clean
from dircleaner.job.sliceorder import recorded_seconds, slice_seconds_key
from dircleaner.job.sweep import SweepConfig
from dircleaner.model import Shard
from dircleaner.pipeline.build import BuildConfig, build_filter, scope_of
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.store import open_store
from dircleaner.synth import SynthSpec
from dircleaner.workers.base import CLEAN, LocalWorkers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dirs", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args()
    if args.workers < 2:
        ap.error("--workers must be at least 2 (one worker runs one slice)")
    src_dir, _meta = ensure_dataset(args.cache_dir, SynthSpec(dirs=args.dirs, seed=args.seed))
    db = args.cache_dir / "slice-order.db"
    copy_dataset(src_dir / "meta.db", db)
    load_kernels()
    pool = LocalWorkers(args.workers)
    slices = len(pool.slices(Shard(), CLEAN))
    times: dict[str, list[float]] = {"ring order": [], "slowest first": []}
    with open_store(store_url(db)) as store:
        built = build_filter(store, BuildConfig(workers=args.workers), workers=pool)
        config = CleanConfig(
            sweep=SweepConfig(
                generation=built.generation,
                workers=args.workers,
                guards=GuardConfig(max_delete_fraction=1.0),
            ),
            min_age_s=0,
            dry_run=True,
        )
        key = slice_seconds_key(scope_of(store, None), Shard(), slices)
        for _ in range(args.rounds):
            for order, runs in times.items():
                if order == "ring order":
                    store.put_state(key, "[]")  # no usable record: a first night
                report = run_clean(store, config, workers=pool)
                phases = report.phase_seconds
                runs.append(phases["sweep"] + phases.get("verify", 0.0))
                recorded = recorded_seconds(store, key, slices)
                print(
                    json.dumps(
                        {
                            "order": order,
                            "first_phase_s": round(runs[-1], 3),
                            "recorded_s": recorded,
                        }
                    ),
                    flush=True,
                )
    for order, runs in times.items():
        print(f"{order}: fastest {min(runs):.2f} s, mean {sum(runs) / len(runs):.2f} s")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s in all)", file=sys.stderr)
