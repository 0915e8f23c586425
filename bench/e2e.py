"""End-to-end benchmark: ``dircleaner run`` against its scan-only floor, on a synthetic dataset.

    python bench/e2e.py --dirs 1000000 --out result.json

1. Generates (once; cached under ``--cache-dir``, keyed by the dataset parameters) a synthetic
   SQLite metastore of about ``--dirs`` directories and its ground truth (the empty directories).
2. Copies the dataset file to a scratch file (not timed), so the cached dataset stays pristine.
3. Measures, in this one run, on that copy:
   * the *scan-only floor*: the two scans the job needs (object partition keys, folder rows),
     doing no work, single process;
   * the same floor at the job's parallelism: ``--workers`` processes, each scanning its slice
     of the ring (the job's own slicing), objects first, then folders
     (``run_over_scan_same_parallelism``: the job's own work against the scans it must do),
     and the same in CPU seconds of all processes (``run_over_scan_cpu``), which a machine
     shared with other work disturbs far less than wall time;
   * the full ``dircleaner run`` (build + sweep + verify + plan + deletes, ``--rate 0``) with
     ``--workers`` processes, as a subprocess whose process tree is sampled for RSS/PSS;
   * the filter engines, ours vs ``pybloom-live``, on the same keys (a sample at scale);
   * the filter's false-positive rate on known negatives (the truly empty directories), and the
     precision and recall of the deletes (the audit log) against the ground truth;
   * the size of an exact Python ``set`` of the directories (sampled and extrapolated).
4. Writes JSON (``--out``) and prints a Markdown table.

Each pass against its own scan (``build_over_scan``, ``sweep_over_scan``) is taken from a floor at
the job's parallelism measured right before the job. With ``--repeat N`` the floor/job pair runs N
times, each on a fresh copy after its own previous night's build, and each per-phase figure is the
median of the rounds with every round's value beside it: at 1M a pass lasts about a second, and one
pair alone says more about the machine's minute than about the job. ``--ratios-only`` measures only
those pairs (no single-process floor, engine comparison nor set sample).

Speed is a ratio (``run_over_scan``) measured in one run: absolute seconds on a shared machine are
noise.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from night import CLI as _CLI
from night import (
    add_night_arguments,
    hashed,
    measured_cli,
    night_figures,
    peak_rss_by_phase,
    resolve_night_arguments,
    score_audit,
    truth_lines,
)

from dircleaner.filter.engines import new_filter
from dircleaner.filter.sizing import DEFAULT_FPR
from dircleaner.gcpause import cyclic_gc_paused
from dircleaner.job.sweep import SweepConfig, load_filter
from dircleaner.model import Shard
from dircleaner.paths import DEFAULT_BUCKET, filter_key
from dircleaner.pipeline.build import packed_ancestors
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.synth import GENERATOR_VERSION, SynthSpec, generate
from dircleaner.workers.base import BUILD, CLEAN, LocalWorkers

DEFAULT_CACHE = Path(__file__).resolve().parent / ".cache"
BATCH = 10_000


# -- the dataset ------------------------------------------------------------------------------


def dataset_dir(cache: Path, spec: SynthSpec) -> Path:
    return cache / (
        f"synth-d{spec.dirs}-s{spec.seed}-e{spec.empty_fraction:g}-{spec.bucket}"
        f"-g{GENERATOR_VERSION}"
    )


def ensure_dataset(cache: Path, spec: SynthSpec) -> tuple[Path, dict[str, Any]]:
    """The cached dataset for ``spec``, generated once, atomically (a partial one is redone)."""
    final = dataset_dir(cache, spec)
    meta_path = final / "gen.json"
    if meta_path.is_file():
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        meta["cached"] = True
        return final, meta
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    print(f"generating {spec.dirs:,} directories into {final} ...", file=sys.stderr)
    store = open_store(f"sqlite:///{(partial / 'meta.db').resolve()}", create=True)
    started = time.perf_counter()
    try:
        result = generate(store, spec, partial / "truth.txt", spill_dir=partial)
    finally:
        store.close()
    meta = {
        "dirs": result.dirs,
        "empty_dirs": result.empty_dirs,
        "objects": result.objects,
        "gen_s": time.perf_counter() - started,
        "generate_s": result.generate_seconds,
        "load_s": result.load_seconds,
        "timestamp_us": result.timestamp_us,
    }
    (partial / "gen.json").write_text(json.dumps(meta, indent=2))
    partial.rename(final)
    meta["cached"] = False
    return final, meta


def store_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def _remove_copy(db: Path) -> None:
    """A scratch copy of the database, with its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def copy_dataset(src: Path, dst: Path) -> float:
    """Copy the database file (the dataset is checkpointed: no WAL to carry over)."""
    started = time.perf_counter()
    _remove_copy(dst)
    shutil.copyfile(src, dst)
    # Flush the copy's dirty pages now: writeback running during the floor would slow it down
    # and flatter run_over_scan.
    os.sync()
    return time.perf_counter() - started


# -- the floor --------------------------------------------------------------------------------


def count_object_partitions(store: Store, shard: Shard) -> int:
    """The build's scan of one slice, doing nothing with the rows but count them. The cyclic GC
    is paused, as the job pauses it: with it running, this process's scans took 20-60% longer,
    which made a floor the job was measured against too slow."""
    with cyclic_gc_paused():
        return sum(len(batch) for batch in store.scan_object_partitions(shard))


def count_folder_rows(store: Store, shard: Shard) -> int:
    """The sweep's scan of one slice, doing nothing with the rows but count them (GC paused)."""
    with cyclic_gc_paused():
        return sum(len(batch) for batch in store.scan_folder_rows(shard))


def scan_floor(store: Store) -> dict[str, Any]:
    """The two scans of the job, doing nothing with the rows, in this one process."""
    started = time.perf_counter()
    partitions = count_object_partitions(store, Shard())
    mid = time.perf_counter()
    rows = count_folder_rows(store, Shard())
    done = time.perf_counter()
    return {
        "scan_only_s": done - started,
        "scan_objects_s": mid - started,
        "scan_folders_s": done - mid,
        "object_partitions": partitions,
        "folder_rows": rows,
    }


def _scan_slices(url: str, todo: Any, table: str, out: Any) -> None:
    """One floor worker: scan slices of one table as they free up (as the job's workers take
    them), doing nothing with the rows; send the count and this process's CPU seconds."""
    cpu = time.process_time()
    count = 0
    store = open_store(url)
    try:
        scan = count_object_partitions if table == "objects" else count_folder_rows
        while (shard := todo.get()) is not None:
            count += scan(store, shard)
    finally:
        store.close()
    out.send((count, time.process_time() - cpu))


def _parallel_scan(
    url: str, processes: int, shards: list[Shard], table: str
) -> tuple[float, int, float]:
    """(wall seconds, rows, CPU seconds of all processes) of ``processes`` processes scanning
    ``table``'s ``shards`` between them, each taking the next slice when it is done."""
    ctx = multiprocessing.get_context("fork")
    todo: Any = ctx.Queue()
    for shard in shards:
        todo.put(shard)
    for _ in range(processes):
        todo.put(None)
    pipes = [ctx.Pipe(duplex=False) for _ in range(processes)]
    procs = [ctx.Process(target=_scan_slices, args=(url, todo, table, send)) for _, send in pipes]
    started = time.perf_counter()
    for proc in procs:
        proc.start()
    sent = [recv.recv() for recv, _ in pipes]
    seconds = time.perf_counter() - started
    total = sum(int(count) for count, _ in sent)
    cpu = sum(float(seconds) for _, seconds in sent)
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise SystemExit(f"a floor worker failed (exit {proc.exitcode})")
    return seconds, total, cpu


def scan_floor_parallel(db: Path, workers: int) -> dict[str, Any]:
    """The two scans at the job's parallelism: ``workers`` processes scanning the slices the
    job's own workers cut (``LocalWorkers.slices``: one per worker for the build, several per
    worker for the sweep, taken as they free up), doing nothing with the rows; all objects
    slices first, then all folders slices, as the job's build and sweep come one after the
    other."""
    pool = LocalWorkers(workers)
    build_slices, clean_slices = pool.slices(Shard(), BUILD), pool.slices(Shard(), CLEAN)
    url = store_url(db)
    objects_s, partitions, objects_cpu = _parallel_scan(url, workers, build_slices, "objects")
    folders_s, rows, folders_cpu = _parallel_scan(url, workers, clean_slices, "folders")
    return {
        "scan_only_s": objects_s + folders_s,
        "scan_only_cpu_s": objects_cpu + folders_cpu,
        "scan_objects_cpu_s": objects_cpu,
        "scan_folders_cpu_s": folders_cpu,
        "scan_objects_s": objects_s,
        "scan_folders_s": folders_s,
        "object_partitions": partitions,
        "folder_rows": rows,
        "processes": workers,
        "slices": {"objects": len(build_slices), "folders": len(clean_slices)},
    }


def phase_ratios(run_s: float, phases: dict[str, float], floor: dict[str, Any]) -> dict[str, Any]:
    """Each pass against its own scan at the same parallelism, and the job's other costs.

    ``build_over_scan``: the build phase (sizing included) over the objects floor;
    ``sweep_over_scan``: the sweep phase (the re-check excluded) over the folders floor.
    ``startup_s`` is what no phase clock covers: the interpreter, imports, the wait for the
    compiled kernels, loading the filter, the lease and the audit log."""
    named = ("build", "sweep", "verify", "plan", "delete")
    return {
        "build_over_scan": phases["build"] / floor["scan_objects_s"],
        "sweep_over_scan": phases["sweep"] / floor["scan_folders_s"],
        "startup_s": run_s - sum(phases.get(name, 0.0) for name in named),
        "recheck_s": phases.get("verify", 0.0),
        "plan_s": phases.get("plan", 0.0),
        "delete_s": phases.get("delete", 0.0),
    }


# -- the run, and its memory ------------------------------------------------------------------


def previous_night(db: Path, args: argparse.Namespace) -> float:
    """``dircleaner build`` once, untimed: a nightly job sizes its filter from last night's.

    The synthetic store has never been cleaned, so without it the run would size its filter for
    every folder row, empty ones included, and land below the target false-positive rate.
    """
    cmd = [sys.executable, "-c", _CLI, "--store", store_url(db), "build", "--fpr", str(args.fpr)]
    cmd += ["--workers", str(args.workers)]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def job_args(args: argparse.Namespace, audit: Path, spill_after: int | None) -> list[str]:
    """The night's ``dircleaner run`` options: every delete as fast as the store takes it."""
    out = ["run", "--rate", "0", "--fpr", str(args.fpr), "--workers", str(args.workers)]
    out += ["--concurrency", str(args.concurrency)]
    if args.max_tombstones_per_partition is not None:
        out += ["--max-tombstones-per-partition", str(args.max_tombstones_per_partition)]
    if args.max_delete_fraction is not None:
        out += ["--max-delete-fraction", str(args.max_delete_fraction)]
    if spill_after is not None:
        out += ["--spill-after", str(spill_after)]
    if args.max_run_time is not None:
        out += ["--max-run-time", args.max_run_time]
    out += ["--max-rewrite-rows", str(args.max_rewrite_rows), "--audit-log", str(audit)]
    return [*out, "--spill-dir", str(audit.parent / "spill")]


def run_job(
    db: Path, args: argparse.Namespace, work: Path, spill_after: int | None = None
) -> dict[str, Any]:
    """``dircleaner run`` on ``db`` as a subprocess; its summary, wall time and memory."""
    audit = work / "audit.jsonl.gz"
    audit.unlink(missing_ok=True)
    ran = measured_cli(store_url(db), job_args(args, audit, spill_after), work, "run")
    return {**ran, "audit_log": audit}


# -- the filter, against the truth --------------------------------------------------------------


def _chunks(items: list[bytes], size: int = BATCH) -> Iterator[list[bytes]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def filter_quality(db: Path, generation: str, truth: Path, bucket: str) -> dict[str, Any]:
    """The run's filter (all shards merged) tested on every truly empty directory."""
    store = open_store(store_url(db))
    try:
        loaded = load_filter(store, SweepConfig(generation=generation))
    finally:
        store.close()
    header, filt = loaded.header, loaded.filt
    keys = [filter_key(bucket, d) for d in truth_lines(truth)]
    false_pos = sum(int(filt.contains_many(chunk).sum()) for chunk in _chunks(keys))
    optimum = -math.log(header.target_p) / math.log(2) ** 2
    bits_per_dir = header.m / header.expected_n
    return {
        "m_bits": header.m,
        "k": header.k,
        "n_sized": header.expected_n,
        "bits_per_dir": bits_per_dir,
        "bits_per_dir_optimum": optimum,
        "bits_per_dir_over_optimum": bits_per_dir / optimum,
        "fill_ratio": loaded.fill_ratio,
        "fpr_estimated_from_fill": loaded.estimated_fpr,
        "fpr_measured": false_pos / len(keys) if keys else 0.0,
        "false_positives": false_pos,
    }


# -- engines and the exact set --------------------------------------------------------------------


def _sample_insert_keys(store: Store, limit: int) -> list[bytes]:
    """The ancestor keys the build inserts, in scan order, the first ``limit`` of them."""
    out: list[bytes] = []
    for batch in store.scan_object_keys(Shard()):
        buf, starts, ends = packed_ancestors(batch)
        raw = buf.tobytes()
        out.extend(raw[lo:hi] for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True))
        if len(out) >= limit:
            break
    return out[:limit]


def _sample_folder_keys(store: Store, limit: int) -> list[bytes]:
    out: list[bytes] = []
    for batch in store.scan_folder_rows(Shard()):
        out.extend(filter_key(r.bucket, r.parent + r.name + "/") for r in batch)
        if len(out) >= limit:
            break
    return out[:limit]


def _time_engine(engine: str, n: int, p: float, inserts: list[bytes], queries: list[bytes]) -> Any:
    filt = new_filter(engine, n, p, 12345)
    started = time.perf_counter()
    for chunk in _chunks(inserts):
        filt.add_many(chunk)
    added = time.perf_counter()
    answers = [filt.contains_many(chunk) for chunk in _chunks(queries)]
    done = time.perf_counter()
    present_inserted = all(bool(a.all()) for a in map(filt.contains_many, _chunks(inserts[:BATCH])))
    return added - started, done - added, answers, present_inserted, filt.nbytes


def engines(db: Path, n_sized: int, p: float, sample: int) -> dict[str, Any]:
    """Ours vs pybloom-live: add the same ancestor keys, test the same folder keys."""
    store = open_store(store_url(db))
    try:
        inserts = _sample_insert_keys(store, sample)
        queries = _sample_folder_keys(store, sample)
    finally:
        store.close()
    ours = _time_engine("mmh3", n_sized, p, inserts, queries)
    ref = _time_engine("pybloom-live", n_sized, p, inserts, queries)
    ours_s, ref_s = ours[0] + ours[1], ref[0] + ref[1]
    ours_yes = sum(int(a.sum()) for a in ours[2])
    ref_yes = sum(int(a.sum()) for a in ref[2])
    keys = len(inserts) + len(queries)
    return {
        "filter_speedup_vs_pybloom_live": ref_s / ours_s,
        "filter_sample": {
            "note": "both engines sized for n_sized, fed the same keys: the first inserted "
            "ancestor keys of the build and the first folder keys of the sweep (scan order); "
            "per-key times scale to the full data",
            "insert_keys": len(inserts),
            "query_keys": len(queries),
            "ours_add_s": ours[0],
            "ours_contains_s": ours[1],
            "pybloom_live_add_s": ref[0],
            "pybloom_live_contains_s": ref[1],
            "ours_ns_per_key": ours_s / keys * 1e9,
            "pybloom_live_ns_per_key": ref_s / keys * 1e9,
            "ours_present": ours_yes,
            "pybloom_live_present": ref_yes,
            "no_false_negatives": bool(ours[3] and ref[3]),
        },
    }


def exact_set_size(db: Path, total_dirs: int, sample: int, seed: int) -> dict[str, Any]:
    """Bytes of a Python ``set`` of the directory paths (set + strings), sampled, extrapolated."""
    store = open_store(store_url(db))
    try:
        rows: list[str] = []
        for batch in store.scan_folder_rows(Shard()):
            rows.extend(r.parent + r.name + "/" for r in batch)
            if len(rows) >= sample:
                break
    finally:
        store.close()
    random.Random(seed).shuffle(rows)
    dirs = set(rows[:sample])
    per_dir = (sys.getsizeof(dirs) + sum(sys.getsizeof(d) for d in dirs)) / len(dirs)
    return {
        "exact_set_bytes": int(per_dir * total_dirs),
        "exact_set_bytes_per_dir": per_dir,
        "exact_set_sample": len(dirs),
    }


# -- the report ---------------------------------------------------------------------------------


def mem_gb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    return 0.0


def markdown(r: dict[str, Any]) -> str:
    p = r["fpr_target"]
    opt = r["bits_per_dir_optimum"]

    def ok(flag: bool) -> str:
        return "yes" if flag else "**no**"

    rows = [
        ("dirs", f"{r['dirs']:,}", "", ""),
        ("gen_s", f"{r['gen_s']:.1f}", "≤ 600 at 30M", ok(r["gen_s"] <= 600 or r["dirs"] < 3e7)),
        ("scan_only_s (1 process)", f"{r['scan_only_s']:.1f}", "", ""),
        (f"run_s (--workers {r['workers']})", f"{r['run_s']:.1f}", "", ""),
        ("run_over_scan", f"{r['run_over_scan']:.3f}", "≤ 1.3", ok(r["run_over_scan"] <= 1.3)),
        (
            f"scan_only_same_parallelism_s ({r['workers']} processes)",
            f"{r['scan_only_same_parallelism_s']:.1f}",
            "",
            "",
        ),
        ("run_over_scan_cpu (CPU s, all processes)", f"{r['run_over_scan_cpu']:.3f}", "", ""),
        (
            "build_over_scan (build ÷ objects scan, same processes and slices)",
            f"{r['build_over_scan']:.3f}",
            "≤ 1.3",
            ok(r["build_over_scan"] <= 1.3),
        ),
        (
            "sweep_over_scan (sweep ÷ folders scan, same processes and slices)",
            f"{r['sweep_over_scan']:.3f}",
            "≤ 1.3",
            ok(r["sweep_over_scan"] <= 1.3),
        ),
        (
            "start-up / re-check / plan / deletes (s)",
            " / ".join(f"{r[k]:.2f}" for k in ("startup_s", "recheck_s", "plan_s", "delete_s")),
            "",
            "",
        ),
        (
            "run_over_scan_same_parallelism",
            f"{r['run_over_scan_same_parallelism']:.3f}",
            "≤ 1.3",
            ok(r["run_over_scan_same_parallelism"] <= 1.3),
        ),
        (
            "peak_rss_mb (largest process)",
            f"{r['peak_rss_mb']:.0f}",
            "≤ 1024",
            ok(r["peak_rss_mb"] <= 1024),
        ),
        (
            "peak_rss_sum_mb / peak_pss_sum_mb",
            f"{r['peak_rss_sum_mb']:.0f} / {r['peak_pss_sum_mb']:.0f}",
            "",
            "",
        ),
        ("filter_bytes", f"{r['filter_bytes']:,}", "", ""),
        ("exact_set_bytes (extrapolated)", f"{r['exact_set_bytes']:,}", "", ""),
        (
            "bits_per_dir (m / n_sized)",
            f"{r['bits_per_dir']:.3f} (optimum {opt:.3f})",
            "within 5%",
            ok(abs(r["bits_per_dir"] / opt - 1) <= 0.05),
        ),
        (
            "fpr_target / fpr_measured",
            f"{p} / {r['fpr_measured']:.5f}",
            "±20%",
            ok(abs(r["fpr_measured"] / p - 1) <= 0.2),
        ),
        ("fpr_estimated_from_fill", f"{r['fpr_estimated_from_fill']:.5f}", "", ""),
        ("precision", f"{r['precision']:.6f}", "= 1.0", ok(r["precision"] == 1.0)),
        ("recall", f"{r['recall']:.5f}", f"≥ {1 - 1.5 * p:.4f}", ok(r["recall"] >= 1 - 1.5 * p)),
        (
            "recall_with_deferred",
            f"{r['recall_with_deferred']:.5f}",
            f"≥ {1 - 1.5 * p:.4f}",
            ok(r["recall_with_deferred"] >= 1 - 1.5 * p),
        ),
        (
            "plan: partition / row / range deletes, deferred",
            "{partition_deletes:,} / {row_deletes:,} / {range_deletes:,}, {deferred:,}".format(
                **r["plan"]
            ),
            "",
            "",
        ),
        (
            "recall in one run ≥ 0.99",
            f"{r['recall']:.5f}",
            "≥ 0.99",
            ok(r["recall"] >= 0.99),
        ),
        (
            "tombstones per live partition: max / p99",
            f"{r['tombstones_per_live_partition_max']:,} / "
            f"{r['tombstones_per_live_partition_p99']:,}",
            "≤ N",
            ok(
                r["budget"] is None
                or r["tombstones_per_live_partition_max"]
                <= r["budget"]["max_tombstones_per_partition"]
            ),
        ),
        (
            "partitions rewritten / rows rewritten",
            f"{r['partitions_rewritten']:,} / {r['rows_rewritten']:,}",
            "",
            "",
        ),
        (
            "filter_speedup_vs_pybloom_live",
            f"{r['filter_speedup_vs_pybloom_live']:.1f}×",
            "≥ 10",
            ok(r["filter_speedup_vs_pybloom_live"] >= 10),
        ),
        ("cores / mem_gb", f"{r['cores']} / {r['mem_gb']:.1f}", "", ""),
    ]
    lines = ["| metric | value | target | met |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


def measure_round(
    data: Path,
    db: Path,
    args: argparse.Namespace,
    work: Path,
    truth: np.ndarray,
    first: bool,
    spill_after: int | None = None,
) -> dict[str, Any]:
    """One floor/job pair on a fresh copy: the previous night's build (untimed), the floor at the
    job's parallelism right before the job, then the job; its per-phase ratios and scores. The
    first round also takes the single-process floor (full mode)."""
    copy_s = copy_dataset(data / "meta.db", db)
    print(f"copied the dataset in {copy_s:.1f}s (not timed)", file=sys.stderr)
    floor = None
    if first and not args.ratios_only:
        store = open_store(store_url(db))
        try:
            floor = scan_floor(store)
        finally:
            store.close()
        print(f"scan-only floor: {floor['scan_only_s']:.1f}s", file=sys.stderr)
    warmup_s = None
    if not args.no_warmup:
        warmup_s = previous_night(db, args)
        print(f"previous night's build: {warmup_s:.1f}s (not timed)", file=sys.stderr)
    load_before = os.getloadavg()
    floor_par = scan_floor_parallel(db, args.workers)
    print(
        f"scan-only floor, {floor_par['processes']} processes: {floor_par['scan_only_s']:.1f}s",
        file=sys.stderr,
    )
    ran = run_job(db, args, work, spill_after)
    print(f"run: {ran['run_s']:.1f}s", file=sys.stderr)
    summary = ran["summary"]
    phase_s = {"build": summary["build"]["seconds"], **summary["clean"]["phase_seconds"]}
    deferred = summary["clean"]["plan"]["deferred"]
    figures = {
        **phase_ratios(ran["run_s"], phase_s, floor_par),
        "job_over_floor": ran["run_s"] / floor_par["scan_only_s"],
        "job_over_floor_cpu": ran["run_cpu_s"] / floor_par["scan_only_cpu_s"],
        "peak_rss_mb": max(ran["peak_rss_single_mb"], ran["peak_rss_single_sampled_mb"]),
        "peak_rss_by_phase_mb": peak_rss_by_phase(ran.pop("rss_timeline"), phase_s, ran["run_s"]),
        **night_figures(summary, ran["audit_log"]),
    }
    scores = score_audit(ran["audit_log"], truth, DEFAULT_BUCKET, deferred)
    print(
        f"precision {scores['precision']:.6f}, recall {scores['recall']:.5f},"
        f" peak RSS {figures['peak_rss_mb']:.0f} MB",
        file=sys.stderr,
    )
    return {
        "copy_s_untimed": copy_s,
        "previous_night_build_s_untimed": warmup_s,
        "spill_after": spill_after,
        "floor": floor,
        "floor_same_parallelism": floor_par,
        "ran": ran,
        "phase_s": phase_s,
        "ratios": figures,
        "scores": scores,
        "loadavg_before_floor": load_before,
        "loadavg_after_run": os.getloadavg(),
    }


#: the per-round figures reported as the median of the rounds, each with its list
ROUND_FIGURES = (
    "job_over_floor",
    "job_over_floor_cpu",
    "build_over_scan",
    "sweep_over_scan",
    "startup_s",
    "recheck_s",
    "recheck_reads_per_s",
    "plan_s",
    "delete_s",
    "deleted_dirs_per_s",
    "audit_log_bytes",
    "peak_rss_mb",
)


def over_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each per-round figure as the median of the rounds, with every round's value beside it
    (``<figure>_runs``), the run's worst memory, worst precision and worst recall."""
    out: dict[str, Any] = {}
    for name in ROUND_FIGURES:
        values = [r["ratios"][name] or 0.0 for r in rounds]
        out[name] = statistics.median(values)
        out[f"{name}_runs"] = [round(v, 3) for v in values]
    out["run_s"] = statistics.median(r["ran"]["run_s"] for r in rounds)
    out["run_s_runs"] = [round(r["ran"]["run_s"], 3) for r in rounds]
    out["peak_rss_mb"] = max(out["peak_rss_mb_runs"])
    out["precision"] = min(r["scores"]["precision"] for r in rounds)
    out["recall"] = min(r["scores"]["recall"] for r in rounds)
    out["recall_with_deferred"] = min(r["scores"]["recall_with_deferred"] for r in rounds)
    last = rounds[-1]
    out["candidates"] = last["ratios"]["candidates"]
    out["removed_dirs"] = last["ratios"]["removed_dirs"]
    out["deleted_by"] = last["scores"]["deleted_by"]
    out["spill"] = last["ratios"]["spill"]
    out["peak_rss_by_phase_mb"] = last["ratios"]["peak_rss_by_phase_mb"]
    out["deadline"] = last["ratios"]["deadline"]
    out["loadavg_runs"] = [
        [round(x, 2) for x in r["loadavg_before_floor"][:1] + r["loadavg_after_run"][:1]]
        for r in rounds
    ]
    return out


def ratios_markdown(r: dict[str, Any]) -> str:
    """The per-round table of a ``--ratios-only`` run: the median, then every round."""
    lines = ["| figure | median | rounds | target | met |", "|---|---:|---|---|---|"]
    for name in ROUND_FIGURES:
        target = "≤ 1.3" if name.endswith(("_over_scan", "_over_floor")) else ""
        met = ("yes" if r[name] <= 1.3 else "**no**") if target else ""
        runs = " / ".join(f"{v:,.2f}" for v in r[f"{name}_runs"])
        lines.append(f"| {name} | {r[name]:,.2f} | {runs} | {target} | {met} |")
    lines.append(f"| peak_rss_mb (largest process) | {r['peak_rss_mb']:.0f} | | ≤ 1024 | |")
    lines.append(f"| precision (worst round) | {r['precision']:.6f} | | = 1.0 | |")
    lines.append(f"| recall in one night (worst round) | {r['recall']:.5f} | | | |")
    lines.append(f"| candidates / removed | {r['candidates']:,} / {r['removed_dirs']:,} | | | |")
    by_phase = ", ".join(f"{k} {v:,.0f}" for k, v in r["peak_rss_by_phase_mb"].items())
    lines.append(f"| peak RSS by phase, MB (last round) | | {by_phase} | | |")
    if r["deadline"] is not None:
        end = r["deadline"]
        lines.append(
            f"| deadline (last round) | | reached {end['reached']}, {end['left_dirs']:,} left | | |"
        )
    loads = " / ".join("–".join(f"{x:.1f}" for x in pair) for pair in r["loadavg_runs"])
    lines.append(f"| load (before floor – after run) | | {loads} | | |")
    return "\n".join(lines)


def spill_variants(text: str | None) -> list[int | None]:
    """``--spill-after``: one value, or several the rounds alternate between (None: the job's
    own budget, written ``default``)."""
    if text is None:
        return [None]
    return [None if v.strip() == "default" else int(v) for v in text.split(",") if v.strip()]


def by_variant(rounds: list[dict[str, Any]], variants: list[int | None]) -> dict[str, Any]:
    """With several ``--spill-after`` values: each one's rounds over their medians, and the job's
    time over its floor (wall and CPU) of each against the first's, pair by pair."""
    groups = {str(v): [r for r in rounds if r["spill_after"] == v] for v in variants}
    out: dict[str, Any] = {name: over_rounds(rs) for name, rs in groups.items() if rs}
    base = groups[str(variants[0])]
    for name, rs in groups.items():
        if name == str(variants[0]) or not rs:
            continue
        for figure in ("job_over_floor", "job_over_floor_cpu"):
            pairs = [
                b["ratios"][figure] / a["ratios"][figure] for a, b in zip(base, rs, strict=False)
            ]
            out[name][f"{figure}_vs_first_runs"] = [round(p, 3) for p in pairs]
            out[name][f"{figure}_vs_first"] = statistics.median(pairs) if pairs else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dirs", type=int, required=True, help="directories in the dataset")
    ap.add_argument("--out", type=Path, help="write the JSON result here")
    ap.add_argument("--seed", type=int, default=0)
    add_night_arguments(ap, "the night's")
    ap.add_argument(
        "--spill-after",
        help="candidates a process keeps in memory (the job's hidden option; default: its own"
        " budget). Several, comma-separated ('100000000,default'): the rounds alternate between"
        " them and each one's figures are reported apart",
    )
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="dataset cache")
    ap.add_argument("--work-dir", type=Path, help="where the scratch copy goes (default: cache)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--fpr", type=float, default=DEFAULT_FPR, help="default: the job's own")
    ap.add_argument("--concurrency", type=int, default=1000, help="delete batch size")
    ap.add_argument(
        "--max-tombstones-per-partition",
        type=int,
        default=None,
        help="default: the job's own (half of tombstone_warn_threshold, 500)",
    )
    ap.add_argument("--max-rewrite-rows", type=int, default=100_000)
    ap.add_argument("--filter-sample", type=int, default=2_000_000, help="keys per engine test")
    ap.add_argument("--set-sample", type=int, default=1_000_000)
    ap.add_argument("--gen-only", action="store_true", help="only make sure the dataset exists")
    ap.add_argument("--keep-copy", action="store_true", help="keep the scratch copy")
    ap.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the previous night's build (the run then sizes for every folder row)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="floor/job rounds, each on a fresh copy; per-phase figures are their median",
    )
    ap.add_argument(
        "--ratios-only",
        action="store_true",
        help="only the per-phase figures: no single-process floor, engines nor set sample",
    )
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")

    resolve_night_arguments(args)
    variants = spill_variants(args.spill_after)
    spec = SynthSpec(dirs=args.dirs, seed=args.seed, empty_fraction=args.empty_fraction)
    data, meta = ensure_dataset(args.cache_dir, spec)
    if args.gen_only:
        print(json.dumps(meta))
        return
    work = (args.work_dir or args.cache_dir) / (
        f"run-d{args.dirs}-s{args.seed}-e{args.empty_fraction:g}"
    )
    work.mkdir(parents=True, exist_ok=True)
    db = work / "meta.db"
    truth = hashed(truth_lines(data / "truth.txt"))
    rounds = []
    for index in range(args.repeat):
        spill_after = variants[index % len(variants)]
        print(f"round {index + 1} of {args.repeat}, --spill-after {spill_after}", file=sys.stderr)
        rounds.append(measure_round(data, db, args, work, truth, index == 0, spill_after))
    per_phase = over_rounds(rounds)

    if args.ratios_only:
        result: dict[str, Any] = {
            "dirs": meta["dirs"],
            "empty_dirs": meta["empty_dirs"],
            "objects": meta["objects"],
            "shape": args.shape,
            "empty_fraction": args.empty_fraction,
            "workers": args.workers,
            "rounds": args.repeat,
            "max_delete_fraction": args.max_delete_fraction,
            **per_phase,
            "details": [_round_details(r) for r in rounds],
        }
        if len(variants) > 1:
            result["by_spill_after"] = by_variant(rounds, variants)
        if not args.keep_copy:
            _remove_copy(db)
        if args.out is not None:
            args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(ratios_markdown(result))
        for name, part in result.get("by_spill_after", {}).items():
            print(f"\n--spill-after {name}\n\n{ratios_markdown(part)}")
            if part.get("job_over_floor_vs_first") is not None:
                print(
                    "job ÷ floor against the first value's, pair by pair: wall"
                    f" {part['job_over_floor_vs_first']:.3f}"
                    f" {part['job_over_floor_vs_first_runs']},"
                    f" CPU {part['job_over_floor_cpu_vs_first']:.3f}"
                    f" {part['job_over_floor_cpu_vs_first_runs']}"
                )
        return

    last = rounds[-1]
    floor, floor_par, ran = rounds[0]["floor"], last["floor_same_parallelism"], last["ran"]
    summary = ran["summary"]
    build = summary["build"]
    quality = filter_quality(db, build["generation"], data / "truth.txt", DEFAULT_BUCKET)
    scores = last["scores"]
    print("scored; timing the filter engines ...", file=sys.stderr)
    eng = engines(data / "meta.db", quality["n_sized"], args.fpr, args.filter_sample)
    exact = exact_set_size(data / "meta.db", meta["dirs"], args.set_sample, args.seed)
    if not args.keep_copy:
        _remove_copy(db)

    self_usage = resource.getrusage(resource.RUSAGE_SELF)
    result = {
        "dirs": meta["dirs"],
        "dirs_requested": args.dirs,
        "empty_dirs": meta["empty_dirs"],
        "objects": meta["objects"],
        "gen_s": meta["gen_s"],
        "gen_cached": meta["cached"],
        "scan_only_s": floor["scan_only_s"],
        "run_s": ran["run_s"],
        "run_over_scan": ran["run_s"] / floor["scan_only_s"],
        "scan_only_same_parallelism_s": floor_par["scan_only_s"],
        "run_over_scan_same_parallelism": ran["run_s"] / floor_par["scan_only_s"],
        # CPU seconds of every process (the job's, interpreter start-up included, against the
        # floor processes'): what a core does per row, robust to a machine shared with others.
        "run_over_scan_cpu": ran["run_cpu_s"] / floor_par["scan_only_cpu_s"],
        **per_phase,
        "rounds": args.repeat,
        "peak_rss_sum_mb": ran["peak_rss_sum_mb"],
        "peak_pss_sum_mb": ran["peak_pss_sum_mb"],
        "filter_bytes": build["filter_bytes"],
        "bits_per_dir": quality["bits_per_dir"],
        "bits_per_dir_optimum": quality["bits_per_dir_optimum"],
        "fpr_target": args.fpr,
        "fpr_measured": quality["fpr_measured"],
        "fpr_estimated_from_fill": quality["fpr_estimated_from_fill"],
        "recall": scores["recall"],
        "recall_with_deferred": scores["recall_with_deferred"],
        "tombstones_per_live_partition_max": scores["tombstones_per_live_partition_max"],
        "tombstones_per_live_partition_p99": scores["tombstones_per_live_partition_p99"],
        "partitions_rewritten": summary["clean"].get("partitions_rewritten", 0),
        "rows_rewritten": summary["clean"].get("rows_rewritten", 0),
        "budget": summary["clean"].get("budget"),
        "plan": summary["clean"]["plan"],
        "filter_speedup_vs_pybloom_live": eng["filter_speedup_vs_pybloom_live"],
        "exact_set_bytes": exact["exact_set_bytes"],
        "workers": args.workers,
        "cores": os.cpu_count(),
        "mem_gb": round(mem_gb(), 1),
        "details": {
            "floor": floor,
            "rounds": [_round_details(r) for r in rounds],
            "run_summary": summary,
            "filter": quality,
            "scores": scores,
            "engines": eng["filter_sample"],
            "exact_set": exact,
            "generation": meta,
            "options": {
                "fpr": args.fpr,
                "concurrency": args.concurrency,
                "max_tombstones_per_partition": args.max_tombstones_per_partition,
                "max_rewrite_rows": args.max_rewrite_rows,
                "rate": 0,
            },
            "bench_process_maxrss_mb": self_usage.ru_maxrss / 1024,
            "loadavg_at_end": os.getloadavg(),
        },
    }
    text = json.dumps(result, indent=2, default=str)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(markdown(result))


def _round_details(r: dict[str, Any]) -> dict[str, Any]:
    """A round's JSON: everything but the run's summary and the audit log's path."""
    ran = {k: v for k, v in r["ran"].items() if k not in ("summary", "audit_log")}
    return {**{k: v for k, v in r.items() if k != "ran"}, "run": ran}


if __name__ == "__main__":
    main()
