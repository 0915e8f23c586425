"""Counts that say what happened: delete requests issued, directories removed (where the store
can tell, as SQLite can), kept because written after T, and deferred by the budget — the same in
the text summary, ``--json`` and the metrics, for ``run``, ``clean`` and ``clean --prefix``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dircleaner.cli.report import deleted_summary, plan_and_delete_lines
from dircleaner.model import KindTally
from dircleaner.pipeline.delete import DeleteStats
from dircleaner.pipeline.plan import PlanSummary
from tests.helpers import invoke, samples_of

#: three empty directories under a/, written now: after T when --min-age is 10 minutes
KEYS = "a/keep/x\na/c/y\na/d/y\na/e/y\n"
GONE = "a/c/y\na/d/y\na/e/y\n"


def metric_values(path: Path) -> dict[str, float]:
    return samples_of(path.read_text())


def stale_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/n.db"
    assert invoke(url, "import-keys", "-", input=KEYS).exit_code == 0
    assert invoke(url, "delete-keys", "-", input=GONE).exit_code == 0
    return url


COMMANDS = {
    "run": ["run", "--max-delete-fraction", "1"],
    "clean": ["clean", "--max-delete-fraction", "1"],
    "clean --prefix": ["clean", "--prefix", "a/"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_rows_written_after_t_are_requested_and_kept_never_called_deleted(
    tmp_path: Path, command: str
) -> None:
    url = stale_store(tmp_path)
    if command == "clean":
        assert invoke(url, "build").exit_code == 0
    args = [*COMMANDS[command], "--audit-log", str(tmp_path / "a.jsonl")]
    metrics = tmp_path / "m.prom"
    text = invoke(url, *args, "--metrics-file", str(metrics))
    assert text.exit_code == 0, text.output
    assert "clean   delete requests issued for 3 directories in " in text.output
    assert (
        "        0 directories removed; 3 kept: written after T, so they survive, as they must\n"
    ) in text.output
    assert "deleted" not in text.output
    # T in UTC, the µs stay in --json.
    assert re.search(r" at T = \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} UTC \(", text.output)
    values = metric_values(metrics)
    assert values["dircleaner_delete_requested_directories"] == 3
    assert values["dircleaner_removed_directories"] == 0
    assert values["dircleaner_kept_written_after_delete_timestamp"] == 3
    assert values["dircleaner_deferred_by_budget"] == 0
    assert not any("deleted_directories" in name for name in values)
    assert values["dircleaner_last_run_success"] == 1
    out = invoke(url, *args, "--json")
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    summary = summary.get("clean", summary)
    counts = [
        summary[k]
        for k in (
            "delete_requested_dirs",
            "removed_dirs",
            "kept_written_after_t",
            "deferred_by_budget",
        )
    ]
    assert counts == [3, 0, 3, 0]
    assert "deleted_dirs" not in summary and isinstance(summary["delete_timestamp_us"], int)
    assert "default\ta/c/" in invoke(url, "list-dirs").output


def test_rows_written_before_t_are_removed(tmp_path: Path) -> None:
    url = stale_store(tmp_path)
    args = ["clean", "--prefix", "a/", "--min-age", "0", "--audit-log", str(tmp_path / "a.jsonl")]
    summary = json.loads(invoke(url, *args, "--json").stdout)
    counts = [summary[k] for k in ("delete_requested_dirs", "removed_dirs", "kept_written_after_t")]
    assert counts == [3, 3, 0]
    assert "default\ta/c/" not in invoke(url, "list-dirs").output


def test_the_plan_lines_add_up_and_say_what_n_is(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/n.db"
    # A dead partition (a/p/: 3 subdirectories), its own row and a range of 3 in a/'s partition.
    keys = ["a/b/x", "a/p/1/x", "a/p/2/x", "a/p/3/x", "a/q/x", "a/r1/x", "a/r2/x", "a/r3/x"]
    assert invoke(url, "import-keys", "-", input="\n".join(keys) + "\n").exit_code == 0
    gone = [k for k in keys if k not in ("a/b/x", "a/q/x")]
    assert invoke(url, "delete-keys", "-", input="\n".join(gone) + "\n").exit_code == 0
    args = ["clean", "--prefix", "a/", "--min-age", "0", "--dry-run"]
    result = invoke(url, *args)
    assert result.exit_code == 0, result.output
    plan = [line for line in result.output.splitlines() if line.startswith("plan")]
    assert plan == [
        "plan    7 directories to delete = 3 in 1 dead partitions + 1 by row deletes"
        " + 3 in 1 ranges + 0 in 0 rewritten partitions (0 rows copied); 0 more deferred by"
        " the budget N"
    ]
    assert (
        "        3 tombstones = 1 partition + 1 row + 1 range (each counts 2 against N)"
        " + 0 of rewritten partitions\n"
    ) in result.output
    assert (
        "budget  N = 500: the per-partition live-tombstone budget, the tombstones one live"
        " partition may hold within the grace period (10 days, default); N is half the default"
        " tombstone_warn_threshold (1000)\n"
    ) in result.output
    summary = json.loads(invoke(url, *args, "--json").stdout)["plan"]
    assert summary["directories_by_action"] == {"partition": 3, "row": 1, "range": 3, "rewrite": 0}
    assert sum(summary["directories_by_action"].values()) == summary["directories"]
    kinds = ("partition_deletes", "row_deletes", "range_deletes", "rewrites")
    assert sum(summary[k] for k in kinds) == summary["tombstones"] == 3


def test_a_store_that_cannot_tell_says_requested_never_deleted() -> None:
    """Cassandra's deletes are blind tombstones: its counts are requests, and what was
    removed is unknown (null in --json), not 0."""
    blind = DeleteStats(deletes=KindTally(row=2), directories=2, seconds=0.5)
    lines = plan_and_delete_lines(
        PlanSummary(directories=2, deletes=KindTally(row=2), dirs=KindTally(row=2)),
        None,
        False,
        blind,
        1_795_680_000_000_000,
        None,
        "build start - --min-age 10m",
    )
    assert lines[-2:] == [
        "clean   delete requests issued for 2 directories in 0.5s at T = 2026-11-26 08:00:00.000000"
        " UTC (build start - --min-age 10m): 0 partition, 2 row and 0 range deletes, 0 rewrites"
        " of 0 rows; 0 retries",
        "        requested, not counted as removed: this store's deletes are blind tombstones"
        " (an entry written after T survives its delete)",
    ]
    summary = deleted_summary(
        blind, PlanSummary(directories=2, deletes=KindTally(row=2), dirs=KindTally(row=2)), False
    )
    assert (summary["delete_requested_dirs"], summary["removed_dirs"]) == (2, None)
    assert summary["kept_written_after_t"] is None
    assert deleted_summary(None, PlanSummary(), False)["removed_dirs"] is None
