"""Scoring a clean against a synthetic dataset's ground truth (its empty directories)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dircleaner.audit import read_audit_log
from dircleaner.paths import dir_of_row


@dataclass(frozen=True)
class Score:
    """Precision must be exactly 1.0: no non-empty directory may ever lose its entry."""

    deleted: int
    empty_total: int
    true_deletes: int
    wrongly_deleted: tuple[str, ...]

    @property
    def precision(self) -> float:
        return self.true_deletes / self.deleted if self.deleted else 1.0

    @property
    def recall(self) -> float:
        return self.true_deletes / self.empty_total if self.empty_total else 1.0


def score(deleted: Iterable[str], truth: set[str]) -> Score:
    """Compare the directories a clean removed with the truly empty ones."""
    removed = set(deleted)
    wrong = sorted(removed - truth)
    return Score(len(removed), len(truth), len(removed & truth), tuple(wrong))


def read_truth(path: Path) -> set[str]:
    """One empty directory per line."""
    with path.open(encoding="utf-8") as stream:
        return {line.rstrip("\n") for line in stream if line != "\n"}


def audited_dirs(path: Path, bucket: str) -> list[str]:
    """The directories an audit log says were deleted in ``bucket``."""
    return [
        dir_of_row(e["parent"], e["name"]) for e in read_audit_log(path) if e["bucket"] == bucket
    ]


def tombstones_by_partition(path: Path, bucket: str) -> Counter[tuple[str, str]]:
    """Tombstone cells an audit log's deletes left per live partition: 1 per row delete, 2 per
    distinct range (its two bounds); partition deletes and rewrites leave none."""
    out: Counter[tuple[str, str]] = Counter()
    ranges: set[tuple[str, str, str]] = set()
    for e in read_audit_log(path):
        if e["bucket"] != bucket:
            continue
        if e.get("via") == "row":
            out[(bucket, e["parent"])] += 1
        elif e.get("via") == "range":
            first, last = e["range"]
            if (e["parent"], first, last) not in ranges:
                ranges.add((e["parent"], first, last))
                out[(bucket, e["parent"])] += 2
    return out


def percentile(values: list[int], q: float) -> int:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank (0 for none)."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def audited_by_via(path: Path, bucket: str) -> Counter[str]:
    """How many directories an audit log says went by partition, row and range delete."""
    return Counter(str(e.get("via")) for e in read_audit_log(path) if e["bucket"] == bucket)
