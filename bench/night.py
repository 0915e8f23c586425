"""What the end-to-end benchmarks share about one night: the options that choose its dataset
and guard, the ``dircleaner`` command run as a subprocess and measured from outside (wall and CPU
seconds, the peak RSS of its largest process, its process tree's RSS and PSS), and its audit log
scored against the ground truth in memory that does not follow the night's size.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dircleaner.audit import read_audit_log
from dircleaner.synth import SHAPES
from dircleaner.synth.groundtruth import percentile

SAMPLE_EVERY_S = 0.2
#: the phases of a night, in the order they run
NIGHT_ORDER = {name: i for i, name in enumerate(("build", "sweep", "verify", "plan", "delete"))}
#: paths hashed per numpy chunk
CHUNK = 1 << 18
#: --max-delete-fraction of the backlog's night: 64% of the directories go, and the guard's
#: default (0.1) refuses it, as it should
BACKLOG_MAX_DELETE_FRACTION = 0.7

# Runs the job and reports the peak RSS of its largest process (RUSAGE_CHILDREN covers every
# waited-for descendant, so the forked workers too) and its own wall time.
_WRAPPER = """
import json, resource, subprocess, sys, time
with open(sys.argv[1], "w") as out, open(sys.argv[2], "w") as err:
    started = time.perf_counter()
    rc = subprocess.call(sys.argv[3:], stdout=out, stderr=err)
    seconds = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = usage.ru_utime + usage.ru_stime
print(json.dumps({"rc": rc, "seconds": seconds, "maxrss_kb": usage.ru_maxrss, "cpu_s": cpu}))
"""

CLI = "import sys; from dircleaner.cli import main; sys.argv[0] = 'dircleaner'; main()"


# -- the night's dataset and guard ------------------------------------------------------------


def add_night_arguments(ap: argparse.ArgumentParser, nights: str) -> None:
    """The options that choose the night's dataset (``--empty-fraction`` or ``--shape``) and its
    guard and window (``--max-delete-fraction``, ``--max-run-time``), the same in every
    end-to-end benchmark; ``nights`` names whose they are in the help ("the night's")."""
    shape = ap.add_mutually_exclusive_group()
    shape.add_argument("--empty-fraction", type=float, help="[default: 0.05]")
    shape.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        help="a cluster of the talk, as gen --shape makes it (steady: 352 empty of 31.5M;"
        " backlog: 16M of 25M)",
    )
    ap.add_argument(
        "--max-delete-fraction",
        type=float,
        help=f"{nights} guard (default: the job's own, 0.1; {BACKLOG_MAX_DELETE_FRACTION:g} with"
        " --shape backlog, which the guard refuses otherwise, as it should)",
    )
    ap.add_argument(
        "--max-run-time",
        help=f"{nights} --max-run-time (e.g. 20m): a backlog night stopped at it, what it left"
        " reported",
    )


def resolve_night_arguments(args: argparse.Namespace) -> None:
    """``args.empty_fraction`` made the share of ``--shape`` or ``--empty-fraction``, and the
    backlog's guard raised to ``BACKLOG_MAX_DELETE_FRACTION`` unless one was given."""
    args.empty_fraction = empty_fraction_of(args.shape, args.empty_fraction)
    if args.max_delete_fraction is None and args.shape == "backlog":
        args.max_delete_fraction = BACKLOG_MAX_DELETE_FRACTION


def empty_fraction_of(shape: str | None, fraction: float | None) -> float:
    """The share of empty directories of ``--shape`` or ``--empty-fraction`` (default 0.05)."""
    if shape is not None:
        return SHAPES[shape]
    return 0.05 if fraction is None else fraction


# -- the process tree's memory ------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo.extend(_children(p))
    return pids


def _memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in KiB; (0, 0) if it is gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


class TreeSampler(threading.Thread):
    """Samples the RSS and PSS of a process tree until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.max_single_rss_kb = 0
        self.max_sum_rss_kb = 0
        self.max_sum_pss_kb = 0
        self.max_processes = 0
        #: (seconds since the start, RSS of the largest process in KiB), one per sample
        self.timeline: list[tuple[float, int]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        started = time.perf_counter()
        while not self._halt.is_set():
            # The wrapper itself is excluded: it is not part of the job.
            pids = [p for p in _tree(self.pid) if p != self.pid]
            mems = [_memory_kb(p) for p in pids]
            rss = [m[0] for m in mems]
            if rss:
                self.max_single_rss_kb = max(self.max_single_rss_kb, max(rss))
                self.timeline.append((time.perf_counter() - started, max(rss)))
            self.max_sum_rss_kb = max(self.max_sum_rss_kb, sum(rss))
            self.max_sum_pss_kb = max(self.max_sum_pss_kb, sum(m[1] for m in mems))
            self.max_processes = max(self.max_processes, sum(1 for r in rss if r))
            self._halt.wait(SAMPLE_EVERY_S)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def measured_cli(url: str, args: list[str], work: Path, name: str) -> dict[str, Any]:
    """``dircleaner --store URL ARGS --json`` as a subprocess, its process tree sampled: its
    JSON summary, wall and CPU seconds (every process of it) and memory. Exits on a failure."""
    out, err = work / f"{name}.json", work / f"{name}.log"
    cmd = [sys.executable, "-c", CLI, "--store", url, *args, "--json"]
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRAPPER, str(out), str(err), *cmd],
        stdout=subprocess.PIPE,
        text=True,
    )
    sampler = TreeSampler(proc.pid)
    sampler.start()
    stdout, _ = proc.communicate()
    wall = time.perf_counter() - started
    sampler.stop()
    wrapped = json.loads(stdout)
    if wrapped["rc"] != 0:
        raise SystemExit(f"dircleaner {args[0]} failed (exit {wrapped['rc']}); see {err}")
    return {
        "summary": json.loads(out.read_text()),
        "run_s": wrapped["seconds"],
        "run_cpu_s": wrapped["cpu_s"],
        "run_wall_with_wrapper_s": wall,
        "peak_rss_single_mb": wrapped["maxrss_kb"] / 1024,
        "peak_rss_single_sampled_mb": sampler.max_single_rss_kb / 1024,
        "peak_rss_sum_mb": sampler.max_sum_rss_kb / 1024,
        "peak_pss_sum_mb": sampler.max_sum_pss_kb / 1024,
        "max_processes": sampler.max_processes,
        "rss_timeline": sampler.timeline,
        "loadavg_after": os.getloadavg(),
    }


def peak_rss_by_phase(
    timeline: list[tuple[float, int]], phases: dict[str, float], run_s: float
) -> dict[str, float]:
    """The largest process's peak RSS (MB) within each phase, the phases (in the night's order)
    laid end to end after the start-up (the seconds no phase covers, put first: the
    interpreter, imports, the lease), so each window is approximate by the start-up's tail.
    ``start-up`` is the window before the first phase."""
    out: dict[str, float] = {}
    start = max(0.0, run_s - sum(phases.values()))
    windows = [("start-up", 0.0, start)]
    # the summary's phases come in key order, not the night's
    ordered = sorted(phases.items(), key=lambda p: NIGHT_ORDER.get(p[0], len(NIGHT_ORDER)))
    for name, seconds in ordered:
        windows.append((name, start, start + seconds))
        start += seconds
    for name, begin, end in windows:
        inside = [kb for t, kb in timeline if begin <= t < end]
        out[name] = round(max(inside) / 1024, 1) if inside else 0.0
    return out


def cassandra_node_pid() -> int | None:
    """The local Cassandra node's process (``CassandraDaemon``), if this machine runs one."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"org.apache.cassandra.service.CassandraDaemon" in f.read():
                    return int(entry)
        except OSError:
            continue
    return None


def process_cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system) a process has used so far; None if it is gone."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def night_figures(summary: dict[str, Any], audit: Path) -> dict[str, Any]:
    """A real night's re-check and deletes, in seconds and per second, and its audit log's
    bytes, from its ``--json`` summary and the log."""
    clean = summary["clean"]
    phases = clean["phase_seconds"]
    recheck_s, delete_s = phases.get("verify", 0.0), phases.get("delete", 0.0)
    # what the store removed, where it can tell (SQLite); else what it acknowledged
    removed = clean.get("removed_dirs")
    removed = int(clean.get("delete_requested_dirs", 0) if removed is None else removed)
    tombstones = sum(int(clean.get(k, 0)) for k in ("partition_tombstones", "row_tombstones"))
    tombstones += int(clean.get("range_tombstones", 0))
    audit_bytes = audit.stat().st_size if audit.exists() else 0
    return {
        "candidates": int(clean["sweep"]["candidates"]),
        "rechecked": int(clean.get("verified", 0)),
        "recheck_s": recheck_s,
        "recheck_reads_per_s": clean["verify_reads"]["rows_per_s"]
        if clean.get("verify_reads")
        else None,
        "removed_dirs": removed,
        "delete_s": delete_s,
        "deleted_dirs_per_s": removed / delete_s if delete_s else None,
        "delete_requests": tombstones,
        "delete_requests_per_s": tombstones / delete_s if delete_s else None,
        "spill": clean.get("spill"),
        "audit_log_bytes": audit_bytes,
        "audit_bytes_per_entry": audit_bytes / removed if removed else None,
        # --max-run-time / --deadline: whether the night stopped at it, and what it left
        "deadline": clean.get("deadline"),
    }


# -- scoring in bounded memory ------------------------------------------------------------------


def hashed(paths: Iterable[str]) -> np.ndarray:
    """The distinct 64-bit hashes of ``paths``, sorted (this process's string hash)."""
    parts: list[np.ndarray] = []
    chunk: list[int] = []
    for path in paths:
        chunk.append(hash(path))
        if len(chunk) >= CHUNK:
            parts.append(np.unique(np.array(chunk, dtype=np.int64)))
            chunk = []
    parts.append(np.array(chunk, dtype=np.int64))
    return np.unique(np.concatenate(parts))


def in_sorted(keys: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """Which of ``keys`` are in ``hashes`` (``hashed``'s sorted array): a binary search per
    key (``np.isin`` sorts both arrays on every call, all 16M truth hashes per batch)."""
    if not len(hashes):
        return np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(hashes, keys), len(hashes) - 1)
    return np.asarray(hashes[at] == keys)


def truth_lines(path: Path) -> Iterator[str]:
    """One empty directory per line of a truth file."""
    with path.open(encoding="utf-8") as stream:
        for line in stream:
            if line != "\n":
                yield line.rstrip("\n")


def score_audit(
    audit: Path,
    truth: np.ndarray,
    bucket: str,
    deferred: int,
    heaviest: int = 0,
    sample: int = 0,
) -> dict[str, Any]:
    """Precision and recall of a night's audit log against the truth (``hashed`` paths of the
    truly empty directories), how its entries went, and the tombstones it left per live
    partition (row 1, each distinct range 2), in one pass over the log; with ``heaviest``, the
    parents of that many partitions it charged most (a second pass); with ``sample``, that
    many of its ``(bucket, directory)`` entries picked at random in the same pass
    (``audited_sample``), for a check by key that they are gone from the index."""
    via: dict[str, int] = {}
    rng = random.Random(len(truth))
    picked: list[tuple[str, str]] = []
    deleted: list[int] = []
    charged: list[int] = []  # a live partition's hash, once per tombstone cell
    ranges: set[int] = set()
    if audit.exists():
        for entry in read_audit_log(audit):
            if entry["bucket"] != bucket:
                continue
            kind = str(entry.get("via"))
            via[kind] = via.get(kind, 0) + 1
            deleted.append(hash(entry["dir"]))
            if len(deleted) <= sample:
                picked.append((bucket, str(entry["dir"])))
            elif sample and (j := rng.randrange(len(deleted))) < sample:
                picked[j] = (bucket, str(entry["dir"]))
            if kind == "row":
                charged.append(hash(entry["parent"]))
            elif kind == "range":
                first, last = entry["range"]
                key = hash((entry["parent"], first, last))
                if key not in ranges:
                    ranges.add(key)
                    charged.extend((hash(entry["parent"]),) * 2)
    done = np.unique(np.array(deleted, dtype=np.int64))
    del deleted
    right = int(np.isin(done, truth, assume_unique=True).sum())
    partitions, per_partition = np.unique(np.array(charged, dtype=np.int64), return_counts=True)
    counts = [int(c) for c in per_partition]
    top = partitions[np.argsort(-per_partition, kind="stable")[:heaviest]]
    wrong = [] if right == len(done) else wrongly_deleted(audit, truth, bucket)
    extra: dict[str, Any] = {"audited_sample": picked} if sample else {}
    return {
        **extra,
        "deleted": len(done),
        "deleted_by": {kind: via.get(kind, 0) for kind in ("partition", "row", "range", "rewrite")},
        "tombstones_per_live_partition_max": max(counts, default=0),
        "tombstones_per_live_partition_p99": percentile(counts, 0.99),
        "heaviest_partitions": parents_of(audit, bucket, set(top.tolist())) if heaviest else [],
        "deleted_nonempty": len(done) - right,
        "wrongly_deleted": wrong,
        "precision": right / len(done) if len(done) else 1.0,
        "truly_empty": len(truth),
        "recall": right / len(truth) if len(truth) else 1.0,
        # Deferred entries are known empty but held back by the per-partition tombstone budget
        # (they go in a later run): this is the recall of the filter and the sweep themselves.
        "recall_with_deferred": min(1.0, (right + deferred) / len(truth)) if len(truth) else 1.0,
    }


def wrongly_deleted(audit: Path, truth: np.ndarray, bucket: str, limit: int = 20) -> list[str]:
    """The first ``limit`` directories the log deleted that the truth does not list."""
    out: list[str] = []
    for entry in read_audit_log(audit):
        if entry["bucket"] == bucket and not in_sorted(np.array([hash(entry["dir"])]), truth)[0]:
            out.append(str(entry["dir"]))
            if len(out) >= limit:
                break
    return out


def parents_of(audit: Path, bucket: str, wanted: set[int]) -> list[str]:
    """The parents among the log's entries whose hash is in ``wanted``."""
    found: dict[int, str] = {}
    for entry in read_audit_log(audit):
        key = hash(entry["parent"])
        if entry["bucket"] == bucket and key in wanted and key not in found:
            found[key] = str(entry["parent"])
            if len(found) == len(wanted):
                break
    return sorted(found.values())


def audited_hashes(audit: Path, bucket: str) -> np.ndarray:
    """The ``hashed`` directories an audit log deleted."""
    return hashed(str(e["dir"]) for e in read_audit_log(audit) if e["bucket"] == bucket)
