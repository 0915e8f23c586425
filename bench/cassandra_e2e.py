"""Cassandra end-to-end benchmark: the job against its scan-only floor and the naive check.

Usage::

    .venv/bin/python bench/cassandra_e2e.py --dirs 1000000 --out result.json \\
        [--store cassandra://127.0.0.1:9042/dcbench] [--workers 1,2] [--rate 2000]

What it measures, all in one process, on one dataset, in one run (DESIGN.md §5: only ratios
taken in the same run mean anything on a shared machine):

* **load** — a synthetic metastore (``dircleaner.synth``) written into the keyspace once, by
  the bulk loader (``--load bulk``: sstables written by Cassandra's own writer and imported) or
  through the store's write path (``--load driver``). The keyspace remembers what it holds
  (state key ``bench:dataset``): a later run with the same parameters skips the load and
  reports the load time recorded then. After a load the dataset is also kept, as a snapshot of
  its tables linked under the cache dir (``cassandra_snapshot.py``): when the keyspace holds
  something else (a real clean's leftovers, another dataset, nothing), the next run restores
  that copy in seconds instead of loading again.
* **scan-only floor** — ``scan_object_partitions(Shard())`` then ``scan_folder_rows(Shard())``
  consumed fully and thrown away: the same token-range scans the job makes, doing no work. With
  ``--workers N`` the floor is split into the same N forked workers the job uses.
* **the job** — ``run_job`` (what ``dircleaner run --min-age 0 --dry-run --workers N`` runs):
  sizing, build, filter store, sweep, verify re-check, plan. It is measured with ``--dry-run``
  because a real clean mutates the data, and because the delete phase is paced by ``--rate``,
  not by work: its duration is rate-limited by design and says nothing about the floor.
  ``run_over_scan`` = job / floor, the floor and the job of a pair run back to back; with
  ``--repeat`` > 1 the pairs are interleaved and the fastest of each side is kept.
* **naive** — the query-per-directory check the design rejects, on a random sample of
  directories: ``objects_partition_nonempty(D)`` and a ``LIMIT 1`` read of D's ``folders``
  partition (does D have children?), one directory after the other. Also reported: the same two
  queries per directory with the store's concurrency in flight (a fairer, harder baseline).
* **the real clean** — one ``run_job`` without ``--dry-run`` at ``--rate``: the delete phase's
  measured rate, and precision / recall of the audit log against the ground truth (precision
  must be exactly 1.0). The night's own figures (wall, CPU, peak RSS by phase) are written
  first (``night-wN-figures.json``), then the checks run: ``--check-sample`` live directories
  sampled before the night must still be listed and as many audited ones must be gone, read
  by key; ``--full-check`` (automatic up to 2M directories) also looks for every audited
  directory in a scan of the whole index, which at 25M through the night's millions of
  tombstones takes over half an hour. The clean mutates
  the keyspace, so the dataset is then marked used and the next invocation reloads it
  (``--no-clean`` skips this step and keeps the dataset for further ratio runs).

Other tests share the node: every number here is noisy; compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.concurrent import execute_concurrent
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.query import SimpleStatement, tuple_factory
from cassandra_snapshot import keep, read_manifest, restore
from night import (
    add_night_arguments,
    audited_hashes,
    cassandra_node_pid,
    hashed,
    in_sorted,
    measured_cli,
    night_figures,
    peak_rss_by_phase,
    process_cpu_s,
    resolve_night_arguments,
    score_audit,
    truth_lines,
)

from dircleaner.filter.sizing import DEFAULT_FPR
from dircleaner.gcpause import cyclic_gc_paused
from dircleaner.job.clean import CleanConfig
from dircleaner.job.run import RunReport, run_job
from dircleaner.job.sweep import SweepConfig
from dircleaner.model import FolderRow, Shard
from dircleaner.paths import DEFAULT_BUCKET, dir_of_row
from dircleaner.pipeline.build import BuildConfig, size_filter
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.progress import Progress
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.cassandra.bulkload import CassandraBulkLoad
from dircleaner.store.cassandra.mapping import stored_parent
from dircleaner.store.cassandra.store import CassandraStore
from dircleaner.synth import GENERATOR_VERSION, SynthSpec, generate
from dircleaner.workers.base import BUILD, CLEAN, LocalWorkers
from dircleaner.workers.local import map_shards

REPO = Path(__file__).resolve().parent.parent
STATE_KEY = "bench:dataset"
#: bump when the dataset a given (dirs, seed, ...) produces changes
DATASET_FORMAT = 1
DEFAULT_STORE = "cassandra://127.0.0.1:9042/dcbench"
DEFAULT_CACHE = Path(__file__).resolve().parent / ".cache" / "cassandra"
TARGET_RUN_OVER_SCAN = 1.5
TARGET_SPEEDUP = 20.0
#: up to this many directories, a night's check scans the whole index (``--full-check``)
FULL_CHECK_MAX_DIRS = 2_000_000
#: rows per slice of the ring the live sample reads
SAMPLE_SLICE_ROWS = 256


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def throttled_progress(every_s: float = 15.0) -> Progress:
    last = [0.0]

    def report(phase: str, done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - last[0] >= every_s:
            last[0] = now
            of = f"/{total:,}" if total else ""
            log(f"  {phase}: {done:,}{of}")

    return report


# -- the dataset ----------------------------------------------------------------------------------


def dataset_params(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "format": DATASET_FORMAT,
        "generator": GENERATOR_VERSION,
        "dirs": args.dirs,
        "seed": args.seed,
        "bucket": DEFAULT_BUCKET,
        "empty_fraction": args.empty_fraction,
    }


def truth_path_for(cache: Path, keyspace: str, params: dict[str, Any]) -> Path:
    name = f"{keyspace}-d{params['dirs']}-s{params['seed']}-e{params['empty_fraction']:g}"
    return cache / name / "truth.txt"


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class AuxSession:
    """A plain driver session for what the store protocol does not offer (on purpose): the
    naive ``folders`` LIMIT 1 probe, and TRUNCATE of the benchmark's own keyspace."""

    def __init__(self, store: CassandraStore) -> None:
        cfg = store.config
        self.cfg = cfg
        level = getattr(ConsistencyLevel, cfg.consistency.verify)
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=cfg.local_dc)),
            consistency_level=level,
            request_timeout=cfg.request_timeout_s,
            row_factory=tuple_factory,
        )
        self.cluster = Cluster(
            contact_points=list(cfg.hosts),
            port=cfg.port,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        )
        self.session = self.cluster.connect()
        key_cols = [*([cfg.columns.bucket] if cfg.columns.bucket else []), cfg.columns.parent]
        where = " AND ".join(f'"{c}" = ?' for c in key_cols)
        ks = f'"{cfg.keyspace}"'
        self.folder_probe = self.session.prepare(
            f'SELECT "{cfg.columns.name}" FROM {ks}."{cfg.tables.folders}" WHERE {where} LIMIT 1'
        )
        self.object_probe = self.session.prepare(
            f'SELECT "{cfg.columns.name}" FROM {ks}."{cfg.tables.objects}" WHERE {where} LIMIT 1'
        )

    def key(self, bucket: str, parent: str) -> tuple[str, ...]:
        stored = stored_parent(self.cfg, parent)
        return (bucket, stored) if self.cfg.columns.bucket else (stored,)

    def truncate_all(self) -> None:
        cfg = self.cfg
        for table in (cfg.tables.objects, cfg.tables.folders, cfg.tables.kv):
            self.session.execute(
                SimpleStatement(f'TRUNCATE "{cfg.keyspace}"."{table}"'), timeout=300.0
            )

    def close(self) -> None:
        self.cluster.shutdown()


def nodetool(*args: str) -> bool:
    """Best effort: the repo's local-node nodetool (flush, compactionstats)."""
    script = REPO / "scripts" / "cassandra"
    if not script.exists():
        return False
    done = subprocess.run(
        [str(script), "nodetool", *args], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        log(f"nodetool {' '.join(args)} failed: {done.stderr.strip()[:200]}")
        return False
    return True


def settle(keyspace: str, wait_s: float = 180.0) -> None:
    """Flush the keyspace's memtables and give compactions a moment to finish."""
    if not nodetool("flush", keyspace):
        return
    deadline = time.monotonic() + wait_s
    script = REPO / "scripts" / "cassandra"
    while time.monotonic() < deadline:
        out = subprocess.run(
            [str(script), "nodetool", "compactionstats"], capture_output=True, text=True
        ).stdout
        if re.search(r"pending tasks:?\s+0\b", out):
            return
        time.sleep(5)
    log("compactions still pending; measuring anyway")


def wait_for_size_estimates(aux: AuxSession, wait_s: float = 400.0) -> None:
    """Wait until the node publishes size estimates of the folders table (every 5 minutes).

    A nightly job runs against a table the node has long known the size of; right after a load
    the estimates are missing and the job's sizing falls back to counting the folders table.
    """
    deadline = time.monotonic() + wait_s
    query = (
        "SELECT partitions_count FROM system.size_estimates"
        " WHERE keyspace_name = %s AND table_name = %s"
    )
    while time.monotonic() < deadline:
        rows = aux.session.execute(query, (aux.cfg.keyspace, aux.cfg.tables.folders))
        if sum(int(r[0] or 0) for r in rows) > 0:
            return
        time.sleep(10)
    log("no size estimates published yet; the job's sizing will count the folders table")


def ensure_dataset(
    store: CassandraStore, aux: AuxSession, args: argparse.Namespace
) -> dict[str, Any]:
    """The dataset of ``args`` in the keyspace: reused when it is intact, else (re)loaded."""
    params = dataset_params(args)
    truth = truth_path_for(args.cache_dir, store.config.keyspace, params)
    raw = store.get_state(STATE_KEY)
    meta: dict[str, Any] | None = json.loads(raw) if raw else None
    if meta is None:
        for batch in store.scan_folder_rows(Shard()):
            if batch:
                raise SystemExit(
                    f"keyspace {store.config.keyspace!r} holds folder rows this benchmark did not"
                    " write; use a keyspace of your own (--store .../dcbench)"
                )
            break
    reason = None
    if meta is None:
        reason = "empty keyspace"
    elif meta.get("params") != params:
        reason = f"keyspace holds another dataset {meta.get('params')}"
    elif meta.get("status") != "loaded":
        reason = f"dataset is {meta.get('status')!r}"
    elif not truth.exists() or file_digest(truth) != meta.get("truth_sha256"):
        reason = f"ground truth {truth} missing or different"
    elif args.reload:
        reason = "--reload"
    if reason is None:
        assert meta is not None
        log(
            f"dataset cached in {store.config.keyspace}: {meta['dirs']:,} dirs (loaded in"
            f" {meta['load_s']:.0f}s on {meta['loaded_at']})"
        )
        return {**meta, "cached": True, "truth_path": str(truth)}

    kept = truth.parent / "snapshot"
    manifest = read_manifest(kept)
    if (
        not args.reload
        and manifest is not None
        and manifest.get("params") == params
        and truth.exists()
        and file_digest(truth) == manifest.get("truth_sha256")
    ):
        log(f"restoring the dataset from {kept} ({reason})")
        restore_s = restore(store, kept)
        meta = {**manifest, "restore_s": round(restore_s, 1)}
        store.put_state(STATE_KEY, json.dumps(meta))
        log(f"restored in {restore_s:.1f}s")
        if not args.no_flush:
            wait_for_size_estimates(aux)
        return {**meta, "cached": True, "restored": True, "truth_path": str(truth)}

    log(f"loading the dataset ({reason}, --load {args.load})")
    if meta is not None:
        aux.truncate_all()
    store.put_state(STATE_KEY, json.dumps({"params": params, "status": "loading"}))
    truth.parent.mkdir(parents=True, exist_ok=True)
    spec = SynthSpec(
        dirs=args.dirs, seed=args.seed, bucket=DEFAULT_BUCKET, empty_fraction=args.empty_fraction
    )
    started = time.perf_counter()
    last = [0.0]

    def progress(done: int) -> None:
        if time.monotonic() - last[0] > 15:
            last[0] = time.monotonic()
            log(f"  generated {done:,} dirs")

    bulk = None
    if args.load == "bulk":
        bulk = CassandraBulkLoad(
            store.config,
            store.requests.cluster.metadata,
            via="nodetool-import",
            scratch_dir=truth.parent,
        )
    result = generate(store, spec, truth, progress, spill_dir=truth.parent, bulk=bulk)
    load_s = time.perf_counter() - started
    log(
        f"loaded {result.dirs:,} dirs + {result.objects:,} objects in {load_s:.0f}s"
        f" (generate {result.generate_seconds:.0f}s, insert {result.load_seconds:.0f}s,"
        f" --load {args.load})"
    )
    settle_started = time.perf_counter()
    if not args.no_flush:
        settle(store.config.keyspace, args.settle_wait)
        wait_for_size_estimates(aux)
    meta = {
        "params": params,
        "status": "loaded",
        "loader": args.load,
        "dirs": result.dirs,
        "empty_dirs": result.empty_dirs,
        "objects": result.objects,
        "load_s": round(load_s, 1),
        "generate_s": round(result.generate_seconds, 1),
        "insert_s": round(result.load_seconds, 1),
        "rows_per_s": round((result.dirs + result.objects) / max(result.load_seconds, 1e-9)),
        "flush_s": round(time.perf_counter() - settle_started, 1),
        "truth_sha256": file_digest(truth),
        "loaded_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    store.put_state(STATE_KEY, json.dumps(meta))
    keep_s = keep(store, kept, meta)
    log(f"kept a snapshot of the dataset in {kept} ({keep_s:.1f}s)")
    return {**meta, "cached": False, "truth_path": str(truth)}


def mark_used(store: Store, meta: dict[str, Any]) -> None:
    keep = {k: v for k, v in meta.items() if k not in ("cached", "truth_path")}
    store.put_state(STATE_KEY, json.dumps({**keep, "status": "cleaned"}))


# -- the floor ------------------------------------------------------------------------------------


def _consume_objects(store: Store, shard: Shard, progress: Progress) -> int:
    """The build's scan of one slice, doing nothing with the partitions but count them, the
    cyclic GC paused as the job pauses it."""
    partitions = 0
    with cyclic_gc_paused():
        for batch in store.scan_object_partitions(shard):
            partitions += len(batch)
            progress("floor:objects", partitions, None)
    return partitions


def _consume_folders(store: Store, shard: Shard, progress: Progress) -> int:
    """The sweep's scan of one slice, doing nothing with the rows but count them (GC paused)."""
    rows = 0
    with cyclic_gc_paused():
        for batch in store.scan_folder_rows(shard):
            rows += len(batch)
            progress("floor:folders", rows, None)
    return rows


@dataclass
class Floor:
    seconds: float
    objects_s: float
    folders_s: float
    object_partitions: int
    folder_rows: int


def scan_floor(store: Store, workers: int) -> Floor:
    """The job's two scans, consumed and thrown away, by as many processes over the job's own
    slices (``LocalWorkers.slices``: one per worker for the build, several per worker for the
    sweep, each process taking the next as it frees up): all objects slices, then all folders
    slices, as the job's build and sweep come one after the other."""
    pool = LocalWorkers(workers)
    progress = throttled_progress()
    started = time.perf_counter()
    objects = map_shards(
        store, pool.slices(Shard(), BUILD), _consume_objects, "floor", progress, workers
    )
    middle = time.perf_counter()
    folders = map_shards(
        store, pool.slices(Shard(), CLEAN), _consume_folders, "floor", progress, workers
    )
    ended = time.perf_counter()
    return Floor(
        seconds=ended - started,
        objects_s=middle - started,
        folders_s=ended - middle,
        object_partitions=sum(objects),
        folder_rows=sum(folders),
    )


def warm_and_sample(store: Store, sample_size: int, seed: int) -> tuple[list[FolderRow], float]:
    """One untimed pass over both scans (warms caches) that reservoir-samples folder rows."""
    started = time.perf_counter()
    for _ in store.scan_object_partitions(Shard()):
        pass
    rng = random.Random(seed)
    sample: list[FolderRow] = []
    seen = 0
    for batch in store.scan_folder_rows(Shard()):
        for row in batch:
            seen += 1
            if len(sample) < sample_size:
                sample.append(row)
            else:
                j = rng.randrange(seen)
                if j < sample_size:
                    sample[j] = row
    return sample, time.perf_counter() - started


# -- the job --------------------------------------------------------------------------------------


def job_configs(
    args: argparse.Namespace, workers: int, dry_run: bool, audit: Path | None
) -> tuple[BuildConfig, CleanConfig]:
    build = BuildConfig(fpr=args.fpr, workers=workers)
    clean = CleanConfig(
        sweep=SweepConfig(workers=workers),
        min_age_s=0.0,
        dry_run=dry_run,
        throttle=ThrottleConfig(rate=float(args.rate), concurrency=args.delete_concurrency),
        audit_log=audit,
    )
    return build, clean


def cli_equivalent(args: argparse.Namespace, workers: int, dry_run: bool) -> str:
    parts = [
        ".venv/bin/dircleaner",
        "--store",
        args.store,
        "run",
        "--min-age",
        "0",
        "--fpr",
        f"{args.fpr:g}",
        "--rate",
        str(args.rate),
        "--workers",
        str(workers),
    ]
    parts += ["--dry-run"] if dry_run else ["--audit-log", "AUDIT.jsonl"]
    return " ".join(parts)


def timed_job(
    store: Store, args: argparse.Namespace, workers: int, dry_run: bool, audit: Path | None
) -> tuple[RunReport, float]:
    build, clean = job_configs(args, workers, dry_run, audit)
    started = time.perf_counter()
    report = run_job(store, build, clean, throttled_progress())
    return report, time.perf_counter() - started


def job_phases(report: RunReport, total: float) -> dict[str, float]:
    assert report.build is not None  # a fresh dry run builds
    phases = {"build": report.build.seconds, **report.clean.phase_seconds}
    phases["plan+gc+other"] = total - sum(phases.values())
    return {k: round(v, 3) for k, v in phases.items()}


# -- the naive check ------------------------------------------------------------------------------


def naive_sequential(
    store: Store, aux: AuxSession, dirs: list[tuple[str, str]]
) -> dict[str, float]:
    """Per directory: any object in its partition? any child directory? One query at a time."""
    objects_s = folders_s = short_s = 0.0
    nonempty_objects = has_children = 0
    clock = time.perf_counter
    started = clock()
    for bucket, directory in dirs:
        t0 = clock()
        with_objects = store.objects_partition_nonempty(bucket, directory)
        t1 = clock()
        children = bool(
            aux.session.execute(aux.folder_probe, aux.key(bucket, directory)).current_rows
        )
        t2 = clock()
        objects_s += t1 - t0
        folders_s += t2 - t1
        # A naive checker could skip the second query when the first already says "non-empty".
        short_s += (t1 - t0) + (0.0 if with_objects else t2 - t1)
        nonempty_objects += with_objects
        has_children += children
    total = clock() - started
    n = len(dirs)
    return {
        "sample": n,
        "seconds": round(total, 3),
        "per_dir_ms": 1000 * total / n,
        "objects_query_ms": 1000 * objects_s / n,
        "folders_query_ms": 1000 * folders_s / n,
        "short_circuit_per_dir_ms": 1000 * short_s / n,
        "share_with_objects": nonempty_objects / n,
        "share_with_children": has_children / n,
    }


def naive_concurrent(
    aux: AuxSession, dirs: list[tuple[str, str]], concurrency: int
) -> dict[str, float]:
    """The same two queries per directory, ``concurrency`` requests in flight."""
    statements: list[tuple[Any, tuple[str, ...]]] = []
    for bucket, directory in dirs:
        key = aux.key(bucket, directory)
        statements.append((aux.object_probe, key))
        statements.append((aux.folder_probe, key))
    started = time.perf_counter()
    results = execute_concurrent(
        aux.session, statements, concurrency=concurrency, raise_on_first_error=True
    )
    for ok, _ in results:
        assert ok
    total = time.perf_counter() - started
    return {
        "sample": len(dirs),
        "concurrency": concurrency,
        "seconds": round(total, 3),
        "per_dir_ms": 1000 * total / len(dirs),
    }


# -- scoring --------------------------------------------------------------------------------------


def still_listed(store: Store, deleted: np.ndarray, bucket: str) -> int:
    """Folder rows still in the index among the ``hashed`` directories a night deleted (a
    scan of the whole index: at 25M directories, through millions of tombstones, over half an
    hour; ``--full-check``)."""
    hits = 0
    for batch in store.scan_folder_rows(Shard(), bucket):
        keys = np.array([hash(dir_of_row(row.parent, row.name)) for row in batch], dtype=np.int64)
        hits += int(in_sorted(keys, deleted).sum())
    return hits


def live_sample(
    store: Store, truth: np.ndarray, bucket: str, dirs: int, size: int, seed: int
) -> list[tuple[str, str]]:
    """Up to ``size`` directories the index lists that are not empty (absent from the truth),
    taken before a night from whole slices of the ring picked at random (about
    ``SAMPLE_SLICE_ROWS`` rows each, whole partitions, wide ones included): rows the night must
    leave listed."""
    count = max(1, dirs // SAMPLE_SLICE_ROWS)
    rng = random.Random(seed)
    order = rng.sample(range(count), count) if count <= size else None
    picked: list[tuple[str, str]] = []
    tried = 0
    while len(picked) < size and tried < count:
        index = order[tried] if order is not None else rng.randrange(count)
        tried += 1
        for batch in store.scan_folder_rows(Shard(index, count), bucket):
            listed = [dir_of_row(row.parent, row.name) for row in batch]
            live = ~in_sorted(np.array([hash(d) for d in listed], dtype=np.int64), truth)
            picked.extend((bucket, d) for d, keep in zip(listed, live, strict=True) if keep)
    return picked[:size]


def sampled_check(
    store: Store, live: list[tuple[str, str]], audited: list[tuple[str, str]]
) -> dict[str, Any]:
    """After a night, by key (the re-check's prepared reads): which sampled live directories
    are no longer listed (a lost row), which sampled audited ones still are."""
    started = time.perf_counter()
    still_live = store.rows_listing(live)
    lost = [d for b, d in live if (b, d) not in still_live]
    left = store.rows_listing(audited)
    return {
        "live_sample": len(live),
        "live_rows_lost_in_sample": len(lost),
        "live_rows_lost_examples": lost[:20],
        "audited_sample": len(audited),
        "audited_still_listed_in_sample": len(left),
        "audited_still_listed_examples": sorted(d for _, d in left)[:20],
        "seconds": round(time.perf_counter() - started, 2),
    }


# -- output ---------------------------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    def ok(flag: bool | None) -> str:
        return "" if flag is None else ("ok" if flag else "**MISSED**")

    rows: list[tuple[str, str, str, str]] = []
    ds = result["dataset"]
    rows.append(("directories / objects", f"{result['dirs']:,} / {ds['objects']:,}", "", ""))
    cached = " (cached)" if ds["cached"] else ""
    if ds.get("restored"):
        cached = f" (restored from the kept snapshot in {ds['restore_s']:.0f} s)"
    rows.append(
        (
            f"load (generate + insert, {ds.get('loader', 'driver')})",
            f"{result['load_s']:.0f} s{cached}, {ds.get('rows_per_s', 0):,} rows/s",
            "",
            "",
        )
    )
    for w, r in result["by_workers"].items():
        rows.append((f"scan-only floor, {w} worker(s)", f"{r['scan_only_s']:.1f} s", "", ""))
        rows.append((f"job (dry run), {w} worker(s)", f"{r['run_s']:.1f} s", "", ""))
        rows.append(
            (
                f"job / floor, {w} worker(s)",
                f"{r['run_over_scan']:.2f}×",
                f"≤ {TARGET_RUN_OVER_SCAN}×",
                ok(r["run_over_scan"] <= TARGET_RUN_OVER_SCAN),
            )
        )
        for ratio in ("build_over_scan", "sweep_over_scan"):
            passes = ", ".join(f"{v:.2f}" for v in r["by_pass"][ratio])
            rows.append(
                (
                    f"{ratio}, {w} worker(s): median (each pass)",
                    f"{r[ratio]:.2f} ({passes})",
                    "≤ 1.3",
                    ok(r[ratio] <= 1.3),
                )
            )
        phases = ", ".join(f"{k} {v:.1f}" for k, v in r["job_phases_s"].items())
        floor_split = (
            f"objects {r['scan_only_objects_s']:.1f}, folders {r['scan_only_folders_s']:.1f}"
        )
        rows.append((f"job phases (s), {w} worker(s)", phases, f"floor: {floor_split}", ""))
        rows.append(
            (
                f"partitions scanned / s, {w} worker(s)",
                f"{r['partitions_per_s']:,.0f} (floor {r['floor_partitions_per_s']:,.0f})",
                "",
                "",
            )
        )
    n = result["naive"]
    rows.append(
        ("naive, per directory (sequential)", f"{result['naive_per_dir_ms']:.3f} ms", "", "")
    )
    rows.append(
        (
            "naive, per directory (concurrent)",
            f"{n['concurrent']['per_dir_ms']:.3f} ms",
            "",
            "",
        )
    )
    rows.append(("ours, per directory", f"{result['ours_per_dir_ms']:.4f} ms", "", ""))
    rows.append(
        (
            "speedup vs naive (sequential)",
            f"{result['speedup_vs_naive']:.0f}×",
            f"≥ {TARGET_SPEEDUP:.0f}×",
            ok(result["speedup_vs_naive"] >= TARGET_SPEEDUP),
        )
    )
    rows.append(
        (
            "speedup vs naive (concurrent)",
            f"{result['speedup_vs_naive_concurrent']:.0f}×",
            "",
            "",
        )
    )
    real = result.get("real_run")
    if real:
        rows.append(
            (
                f"delete requests / s at --rate {result['rate']}",
                f"{real['delete_requests_per_s'] or 0:,.0f}",
                f"≈ {result['rate']}" if result["rate"] else "",
                "",
            )
        )
        rows.append(
            (
                "re-check: candidates read per second",
                f"{real['recheck_reads_per_s'] or 0:,.0f} ({real['rechecked']:,} in"
                f" {real['recheck_s']:.1f} s)",
                "",
                "",
            )
        )
        rows.append(
            (
                "peak RSS, largest process / audit log",
                f"{real['peak_rss_mb']:,.0f} MB / {real['audit_log_bytes']:,} bytes",
                "≤ 1024 MB",
                ok(real["peak_rss_mb"] <= 1024),
            )
        )
        rows.append(
            ("precision", f"{result['precision']:.6f}", "= 1.0", ok(result["precision"] == 1.0))
        )
        rows.append(
            (
                "tombstones per live partition: max / p99 (audit); traced max",
                f"{real['tombstones_per_live_partition_max']:,} /"
                f" {real['tombstones_per_live_partition_p99']:,};"
                f" {real['traced_tombstones_max_of_10_heaviest']:,}",
                "≤ N = {}".format(
                    real["budget"]["max_tombstones_per_partition"] if real["budget"] else "?"
                ),
                "",
            )
        )
        rows.append(
            (
                "partitions / rows rewritten",
                f"{real['partitions_rewritten']:,} / {real['rows_rewritten']:,}",
                "",
                "",
            )
        )
        rows.append(
            (
                "recall (this run)",
                f"{result['recall']:.4f}",
                f"{real['deferred']:,} deferred by the per-partition tombstone budget",
                "",
            )
        )
        rows.append(
            (
                "recall, deferred counted as pending",
                f"{real['recall_with_deferred']:.4f}",
                f"≥ 1 − 1.5·p = {real['recall_target']:.4f}",
                ok(real["recall_with_deferred"] >= real["recall_target"]),
            )
        )
    lines = ["| metric | value | target | |", "|---|---:|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


def git_head() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return head + ("+dirty" if dirty else "")


# -- a real night, as an operator runs it ---------------------------------------------------------


def work_dir(args: argparse.Namespace) -> Path:
    """Where the nights' summaries, logs and audit logs go: beside ``--out``."""
    out: Path = args.out.parent / f"{args.out.stem}-nights"
    out.mkdir(parents=True, exist_ok=True)
    return out


def night_args(args: argparse.Namespace, workers: int, audit: Path) -> list[str]:
    """``dircleaner run``'s options for a real night on the benchmark's keyspace."""
    out = ["run", "--fpr", f"{args.fpr:g}", "--rate", f"{args.rate:g}", "--workers", str(workers)]
    out += ["--concurrency", str(args.delete_concurrency), "--audit-log", str(audit)]
    out += ["--spill-dir", str(audit.parent / "spill")]
    if args.max_delete_fraction is not None:
        out += ["--max-delete-fraction", f"{args.max_delete_fraction:g}"]
    if args.max_run_time is not None:
        out += ["--max-run-time", args.max_run_time]
    if args.config is not None:
        out += ["--config", str(args.config)]
    return out


def real_night(
    store: CassandraStore,
    args: argparse.Namespace,
    dataset: dict[str, Any],
    workers: int,
    truth: np.ndarray,
    floor: Floor | None = None,
) -> dict[str, Any]:
    """One real night on the dataset (``dircleaner run`` as a subprocess, measured from outside:
    wall, CPU, the peak RSS of its largest process), scored against the truth; each pass against
    its scan when ``floor`` (taken right before) is given. The dataset is marked used first: a
    killed night leaves it to be restored."""
    work = work_dir(args)
    name = f"night-w{workers}"
    audit = work / f"{name}.jsonl.gz"
    audit.unlink(missing_ok=True)
    live = live_sample(
        store, truth, DEFAULT_BUCKET, int(dataset["dirs"]), args.check_sample, args.seed
    )
    log(f"  {len(live):,} live directories sampled for the check after the night")
    mark_used(store, dataset)
    load_before = os.getloadavg()
    node = cassandra_node_pid()
    node_cpu = process_cpu_s(node)
    ran = measured_cli(args.store, night_args(args, workers, audit), work, name)
    node_cpu_after = process_cpu_s(node)
    summary = ran["summary"]
    clean = summary["clean"]
    phases = {"build": summary["build"]["seconds"], **clean["phase_seconds"]}
    log(f"  {ran['run_s']:.1f}s: " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()))
    deferred = int(clean["plan"]["deferred"])
    night: dict[str, Any] = {
        "workers": workers,
        "run_s": round(ran["run_s"], 3),
        "run_cpu_s": round(ran["run_cpu_s"], 3),
        "phases_s": {k: round(v, 3) for k, v in phases.items()},
        "startup_s": round(ran["run_s"] - sum(phases.values()), 3),
        **night_figures(summary, audit),
        # CPU seconds of the night's processes, and of the node meanwhile (its other clients'
        # requests included: the suite's tests share it)
        "client_cpu_s": round(ran["run_cpu_s"], 1),
        "node_cpu_s": None
        if node_cpu is None or node_cpu_after is None
        else round(node_cpu_after - node_cpu, 1),
        "peak_rss_mb": round(max(ran["peak_rss_single_mb"], ran["peak_rss_single_sampled_mb"]), 1),
        "peak_rss_by_phase_mb": peak_rss_by_phase(ran["rss_timeline"], phases, ran["run_s"]),
        "peak_rss_sum_mb": round(ran["peak_rss_sum_mb"], 1),
        "peak_pss_sum_mb": round(ran["peak_pss_sum_mb"], 1),
        "deferred": deferred,
        "recall_target": 1 - 1.5 * args.fpr,
        "budget": clean.get("budget"),
        "plan": clean["plan"],
        "partitions_rewritten": clean.get("partitions_rewritten", 0),
        "rows_rewritten": clean.get("rows_rewritten", 0),
        "retries": clean.get("retries", 0),
        "final_rate": clean.get("final_rate"),
        "sizing_method": summary["build"].get("sizing_method"),
        "audit_log": str(audit),
        "loadavg_before": load_before[0],
        "loadavg_after": ran["loadavg_after"][0],
        "cli": "dircleaner --store "
        + args.store
        + " "
        + " ".join(night_args(args, workers, audit)),
    }
    if floor is not None:
        night.update(
            floor_s=round(floor.seconds, 3),
            floor_objects_s=round(floor.objects_s, 3),
            floor_folders_s=round(floor.folders_s, 3),
            job_over_floor=ran["run_s"] / floor.seconds,
            build_over_scan=phases["build"] / floor.objects_s,
            sweep_over_scan=phases["sweep"] / floor.folders_s,
            # the passes the floor reads, against it: the night without its re-check, plan
            # and deletes, which no scan makes
            scans_over_floor=(phases["build"] + phases["sweep"]) / floor.seconds,
        )
    # The night's own figures, kept before any check runs: a check stopped later loses none.
    figures = work / f"{name}-figures.json"
    figures.write_text(json.dumps(night, indent=2, ensure_ascii=False) + "\n")
    by_phase = ", ".join(f"{k} {v:,.0f}" for k, v in night["peak_rss_by_phase_mb"].items())
    log(
        f"  peak RSS {night['peak_rss_mb']:,.0f} MB (by phase, MB: {by_phase}),"
        f" CPU {night['client_cpu_s']:,.0f} s (node {night['node_cpu_s']} s),"
        f" audit log {night['audit_log_bytes']:,} bytes; figures in {figures}"
    )
    check_night(store, args, dataset, night, audit, truth, live)
    figures.write_text(json.dumps(night, indent=2, ensure_ascii=False) + "\n")
    return night


def check_night(
    store: CassandraStore,
    args: argparse.Namespace,
    dataset: dict[str, Any],
    night: dict[str, Any],
    audit: Path,
    truth: np.ndarray,
    live: list[tuple[str, str]],
) -> None:
    """Score a night into ``night``: precision and recall from its audit log against the truth
    (no read of the store); the sampled live directories still listed and the sampled audited
    ones gone, read by key; the tombstones traced in the partitions the log charged most; with
    ``--full-check`` (or a dataset of at most ``FULL_CHECK_MAX_DIRS``), every audited directory
    looked for in a scan of the whole index."""
    started = time.perf_counter()
    scores = score_audit(
        audit, truth, DEFAULT_BUCKET, night["deferred"], heaviest=10, sample=args.check_sample
    )
    audited = scores.pop("audited_sample")
    log(
        f"  precision {scores['precision']:.6f} recall {scores['recall']:.4f}"
        f" (audit log against the truth, {time.perf_counter() - started:.0f}s)"
    )
    night.update(scores)
    # Cassandra's own count, by tracing, in the partitions the audit log charged most.
    traced = [
        store.tombstones_in_partition(DEFAULT_BUCKET, p) for p in night.pop("heaviest_partitions")
    ]
    night["traced_tombstones_max_of_10_heaviest"] = max(traced, default=0)
    sampled = sampled_check(store, live, audited)
    night["check"] = sampled
    night["live_rows_lost_in_sample"] = sampled["live_rows_lost_in_sample"]
    night["audited_but_still_listed"] = sampled["audited_still_listed_in_sample"]
    log(
        f"  sample by key: {sampled['live_rows_lost_in_sample']:,} of {len(live):,} live"
        f" directories lost, {sampled['audited_still_listed_in_sample']:,} of {len(audited):,}"
        f" audited still listed ({sampled['seconds']:.1f}s)"
    )
    if args.full_check or int(dataset["dirs"]) <= FULL_CHECK_MAX_DIRS:
        scan_started = time.perf_counter()
        leftover = still_listed(store, audited_hashes(audit, DEFAULT_BUCKET), DEFAULT_BUCKET)
        night["audited_but_still_listed"] += leftover
        night["check"]["full_scan_still_listed"] = leftover
        night["check"]["full_scan_s"] = round(time.perf_counter() - scan_started, 1)
        log(f"  full scan: {leftover:,} audited directories still listed")


def night_rounds(
    args: argparse.Namespace, store: CassandraStore, aux: AuxSession
) -> dict[str, Any]:
    """``--ratios-only``: ``--repeat`` rounds, each a real night per worker count in turn (the
    counts alternate): the pristine dataset (restored from its kept copy after the night
    before), the node's compactions settled, the floor at the night's parallelism and slices,
    then the night."""
    truth: np.ndarray | None = None
    nights: dict[str, list[dict[str, Any]]] = {str(w): [] for w in args.worker_counts}
    dataset: dict[str, Any] = {}
    for rep in range(args.repeat):
        for workers in args.worker_counts:
            dataset = ensure_dataset(store, aux, args)
            if not args.no_flush:
                settle(store.config.keyspace, args.settle_wait)
            if truth is None:
                truth = hashed(truth_lines(Path(dataset["truth_path"])))
            log(f"round {rep + 1}, {workers} worker(s): floor")
            node = cassandra_node_pid()
            node_cpu = process_cpu_s(node)
            floor = scan_floor(store, workers)
            floor_node_cpu = process_cpu_s(node)
            log(
                f"  {floor.seconds:.1f}s (objects {floor.objects_s:.1f},"
                f" folders {floor.folders_s:.1f})"
            )
            log(f"round {rep + 1}, {workers} worker(s): night")
            night = real_night(store, args, dataset, workers, truth, floor)
            if node_cpu is not None and floor_node_cpu is not None:
                night["floor_node_cpu_s"] = round(floor_node_cpu - node_cpu, 1)
            nights[str(workers)].append(night)
            # what is known so far, in case a later round is stopped
            args.out.parent.mkdir(parents=True, exist_ok=True)
            partial = {"partial": True, "nights": nights, "git_head": git_head()}
            args.out.write_text(json.dumps(partial, indent=2, ensure_ascii=False) + "\n")
    by_workers = {w: over_nights(ns) for w, ns in nights.items()}
    return {
        "dirs": dataset.get("dirs"),
        "empty_dirs": dataset.get("empty_dirs"),
        "objects": dataset.get("objects"),
        "shape": args.shape,
        "empty_fraction": args.empty_fraction,
        "dataset": {k: v for k, v in dataset.items() if k != "truth_sha256"},
        "rate": args.rate,
        "max_delete_fraction": args.max_delete_fraction,
        "by_workers": by_workers,
        "nights": nights,
        "store": args.store,
        "git_head": git_head(),
    }


#: a night's figures reported as the median of the rounds, each with its list
NIGHT_FIGURES = (
    "job_over_floor",
    "scans_over_floor",
    "build_over_scan",
    "sweep_over_scan",
    "startup_s",
    "recheck_s",
    "recheck_reads_per_s",
    "delete_s",
    "deleted_dirs_per_s",
    "delete_requests_per_s",
    "audit_log_bytes",
    "peak_rss_mb",
    "client_cpu_s",
    "node_cpu_s",
)


def over_nights(nights: list[dict[str, Any]]) -> dict[str, Any]:
    """The nights of one worker count: each figure's median and every night's value, the
    worst precision and recall."""
    out: dict[str, Any] = {}
    for name in NIGHT_FIGURES:
        values = [float(n.get(name) or 0.0) for n in nights]
        out[name] = statistics.median(values)
        out[f"{name}_runs"] = [round(v, 3) for v in values]
    out["peak_rss_mb"] = max(out["peak_rss_mb_runs"])
    for name in ("precision", "recall", "recall_with_deferred"):
        out[name] = min(n[name] for n in nights)
    out["candidates"] = nights[-1]["candidates"]
    out["removed_dirs"] = nights[-1]["removed_dirs"]
    out["audited_but_still_listed"] = max(n["audited_but_still_listed"] for n in nights)
    out["peak_rss_by_phase_mb"] = nights[-1]["peak_rss_by_phase_mb"]
    out["deadline"] = nights[-1]["deadline"]
    out["loads"] = [[n["loadavg_before"], n["loadavg_after"]] for n in nights]
    return out


def nights_markdown(result: dict[str, Any]) -> str:
    """One column per worker count: each figure's median, then every night's."""
    counts = list(result["by_workers"])
    lines = ["| figure | " + " | ".join(f"{w} worker(s)" for w in counts) + " |"]
    lines.append("|---|" + "---|" * len(counts))

    def cell(r: dict[str, Any], name: str) -> str:
        runs = ", ".join(f"{v:,.2f}" for v in r[f"{name}_runs"])
        return f"{r[name]:,.2f} ({runs})"

    for name in NIGHT_FIGURES:
        lines.append(
            f"| {name} | " + " | ".join(cell(result["by_workers"][w], name) for w in counts) + " |"
        )
    for name in ("precision", "recall", "recall_with_deferred", "candidates", "removed_dirs"):
        values = [result["by_workers"][w][name] for w in counts]
        lines.append(
            f"| {name} | "
            + " | ".join(f"{v:,}" if isinstance(v, int) else f"{v:.6f}" for v in values)
            + " |"
        )
    phases = [result["by_workers"][w]["peak_rss_by_phase_mb"] for w in counts]
    by_phase = [", ".join(f"{k} {v:,.0f}" for k, v in p.items()) for p in phases]
    lines.append("| peak RSS by phase, MB (last night) | " + " | ".join(by_phase) + " |")
    ends = [result["by_workers"][w]["deadline"] for w in counts]
    if any(end is not None for end in ends):
        lines.append(
            "| deadline (last night) | "
            + " | ".join(
                "none" if e is None else f"reached {e['reached']}, {e['left_dirs']:,} left"
                for e in ends
            )
            + " |"
        )
    loads = [
        "; ".join(f"{a:.1f}–{b:.1f}" for a, b in result["by_workers"][w]["loads"]) for w in counts
    ]
    lines.append("| load (before – after each night) | " + " | ".join(loads) + " |")
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dirs", type=int, required=True, help="directories to generate")
    ap.add_argument("--out", type=Path, required=True, help="result JSON")
    ap.add_argument("--store", default=DEFAULT_STORE, help="cassandra:// URL (own keyspace)")
    ap.add_argument("--config", type=Path, default=None, help="dircleaner TOML config")
    ap.add_argument("--seed", type=int, default=0)
    add_night_arguments(ap, "the real nights'")
    ap.add_argument(
        "--ratios-only",
        action="store_true",
        help="only real nights, each on the pristine dataset after a floor at its parallelism"
        " (--repeat rounds, the worker counts alternating): no dry runs, naive check nor"
        " sample",
    )
    ap.add_argument(
        "--prepare-only",
        action="store_true",
        help="only make sure the keyspace holds the pristine dataset (load or restore it)",
    )
    ap.add_argument(
        "--settle-wait",
        type=float,
        default=180.0,
        help="seconds to wait for the node's compactions after a load or a restore",
    )
    ap.add_argument("--fpr", type=float, default=DEFAULT_FPR, help="default: the job's own")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--repeat", type=int, default=1, help="floor/job pairs per worker count")
    ap.add_argument("--rate", type=int, default=2000, help="deletes/s of the real clean")
    ap.add_argument("--delete-concurrency", type=int, default=32)
    ap.add_argument("--naive-sample", type=int, default=20_000)
    ap.add_argument("--no-clean", action="store_true", help="skip the real clean (keep data)")
    ap.add_argument(
        "--check-sample",
        type=int,
        default=5000,
        help="after a real night, this many live directories (sampled before it) and audited"
        " ones read by key: the live still listed, the audited gone",
    )
    ap.add_argument(
        "--full-check",
        action="store_true",
        help="also look for every audited directory in a scan of the whole index (always at"
        f" up to {FULL_CHECK_MAX_DIRS:,} directories)",
    )
    ap.add_argument("--reload", action="store_true", help="reload the dataset even if cached")
    ap.add_argument(
        "--load",
        choices=("bulk", "driver"),
        default="bulk",
        help="how a dataset is loaded: sstables through the bulk loader, or the driver's inserts",
    )
    ap.add_argument("--no-flush", action="store_true", help="do not nodetool-flush after load")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args(argv)
    args.worker_counts = [int(w) for w in str(args.workers).split(",") if w.strip()]
    resolve_night_arguments(args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    store = open_store(args.store, config_path=args.config, create=True)
    if not isinstance(store, CassandraStore):
        raise SystemExit("this benchmark needs a cassandra:// store")
    aux = AuxSession(store)
    try:
        return _main(args, store, aux)
    finally:
        aux.close()
        store.close()


def _main(args: argparse.Namespace, store: CassandraStore, aux: AuxSession) -> int:
    if args.prepare_only:
        dataset = ensure_dataset(store, aux, args)
        log(f"the dataset is pristine in {store.config.keyspace}: {dataset['dirs']:,} dirs")
        return 0
    if args.ratios_only:
        rounds = night_rounds(args, store, aux)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rounds, indent=2, ensure_ascii=False) + "\n")
        print(nights_markdown(rounds))
        print(f"\nJSON: {args.out}")
        every = [n for ns in rounds["nights"].values() for n in ns]
        return 1 if any(failed_night(n) for n in every) else 0
    load_started = time.perf_counter()
    dataset = ensure_dataset(store, aux, args)
    log(f"dataset ready after {time.perf_counter() - load_started:.0f}s")
    dirs = int(dataset["dirs"])

    log("warm-up scan + naive sample")
    sample, warm_s = warm_and_sample(store, args.naive_sample, args.seed)
    log(f"  warm-up pass {warm_s:.1f}s")

    sizing_started = time.perf_counter()
    sizing = size_filter(store, BuildConfig(fpr=args.fpr))
    sizing_s = time.perf_counter() - sizing_started
    log(f"sizing: {sizing.count:,} ({sizing.method}) in {sizing_s:.1f}s")

    by_workers: dict[str, dict[str, Any]] = {}
    for workers in args.worker_counts:
        floors: list[Floor] = []
        jobs: list[tuple[RunReport, float]] = []
        for rep in range(args.repeat):
            log(f"floor, {workers} worker(s), pass {rep + 1}")
            floors.append(scan_floor(store, workers))
            log(f"  {floors[-1].seconds:.1f}s")
            log(f"job --dry-run, {workers} worker(s), pass {rep + 1}")
            jobs.append(timed_job(store, args, workers, True, None))
            log(f"  {jobs[-1][1]:.1f}s")
        floor = min(floors, key=lambda f: f.seconds)
        report, run_s = min(jobs, key=lambda j: j[1])
        # Each pass against its own scan, pair by pair (a floor and the job right after it):
        # the build phase over the objects scan, the sweep phase (re-check excluded) over the
        # folders scan, as bench/e2e.py reports them on SQLite.
        per_pass: dict[str, list[float]] = {
            "build_over_scan": [],
            "sweep_over_scan": [],
            "run_over_scan": [],
        }
        for pass_floor, (job, job_s) in zip(floors, jobs, strict=True):
            assert job.build is not None  # a fresh dry run builds
            per_pass["build_over_scan"].append(job.build.seconds / pass_floor.objects_s)
            sweep_s = job.clean.phase_seconds["sweep"]
            per_pass["sweep_over_scan"].append(sweep_s / pass_floor.folders_s)
            per_pass["run_over_scan"].append(job_s / pass_floor.seconds)
        assert report.build is not None
        scanned = report.build.partitions_scanned + report.clean.sweep.result.partitions
        by_workers[str(workers)] = {
            "workers": workers,
            "scan_only_s": round(floor.seconds, 3),
            "scan_only_objects_s": round(floor.objects_s, 3),
            "scan_only_folders_s": round(floor.folders_s, 3),
            "run_s": round(run_s, 3),
            "run_over_scan": round(run_s / floor.seconds, 3),
            "build_over_scan": round(statistics.median(per_pass["build_over_scan"]), 3),
            "sweep_over_scan": round(statistics.median(per_pass["sweep_over_scan"]), 3),
            "by_pass": {k: [round(v, 3) for v in vs] for k, vs in per_pass.items()},
            "all_floor_s": [round(f.seconds, 3) for f in floors],
            "all_run_s": [round(j[1], 3) for j in jobs],
            "job_phases_s": job_phases(report, run_s),
            "object_partitions": report.build.partitions_scanned,
            "folder_partitions": report.clean.sweep.result.partitions,
            "folder_rows": report.clean.sweep.result.swept_rows,
            "floor_counts": [floor.object_partitions, floor.folder_rows],
            "partitions_per_s": round(scanned / run_s),
            "floor_partitions_per_s": round(
                (floor.object_partitions + report.clean.sweep.result.partitions) / floor.seconds
            ),
            "candidates": report.clean.sweep.result.candidates,
            "verified": report.clean.verified,
            "plan_actions": report.clean.plan.deletes.partition
            + report.clean.plan.deletes.row
            + report.clean.plan.deletes.range,
            "sizing_method": report.build.sizing.method,
            "fill_ratio": round(report.build.fill_ratio, 4),
            "fpr_estimated": report.build.estimated_fpr,
            "cli": cli_equivalent(args, workers, True),
        }
    primary = by_workers[str(args.worker_counts[0])]

    log(f"naive check, sequential, {len(sample):,} sampled directories")
    sample_dirs = [(row.bucket, dir_of_row(row.parent, row.name)) for row in sample]
    naive_seq = naive_sequential(store, aux, sample_dirs)
    log(f"  {naive_seq['seconds']:.1f}s")
    naive_conc = naive_concurrent(aux, sample_dirs, store.config.concurrency)
    log(f"  concurrent {naive_conc['seconds']:.1f}s")
    ours_per_dir_ms = 1000 * primary["run_s"] / dirs

    result: dict[str, Any] = {
        "dirs": dirs,
        "load_s": dataset["load_s"],
        "scan_only_s": primary["scan_only_s"],
        "run_s": primary["run_s"],
        "run_over_scan": primary["run_over_scan"],
        "workers": primary["workers"],
        "naive_per_dir_ms": round(naive_seq["per_dir_ms"], 4),
        "ours_per_dir_ms": round(ours_per_dir_ms, 5),
        "speedup_vs_naive": round(naive_seq["per_dir_ms"] / ours_per_dir_ms, 1),
        "speedup_vs_naive_concurrent": round(naive_conc["per_dir_ms"] / ours_per_dir_ms, 1),
        "partitions_per_s": primary["partitions_per_s"],
        "deletes_per_s": None,
        "rate": args.rate,
        "precision": None,
        "recall": None,
        "dataset": {k: v for k, v in dataset.items() if k != "truth_sha256"},
        "sizing": {"count": sizing.count, "method": sizing.method, "seconds": round(sizing_s, 2)},
        "warmup_s": round(warm_s, 2),
        "by_workers": by_workers,
        "naive": {"sequential": naive_seq, "concurrent": naive_conc},
        "store": args.store,
        "cassandra_config": {
            "fetch_size": store.config.fetch_size,
            "splits_per_range": store.config.splits_per_range,
            "concurrency": store.config.concurrency,
        },
        "loadavg_1m": os.getloadavg()[0],
        "git_head": git_head(),
        "method": (
            "ratio: run_job --dry-run --min-age 0 (sizing+build+sweep+verify+plan) vs the two"
            " token-range scans consumed fully, same process, same worker layout; deletes/s and"
            " precision/recall: one real run_job at --rate on the same data, which then is"
            " marked used and reloaded on the next invocation"
        ),
    }

    if not args.no_clean:
        workers = args.worker_counts[0]
        log(f"real night at --rate {args.rate}, {workers} worker(s)")
        truth = hashed(truth_lines(Path(dataset["truth_path"])))
        real = real_night(store, args, dataset, workers, truth)
        result.update(
            deletes_per_s=real["delete_requests_per_s"],
            precision=real["precision"],
            recall=real["recall"],
        )
        result["real_run"] = real

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(markdown(result))
    print(f"\nJSON: {args.out}")
    return 1 if failed_night(result.get("real_run")) else 0


def failed_night(night: dict[str, Any] | None) -> bool:
    """Whether a real night deleted a directory that was not empty, or left one it audited."""
    if night is None:
        return False
    return (
        night["precision"] != 1.0
        or bool(night["audited_but_still_listed"])
        or bool(night.get("live_rows_lost_in_sample"))
    )


if __name__ == "__main__":
    sys.exit(main())
