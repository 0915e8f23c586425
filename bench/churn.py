"""Benchmark: a churn night (``clean --changed``) against a full night (``run``) after the same
deletes, at 0.1% and 1% of the object partitions emptied.

    python bench/churn.py --dirs 31500000 --shape steady --churn 0.001 0.01 --out churn.json \
        [--cassandra-url cassandra://127.0.0.1:9042/dcbench_steady [--no-sqlite]]

On SQLite, for ``--dirs`` (and ``--shape`` or ``--empty-fraction``):

1. the cached synthetic store of ``bench/e2e.py`` (generated once) is copied and a full night
   runs on it once: the steady store, holding no empty directory (its false positives aside),
   kept as ``churn-steady-<dirs>.db`` beside the dataset, its tombstones and their charges in the
   ledger forgotten, as if the grace period had passed since (they would otherwise hold back
   either night's deletes in the partitions the setup night cleaned);
2. for each churn fraction: a copy of the steady store; that fraction of its object partitions,
   drawn by their token mixed with ``--seed`` (streamed: no list of the store's partitions),
   loses every object, through the journaled delete path (``Store.delete_objects``, then
   ``dircleaner.journal.record_deletes``: a batch of keys is a request);
3. the copy is copied again; ``clean --changed --settle 0s`` runs on one, ``run`` on the other,
   each a subprocess (wall time, interpreter start-up included), ``--rate 0``, the same
   ``--concurrency`` (1000 on SQLite, as ``bench/e2e.py``: a group is one transaction). Reads: the
   full night's object partitions scanned + folder rows swept + candidates re-checked; the
   churn night's journal rows + objects partitions probed + folders partitions read + folder
   rows read.

The truth, in memory that follows the churn, not the store: the emptied partitions and their
ancestors are the only directories that can have been emptied; one pass over the object
partitions after the deletes marks those still holding an object (a partition's walk up stops at
the first one already marked). The newly emptied are the rest that are folder rows. Precision:
no directory a night's audit log deleted holds an object (a second pass marks them; must be
1.0); on SQLite the folder rows a night removed are counted too (they must be what its log
says). Recall: the newly emptied that the night deleted.

With ``--cassandra-url`` (a keyspace of its own; ``bench/cassandra_e2e.py`` with the same
``--dirs``, shape and keyspace shares it), the dataset is loaded by the bulk loader once and
kept as a snapshot (restored in seconds when a night has used it); a full night makes it
steady; then, for each fraction: the journal and the ledger emptied, the deletes, the churn
night, its deletes put back (``restore`` of its audit log, the ledger's charges dropped), and
the full night on the same deletes.

Speed is a ratio taken in one run (churn ÷ full); absolute seconds on a shared machine are
noise. Beside the whole nights, the ratio without the deletes, which both nights pay alike, and
each night's phases. ``--profile DIR`` runs the churn nights under cProfile. Writes JSON
(``--out``) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from e2e import DEFAULT_CACHE, copy_dataset, ensure_dataset, store_url
from night import CLI, empty_fraction_of

from dircleaner.audit import read_audit_log
from dircleaner.journal import record_deletes
from dircleaner.model import Shard
from dircleaner.paths import iter_ancestors_upward, parent_of_dir
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.synth import SHAPES, SynthSpec

#: keys deleted (and journaled) as one request
REQUEST_KEYS = 1000
#: partitions whose objects are read (Cassandra) at a time
PICK_CHUNK = 10_000
MASK = (1 << 64) - 1
BucketDir = tuple[str, str]


def run_cli(
    url: str, args: list[str], work: Path, name: str, profile: Path | None = None
) -> dict[str, Any]:
    """One dircleaner command as a subprocess: its JSON summary and its wall time (under
    cProfile, its stats in ``profile``, when given)."""
    out, err = work / f"{name}.json", work / f"{name}.log"
    runner = ["-c", CLI]
    if profile is not None:
        script = work / "dircleaner_cli.py"
        script.write_text(CLI.replace("; ", "\n") + "\n")
        runner = ["-m", "cProfile", "-o", str(profile), str(script)]
    cmd = [sys.executable, *runner, "--store", url, *args, "--json"]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    with out.open("w") as stdout, err.open("w") as stderr:
        rc = subprocess.call(cmd, stdout=stdout, stderr=stderr)
    seconds = time.perf_counter() - started
    if rc != 0:
        raise SystemExit(f"{name} failed (exit {rc}); see {err}")
    summary = json.loads(out.read_text())
    return {
        "seconds": seconds,
        "summary": summary,
        "load_before": load,
        "load_after": os.getloadavg()[0],
    }


def full_night(url: str, work: Path, workers: int, concurrency: int, *extra: str) -> dict[str, Any]:
    audit = work / "full.jsonl.gz"
    audit.unlink(missing_ok=True)
    args = ["run", "--rate", "0", "--max-delete-fraction", "1", "--workers", str(workers)]
    args += ["--concurrency", str(concurrency), "--audit-log", str(audit), *extra]
    return {**run_cli(url, args, work, "full"), "audit_log": audit}


def churn_night(
    url: str, work: Path, concurrency: int, profile: Path | None = None
) -> dict[str, Any]:
    audit = work / "churn.jsonl.gz"
    audit.unlink(missing_ok=True)
    args = ["clean", "--changed", "--settle", "0s", "--rate", "0", "--max-delete-fraction", "1"]
    args += ["--concurrency", str(concurrency), "--audit-log", str(audit)]
    return {**run_cli(url, args, work, "churn", profile), "audit_log": audit}


def full_reads(summary: dict[str, Any]) -> int:
    """What a full night read: object partitions, folder rows, re-checked candidates."""
    clean = summary["clean"]
    built = summary["build"].get("partitions_scanned", 0)
    return int(built + clean["sweep"]["swept_dirs"] + clean["verified"])


def churn_reads(summary: dict[str, Any]) -> int:
    """What a churn night read: journal rows, and its checks' partitions and rows."""
    return int(summary["journal"]["entries"] + summary["check"]["reads"]["total"])


# -- the pick and the truth, streamed ---------------------------------------------------------


def picked(token: int, fraction: float, seed: int) -> bool:
    """Whether a partition of this token is among ``fraction`` of them for ``seed``: the token
    mixed with the seed (an odd multiplier, so every seed draws another set), under the
    fraction of 2⁶⁴. Pure."""
    mixed = ((token ^ (seed * 0x9E3779B97F4A7C15)) * 0xBF58476D1CE4E5B9) & MASK
    mixed ^= mixed >> 31
    return mixed < fraction * (1 << 64)


def pick(store: Store, fraction: float, seed: int) -> tuple[list[BucketDir], int]:
    """The object partitions (never the root's) drawn for ``fraction`` and ``seed``, and how
    many partitions the store holds."""
    chosen: list[BucketDir] = []
    total = 0
    for batch in store.scan_object_partitions(Shard()):
        total += len(batch)
        chosen.extend(
            (k.bucket, k.parent) for k in batch if k.parent and picked(k.token, fraction, seed)
        )
    return sorted(chosen), total


def ancestors_of(partitions: Iterable[BucketDir]) -> set[BucketDir]:
    """Each partition's directory and its ancestors (the root excluded)."""
    out: set[BucketDir] = set()
    for bucket, parent in partitions:
        for directory in iter_ancestors_upward(parent):
            if (bucket, directory) in out:
                break
            out.add((bucket, directory))
    return out


def still_live(store: Store, tracked: set[BucketDir]) -> set[BucketDir]:
    """The ``tracked`` directories that hold an object: each object partition's walk up marks
    those it meets, and stops at one already marked (every tracked directory above it is)."""
    live: set[BucketDir] = set()
    for batch in store.scan_object_partitions(Shard()):
        for key in batch:
            current = key.parent
            while current:
                entry = (key.bucket, current)
                if entry in tracked:
                    if entry in live:
                        break
                    live.add(entry)
                current = parent_of_dir(current)
    return live


def audited(audit: Path) -> set[BucketDir]:
    """The directories a night's audit log deleted."""
    if not audit.exists():
        return set()
    return {(str(e["bucket"]), str(e["dir"])) for e in read_audit_log(audit)}


def listed(store: Store, dirs: Iterable[BucketDir]) -> set[BucketDir]:
    """Which of ``dirs`` the folder index lists."""
    found: set[BucketDir] = set()
    ordered = sorted(dirs)
    for start in range(0, len(ordered), 50_000):
        found.update(store.rows_listing(ordered[start : start + 50_000]))
    return found


def score(deleted: set[BucketDir], live: set[BucketDir], emptied: set[BucketDir]) -> dict[str, Any]:
    """Precision (no deleted directory holds an object) and recall on the newly emptied."""
    wrong = deleted & live
    return {
        "deleted": len(deleted),
        "deleted_nonempty": len(wrong),
        "wrongly_deleted": sorted(d for _, d in wrong)[:20],
        "precision": 1.0 if not deleted else 1 - len(wrong) / len(deleted),
        "newly_emptied": len(emptied),
        "recall_newly_emptied": len(deleted & emptied) / len(emptied) if emptied else 1.0,
    }


# -- the deletes ------------------------------------------------------------------------------


def sqlite_keys(db: Path, chosen: Sequence[BucketDir]) -> list[tuple[str, str]]:
    """(bucket, key) of every object in the chosen partitions of an SQLite store."""
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TEMP TABLE pick (bucket TEXT, parent TEXT)")
        conn.executemany("INSERT INTO pick VALUES (?, ?)", chosen)
        rows = conn.execute(
            "SELECT o.bucket, o.parent || o.name FROM pick p JOIN objects o"
            " ON o.bucket = p.bucket AND o.parent = p.parent"
        ).fetchall()
    return [(str(b), str(k)) for b, k in rows]


def cassandra_keys(store: Any, chosen: Sequence[BucketDir]) -> Iterator[list[tuple[str, str]]]:
    """(bucket, key) of every object in the chosen partitions of a Cassandra store, a chunk of
    partitions at a time."""
    requests = store.requests
    stmt = requests.prepare(
        f"SELECT {requests.cql.name} FROM {requests.cql.objects} WHERE {requests.cql.key_eq}"
    )
    for start in range(0, len(chosen), PICK_CHUNK):
        chunk = chosen[start : start + PICK_CHUNK]
        results = requests.run_many(stmt, [requests.key_values(b, p) for b, p in chunk], "verify")
        requests.raise_first(results)
        yield [
            (bucket, parent + name)
            for (bucket, parent), result in zip(chunk, results, strict=True)
            for (name,) in result
        ]


def delete_journaled(store: Store, keys: Iterable[list[tuple[str, str]]]) -> tuple[float, int]:
    """The keys deleted as the metastore's delete path does, a request at a time: the object
    rows, then the journal's rows of their parents. Seconds taken, keys deleted."""
    started = time.perf_counter()
    count = 0
    for chunk in keys:
        by_bucket: dict[str, list[str]] = {}
        for bucket, key in chunk:
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, names in by_bucket.items():
            for start in range(0, len(names), REQUEST_KEYS):
                request = names[start : start + REQUEST_KEYS]
                store.delete_objects(bucket, request, time.time_ns() // 1000)
                record_deletes(store, bucket, request)
                count += len(request)
    return time.perf_counter() - started, count


def emptied_by(store: Store, chosen: Sequence[BucketDir]) -> tuple[set[BucketDir], set[BucketDir]]:
    """After the deletes: the directories that could have been emptied (the chosen partitions
    and their ancestors), and of those the newly emptied (no object left under them, a
    folder row)."""
    candidates = ancestors_of(chosen)
    bare = candidates - still_live(store, candidates)
    return candidates, listed(store, bare)


def scored(
    store: Store, result: dict[str, Any], candidates: set[BucketDir], emptied: set[BucketDir]
) -> None:
    """Both nights' precision and recall: one pass marks what still holds an object among the
    directories either deleted (and the candidates)."""
    churn = audited(result["churn_night"]["audit_log"])
    full = audited(result["full_night"]["audit_log"])
    live = still_live(store, candidates | churn | full)
    result["churn_score"] = score(churn, live, emptied)
    result["full_score"] = score(full, live, emptied)


# -- SQLite -----------------------------------------------------------------------------------


def forget_the_grace_period(db: Path) -> None:
    """The steady store as a long-running one is: the setup night's tombstones and their
    charges in the ledger older than the grace period, purged as compaction would purge them
    (else they would hold back what either night may delete in the same partitions)."""
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM ledger")
        conn.execute("DELETE FROM tombstones")
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def folder_count(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM folders").fetchone()[0])


def spec_of(args: argparse.Namespace) -> SynthSpec:
    return SynthSpec(dirs=args.dirs, seed=0, empty_fraction=args.empty_fraction)


def steady_store(args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """The dataset after one full night: cached beside it."""
    source, meta = ensure_dataset(args.cache_dir, spec_of(args))
    steady = source / f"churn-steady-{args.dirs}.db"
    if not steady.is_file():
        print(f"the steady store of {args.dirs:,} directories ...", file=sys.stderr)
        scratch = source / "churn-steady.partial.db"
        copy_dataset(source / "meta.db", scratch)
        full_night(store_url(scratch), source, args.workers, 1000, "--min-age", "0s")
        forget_the_grace_period(scratch)
        scratch.rename(steady)
    return steady, meta


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def sqlite_fraction(
    args: argparse.Namespace, steady: Path, fraction: float, index: int
) -> dict[str, Any]:
    work = args.work_dir or steady.parent
    work.mkdir(parents=True, exist_ok=True)
    churn_db, full_db = work / "churn-a.db", work / "churn-b.db"
    copy_dataset(steady, churn_db)
    url = store_url(churn_db)
    with open_store(url) as store:
        chosen, partitions = pick(store, fraction, args.seed + index)
        log(f"sqlite, churn {fraction:g}: {len(chosen):,} of {partitions:,} object partitions")
        deleting, deleted = delete_journaled(store, [sqlite_keys(churn_db, chosen)])
        candidates, emptied = emptied_by(store, chosen)
    with sqlite3.connect(churn_db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    copy_dataset(churn_db, full_db)
    before = folder_count(churn_db)
    result: dict[str, Any] = {
        "backend": "sqlite",
        "dirs": before,
        "churn": fraction,
        "object_partitions": partitions,
        "partitions_emptied": len(chosen),
        "objects_deleted": deleted,
        "delete_and_journal_s": deleting,
    }
    # The two nights one after the other on identical copies; the churn night first.
    log(f"sqlite, churn {fraction:g}: the churn night")
    result["churn_night"] = churn_night(
        url, work, args.concurrency, profile_path(args, "sqlite", fraction)
    )
    log(f"sqlite, churn {fraction:g}: the full night")
    result["full_night"] = full_night(store_url(full_db), work, args.workers, args.concurrency)
    result["churn_removed_rows"] = before - folder_count(churn_db)
    result["full_removed_rows"] = before - folder_count(full_db)
    with open_store(url) as store:
        scored(store, result, candidates, emptied)
    for night in ("churn", "full"):
        if result[f"{night}_removed_rows"] != result[f"{night}_score"]["deleted"]:
            raise SystemExit(f"the {night} night removed other rows than its audit log says")
    for db in (churn_db, full_db):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    return ratios(result)


def profile_path(args: argparse.Namespace, backend: str, fraction: float) -> Path | None:
    if args.profile is None:
        return None
    directory: Path = args.profile
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"churn-{backend}-{args.dirs}-{fraction:g}.prof"


#: the phases no night's summary times: the interpreter, imports, connecting, the lease
STARTUP = "start-up and the rest"


def phases_of(night: dict[str, Any], kind: str) -> dict[str, float]:
    """A night's seconds by phase, with what its phases do not cover."""
    summary = night["summary"]
    if kind == "full":
        phases = {"build": float(summary["build"]["seconds"]), **summary["clean"]["phase_seconds"]}
    else:
        phases = dict(summary["phase_seconds"])
    phases[STARTUP] = night["seconds"] - sum(phases.values())
    return {k: round(float(v), 3) for k, v in phases.items()}


def ratios(result: dict[str, Any]) -> dict[str, Any]:
    churn, full = result["churn_night"], result["full_night"]
    result["churn_phases_s"] = phases_of(churn, "churn")
    result["full_phases_s"] = phases_of(full, "full")
    result["churn_reads"] = churn_reads(churn["summary"])
    result["full_reads"] = full_reads(full["summary"])
    result["time_ratio"] = churn["seconds"] / full["seconds"]
    result["reads_ratio"] = result["churn_reads"] / result["full_reads"]
    churn_delete = result["churn_phases_s"].get("delete", 0.0)
    full_delete = result["full_phases_s"].get("delete", 0.0)
    result["time_ratio_without_deletes"] = (churn["seconds"] - churn_delete) / (
        full["seconds"] - full_delete
    )
    for key in ("churn_night", "full_night"):
        result[key]["audit_log"] = str(result[key]["audit_log"])
    return result


# -- Cassandra --------------------------------------------------------------------------------


def forget(url: str, table: str) -> None:
    """Empty one of dircleaner's own tables of the benchmark's keyspace: the ledger (as if the
    grace period had passed since the nights before), the journal (the rows an earlier night
    read: each fraction's night reads only its own deletes)."""
    with open_store(url) as store:
        cfg = store.config  # type: ignore[attr-defined]
        name = getattr(cfg.tables, table)
        store.requests.session.execute(f'TRUNCATE "{cfg.keyspace}"."{name}"', timeout=300)  # type: ignore[attr-defined]


def cassandra_dataset(args: argparse.Namespace) -> dict[str, Any]:
    """The dataset in the keyspace, pristine: bulk-loaded once and kept as a snapshot, restored
    when a night has used it (``bench/cassandra_e2e.py``'s own)."""
    from cassandra_e2e import AuxSession, mark_used
    from cassandra_e2e import ensure_dataset as cassandra_ensure

    from dircleaner.store.cassandra.store import CassandraStore

    e2e = argparse.Namespace(
        dirs=args.cassandra_dirs,
        seed=0,
        empty_fraction=args.empty_fraction,
        cache_dir=args.cassandra_cache_dir,
        reload=False,
        load="bulk",
        no_flush=False,
        settle_wait=args.settle_wait,
    )
    store = CassandraStore.open(args.cassandra_url, create=True)
    aux = AuxSession(store)
    try:
        dataset = cassandra_ensure(store, aux, e2e)
        mark_used(store, dataset)  # the nights below change it
    finally:
        aux.close()
        store.close()
    return dataset


def cassandra_results(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The keyspace made pristine and steady, then each fraction in turn on it."""
    url = args.cassandra_url
    work = args.work_dir or args.cache_dir / "churn-cassandra"
    work.mkdir(parents=True, exist_ok=True)
    dataset = cassandra_dataset(args)
    log(f"cassandra: {dataset['dirs']:,} directories; the steady keyspace: a full night ...")
    setup = full_night(url, work, args.workers, args.cassandra_concurrency, "--min-age", "0s")
    log(f"  {setup['seconds']:.0f}s")
    forget(url, "ledger")
    results = []
    for index, fraction in enumerate(args.churn):
        forget(url, "journal")
        # The full night of the fraction before charged the ledger: each churn night starts
        # with none, as its full night does (else it defers what the full night deletes).
        forget(url, "ledger")
        with open_store(url) as store:
            chosen, partitions = pick(store, fraction, args.seed + index)
            log(
                f"cassandra, churn {fraction:g}: {len(chosen):,} of {partitions:,}"
                " object partitions"
            )
            deleting, deleted = delete_journaled(store, cassandra_keys(store, chosen))
            candidates, emptied = emptied_by(store, chosen)
        result: dict[str, Any] = {
            "backend": "cassandra",
            "dirs": int(dataset["dirs"]),
            "churn": fraction,
            "object_partitions": partitions,
            "partitions_emptied": len(chosen),
            "objects_deleted": deleted,
            "delete_and_journal_s": deleting,
        }
        concurrency = args.cassandra_concurrency
        log(f"cassandra, churn {fraction:g}: the churn night")
        result["churn_night"] = churn_night(
            url, work, concurrency, profile_path(args, "cassandra", fraction)
        )
        # The same deletes for the full night: the churn night's put back from its audit log,
        # and its charges dropped from the ledger (the rows' tombstones stay).
        generation = result["churn_night"]["summary"]["generation"]
        audit = str(result["churn_night"]["audit_log"])
        result["restore"] = run_cli(
            url, ["restore", audit, "--generation", generation], work, "restore"
        )
        forget(url, "ledger")
        log(f"cassandra, churn {fraction:g}: the full night")
        # At T = its build's start: the rows restored just now are older than that.
        result["full_night"] = full_night(url, work, args.workers, concurrency, "--min-age", "0s")
        with open_store(url) as store:
            scored(store, result, candidates, emptied)
            gone = listed(store, audited(result["full_night"]["audit_log"]))
        result["full_audited_still_listed"] = len(gone)
        results.append(ratios(result))
    return results


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| backend | directories | churn | newly emptied | churn night s | full night s"
        " | time ÷ | without deletes ÷ | churn reads | full reads | reads ÷ | precision"
        " | recall (churn / full) | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        s, f = r["churn_score"], r["full_score"]
        loads = [
            r[n][k] for n in ("churn_night", "full_night") for k in ("load_before", "load_after")
        ]
        lines.append(
            f"| {r['backend']} | {r['dirs']:,} | {r['churn']:.1%} | {s['newly_emptied']:,}"
            f" | {r['churn_night']['seconds']:.1f} | {r['full_night']['seconds']:.1f}"
            f" | {r['time_ratio']:.3f} | {r['time_ratio_without_deletes']:.3f}"
            f" | {r['churn_reads']:,} | {r['full_reads']:,} | {r['reads_ratio']:.4f}"
            f" | {s['precision']:.6f} | {s['recall_newly_emptied']:.4f} /"
            f" {f['recall_newly_emptied']:.4f} | {min(loads):.1f}–{max(loads):.1f} |"
        )
    lines.append("")
    for r in results:
        churn = ", ".join(f"{k} {v:.1f}" for k, v in r["churn_phases_s"].items())
        full = ", ".join(f"{k} {v:.1f}" for k, v in r["full_phases_s"].items())
        lines.append(f"- {r['backend']} {r['churn']:.1%}: churn night {churn}; full night {full}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dirs", type=int, default=1_000_000, help="SQLite store size")
    shape = ap.add_mutually_exclusive_group()
    shape.add_argument("--empty-fraction", type=float, help="[default: 0.05]")
    shape.add_argument(
        "--shape", choices=sorted(SHAPES), help="a cluster of the talk (gen --shape)"
    )
    ap.add_argument("--churn", type=float, nargs="+", default=[0.001, 0.01])
    ap.add_argument("--seed", type=int, default=1, help="of the partitions emptied")
    ap.add_argument("--out", type=Path, help="write the JSON result here")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="dataset cache")
    ap.add_argument("--work-dir", type=Path, help="where the scratch copies go (default: cache)")
    ap.add_argument("--workers", type=int, default=1, help="of the full night")
    ap.add_argument(
        "--concurrency", type=int, default=1000, help="both nights' on SQLite (bench/e2e.py's)"
    )
    ap.add_argument("--cassandra-concurrency", type=int, default=32, help="both nights' there")
    ap.add_argument("--no-sqlite", action="store_true", help="only the Cassandra part")
    ap.add_argument("--cassandra-url", help="also measure on this keyspace (one of its own)")
    ap.add_argument("--cassandra-dirs", type=int, help="default: --dirs")
    ap.add_argument(
        "--cassandra-cache-dir",
        type=Path,
        default=DEFAULT_CACHE / "cassandra",
        help="the kept Cassandra datasets (bench/cassandra_e2e.py's)",
    )
    ap.add_argument("--settle-wait", type=float, default=180.0, help="for the node's compactions")
    ap.add_argument("--profile", type=Path, help="run the churn nights under cProfile, stats here")
    args = ap.parse_args()
    args.empty_fraction = empty_fraction_of(args.shape, args.empty_fraction)
    args.cassandra_dirs = args.cassandra_dirs or args.dirs
    results: list[dict[str, Any]] = []
    if not args.no_sqlite:
        steady, _meta = steady_store(args)
        for index, fraction in enumerate(args.churn):
            results.append(sqlite_fraction(args, steady, fraction, index))
    if args.cassandra_url:
        results += cassandra_results(args)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    for r in results:
        if r["churn_score"]["precision"] != 1.0 or r["full_score"]["precision"] != 1.0:
            raise SystemExit("a night deleted a directory that holds an object: see the JSON")


if __name__ == "__main__":
    main()
