"""Benchmark: what the re-check's folders reads of the cascade cost a night with a sound filter.

    python bench/cascade_check.py --dirs 200000 --fpr 0.005 0.05

A candidate the filter holds (one only because its parent is absent) has its folders partition
read besides its objects partition (``pipeline/recheck.py``). On a sound filter these are its
false positives under an absent directory. For each ``--fpr``, on one generated SQLite store
(``dircleaner gen``, kept in ``--work-dir``): a filter built in memory with that target, the
sweep, then the re-check; printed as a Markdown table row: the candidates, those in absent
directories' partitions (the cascade), the objects reads, the folders reads and their share of
the objects reads, the candidates the folders reads kept, and the candidates left out of the
plan for them (with their ancestors: what the night's recall pays, against a re-check without
the folders reads). Reads only: nothing is deleted.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from dircleaner.filter.bloom import BloomFilter
from dircleaner.model import BucketDir, PartitionFacts, Shard
from dircleaner.pipeline.build import BuildConfig, build_filter
from dircleaner.pipeline.plan import drop_nonempty
from dircleaner.pipeline.recheck import find_nonempty
from dircleaner.pipeline.sweep import sweep
from dircleaner.store import open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shape", choices=["backlog", "steady"], default=None)
    parser.add_argument("--fpr", type=float, nargs="+", default=[0.005, 0.05])
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="cascade-check-"))
    work.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{(work / 'meta.db').resolve()}"
    if not (work / "meta.db").exists():
        gen = [sys.executable, "-m", "dircleaner", "--store", url, "gen", "--dirs", str(args.dirs)]
        gen += ["--seed", str(args.seed), *(["--shape", args.shape] if args.shape else [])]
        subprocess.run(gen, check=True, stdout=subprocess.DEVNULL)
    print(
        "| fpr target (effective) | candidates | in absent partitions | objects reads"
        " | folders reads (share) | kept by their folders partition | left out of the plan |"
    )
    print("|---|---|---|---|---|---|---|")
    #: a filter holding nothing: the re-check without the folders reads
    nothing = BloomFilter(1 << 16, 7, 0)
    with open_store(url) as store:
        for fpr in args.fpr:
            built = build_filter(store, BuildConfig(fpr=fpr, salt=args.seed, persist=False))
            assert built.in_memory is not None
            _header, filt = built.in_memory
            swept = sweep(store.scan_folder_keys(Shard(), None, None), filt)
            cascade = sum(len(f.candidates) for f in swept.facts if f.dir_absent)
            found = find_nonempty(store, swept.facts, filt)
            share = found.cascade_read / max(1, found.checked)
            plain = find_nonempty(store, swept.facts, nothing).nonempty
            lost = planned(swept.facts, plain) - planned(swept.facts, found.nonempty)
            print(
                f"| {fpr} ({built.estimated_fpr:.4f}) | {swept.candidates:,} | {cascade:,}"
                f" | {found.checked:,} | {found.cascade_read:,} ({share:.2%})"
                f" | {found.cascade_kept:,} | {lost:,} |"
            )


def planned(facts: list[PartitionFacts], nonempty: set[BucketDir]) -> int:
    """Candidates left once the directories kept, and their ancestors, are dropped."""
    return sum(len(f.candidates) for f in drop_nonempty(facts, nonempty))


if __name__ == "__main__":
    main()
