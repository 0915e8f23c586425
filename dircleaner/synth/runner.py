"""Running the layout jobs (in processes) and loading their rows into a store."""

from __future__ import annotations

import dataclasses
import heapq
import json
import marshal
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from dircleaner.errors import UsageError
from dircleaner.gcpause import cyclic_gc_paused
from dircleaner.model import Shard
from dircleaner.store.base import Store
from dircleaner.store.capabilities import BulkLoader, index_writer
from dircleaner.synth.layouts import TMP_DIRS, write_layout
from dircleaner.synth.shares import share_empties
from dircleaner.synth.spec import (
    DAY_US,
    LAYOUT_MIX,
    LayoutStats,
    Progress,
    Row,
    SynthResult,
    SynthSpec,
)
from dircleaner.synth.writer import PROGRESS_EVERY, SLICES, Spill, SpillRef, Writer
from dircleaner.workers import interrupt

#: Rows handed to one ``bulk_insert`` call (one transaction).
INSERT_BATCH = 50_000
#: Target rows per token bucket at load time; bounds the loader's memory.
BUCKET_ROWS = 400_000
#: Below this many directories the generator runs in-process by default.
PARALLEL_MIN_DIRS = 300_000


# -- jobs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    layout: str
    budget: int
    seed: int
    bucket: str
    empty_fraction: float
    buckets: int
    workdir: str
    timestamp_us: int
    #: the set pieces this layout makes (see ``dircleaner.synth.shares``)
    wide_children: int = 0
    set_pieces: bool = False


@dataclass(frozen=True)
class _JobOutput:
    stats: LayoutStats
    folders: SpillRef
    objects: SpillRef
    truth_runs: list[str]
    protocol_keys: list[tuple[str, bool]] | None = field(default=None)


def _run_job(job: _Job, tick: Callable[[int], None] | None = None) -> _JobOutput:
    """Generate one layout into spill files and sorted truth runs."""
    with cyclic_gc_paused():
        return _generate_layout(job, tick)


def _generate_layout(job: _Job, tick: Callable[[int], None] | None) -> _JobOutput:
    workdir = Path(job.workdir)
    shift = 64 - ((job.buckets * SLICES).bit_length() - 1)
    folders = Spill(workdir / f"{job.layout}.folders", job.buckets)
    objects = Spill(workdir / f"{job.layout}.objects", job.buckets)
    w = Writer(
        job.bucket,
        job.timestamp_us,
        folders,
        objects,
        shift,
        job.empty_fraction,
        workdir,
        job.layout,
        tick,
        budget=job.budget,
    )
    rng = random.Random(f"dircleaner-synth:{job.seed}:{job.layout}")
    write_layout(
        job.layout,
        w,
        rng,
        job.budget,
        job.empty_fraction,
        wide_children=job.wide_children,
        set_pieces=job.set_pieces,
    )
    w.finish()
    return _JobOutput(
        LayoutStats(job.layout, w.dirs, w.empties, w.objects),
        folders.close(),
        objects.close(),
        w.truth_runs,
        w.protocol_keys,
    )


def _token_buckets(dirs: int) -> int:
    """A power of two such that one token bucket of one table holds about BUCKET_ROWS rows."""
    want = max(1, math.ceil(dirs * 1.6 / BUCKET_ROWS))
    return min(1 << 16, 1 << (want - 1).bit_length())


def plan_jobs(spec: SynthSpec, workdir: Path, timestamp_us: int = 0) -> list[_Job]:
    """The independent layout jobs for ``spec`` (their budgets add up to ``spec.dirs``)."""
    buckets = _token_buckets(spec.dirs)
    total = max(0, spec.dirs - TMP_DIRS)
    budgets = {name: int(total * share) for name, share in LAYOUT_MIX}
    budgets["ids"] += total - sum(budgets.values())
    budgets["tmp"] = TMP_DIRS
    shares = share_empties(spec.dirs, spec.empty_fraction, budgets)
    return [
        _Job(
            layout=name,
            budget=budget,
            seed=spec.seed,
            bucket=spec.bucket,
            empty_fraction=shares.fractions[name],
            buckets=buckets,
            workdir=str(workdir),
            timestamp_us=timestamp_us,
            wide_children=shares.wide_children if name == "dates" else 0,
            set_pieces=shares.set_pieces,
        )
        for name, budget in budgets.items()
        if budget > 0
    ]


def iter_layout_keys(spec: SynthSpec) -> Iterator[tuple[str, str, bool]]:
    """Every (layout, key, alive) of the dataset, layout by layout, in token-bucket order.

    Alive keys are the object rows the store ends up with (a marker is its ``dir/`` key); dead
    keys are the few put and then deleted through the store protocol. Streams from spill files.
    """
    with tempfile.TemporaryDirectory(prefix="dircleaner-synth-") as tmp:
        for job in plan_jobs(spec, Path(tmp)):
            out = _run_job(job, tick=lambda _n: None)
            if out.protocol_keys is not None:
                for key, alive in out.protocol_keys:
                    yield job.layout, key, alive
                continue
            if not Path(out.objects.path).exists():
                continue
            with open(out.objects.path, "rb") as handle:
                for bucket in range(job.buckets):
                    for group in out.objects.read_bucket(bucket, handle):
                        for rows in group:
                            for _tok, _bucket, parent, name, _ts in rows:
                                yield job.layout, parent + name, True


# -- the load -----------------------------------------------------------------------------------


def _default_workers(dirs: int) -> int:
    """One process for small specs (a worker costs ~0.2 s to start), else one per CPU."""
    if dirs < PARALLEL_MIN_DIRS:
        return 1
    return max(1, min(len(LAYOUT_MIX), os.cpu_count() or 1))


def _save_output(out: _JobOutput, path: Path) -> None:
    data = {
        "stats": (out.stats.name, out.stats.dirs, out.stats.empty_dirs, out.stats.objects),
        "folders": (out.folders.path, out.folders.index),
        "objects": (out.objects.path, out.objects.index),
        "truth_runs": out.truth_runs,
    }
    path.write_bytes(marshal.dumps(data))


def _read_output(path: Path) -> _JobOutput:
    data = marshal.loads(path.read_bytes())
    return _JobOutput(
        LayoutStats(*data["stats"]),
        SpillRef(*data["folders"]),
        SpillRef(*data["objects"]),
        data["truth_runs"],
    )


def _worker_main() -> None:
    """A generator subprocess: one job as JSON on stdin, progress deltas as lines on stdout."""
    job = _Job(**json.loads(sys.stdin.read()))

    def tick(delta: int) -> None:
        sys.stdout.write(f"{delta}\n")
        sys.stdout.flush()

    _save_output(_run_job(job, tick), Path(job.workdir) / f"{job.layout}.out")


# SIGINT as SIGTERM: the worker ends at once and quietly (no KeyboardInterrupt traceback);
# the parent, stopped by the same Ctrl-C, says so.
_WORKER_CODE = (
    "import signal; signal.signal(signal.SIGINT, signal.SIG_DFL);"
    " from dircleaner.synth.runner import _worker_main; _worker_main()"
)


def _run_in_subprocess(
    job: _Job, tick: Callable[[int], None], running: list[subprocess.Popen[str]]
) -> _JobOutput:
    """Run one job in a fresh interpreter (no fork, no re-import of the caller's ``__main__``),
    listed in ``running`` so that a stopped parent can stop it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    workdir = Path(job.workdir)
    with (workdir / f"{job.layout}.stderr").open("w+", encoding="utf-8") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_CODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )
        running.append(proc)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(dataclasses.asdict(job)))
        proc.stdin.close()
        for line in proc.stdout:
            tick(int(line))
        code = proc.wait()
        if code != 0:
            err.seek(0)
            tail = err.read()[-2000:].strip()
            raise RuntimeError(f"generator worker for layout {job.layout!r} exited {code}: {tail}")
    return _read_output(workdir / f"{job.layout}.out")


def _run_jobs(jobs: list[_Job], workers: int, progress: Progress | None) -> list[_JobOutput]:
    """Run the jobs: in this process for 1 worker, else largest first in ``workers`` processes."""
    lock = threading.Lock()
    done = [0]
    reported = [0]

    def tick(delta: int) -> None:
        with lock:
            done[0] += delta

    def report() -> None:
        if progress is not None and done[0] - reported[0] >= PROGRESS_EVERY:
            reported[0] = done[0]
            progress(done[0])

    if workers <= 1:

        def tick_and_report(delta: int) -> None:
            tick(delta)
            report()

        serial = [_run_job(job, tick_and_report) for job in jobs]
        if progress is not None and done[0] > reported[0]:
            progress(done[0])
        return serial
    outputs: dict[int, _JobOutput] = {}
    local = [i for i, job in enumerate(jobs) if job.layout == "tmp"]
    remote = sorted((i for i in range(len(jobs)) if i not in local), key=lambda i: -jobs[i].budget)
    running: list[subprocess.Popen[str]] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        try:
            futures = {pool.submit(_run_in_subprocess, jobs[i], tick, running): i for i in remote}
            for i in local:
                outputs[i] = _run_job(jobs[i], tick)
            pending = set(futures)
            while pending:
                interrupt.check()  # a stop request ends the generation (said by the caller)
                finished, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
                for future in finished:
                    if future.exception() is not None:
                        interrupt.check()  # a worker ended by the same signal: not a failure
                    outputs[futures[future]] = future.result()
                report()
        except BaseException:
            for proc in list(running):  # the jobs not finished are of no use now
                if proc.poll() is None:
                    proc.kill()
            pool.shutdown(cancel_futures=True)
            raise
    if progress is not None and done[0] > reported[0]:
        progress(done[0])
    return [outputs[i] for i in range(len(jobs))]


def _load(
    store: Store,
    outputs: list[_JobOutput],
    buckets: int,
    bucket: str,
    timestamp_us: int,
    bulk: BulkLoader | None = None,
) -> None:
    """Insert every spilled row, one token bucket at a time, slice by slice (near token order)."""
    loader = bulk if bulk is not None else store if isinstance(store, BulkLoader) else None
    writer = index_writer(store)
    # The protocol job's rows reach the store through put_objects, not through the spill.
    outputs = [out for out in outputs if out.protocol_keys is None]
    with ExitStack() as stack:
        handles: dict[str, IO[bytes]] = {}
        for out in outputs:
            for ref in (out.folders, out.objects):
                if Path(ref.path).exists():
                    handles[ref.path] = stack.enter_context(open(ref.path, "rb"))
        if loader is not None:
            stack.enter_context(loader.bulk_loading())
        stack.enter_context(cyclic_gc_paused())
        for b in range(buckets):
            for table in ("folders", "objects"):
                chunks: list[list[list[Row]]] = []
                for out in outputs:
                    ref = out.folders if table == "folders" else out.objects
                    handle = handles.get(ref.path)
                    if handle is not None:
                        chunks.extend(ref.read_bucket(b, handle))
                slices = (chunk[i] for i in range(SLICES) for chunk in chunks if chunk[i])
                for part in _batches(slices, INSERT_BATCH):
                    if loader is not None:
                        loader.bulk_insert(table, part)
                    elif table == "folders":
                        writer.write_folder_rows([r[1:4] for r in part], timestamp_us)
                    else:
                        writer.write_object_rows([r[1:4] for r in part], timestamp_us)


def _batches(pieces: Iterable[list[Row]], size: int) -> Iterator[list[Row]]:
    """Regroup lists of rows into lists of about ``size`` rows."""
    batch: list[Row] = []
    for piece in pieces:
        batch.extend(piece)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _merge_truth(runs: list[str], out_path: Path) -> None:
    """Merge sorted runs into the sorted truth file (bounded memory)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        files = [stack.enter_context(open(run, encoding="utf-8", newline="\n")) for run in runs]
        streams = [(line[:-1] for line in f) for f in files]
        tmp = out_path.with_name(out_path.name + ".partial")
        with tmp.open("w", encoding="utf-8", newline="\n") as out:
            out.writelines(p + "\n" for p in heapq.merge(*streams))
        tmp.replace(out_path)


def _ensure_fresh(store: Store, bucket: str) -> None:
    for batch in store.scan_folder_rows(Shard(), bucket):
        if batch:
            raise UsageError(
                f"the store already holds directories of bucket {bucket!r}; generate into a new"
                " store or another bucket"
            )
        break


def generate(
    store: Store,
    spec: SynthSpec,
    truth_path: Path | None,
    progress: Progress | None = None,
    *,
    workers: int | None = None,
    spill_dir: Path | None = None,
    bulk: BulkLoader | None = None,
) -> SynthResult:
    """Fill an empty bucket of ``store`` with the dataset of ``spec``; write its ground truth.

    The truth file lists every empty directory (full path ending in ``/``), sorted, one per line.
    ``progress`` is called with the number of directories generated so far, every ~100k; the bulk
    load follows generation. ``workers`` processes generate layouts in parallel (default: CPUs);
    the dataset does not depend on it. Spill files go to ``spill_dir`` (default: the temp dir).
    The rows go to ``bulk`` when given (the Cassandra bulk loader), else to the store's own
    ``BulkLoader`` or ``IndexWriter``.
    """
    started = time.perf_counter()
    _ensure_fresh(store, spec.bucket)
    timestamp_us = (
        spec.timestamp_us if spec.timestamp_us is not None else time.time_ns() // 1000 - DAY_US
    )
    workers = _default_workers(spec.dirs) if workers is None else max(1, workers)
    with tempfile.TemporaryDirectory(prefix="dircleaner-synth-", dir=spill_dir) as tmp:
        jobs = plan_jobs(spec, Path(tmp), timestamp_us)
        outputs = _run_jobs(jobs, workers, progress)
        generated = time.perf_counter()
        _load(store, outputs, jobs[0].buckets, spec.bucket, timestamp_us, bulk)
        protocol = [key for out in outputs for key in out.protocol_keys or ()]
        if protocol:
            store.put_objects(spec.bucket, [key for key, _ in protocol], timestamp_us)
            store.delete_objects(
                spec.bucket, [key for key, alive in protocol if not alive], timestamp_us
            )
        loaded = time.perf_counter()
        if truth_path is not None:
            _merge_truth([run for out in outputs for run in out.truth_runs], truth_path)
    stats = tuple(out.stats for out in outputs)
    return SynthResult(
        dirs=sum(s.dirs for s in stats),
        empty_dirs=sum(s.empty_dirs for s in stats),
        objects=sum(s.objects for s in stats),
        seconds=time.perf_counter() - started,
        generate_seconds=generated - started,
        load_seconds=loaded - generated,
        layouts=stats,
        timestamp_us=timestamp_us,
        truth_path=truth_path,
    )
