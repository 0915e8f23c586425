"""Benchmark: a churn night (``clean --changed``) against a full night (``run``) after the same
deletes, at 0.1% and 1% of the object partitions emptied.

    python bench/churn.py --dirs 1000000 --churn 0.001 0.01 --out churn.json \
        [--cassandra-url cassandra://127.0.0.1:9042/dcbench_churn --cassandra-dirs 100000]

On SQLite, for ``--dirs``:

1. the cached synthetic store of ``bench/e2e.py`` (generated once) is copied and a full night
   runs on it once: the steady store, holding no empty directory (its false positives aside),
   kept as ``churn-steady-<dirs>.db`` beside the dataset, its tombstones and their charges in the
   ledger forgotten, as if the grace period had passed since (they would otherwise hold back
   either night's deletes in the partitions the setup night cleaned);
2. for each churn fraction: a copy of the steady store; that fraction of its object partitions,
   drawn at random (``--seed``), loses every object, through the journaled delete path
   (``Store.delete_objects``, then ``dircleaner.journal.record_deletes``: a batch of keys is a
   request). The truth: the folder index's directories that held an object before and hold
   none now, the newly emptied;
3. the copy is copied again; ``clean --changed --settle 0s`` runs on one, ``run`` on the other,
   each a subprocess (wall time, interpreter start-up included), ``--rate 0``, the same
   ``--concurrency`` (1000 on SQLite, as ``bench/e2e.py``: a group is one transaction). Reads: the
   full night's object partitions scanned + folder rows swept + candidates re-checked; the
   churn night's journal rows + objects partitions probed + folders partitions read + folder
   rows read. Precision: no deleted directory holds an object (must be 1.0); recall: the newly
   emptied ones the night deleted.

With ``--cassandra-url`` (a keyspace of its own), ``--cassandra-dirs`` are generated into it
once; a full night makes it steady; then, for each fraction, the deletes, the churn night, its
deletes put back (``restore`` of its audit log, its ledger charges dropped), and the full night
on the same deletes; both checked against the truth scanned from the keyspace.

Speed is a ratio taken in one run (churn ÷ full); absolute seconds on a shared machine are
noise. Writes JSON (``--out``) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from e2e import DEFAULT_CACHE, copy_dataset, ensure_dataset, store_url

from dircleaner.journal import record_deletes
from dircleaner.model import Shard
from dircleaner.paths import dir_of_row, iter_ancestors_upward
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.synth import SynthSpec

_CLI = "import sys; from dircleaner.cli import main; sys.argv[0] = 'dircleaner'; main()"
#: keys deleted (and journaled) as one request
REQUEST_KEYS = 1000
BucketDir = tuple[str, str]


def run_cli(url: str, args: list[str], work: Path, name: str) -> dict[str, Any]:
    """One dircleaner command as a subprocess: its JSON summary and its wall time."""
    out, err = work / f"{name}.json", work / f"{name}.log"
    cmd = [sys.executable, "-c", _CLI, "--store", url, *args, "--json"]
    started = time.perf_counter()
    with out.open("w") as stdout, err.open("w") as stderr:
        rc = subprocess.call(cmd, stdout=stdout, stderr=stderr)
    seconds = time.perf_counter() - started
    if rc != 0:
        raise SystemExit(f"{name} failed (exit {rc}); see {err}")
    return {"seconds": seconds, "summary": json.loads(out.read_text())}


def full_night(url: str, work: Path, workers: int, concurrency: int, *extra: str) -> dict[str, Any]:
    audit = work / "full.jsonl"
    audit.unlink(missing_ok=True)
    args = ["run", "--rate", "0", "--max-delete-fraction", "1", "--workers", str(workers)]
    args += ["--concurrency", str(concurrency), "--audit-log", str(audit), *extra]
    return run_cli(url, args, work, "full")


def churn_night(url: str, work: Path, concurrency: int) -> dict[str, Any]:
    audit = work / "churn.jsonl"
    audit.unlink(missing_ok=True)
    args = ["clean", "--changed", "--settle", "0s", "--rate", "0", "--max-delete-fraction", "1"]
    args += ["--concurrency", str(concurrency), "--audit-log", str(audit)]
    return run_cli(url, args, work, "churn")


def full_reads(summary: dict[str, Any]) -> int:
    """What a full night read: object partitions, folder rows, re-checked candidates."""
    clean = summary["clean"]
    built = summary["build"].get("partitions_scanned", 0)
    return int(built + clean["sweep"]["swept_dirs"] + clean["verified"])


def churn_reads(summary: dict[str, Any]) -> int:
    """What a churn night read: journal rows, and its checks' partitions and rows."""
    return int(summary["journal"]["entries"] + summary["check"]["reads"]["total"])


# -- the truth --------------------------------------------------------------------------------


def live_dirs(partitions: Iterable[BucketDir]) -> set[BucketDir]:
    """Every directory holding an object: each objects partition's and its ancestors."""
    out: set[BucketDir] = set()
    for bucket, parent in partitions:
        for directory in iter_ancestors_upward(parent):
            if (bucket, directory) in out:
                break
            out.add((bucket, directory))
    return out


def object_partitions(store: Store) -> list[BucketDir]:
    return [(k.bucket, k.parent) for batch in store.scan_object_partitions(Shard()) for k in batch]


def folder_dirs(store: Store) -> set[BucketDir]:
    return {(r.bucket, dir_of_row(r.parent, r.name)) for r in store.iter_folder_rows()}


def score(
    before: set[BucketDir], after: set[BucketDir], live: set[BucketDir], emptied: set[BucketDir]
) -> dict[str, Any]:
    """Precision (no deleted directory holds an object) and recall on the newly emptied."""
    deleted = before - after
    wrong = deleted & live
    return {
        "deleted": len(deleted),
        "deleted_nonempty": len(wrong),
        "precision": 1.0 if not deleted else 1 - len(wrong) / len(deleted),
        "newly_emptied": len(emptied),
        "recall_newly_emptied": len(deleted & emptied) / len(emptied) if emptied else 1.0,
    }


# -- the deletes ------------------------------------------------------------------------------


def pick(partitions: Sequence[BucketDir], fraction: float, seed: int) -> list[BucketDir]:
    """``fraction`` of the object partitions (never the root's), drawn at random."""
    candidates = sorted(p for p in partitions if p[1])
    count = max(1, round(len(candidates) * fraction))
    return sorted(random.Random(seed).sample(candidates, count))


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


def cassandra_keys(store: Any, chosen: Sequence[BucketDir]) -> list[tuple[str, str]]:
    """(bucket, key) of every object in the chosen partitions of a Cassandra store."""
    requests = store.requests
    stmt = requests.prepare(
        f"SELECT {requests.cql.name} FROM {requests.cql.objects} WHERE {requests.cql.key_eq}"
    )
    out: list[tuple[str, str]] = []
    results = requests.run_many(stmt, [requests.key_values(b, p) for b, p in chosen], "verify")
    requests.raise_first(results)
    for (bucket, parent), result in zip(chosen, results, strict=True):
        out.extend((bucket, parent + name) for (name,) in result)
    return out


def delete_journaled(store: Store, keys: Sequence[tuple[str, str]]) -> float:
    """The keys deleted as the metastore's delete path does, a request at a time: the object
    rows, then the journal's rows of their parents. Seconds taken."""
    started = time.perf_counter()
    by_bucket: dict[str, list[str]] = {}
    for bucket, key in keys:
        by_bucket.setdefault(bucket, []).append(key)
    for bucket, names in by_bucket.items():
        for start in range(0, len(names), REQUEST_KEYS):
            request = names[start : start + REQUEST_KEYS]
            store.delete_objects(bucket, request, time.time_ns() // 1000)
            record_deletes(store, bucket, request)
    return time.perf_counter() - started


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


def steady_store(args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """The dataset after one full night: cached beside it."""
    source, meta = ensure_dataset(args.cache_dir, SynthSpec(dirs=args.dirs))
    steady = source / f"churn-steady-{args.dirs}.db"
    if not steady.is_file():
        print(f"the steady store of {args.dirs:,} directories ...", file=sys.stderr)
        scratch = source / "churn-steady.partial.db"
        copy_dataset(source / "meta.db", scratch)
        full_night(store_url(scratch), source, args.workers, 1000, "--min-age", "0s")
        forget_the_grace_period(scratch)
        scratch.rename(steady)
    return steady, meta


def sqlite_fraction(args: argparse.Namespace, steady: Path, fraction: float) -> dict[str, Any]:
    work = args.work_dir or steady.parent
    work.mkdir(parents=True, exist_ok=True)
    churn_db, full_db = work / "churn-a.db", work / "churn-b.db"
    copy_dataset(steady, churn_db)
    url = store_url(churn_db)
    with open_store(url) as store:
        partitions = object_partitions(store)
        chosen = pick(partitions, fraction, args.seed)
        keys = sqlite_keys(churn_db, chosen)
        deleting = delete_journaled(store, keys)
        live_before = live_dirs(partitions)
        live_after = live_dirs(object_partitions(store))
        before = folder_dirs(store)
    with sqlite3.connect(churn_db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    copy_dataset(churn_db, full_db)
    emptied = (live_before - live_after) & before
    result: dict[str, Any] = {
        "backend": "sqlite",
        "dirs": len(before),
        "churn": fraction,
        "partitions_emptied": len(chosen),
        "objects_deleted": len(keys),
        "delete_and_journal_s": deleting,
    }
    # The two nights one after the other on identical copies; the churn night first.
    result["churn_night"] = churn_night(url, work, args.concurrency)
    with open_store(url) as store:
        result["churn_score"] = score(before, folder_dirs(store), live_after, emptied)
    result["full_night"] = full_night(store_url(full_db), work, args.workers, args.concurrency)
    with open_store(store_url(full_db)) as store:
        result["full_score"] = score(before, folder_dirs(store), live_after, emptied)
    for db in (churn_db, full_db):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    return ratios(result)


def ratios(result: dict[str, Any]) -> dict[str, Any]:
    churn, full = result["churn_night"], result["full_night"]
    result["churn_reads"] = churn_reads(churn["summary"])
    result["full_reads"] = full_reads(full["summary"])
    result["time_ratio"] = churn["seconds"] / full["seconds"]
    result["reads_ratio"] = result["churn_reads"] / result["full_reads"]
    return result


# -- Cassandra --------------------------------------------------------------------------------

DATASET_STATE = "bench:churn-dataset"


def forget(url: str, table: str) -> None:
    """Empty one of dircleaner's own tables of the benchmark's keyspace: the ledger (as if the
    grace period had passed since the nights before), the journal (the rows an earlier night
    read: each fraction's night reads only its own deletes)."""
    with open_store(url) as store:
        cfg = store.config  # type: ignore[attr-defined]
        name = getattr(cfg.tables, table)
        store.requests.session.execute(f'TRUNCATE "{cfg.keyspace}"."{name}"')  # type: ignore[attr-defined]


def cassandra_results(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The keyspace loaded once and made steady, then each fraction in turn on it."""
    from dircleaner.synth import generate

    url = args.cassandra_url
    work = args.work_dir or args.cache_dir
    work.mkdir(parents=True, exist_ok=True)
    with open_store(url, create=True) as store:
        loaded = store.get_state(DATASET_STATE)
        if loaded is None:
            if any(batch for batch in store.scan_folder_rows(Shard())):
                raise SystemExit(f"{url} is not empty: give the benchmark a keyspace of its own")
            print(f"loading {args.cassandra_dirs:,} directories into {url} ...", file=sys.stderr)
            generate(store, SynthSpec(dirs=args.cassandra_dirs), None, spill_dir=work)
            store.put_state(DATASET_STATE, str(args.cassandra_dirs))
        elif int(loaded) != args.cassandra_dirs:
            raise SystemExit(f"{url} holds the {loaded} dataset, not {args.cassandra_dirs:,}")
    print("the steady keyspace: a full night ...", file=sys.stderr)
    full_night(url, work, args.workers, args.cassandra_concurrency, "--min-age", "0s")
    forget(url, "ledger")
    results = []
    for fraction in args.churn:
        print(f"cassandra, churn {fraction:g} ...", file=sys.stderr)
        forget(url, "journal")
        with open_store(url) as store:
            partitions = object_partitions(store)
            chosen = pick(partitions, fraction, args.seed)
            keys = cassandra_keys(store, chosen)
            deleting = delete_journaled(store, keys)
            live_before = live_dirs(partitions)
            live_after = live_dirs(object_partitions(store))
            before = folder_dirs(store)
        emptied = (live_before - live_after) & before
        result: dict[str, Any] = {
            "backend": "cassandra",
            "dirs": len(before),
            "churn": fraction,
            "partitions_emptied": len(chosen),
            "objects_deleted": len(keys),
            "delete_and_journal_s": deleting,
        }
        concurrency = args.cassandra_concurrency
        result["churn_night"] = churn_night(url, work, concurrency)
        with open_store(url) as store:
            result["churn_score"] = score(before, folder_dirs(store), live_after, emptied)
        # The same deletes for the full night: the churn night's put back from its audit log,
        # and its charges dropped from the ledger (the rows' tombstones stay).
        generation = result["churn_night"]["summary"]["generation"]
        put_back = ["restore", str(work / "churn.jsonl"), "--generation", generation]
        result["restore"] = run_cli(url, put_back, work, "restore")
        forget(url, "ledger")
        # At T = its build's start: the rows restored just now are older than that.
        result["full_night"] = full_night(url, work, args.workers, concurrency, "--min-age", "0s")
        with open_store(url) as store:
            result["full_score"] = score(before, folder_dirs(store), live_after, emptied)
        results.append(ratios(result))
    return results


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| backend | directories | churn | newly emptied | churn night s | full night s"
        " | time ÷ | churn reads | full reads | reads ÷ | precision | recall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        s = r["churn_score"]
        lines.append(
            f"| {r['backend']} | {r['dirs']:,} | {r['churn']:.1%} | {s['newly_emptied']:,}"
            f" | {r['churn_night']['seconds']:.2f} | {r['full_night']['seconds']:.1f}"
            f" | {r['time_ratio']:.3f} | {r['churn_reads']:,} | {r['full_reads']:,}"
            f" | {r['reads_ratio']:.4f} | {s['precision']:.6f} | {s['recall_newly_emptied']:.4f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dirs", type=int, default=1_000_000, help="SQLite store size")
    ap.add_argument("--churn", type=float, nargs="+", default=[0.001, 0.01])
    ap.add_argument("--seed", type=int, default=1)
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
    ap.add_argument("--cassandra-dirs", type=int, default=100_000)
    args = ap.parse_args()
    results: list[dict[str, Any]] = []
    if not args.no_sqlite:
        steady, _meta = steady_store(args)
        for fraction in args.churn:
            print(f"sqlite, churn {fraction:g} ...", file=sys.stderr)
            results.append(sqlite_fraction(args, steady, fraction))
    if args.cassandra_url:
        results += cassandra_results(args)
    for r in results:
        if r["churn_score"]["precision"] != 1.0:
            raise SystemExit("a churn night deleted a directory that holds an object: see the JSON")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
