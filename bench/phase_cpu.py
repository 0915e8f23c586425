"""The build's and the sweep's CPU against their own scans', interleaved, in one run.

    python bench/phase_cpu.py --dirs 1000000 --rounds 3 [--workers 2] [--steps | --profile sweep]

On a copy of ``e2e.py``'s cached dataset (after an untimed previous night's build), each round
counts CPU seconds (what other work on a shared machine disturbs least), in this order:

* ``scan_objects``: ``--workers`` processes scanning the objects table's partition keys over
  the build's slices, counting them (``count_object_partitions``, GC paused), as ``e2e.py``'s
  floor does;
* ``build``: ``build_filter`` with ``--workers`` (sizing, serialising and storing the filter
  included: the job's build phase), this process's CPU and its forked workers';
* ``scan_folders``: the same for the folders table's rows over the clean's slices
  (``count_folder_rows``);
* ``sweep``: the sweep phase (re-check excluded): ``sweep`` over the store's packed scan through
  the workers over the clean's slices, as the clean's first phase runs it (only the totals go
  back to this process);
* ``build_loop`` (one worker only): the build's per-batch work alone (``packed_ancestors`` and
  the filter's ``add_ranges``) over the same scan, without sizing or storing.

``--fixed N`` measures instead what each job process pays before its first row, in ``N`` fresh
interpreters (CPU and wall seconds, min and median): importing numpy, then ``load_kernels()`` as
the job calls it (the kernels compiled ahead of time by ``make install``, without numba, where
built: ``ahead_of_time``), then numba's path for comparison: importing numba, importing the
kernel module, and ``warm_up()`` (loading the kernels' cached machine code: numba sets up its
typing and lowering tables on the first load, which is most of it; a first run on a machine
compiles them instead, reported as ``compiled``). The job loads the kernels once, in its first
process; the forked workers inherit them.

The fastest of the rounds is kept per step; ``build_over_scan`` and ``sweep_over_scan`` are the
ratios of CPU seconds. ``--profile`` runs one step under cProfile and prints its top functions.

``--steps`` splits the work beyond reading instead, per row, on batches read beforehand: the
sweep's filter tests (rows, partition directories and their parents), partition boundaries,
key shapes and the rest (candidates and partition bookkeeping: the sweep over the same batches
less those steps), and the build's ancestor walk and filter inserts; beside them the reads
(the packed scans the job uses, and the floors' row scans).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import pstats
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sized
from pathlib import Path
from typing import Any

from e2e import (
    DEFAULT_CACHE,
    _parallel_scan,
    copy_dataset,
    ensure_dataset,
    store_url,
)

from dircleaner.filter.bloom import finish_loading_kernels, start_loading_kernels
from dircleaner.filter.engines import new_filter
from dircleaner.gcpause import cyclic_gc_paused
from dircleaner.job.sweep import SweepConfig, load_filter
from dircleaner.model import Shard
from dircleaner.pipeline.build import BuildConfig, build_filter, packed_ancestors
from dircleaner.pipeline.sweep import SweepTotals, sweep
from dircleaner.progress import Progress
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.synth import SynthSpec
from dircleaner.workers.base import BUILD, CLEAN, LocalWorkers


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


def _best(rounds: int, step: Callable[[], Any]) -> float:
    """The fewest CPU seconds ``step`` took in ``rounds`` tries."""
    best = math.inf
    for _ in range(rounds):
        cpu = time.process_time()
        step()
        best = min(best, time.process_time() - cpu)
    return best


def steps_per_row(
    store: Store, filt: Any, capacity: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Nanoseconds of CPU per row of each step of the sweep and the build (GC paused)."""
    from dircleaner.pipeline import sweep as sweep_module

    with cyclic_gc_paused():
        folders = list(store.scan_folder_keys(Shard()))
        objects = list(store.scan_object_keys(Shard()))
        rows = sum(map(len, folders))
        parts = sum(map(len, objects))
        starts = [sweep_module._partition_starts(b) for b in folders]
        heads = [(b.offsets[s], b.prefix_ends[s]) for b, s in zip(folders, starts, strict=True)]
        ancestors = [packed_ancestors(b) for b in objects]
        r = args.rounds

        def tests() -> None:
            for b, (lo, hi) in zip(folders, heads, strict=True):
                sweep_module._contains(filt, b.buf, b.offsets[:-1], b.offsets[1:])
                sweep_module._partition_dirs_present(filt, b.buf, lo, hi)

        def shapes() -> None:
            for b, (lo, hi) in zip(folders, heads, strict=True):
                sweep_module._key_shapes(b.buf, lo, hi)

        def inserts() -> None:
            fresh = new_filter("mmh3", capacity, args.fpr, 12345)
            for buf, lo, hi in ancestors:
                fresh.add_ranges(buf, lo, hi)

        seconds = {
            "sweep: read, packed (scan_folder_keys)": _best(r, lambda: _drain(store, "keys")),
            "sweep: read, rows (the floor's scan_folder_rows)": _best(
                r, lambda: _drain(store, "rows")
            ),
            "sweep: all the work on read batches": _best(r, lambda: sweep(folders, filt)),
            "sweep: filter tests (rows, partitions, parents)": _best(r, tests),
            "sweep: partition boundaries": _best(
                r, lambda: [sweep_module._partition_starts(b) for b in folders]
            ),
            "sweep: key shapes (directory, parent)": _best(r, shapes),
            "build: read, packed (scan_object_keys)": _best(r, lambda: _drain(store, "objects")),
            "build: read, rows (the floor's scan_object_partitions)": _best(
                r, lambda: _drain(store, "partitions")
            ),
            "build: ancestor walk": _best(r, lambda: [packed_ancestors(b) for b in objects]),
            "build: filter inserts": _best(r, inserts),
        }
    per = {k: v / (parts if k.startswith("build") else rows) * 1e9 for k, v in seconds.items()}
    named = ("filter tests", "partition boundaries", "key shapes")
    per["sweep: candidates and partition bookkeeping (the rest)"] = per[
        "sweep: all the work on read batches"
    ] - sum(v for k, v in per.items() if k.startswith("sweep") and any(n in k for n in named))
    return {
        "rows": rows,
        "object_partitions": parts,
        "ancestor_keys": sum(len(starts) for _, starts, _ in ancestors),
        "ns_per_row": {k: round(v) for k, v in per.items()},
        "cpu_s": seconds,
    }


def _drain(store: Store, what: str) -> int:
    scans: dict[str, Callable[[Shard], Iterator[Sized]]] = {
        "keys": store.scan_folder_keys,
        "rows": store.scan_folder_rows,
        "objects": store.scan_object_keys,
        "partitions": store.scan_object_partitions,
    }
    return sum(len(batch) for batch in scans[what](Shard()))


# One fresh interpreter's fixed cost, step by step: (step, CPU seconds, wall seconds) as JSON.
_FIXED = """
import json, sys, time
marks = [(time.process_time(), time.perf_counter())]
def mark():
    marks.append((time.process_time(), time.perf_counter()))
import numpy
mark()
from dircleaner.filter import aot, bloom
bloom.load_kernels()
mark()
ahead = isinstance(bloom.compiled(), aot.Compiled) and "numba" not in sys.modules
import numba
mark()
from dircleaner.filter import kernel
mark()
kernel.warm_up()
mark()
names = ("import numpy", "load_kernels (as a job process)", "import numba",
         "import the kernel module", "warm_up (load the kernels)")
steps = {n: (b[0] - a[0], b[1] - a[1]) for n, a, b in zip(names, marks, marks[1:])}
compiled = any(d.stats.cache_misses for d in (kernel.add_many, kernel.contains_many))
print(json.dumps({"steps": steps, "compiled": compiled, "ahead_of_time": ahead}))
"""


def fixed_cost(processes: int) -> dict[str, Any]:
    """What a job process pays before its first row, in ``processes`` fresh interpreters."""
    runs = []
    for _ in range(processes):
        out = subprocess.run(
            [sys.executable, "-c", _FIXED], check=True, capture_output=True, text=True
        ).stdout
        runs.append(json.loads(out))
    result: dict[str, Any] = {
        "processes": processes,
        "compiled": [r["compiled"] for r in runs],
        "ahead_of_time": [r["ahead_of_time"] for r in runs],
    }
    for step in runs[0]["steps"]:
        for i, what in enumerate(("cpu_s", "wall_s")):
            values = [r["steps"][step][i] for r in runs]
            result[f"{step}: {what} min / median"] = (min(values), statistics.median(values))
    job = [sum(r["steps"][step][0] for step in list(r["steps"])[:2]) for r in runs]
    result["job process cpu_s min / median"] = (min(job), statistics.median(job))
    jit = [
        sum(cpu for step, (cpu, _) in r["steps"].items() if step != list(r["steps"])[1])
        for r in runs
    ]
    result["numba path cpu_s min / median"] = (min(jit), statistics.median(jit))
    return result


def _cpu() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dirs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--empty-fraction", type=float, default=0.05)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1, help="the job's --workers")
    ap.add_argument("--fpr", type=float, default=0.005)
    ap.add_argument("--profile", choices=("build", "build_loop", "sweep"))
    ap.add_argument("--steps", action="store_true", help="per-row split of the work")
    ap.add_argument("--fixed", type=int, metavar="N", help="fixed cost in N fresh processes")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.fixed:
        fixed = json.dumps(fixed_cost(args.fixed), indent=2)
        if args.out:
            args.out.write_text(fixed + "\n")
        print(fixed)
        return

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

    workers = args.workers
    pool = LocalWorkers(workers)

    def floor(table: str) -> float:
        """CPU seconds of ``workers`` processes scanning ``table`` over the job's slices."""
        shards = pool.slices(Shard(), BUILD if table == "objects" else CLEAN)
        return _parallel_scan(url, workers, shards, table)[2]

    def run_build() -> None:
        build_filter(store, BuildConfig(fpr=args.fpr, workers=workers))

    def sweep_part(part_store: Store, shard: Shard, report: Progress) -> SweepTotals:
        # As the clean's first phase: the totals go back, the candidates stay in the worker.
        return sweep(part_store.scan_folder_keys(shard), loaded.filt, report).totals()

    def sweep_only() -> None:
        with cyclic_gc_paused():
            pool.map_shards(store, pool.slices(Shard(), CLEAN), sweep_part, "sweep")

    # A step returns the CPU seconds it measured in its own processes, or None: then this
    # process's and its reaped children's are counted (the job's forked workers).
    steps: dict[str, Callable[[], float | None]] = {
        "scan_objects": lambda: floor("objects"),
        "build": run_build,
        "scan_folders": lambda: floor("folders"),
        "sweep": sweep_only,
    }
    if workers == 1:
        steps["build_loop"] = lambda: build_loop(store, capacity, args.fpr) and None
    if args.steps:
        result = steps_per_row(store, loaded.filt, capacity, args)
        print(json.dumps(result, indent=2))
        if args.out:
            args.out.write_text(json.dumps(result, indent=2) + "\n")
        return
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
            before = _cpu()
            measured = step()
            spent = measured if measured is not None else _cpu() - before
            every[name].append(round(spent, 4))
            best[name] = min(best.get(name, spent), spent)
    store.close()
    result = {
        "dirs": meta["dirs"],
        "workers": workers,
        "cpu_s": best,
        "build_over_scan": best["build"] / best["scan_objects"],
        "build_loop_over_scan": best.get("build_loop", math.nan) / best["scan_objects"],
        "sweep_over_scan": best["sweep"] / best["scan_folders"],
        "every_round": every,
    }
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
