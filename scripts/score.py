#!/usr/bin/env python3
"""Score a clean against ground truth: precision (must be 1.0) and recall.

Usage: scripts/score.py --store URL --truth truth.txt --audit-log audit.jsonl [--bucket B]
Exit 1 if any non-empty directory lost its entry, or if the store and the audit log disagree.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dircleaner.paths import DEFAULT_BUCKET, dir_of_row
from dircleaner.store import open_store
from dircleaner.synth.groundtruth import audited_by_via, audited_dirs, read_truth, score


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--truth", type=Path, required=True)
    parser.add_argument("--audit-log", type=Path, required=True)
    parser.add_argument("--bucket", default=DEFAULT_BUCKET)
    args = parser.parse_args()

    truth = read_truth(args.truth)
    deleted = audited_dirs(args.audit_log, args.bucket) if args.audit_log.exists() else []
    via = audited_by_via(args.audit_log, args.bucket) if args.audit_log.exists() else {}
    with open_store(args.store) as store:
        remaining = {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows(args.bucket)}
    result = score(deleted, truth)
    still_there = sorted(set(deleted) & remaining)
    print(
        f"score   {result.deleted:,} directories deleted of {result.empty_total:,} truly empty:"
        f" precision {result.precision:.6f}, recall {result.recall:.4f};"
        f" {len(remaining):,} directories remain"
    )
    print(
        f"        by partition delete {via.get('partition', 0):,}, by row delete"
        f" {via.get('row', 0):,}, by range delete {via.get('range', 0):,}"
    )
    if result.wrongly_deleted:
        print(f"FAIL: non-empty directories deleted: {list(result.wrongly_deleted[:10])}")
        return 1
    if still_there:
        print(f"FAIL: audited as deleted but still listed: {still_there[:10]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
