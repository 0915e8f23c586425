"""Scoring a clean against the ground truth: precision, recall and the audit log's tallies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dircleaner.synth.groundtruth import (
    audited_by_via,
    audited_dirs,
    percentile,
    read_truth,
    score,
    tombstones_by_partition,
)


def test_score_names_every_wrong_delete() -> None:
    got = score(["a/", "b/", "c/", "a/"], {"a/", "b/", "d/", "e/"})
    assert (got.deleted, got.empty_total, got.true_deletes) == (3, 4, 2)
    assert got.wrongly_deleted == ("c/",)
    assert got.precision == pytest.approx(2 / 3) and got.recall == 0.5
    assert (score([], set()).precision, score([], set()).recall) == (1.0, 1.0)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([], 0.99, 0), ([5], 0.5, 5), ([3, 1, 2, 4], 0.5, 2), ([3, 1, 2, 4], 1.0, 4), ([7, 9], 0, 7)],
)
def test_percentile_by_nearest_rank(values: list[int], q: float, expected: int) -> None:
    assert percentile(values, q) == expected


def line(bucket: str, parent: str, name: str, via: str, **extra: object) -> str:
    entry = {"bucket": bucket, "parent": parent, "name": name, "via": via, **extra}
    return json.dumps(entry) + "\n"


def test_the_audit_log_tallies(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    log.write_text(
        line("b", "p/", "x", "row")
        + line("b", "p/", "y", "row")
        + line("b", "q/", "c1", "range", range=["c1", "c2"])
        + line("b", "q/", "c2", "range", range=["c1", "c2"])
        + line("b", "", "gone", "partition")
        + line("other", "p/", "z", "row"),
        encoding="utf-8",
    )
    assert audited_dirs(log, "b") == ["p/x/", "p/y/", "q/c1/", "q/c2/", "gone/"]
    # A row delete leaves one tombstone, a range two (its bounds, once), a partition delete none.
    assert tombstones_by_partition(log, "b") == {("b", "p/"): 2, ("b", "q/"): 2}
    assert audited_by_via(log, "b") == {"row": 2, "range": 2, "partition": 1}


def test_the_truth_file_is_one_directory_a_line(tmp_path: Path) -> None:
    path = tmp_path / "truth.txt"
    path.write_text("a/\n\nb c/\n", encoding="utf-8")
    assert read_truth(path) == {"a/", "b c/"}
