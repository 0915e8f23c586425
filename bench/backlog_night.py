"""A backlog cleared on purpose, as an operator would: the refused night, the same night with a
broken filter, then nights with a window until the backlog is gone.

    python bench/backlog_night.py --dirs 1000000 --workers 2 --window 2m
    python bench/backlog_night.py --store cassandra://127.0.0.1:9042/KS --dirs 100000 --window 30s

On ``gen --shape backlog`` (64% of the directories empty; on SQLite the dataset is generated
once into ``--cache-dir`` and copied for each run, on Cassandra into the given keyspace, which
must be empty), through the command line (``dircleaner ... --json``):

1. **the refused night**: ``run`` with the default guards; its wall time, and from the
   refusal's details what the sampled candidates look like, the plan's size and its estimate
   at ``--rate``, the ``--max-delete-fraction`` it suggests;
2. **a broken filter**: that night's filter stored again with a third of its bytes cleared (a
   newer generation), then ``clean``: refused, and what it looks like; the damaged generation
   is removed afterwards;
3. **the nights with a window**: ``run --max-delete-fraction F --max-run-time W`` (F as the
   refusal suggested) until a night ends before its deadline (at most ``--nights``): per night
   its wall time, whether it resumed the last one's generation (and T), the delete requests it
   issued and their rate against ``--rate`` (requests over the delete phase), what it left;
4. **the score**: the audit log's directories against the ground truth (precision, recall).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from e2e import DEFAULT_CACHE, copy_dataset

from dircleaner.filter.format import decode_header, encode_header
from dircleaner.filter.generation import new_generation_id
from dircleaner.filter.stored import latest_complete, read_filter_part, save_filter_part
from dircleaner.pipeline.build import scope_of
from dircleaner.store import open_store

BIN = Path(sys.executable).parent / "dircleaner"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cli(url: str, *args: str) -> tuple[int, dict[str, Any], float]:
    """Run the command line with --json: exit code, its JSON, wall seconds."""
    started = time.perf_counter()
    done = subprocess.run(
        [str(BIN), "--store", url, *args, "--json"], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    try:
        out: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"dircleaner {' '.join(args)} failed: {done.stderr}") from None
    return done.returncode, out, seconds


def prepare(args: argparse.Namespace, work: Path) -> tuple[str, Path]:
    """The store (a fresh copy of the cached SQLite dataset, or the Cassandra keyspace filled)
    and the ground truth file."""
    if args.store is None:
        cached = args.cache_dir / f"backlog-{args.dirs}-{args.seed}"
        if not (cached / "gen.json").is_file():
            cached.mkdir(parents=True, exist_ok=True)
            code, out, seconds = cli(
                f"sqlite:///{cached / 'meta.db'}", "gen", "--dirs", str(args.dirs),
                "--shape", "backlog", "--seed", str(args.seed), "--truth", str(cached / "truth"),
            )  # fmt: skip
            assert code == 0, out
            (cached / "gen.json").write_text(json.dumps({**out, "seconds": seconds}))
        copy_dataset(cached / "meta.db", work / "meta.db")
        return f"sqlite:///{work / 'meta.db'}", cached / "truth"
    truth = work / "truth"
    code, out, seconds = cli(
        args.store, "gen", "--dirs", str(args.dirs), "--shape", "backlog",
        "--seed", str(args.seed), "--truth", str(truth), *(["--bulk"] if args.bulk else []),
    )  # fmt: skip
    assert code == 0, out
    log(f"generated in {seconds:.0f}s")
    return args.store, truth


def damage(url: str) -> str:
    """The newest filter again, a third of its bytes cleared, as a newer generation."""
    with open_store(url) as store:
        info = latest_complete(store, scope_of(store, None))
        generation = ""
        for part in info.shards:
            header_bytes, body = read_filter_part(store, info.generation, part.shard)
            header = decode_header(header_bytes)
            damaged = bytes(b if i % 3 else 0 for i, b in enumerate(body))
            header = replace(header, body_crc=zlib.crc32(damaged))
            generation = new_generation_id(header.snapshot_us + 1, header.salt)
            save_filter_part(store, generation, header, encode_header(header), damaged)
    return generation


def refusal(details: dict[str, Any], seconds: float) -> dict[str, Any]:
    return {
        "seconds": round(seconds, 1),
        "swept_dirs": details.get("swept_dirs"),
        "candidates": details.get("candidates"),
        "sample": details.get("sample"),
        "looks_like": details.get("looks_like"),
        "plan": details.get("plan"),
        "estimated_delete_seconds": details.get("estimated_delete_seconds"),
        "suggested_max_delete_fraction": details.get("suggested_max_delete_fraction"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dirs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--store", help="a Cassandra keyspace of your own (default: SQLite)")
    ap.add_argument("--bulk", action="store_true", help="Cassandra: gen --bulk")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--window", default="2m", help="each night's --max-run-time")
    ap.add_argument("--nights", type=int, default=10)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_CACHE / "backlog-night")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    audit = work / "audit.jsonl.gz"
    audit.unlink(missing_ok=True)
    url, truth = prepare(args, work)
    common = ["--workers", str(args.workers), "--rate", f"{args.rate:g}"]
    result: dict[str, Any] = {"argv": sys.argv[1:], "store": url}

    code, out, seconds = cli(url, "run", *common, "--audit-log", str(audit))
    assert code == 3, out
    result["refused"] = refusal(out["details"], seconds)
    log(f"refused night: {result['refused']}")

    broken = damage(url)
    code, out, seconds = cli(url, "clean", *common, "--audit-log", str(audit))
    assert code == 3, out
    result["broken_filter"] = refusal(out["details"], seconds)
    log(f"broken filter: {result['broken_filter']}")
    subprocess.run([str(BIN), "--store", url, "filters", "rm", broken], check=True)

    fraction = str(result["refused"]["suggested_max_delete_fraction"])
    nights = []
    for night in range(args.nights):
        code, out, seconds = cli(
            url, "run", *common, "--max-delete-fraction", fraction,
            "--max-run-time", args.window, "--audit-log", str(audit),
        )  # fmt: skip
        assert code == 0, out
        clean, build = out["clean"], out["build"]
        requests = sum(
            clean[k]
            for k in ("partition_tombstones", "row_tombstones", "range_tombstones",
                      "partitions_rewritten")
        )  # fmt: skip
        delete_s = clean["phase_seconds"].get("delete", 0.0)
        deadline = clean["deadline"]
        nights.append(
            {
                "night": night + 1,
                "seconds": round(seconds, 1),
                "resumed": build.get("resumed") is not None,
                "delete_timestamp_us": clean["delete_timestamp_us"],
                "candidates": clean["sweep"]["candidates"],
                "delete_requested_dirs": clean["delete_requested_dirs"],
                "requests": requests,
                "delete_s": round(delete_s, 1),
                "requests_per_s_of_rate": round(requests / delete_s / args.rate, 3)
                if delete_s
                else None,
                "stopped_at_deadline": deadline["reached"],
                "left_dirs": deadline["left_dirs"],
            }
        )
        log(f"night {night + 1}: {nights[-1]}")
        if not deadline["reached"]:
            break
    result["nights"] = nights

    from dircleaner.audit import read_audit_log

    deleted = {str(e["dir"]) for e in read_audit_log(audit)}
    empty = {line.split("\t")[-1] for line in truth.read_text().splitlines()}
    result["score"] = {
        "deleted": len(deleted),
        "truly_empty": len(empty),
        "precision": round(len(deleted & empty) / len(deleted), 6) if deleted else None,
        "recall": round(len(deleted & empty) / len(empty), 4) if empty else None,
    }
    log(f"score: {result['score']}")
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
