"""Benchmark: ``clean --prefix`` after a mass delete, against a full ``run``, at two store sizes.

    python bench/prefix.py --sizes 1000000 4000000 --out prefix.json

For each size:

1. the cached synthetic SQLite store of ``bench/e2e.py`` (generated once) is copied to a scratch
   file, and a fixed subtree (``massdel/y2025/``, about 24k directories: months / days / hours /
   two leaves, one object per leaf) is put into it and then mass-deleted, all but one leaf in
   ``--keep-every`` (those keep their object). The subtree is the same at every size: only the
   rest of the store grows;
2. ``dircleaner clean --prefix massdel/y2025/ --rate 0`` runs as a subprocess (wall time,
   including interpreter start-up) and is checked against the truth: every empty directory of the
   subtree gone, every kept one and everything outside the subtree untouched;
3. at the first size (``--run-at``), a full ``dircleaner run --rate 0`` runs on a second copy of
   the same store, as the nightly job would after the same mass delete.

With ``--cassandra-url``, the first size is also loaded into that keyspace (see
``bench/cassandra_e2e.py``) and cleaned there.

Speed is a ratio measured in one run (prefix clean / full run; prefix clean at the largest size /
at the smallest): absolute seconds on a shared machine are noise. Writes JSON (``--out``) and
prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from e2e import DEFAULT_CACHE, copy_dataset, ensure_dataset, store_url

from dircleaner.model import Shard
from dircleaner.paths import DEFAULT_BUCKET, dir_of_row
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.synth import SynthSpec

PREFIX = "massdel/y2025/"
_CLI = "import sys; from dircleaner.cli import main; sys.argv[0] = 'dircleaner'; main()"


def subtree_keys(months: int, days: int, hours: int, leaves: int) -> list[str]:
    """One object key per leaf directory of the mass-deleted subtree."""
    return [
        f"{PREFIX}m{m:02d}/d{d:02d}/h{h:02d}/part-{leaf}/data.json"
        for m in range(1, months + 1)
        for d in range(1, days + 1)
        for h in range(hours)
        for leaf in range(leaves)
    ]


def mass_delete(store: Store, keys: list[str], keep_every: int, ts: int) -> list[str]:
    """Put the subtree's objects, then delete all but every ``keep_every``-th; the kept keys."""
    for start in range(0, len(keys), 10_000):
        store.put_objects(DEFAULT_BUCKET, keys[start : start + 10_000], ts)
    kept = keys[::keep_every] if keep_every else []
    keep = set(kept)
    gone = [key for key in keys if key not in keep]
    for start in range(0, len(gone), 10_000):
        store.delete_objects(DEFAULT_BUCKET, gone[start : start + 10_000], ts + 1)
    return kept


def folder_dirs(store: Store) -> tuple[set[str], int]:
    """The directories under PREFIX (and PREFIX's ancestors' side), and the count of the rest."""
    under: set[str] = set()
    outside = 0
    for row in store.iter_folder_rows(DEFAULT_BUCKET):
        directory = dir_of_row(row.parent, row.name)
        if directory.startswith(PREFIX):
            under.add(directory)
        else:
            outside += 1
    return under, outside


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


def prefix_clean(url: str, work: Path, tag: str) -> dict[str, Any]:
    audit = work / f"prefix-{tag}.jsonl"
    audit.unlink(missing_ok=True)
    args = ["clean", "--prefix", PREFIX, "--rate", "0", "--audit-log", str(audit)]
    return run_cli(url, args, work, f"prefix-{tag}")


def full_run(url: str, work: Path, workers: int, *extra: str) -> dict[str, Any]:
    audit = work / "run.jsonl"
    audit.unlink(missing_ok=True)
    args = ["run", "--rate", "0", "--workers", str(workers), "--audit-log", str(audit), *extra]
    return run_cli(url, args, work, "run")


def check(
    before: tuple[set[str], int], after: tuple[set[str], int], kept: list[str]
) -> dict[str, Any]:
    """Every empty directory of the subtree gone, the kept ones and the rest untouched."""
    keep = {d for key in kept for d in _dirs_under(key)}
    should_go = before[0] - keep
    gone = before[0] - after[0]
    return {
        "subtree_dirs": len(before[0]),
        "kept_dirs": len(keep),
        "deleted": len(gone),
        "deleted_nonempty": len(gone & keep),
        "missed": len(should_go - gone),
        "outside_before": before[1],
        "outside_after": after[1],
        "exact": gone == should_go and before[1] == after[1],
    }


def _dirs_under(key: str) -> list[str]:
    parts = key.split("/")[:-1]
    out = ["/".join(parts[: i + 1]) + "/" for i in range(len(parts))]
    return [d for d in out if d.startswith(PREFIX)]


def sqlite_prefix(args: argparse.Namespace, dirs: int, keys: list[str], rep: int) -> dict[str, Any]:
    """One prefix clean on a fresh, mass-deleted copy of the ``dirs`` store, checked."""
    source, meta = ensure_dataset(args.cache_dir, SynthSpec(dirs=dirs))
    work = args.work_dir or source
    work.mkdir(parents=True, exist_ok=True)
    db = work / "prefix-scratch.db"
    copy_dataset(source / "meta.db", db)
    url = store_url(db)
    with open_store(url) as store:
        kept = mass_delete(store, keys, args.keep_every, int(meta["timestamp_us"]))
        before = folder_dirs(store)
    result: dict[str, Any] = {"store_dirs": meta["dirs"], "backend": "sqlite", "repeat": rep}
    result["prefix"] = prefix_clean(url, work, f"sqlite-{dirs}")
    with open_store(url) as store:
        result["check"] = check(before, folder_dirs(store), kept)
    if not args.keep_copy:
        db.unlink()
    return result


def sqlite_run(args: argparse.Namespace, dirs: int, keys: list[str]) -> dict[str, Any]:
    """The nightly ``run`` on a fresh copy of the ``dirs`` store after the same mass delete."""
    source, meta = ensure_dataset(args.cache_dir, SynthSpec(dirs=dirs))
    work = args.work_dir or source
    db = work / "prefix-run-scratch.db"
    copy_dataset(source / "meta.db", db)
    with open_store(store_url(db)) as store:
        mass_delete(store, keys, args.keep_every, int(meta["timestamp_us"]))
    result = full_run(store_url(db), work, args.workers)
    if not args.keep_copy:
        db.unlink()
    return result


#: the state key a keyspace loaded by this benchmark records its dataset's size in
DATASET_STATE = "bench:prefix-dataset"
#: the prefix clean's default --min-age: the subtree is written this long (plus a second) ago,
#: so the clean's deletes (at walk start - min-age) reach it
MIN_AGE_US = 600 * 1_000_000


def cassandra_store(args: argparse.Namespace, dirs: int) -> tuple[int, float | None]:
    """The keyspace holding the ``dirs`` dataset: loaded once (its size recorded in the state
    key DATASET_STATE), reused by later invocations; the dataset's size and the load's time."""
    from dircleaner.synth import generate

    url = args.cassandra_url
    work = args.work_dir or args.cache_dir
    work.mkdir(parents=True, exist_ok=True)
    with open_store(url, create=True) as store:
        loaded = store.get_state(DATASET_STATE)
        if loaded is not None:
            if int(loaded.split()[0]) != dirs:
                raise SystemExit(f"{url} holds the {loaded} dataset, not {dirs:,}: use another")
            return int(loaded.split()[1]), None
        for batch in store.scan_folder_rows(Shard()):
            if batch:
                raise SystemExit(f"{url} is not empty: give the benchmark a keyspace of its own")
            break
        started = time.perf_counter()
        generated = generate(store, SynthSpec(dirs=dirs), None, spill_dir=work)
        load_s = time.perf_counter() - started
        store.put_state(DATASET_STATE, f"{dirs} {generated.dirs}")
        return generated.dirs, load_s


def cassandra_size(
    args: argparse.Namespace, dirs: int, keys: list[str], rep: int, last_t_us: int | None
) -> dict[str, Any]:
    """On the loaded keyspace: mass-delete the subtree (again), then a dry-run ``run`` (with
    --cassandra-run) and the prefix clean, checked.

    Each repeat writes the subtree again at now - min-age - 1 s: after the previous clean's
    deletes (at its walk start - min-age), before this one's.
    """
    url = args.cassandra_url
    work = args.work_dir or args.cache_dir
    store_dirs, load_s = cassandra_store(args, dirs)
    ts = time.time_ns() // 1000 - MIN_AGE_US - 1_000_000
    if last_t_us is not None and ts <= last_t_us:
        time.sleep((last_t_us - ts) / 1e6 + 0.1)
        ts = time.time_ns() // 1000 - MIN_AGE_US - 1_000_000
    with open_store(url) as store:
        kept = mass_delete(store, keys, args.keep_every, ts)
        before = folder_dirs(store)
    result: dict[str, Any] = {
        "store_dirs": store_dirs,
        "backend": "cassandra",
        "repeat": rep,
        "load_s": load_s,
    }
    if args.cassandra_run:
        # Before the prefix clean, so it faces the same mass delete; a dry run, so it leaves the
        # subtree to the prefix clean (the ratio then leaves out the run's deletes: it errs
        # against the prefix clean).
        result["run"] = full_run(url, work, args.workers, "--dry-run")
    result["prefix"] = prefix_clean(url, work, f"cassandra-{dirs}")
    with open_store(url) as store:
        result["check"] = check(before, folder_dirs(store), kept)
    return result


def cassandra_results(args: argparse.Namespace, keys: list[str]) -> list[dict[str, Any]]:
    """``--repeat`` tries on the first size, each with its own dry-run run when asked; every
    try is kept, with its own ratio."""
    tries: list[dict[str, Any]] = []
    last_t: int | None = None
    for rep in range(args.repeat):
        print(f"size {args.sizes[0]:,} (cassandra), repeat {rep + 1} ...", file=sys.stderr)
        tries.append(cassandra_size(args, args.sizes[0], keys, rep, last_t))
        last_t = int(tries[-1]["prefix"]["summary"]["delete_timestamp_us"])
    if not all(t["check"]["exact"] for t in tries):
        raise SystemExit("a Cassandra prefix clean was not exact: see the JSON")
    return tries


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| backend | store dirs | subtree dirs | deleted | exact | prefix clean s (wall)"
        " | walk s | plan s | delete s | full run s (wall) |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        phases = r["prefix"]["summary"]["phase_seconds"]
        run = f"{r['run']['seconds']:.1f}" if "run" in r else "-"
        lines.append(
            f"| {r['backend']} | {r['store_dirs']:,} | {r['check']['subtree_dirs']:,}"
            f" | {r['check']['deleted']:,} | {r['check']['exact']}"
            f" | {r['prefix']['seconds']:.2f} | {phases.get('walk', 0):.2f}"
            f" | {phases.get('plan', 0):.2f} | {phases.get('delete', 0):.2f} | {run} |"
        )
    return "\n".join(lines)


def sqlite_results(args: argparse.Namespace, keys: list[str]) -> list[dict[str, Any]]:
    """Each size's fastest prefix clean (sizes interleaved, repeat after repeat: the machine's
    load drifts, and each size should see the same drift; noise only ever adds), and the full
    run at the smallest size."""
    tries: list[dict[str, Any]] = []
    for rep in range(args.repeat):
        for dirs in args.sizes:
            print(f"size {dirs:,} (sqlite), repeat {rep + 1} ...", file=sys.stderr)
            tries.append(sqlite_prefix(args, dirs, keys, rep))
    if not all(t["check"]["exact"] for t in tries):
        raise SystemExit("a prefix clean was not exact: see the JSON")
    results = [
        min((t for t in tries if t["store_dirs"] == d), key=lambda t: t["prefix"]["seconds"])
        for d in dict.fromkeys(t["store_dirs"] for t in tries)
    ]
    for r in results:
        r["prefix_tries_s"] = [
            t["prefix"]["seconds"] for t in tries if t["store_dirs"] == r["store_dirs"]
        ]
    if not args.no_run:
        print(f"full run at {args.sizes[0]:,} ...", file=sys.stderr)
        results[0]["run"] = sqlite_run(args, args.sizes[0], keys)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--out", type=Path, help="write the JSON result here")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="dataset cache")
    ap.add_argument("--work-dir", type=Path, help="where the scratch copies go (default: cache)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="for the full run")
    ap.add_argument("--months", type=int, default=12)
    ap.add_argument("--days", type=int, default=28)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--leaves", type=int, default=2)
    ap.add_argument("--keep-every", type=int, default=1000, help="leaves that keep their object")
    ap.add_argument("--no-run", action="store_true", help="skip the full run")
    ap.add_argument("--no-sqlite", action="store_true", help="only the Cassandra part")
    ap.add_argument("--repeat", type=int, default=3, help="prefix cleans per size (min kept)")
    ap.add_argument("--cassandra-url", help="also clean the first size loaded into this keyspace")
    ap.add_argument(
        "--cassandra-run", action="store_true", help="and a full run there (--dry-run, before)"
    )
    ap.add_argument("--keep-copy", action="store_true", help="keep the scratch copies")
    args = ap.parse_args()
    keys = subtree_keys(args.months, args.days, args.hours, args.leaves)
    results = [] if args.no_sqlite else sqlite_results(args, keys)
    if args.cassandra_url:
        results += cassandra_results(args, keys)
    ratios: dict[str, Any] = {}
    sqlite = [r for r in results if r["backend"] == "sqlite"]
    if sqlite:
        first, last = sqlite[0], sqlite[-1]
        ratios["growth_prefix_clean"] = last["prefix"]["seconds"] / first["prefix"]["seconds"] - 1
        walks = [r["prefix"]["summary"]["phase_seconds"]["walk"] for r in (first, last)]
        ratios["growth_walk"] = walks[1] / walks[0] - 1
        if "run" in first:
            ratios["prefix_over_run"] = first["prefix"]["seconds"] / first["run"]["seconds"]
    cass = [r for r in results if r["backend"] == "cassandra"]
    if cass and "run" in cass[0]:
        each = [r["prefix"]["seconds"] / r["run"]["seconds"] for r in cass]
        ratios["cassandra_prefix_over_run"] = min(each)
        ratios["cassandra_prefix_over_run_each"] = each
    report = {"subtree_keys": len(keys), "results": results, "ratios": ratios}
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, default=str))
    print(table(results))
    print(json.dumps(ratios, indent=2))


if __name__ == "__main__":
    main()
