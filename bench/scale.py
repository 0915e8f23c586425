"""Scaling benchmark: the build and the clean at 1, 2, 4, … workers, locally and on Dask.

    python bench/scale.py --dirs 200000 --workers 1,2 --modes local,dask,localcluster

Modes (each at every worker count, on a fresh copy of one cached synthetic SQLite dataset):

* ``local``: the default, N forked processes taking slices as they free up (``--workers N``);
* ``dask``: a ``dask scheduler`` and N ``dask worker --nthreads 1`` processes started here on
  loopback with ``scripts/dask-worker.yaml`` (the README's worker settings), the job as a
  client of it (``--scheduler``), sliced as the CLI slices it;
* ``localcluster``: a ``distributed.LocalCluster`` of N one-thread worker processes, to decide
  whether it could replace the fork pool as the local default.

Per phase (build; the clean's sweep + re-check; its plan + deletes): seconds, directories per
second, and speedup over one worker of the same mode; the ratio of each mode to ``local`` at the
same N. Per-task overheads: opening a store connection, loading the filter, and a no-op task's
round trip through the mechanism. Before anything is timed, the compiled filter kernels are
loaded in this process and in every worker (untimed, about a second per process): a Dask worker
is a long-lived process that loads them once, and the CLI's local run loads them in the
background while it sizes or reads the filter. JSON (``--out``) and a Markdown table. Ratios
within one run are what count: absolute seconds on a shared machine are noise. So each point
also times the two scans alone (rows read and counted, nothing else) through the same workers
and slices: the job's speedup reads against what the machine gave its scans in the same run.

``--night first`` (the default) cleans with no record of a last run, so the clean's slices go in
ring order; ``--night later`` first runs each point once untimed and starts each timed clean
from the slice times that run recorded, as every night after the first does (the slowest slice
first). Only the record is carried over: the timed run's caches start cold either way.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from e2e import (
    DEFAULT_CACHE,
    copy_dataset,
    count_folder_rows,
    count_object_partitions,
    ensure_dataset,
    store_url,
)

from dircleaner.filter.bloom import load_kernels
from dircleaner.job.clean import CleanConfig, run_clean
from dircleaner.job.sliceorder import slice_seconds_key
from dircleaner.job.sweep import SweepConfig, load_filter
from dircleaner.model import Shard
from dircleaner.pipeline.build import BuildConfig, build_filter, scope_of
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.synth import SynthSpec
from dircleaner.workers.base import LocalWorkers, Workers

ROOT = Path(__file__).resolve().parent.parent


def _loopback_cluster(logs: Path, n: int) -> Any:
    """The tests' loopback cluster (``tests/daskcluster.py``: the real ``dask scheduler`` and
    ``dask worker`` commands with the README's worker settings), loaded from its file: a bench
    runs as a script, where the installed package and this directory are importable, not the
    tests."""
    spec = importlib.util.spec_from_file_location("daskcluster", ROOT / "tests" / "daskcluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LoopbackCluster(logs, workers=n)


@contextmanager
def mechanism(mode: str, n: int, logs: Path) -> Iterator[Workers]:
    """The workers of ``mode`` with ``n`` one-thread workers; started (not timed) and torn down."""
    if mode == "local":
        yield LocalWorkers(n)
        return
    from dircleaner.workers.daskcluster import DaskWorkers

    if mode == "dask":
        cluster = _loopback_cluster(logs, n)
        try:
            pool = DaskWorkers(cluster.address)
            try:
                yield pool
            finally:
                pool.close()
        finally:
            cluster.close()
        return
    from distributed import LocalCluster

    with LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None
    ) as local:
        pool = DaskWorkers(local.scheduler_address)
        try:
            yield pool
        finally:
            pool.close()


def _noop(store: Store, shard: Shard, progress: Any) -> int:
    return shard.index


def _count_object_partitions(store: Store, shard: Shard, progress: Any) -> int:
    return count_object_partitions(store, shard)


def _count_folder_rows(store: Store, shard: Shard, progress: Any) -> int:
    return count_folder_rows(store, shard)


def scan_floor(pool: Workers, url: str) -> dict[str, float]:
    """The two scans alone (rows read and counted, nothing else), through the same workers and
    slices as the build and the clean: what the job would take if its per-row work cost
    nothing. On its own connection, so the job's starts as cold as without it."""
    out: dict[str, float] = {}
    with open_store(url) as store:
        for phase, purpose, count in (
            ("floor_build", "build", _count_object_partitions),
            ("floor_sweep", "clean", _count_folder_rows),
        ):
            started = time.perf_counter()
            pool.map_shards(store, pool.slices(Shard(), purpose), count, "floor")
            out[f"{phase}_s"] = time.perf_counter() - started
    return out


def overheads(pool: Workers, db: Path, generation: str) -> dict[str, float]:
    """What a task pays before its work: a store connection, the filter, the round trip."""
    started = time.perf_counter()
    with open_store(store_url(db)) as store:
        connect_s = time.perf_counter() - started
        started = time.perf_counter()
        load_filter(store, SweepConfig(generation=generation))
        filter_s = time.perf_counter() - started
        shards = Shard().split(32)
        started = time.perf_counter()
        pool.map_shards(store, shards, _noop, "noop")
        task_s = (time.perf_counter() - started) / len(shards)
    return {"connect_s": connect_s, "filter_load_s": filter_s, "noop_task_s": task_s}


def one(
    mode: str, n: int, src: Path, work: Path, dirs: int, last_night: str | None = None
) -> dict[str, Any]:
    """One point on a fresh copy of the dataset. ``last_night`` is the slice-time record a
    previous clean of the same point left (None: a first night, slices in ring order); the
    record this clean leaves is returned as ``slice_record``."""
    db = work / f"scale-{mode}-{n}.db"
    copy_dataset(src, db)
    url = store_url(db)
    out: dict[str, Any] = {"mode": mode, "workers": n, "later_night": last_night is not None}
    with mechanism(mode, n, work) as pool, open_store(url) as store:
        out["slices_build"] = len(pool.slices(Shard(), "build"))
        out["slices_clean"] = len(pool.slices(Shard(), "clean"))
        record_key = slice_seconds_key(scope_of(store, None), Shard(), out["slices_clean"])
        if last_night is not None:
            # Only the record is carried over: every cache (this connection's, the workers')
            # starts as cold as on a first night.
            store.put_state(record_key, last_night)
        load_kernels()
        client = getattr(pool, "client", None)
        if client is not None:
            client.run(load_kernels)  # each worker's, as a long-lived worker has them
        out.update(scan_floor(pool, url))
        started = time.perf_counter()
        built = build_filter(store, BuildConfig(fpr=0.01, workers=n), workers=pool)
        out["build_s"] = time.perf_counter() - started
        config = CleanConfig(
            sweep=SweepConfig(
                generation=built.generation,
                workers=n,
                guards=GuardConfig(max_delete_fraction=1.0),
            ),
            min_age_s=0,
            throttle=ThrottleConfig(rate=0, concurrency=1000),
            audit_log=work / f"scale-{mode}-{n}.jsonl",
        )
        started = time.perf_counter()
        report = run_clean(store, config, workers=pool)
        out["clean_s"] = time.perf_counter() - started
        # The first phase (sweep + re-check) as the run timed it: from its start to the decision.
        # (The first delete's progress, used before, came after that slice's plan: with one
        # in-process slice, the whole plan counted as sweep.) The rest is the second phase and
        # what surrounds the phases (the filter load, the lease, the decision).
        phases = report.phase_seconds
        out["sweep_verify_s"] = phases.get("sweep", 0.0) + phases.get("verify", 0.0)
        out["plan_delete_s"] = out["clean_s"] - out["sweep_verify_s"]
        out["deleted"] = report.deleted.directories if report.deleted else 0
        out["phase_seconds"] = report.phase_seconds
        out["slice_record"] = store.get_state(record_key)
        out.update(overheads(pool, db, built.generation))
    for phase in ("build", "sweep_verify", "clean"):
        out[f"{phase}_dirs_per_s"] = dirs / out[f"{phase}_s"] if out[f"{phase}_s"] else None
    for suffix in ("", "-wal", "-shm", ".jsonl"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    Path(work / f"scale-{mode}-{n}.jsonl").unlink(missing_ok=True)
    return out


def fastest(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One point's runs as one row: each timed phase at its fastest (noise only adds time), the
    job's own phase times included."""
    row = dict(runs[0])
    for key in row:
        if key.endswith("_dirs_per_s"):  # before "_s", which it also ends with
            row[key] = max(r[key] or 0 for r in runs) or None
        elif key.endswith("_s"):
            row[key] = min(r[key] for r in runs)
    phases = {phase for r in runs for phase in r["phase_seconds"]}
    row["phase_seconds"] = {
        phase: min(r["phase_seconds"][phase] for r in runs if phase in r["phase_seconds"])
        for phase in sorted(phases)
    }
    row["runs"] = len(runs)
    return row


PHASES = ("build", "sweep_verify", "plan_delete", "clean")


def ratios(rows: list[dict[str, Any]]) -> None:
    """Speedup over one worker of the same mode; each mode against ``local`` at the same N."""
    by = {(r["mode"], r["workers"]): r for r in rows}
    for r in rows:
        base = by.get((r["mode"], 1))
        local = by.get(("local", r["workers"]))
        for phase in (*PHASES, "floor_build", "floor_sweep"):
            if base:
                r[f"{phase}_speedup"] = base[f"{phase}_s"] / r[f"{phase}_s"]
            if local:
                r[f"{phase}_vs_local"] = r[f"{phase}_s"] / local[f"{phase}_s"]


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| mode | N | slices b/c | build s (×) | sweep+verify s (×) | plan+delete s (×) |"
        " clean s (×) | scans alone: build / sweep s (×) | vs local: build / clean |"
        " task rtt ms | connect ms | filter ms |"
    )
    lines = [head, "|" + "---|" * 12]
    for r in rows:

        def cell(phase: str, r: dict[str, Any] = r) -> str:
            return f"{r[f'{phase}_s']:.2f} ({r.get(f'{phase}_speedup', 0):.2f})"

        lines.append(
            f"| {r['mode']} | {r['workers']} | {r['slices_build']}/{r['slices_clean']} |"
            f" {cell('build')} | {cell('sweep_verify')} | {cell('plan_delete')} |"
            f" {cell('clean')} | {cell('floor_build')} / {cell('floor_sweep')} |"
            f" {r.get('build_vs_local', 0):.2f} / {r.get('clean_vs_local', 0):.2f} |"
            f" {r['noop_task_s'] * 1e3:.1f} | {r['connect_s'] * 1e3:.1f} |"
            f" {r['filter_load_s'] * 1e3:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dirs", type=int, required=True)
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--modes", default="local,dask,localcluster")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds over every point, interleaved (each phase keeps its fastest time)",
    )
    ap.add_argument(
        "--night",
        choices=("first", "later"),
        default="first",
        help="first: no record of a last run (the clean's slices in ring order); later: each"
        " point's cleans start from the slice times an untimed run of the same point recorded,"
        " as a nightly job's second and later nights do (slowest slice first)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    src_dir, meta = ensure_dataset(args.cache_dir, SynthSpec(dirs=args.dirs, seed=args.seed))
    src = src_dir / "meta.db"
    counts = [int(x) for x in args.workers.split(",")]
    modes = args.modes.split(",")
    last_night: dict[tuple[str, int], str | None] = {}
    if args.night == "later":
        for n in counts:
            for mode in modes:
                # Untimed: only its record is kept (one slice records nothing: nothing to order).
                last_night[(mode, n)] = one(mode, n, src, args.cache_dir, meta["dirs"])[
                    "slice_record"
                ]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for _ in range(args.repeat):
        # Every point once per round, modes interleaved at each N, so that a noisy neighbour
        # or the machine's drift hits them alike.
        for n in counts:
            for mode in modes:
                record = last_night.get((mode, n))
                run = one(mode, n, src, args.cache_dir, meta["dirs"], record)
                runs.setdefault((mode, n), []).append(run)
                print(json.dumps(run), file=sys.stderr, flush=True)
    rows = [fastest(runs[point]) for point in sorted(runs)]
    ratios(rows)
    result = {
        "dirs": meta["dirs"],
        "night": args.night,
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(markdown(rows))


if __name__ == "__main__":
    main()
