"""The build's and the sweep's CPU against their own scans', in one process, interleaved.

    python bench/phase_cpu.py --dirs 1000000 --rounds 3 [--profile build|sweep]

On a copy of ``e2e.py``'s cached dataset, each round times with ``time.process_time`` (CPU of
this process: what other work on a shared machine disturbs least), in this order:

* ``scan_objects``: the objects table's partition keys, counted (``count_object_partitions``);
* ``build_loop``: the same scan with the build's per-batch work (``packed_ancestors`` and the
  filter's ``add_ranges``), as one build worker runs it;
* ``build``: ``build_filter`` with one worker, sizing, serialising and storing the filter
  included (the job's build phase);
* ``scan_folders``: the folders table's rows, counted (``count_folder_rows``);
* ``sweep``: ``sweep`` over the same scan against the filter just built (the job's sweep
  phase, re-check excluded).

The fastest of the rounds is kept per step; ``build_over_scan`` and ``sweep_over_scan`` are the
ratios of CPU seconds. ``--profile`` runs one step under cProfile and prints its top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.e2e import (
    DEFAULT_CACHE,
    copy_dataset,
    count_folder_rows,
    count_object_partitions,
    ensure_dataset,
    store_url,
)
from dircleaner.filter.bloom import finish_loading_kernels, start_loading_kernels
from dircleaner.filter.engines import new_filter
from dircleaner.gcpause import cyclic_gc_paused
from dircleaner.job.run import SweepConfig, load_filter
from dircleaner.model import Shard
from dircleaner.pipeline.build import BuildConfig, build_filter, packed_ancestors
from dircleaner.pipeline.sweep import sweep
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.synth import SynthSpec


def build_loop(store: Store, capacity: int, fpr: float) -> int:
    """One build worker's loop over the whole ring, without sizing or storing the filter."""
    filt = new_filter("mmh3", capacity, fpr, 12345)
    inserted = 0
    with cyclic_gc_paused():
        for batch in store.scan_object_keys(Shard()):
            buf, starts, ends = packed_ancestors(batch)
            inserted += len(starts)
            if len(starts):
                filt.add_ranges(buf, starts, ends)
    return inserted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dirs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--empty-fraction", type=float, default=0.05)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fpr", type=float, default=0.005)
    ap.add_argument("--profile", choices=("build", "build_loop", "sweep"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    spec = SynthSpec(dirs=args.dirs, seed=args.seed, empty_fraction=args.empty_fraction)
    data, meta = ensure_dataset(args.cache_dir, spec)
    work = args.cache_dir / f"phase-cpu-d{args.dirs}-s{args.seed}"
    work.mkdir(parents=True, exist_ok=True)
    db = work / "meta.db"
    copy_dataset(data / "meta.db", db)
    url = store_url(db)
    start_loading_kernels()
    finish_loading_kernels()
    store = open_store(url)
    # The previous night's build, untimed: it sizes the timed ones as a nightly job is sized.
    generation = build_filter(store, BuildConfig(fpr=args.fpr)).generation
    loaded = load_filter(store, SweepConfig(generation=generation))
    capacity = loaded.header.expected_n

    def run_sweep() -> int:
        with cyclic_gc_paused():
            return sweep(store.scan_folder_keys(Shard()), loaded.filt).swept_rows

    steps: dict[str, Callable[[], Any]] = {
        "scan_objects": lambda: count_object_partitions(store, Shard()),
        "build_loop": lambda: build_loop(store, capacity, args.fpr),
        "build": lambda: build_filter(store, BuildConfig(fpr=args.fpr)).keys_inserted,
        "scan_folders": lambda: count_folder_rows(store, Shard()),
        "sweep": run_sweep,
    }
    if args.profile:
        steps[args.profile]()  # warm the page cache
        prof = cProfile.Profile()
        prof.enable()
        steps[args.profile]()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return
    best: dict[str, float] = {}
    every: dict[str, list[float]] = {name: [] for name in steps}
    steps["scan_objects"]()  # warm the page cache
    steps["scan_folders"]()
    for _ in range(args.rounds):
        for name, step in steps.items():
            cpu = time.process_time()
            step()
            spent = time.process_time() - cpu
            every[name].append(round(spent, 4))
            best[name] = min(best.get(name, spent), spent)
    store.close()
    result = {
        "dirs": meta["dirs"],
        "cpu_s": best,
        "build_loop_over_scan": best["build_loop"] / best["scan_objects"],
        "build_over_scan": best["build"] / best["scan_objects"],
        "sweep_over_scan": best["sweep"] / best["scan_folders"],
        "every_round": every,
    }
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
