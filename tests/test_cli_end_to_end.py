"""End to end through the CLI, with ground truth: adversarial names, deep chains, wide parents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dircleaner.store import open_store
from tests.helpers import (
    EAGER,
    audit_entries,
    expected_dirs,
    invoke,
    row_tombstones_per_partition,
    run_eagerly,
    tombstones_per_partition,
    write_lines,
)

BUDGET = 100


def adversarial_dataset() -> tuple[list[str], list[str]]:
    """Keys to put and keys then deleted, covering the path model's corner cases."""
    live = [
        "plain/file.txt",
        'quotes/it\'s "quoted"/x',
        "back\\slash/dir\\name/y",
        "spaces in/ name /z",
        "unicodé/日本語/ファイル",
        "emoji/🙂/🚀.bin",
        "a//b/c",  # empty segment
        "/leading/slash",
        "markers/kept/",  # a marker alone keeps its directory
        "deep/" + "/".join(f"l{i}" for i in range(10)) + "/leaf",
        "wide/2026-04-11/LIVE/obj",
        "long/" + "ж" * 500 + "/x",  # ≈ 1 KiB of UTF-8
        "rootfile",
    ]
    dead = [
        'quotes/it\'s "quoted"/gone/x',
        "back\\slash/empty\\dir/y",
        "unicodé/空/ファイル",
        "a//b//gone",
        "//double/root",
        "markers/gone/",
        "chain/" + "/".join(f"c{i}" for i in range(40)) + "/obj",  # a 40-level empty chain
        *(
            f"wide/2026-04-11/{a}{b}/obj"
            for a in "ABCDEFGHIJKL"
            for b in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        ),
    ]
    return live + dead, dead


@pytest.fixture()
def dataset(tmp_path: Path) -> tuple[str, set[str], set[str], Path]:
    url = f"sqlite:///{tmp_path}/meta.db"
    put, dead = adversarial_dataset()
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "put.txt", put))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "dead.txt", dead))).exit_code == 0
    every, live = expected_dirs(put, dead)
    return url, every, live, tmp_path


def listed(url: str) -> set[str]:
    result = invoke(url, "list-dirs", "--bucket", "default")
    assert result.exit_code == 0, result.output
    return set(result.output.splitlines())


def test_import_builds_the_folder_index_of_every_ancestor(
    dataset: tuple[str, set[str], set[str], Path],
) -> None:
    url, every, _, _ = dataset
    assert listed(url) == every
    assert len(every) > 380


@pytest.mark.parametrize("workers", ["1", "2"])
def test_repeated_runs_clean_everything_with_perfect_precision_and_budget(
    dataset: tuple[str, set[str], set[str], Path], workers: str
) -> None:
    url, every, live, tmp = dataset
    empty = every - live
    assert "chain/" + "/".join(f"c{i}" for i in range(40)) + "/" in empty
    recall = 0.0
    for attempt in range(6):
        audit = tmp / f"audit{attempt}.jsonl"
        result = run_eagerly(
            url,
            audit,
            "--fpr",
            "0.001",
            "--max-tombstones-per-partition",
            str(BUDGET),
            "--workers",
            workers,
            "--json",
        )
        assert result.exit_code == 0, result.output
        remaining = listed(url)
        assert live <= remaining, f"non-empty directories lost: {sorted(live - remaining)[:5]}"
        entries = audit_entries(audit)
        assert {e["dir"] for e in entries} <= empty
        assert max(tombstones_per_partition(entries).values(), default=0) <= BUDGET
        if attempt == 0:
            # The 312 adjacent empty children of wide/2026-04-11/ go as range deletes.
            assert any(e["via"] == "range" for e in entries)
        recall = len(empty - remaining) / len(empty)
        if recall >= 0.99:
            break
    assert recall >= 0.99


def test_first_run_defers_over_budget_and_reports_it(
    dataset: tuple[str, set[str], set[str], Path],
) -> None:
    url, _, _, tmp = dataset
    # Without rewrites: the budget of row and range deletes is what is tested.
    budget = ("--max-tombstones-per-partition", "1", "--max-rewrite-rows", "0")
    result = run_eagerly(url, tmp / "a.jsonl", *budget, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    plan = summary["clean"]["plan"]
    # One tombstone left cannot pay for a range (2): the first row of the run goes as a row.
    assert plan["deferred"] >= 312 - 1
    assert plan["max_row_tombstones_in_a_partition"] == 1
    assert plan["range_deletes"] == 0
    per_partition = row_tombstones_per_partition(audit_entries(tmp / "a.jsonl"))
    assert per_partition[("default", "wide/2026-04-11/")] == 1


def test_the_40_level_chain_costs_its_live_parent_one_row_tombstone(
    dataset: tuple[str, set[str], set[str], Path],
) -> None:
    url, _, _, tmp = dataset
    audit = tmp / "a.jsonl"
    result = run_eagerly(url, audit)
    assert result.exit_code == 0, result.output
    chain = [e for e in audit_entries(audit) if e["dir"].startswith("chain/")]
    assert len(chain) == 41  # chain/ and its 40 levels
    rows = [e for e in chain if e["via"] == "row"]
    assert [e["dir"] for e in rows] == ["chain/"]
    assert rows[0]["parent"] == ""


def test_dry_run_deletes_nothing(dataset: tuple[str, set[str], set[str], Path]) -> None:
    url, every, _, tmp = dataset
    result = invoke(
        url,
        "run",
        "--dry-run",
        "--min-age",
        "0",
        "--max-delete-fraction",
        "1",
        "--audit-log",
        str(tmp / "a.jsonl"),
    )
    assert result.exit_code == 0, result.output
    assert "dry run: nothing deleted" in result.output
    assert listed(url) == every
    assert not (tmp / "a.jsonl").exists()


def test_restore_puts_back_what_the_audit_log_recorded(
    dataset: tuple[str, set[str], set[str], Path],
) -> None:
    url, every, _, tmp = dataset
    audit = tmp / "a.jsonl"
    assert run_eagerly(url, audit).exit_code == 0
    assert listed(url) != every
    result = invoke(url, "restore", str(audit))
    assert result.exit_code == 0, result.output
    assert listed(url) == every


def test_sweep_then_clean_step_by_step(dataset: tuple[str, set[str], set[str], Path]) -> None:
    url, every, live, tmp = dataset
    assert invoke(url, "build", "--fpr", "0.001").exit_code == 0
    out = tmp / "candidates.txt"
    result = invoke(url, "sweep", "--out", str(out))
    assert result.exit_code == 0, result.output
    lines = out.read_text(encoding="utf-8").splitlines()
    assert {line.split("\t")[0] for line in lines} == {"default"}  # BUCKET<TAB>PATH
    candidates = {line.split("\t", 1)[1] for line in lines}
    assert candidates and candidates <= every - live
    result = invoke(url, "clean", *EAGER, "--audit-log", str(tmp / "a.jsonl"))
    assert result.exit_code == 0, result.output
    assert live <= listed(url)


def test_min_age_spares_entries_written_after_the_cutoff(
    dataset: tuple[str, set[str], set[str], Path],
) -> None:
    """Everything here was written seconds ago; with the default --min-age 10m nothing goes."""
    url, every, _, tmp = dataset
    result = invoke(url, "run", "--max-delete-fraction", "1", "--audit-log", str(tmp / "a.jsonl"))
    assert result.exit_code == 0, result.output
    assert listed(url) == every


# -- runs of adjacent empty siblings: range deletes ---------------------------------------------


def mass_delete_dataset() -> tuple[list[str], list[str]]:
    """Keys put and then deleted: real mass deletes leave long runs of empty siblings.

    * 676 hour-shards of a day, 90% emptied: one in ten stays, so runs of nine empties;
    * the oldest 600 of 700 sequential order ids, by retention;
    * a parent whose children alternate empty and live (runs of one: row deletes).
    """
    shards = [a + b for a in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" for b in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"]
    hours = [f"logs/2026-04-11/{s}/part-0" for s in shards]
    orders = [f"orders/{i:06d}/invoice.pdf" for i in range(700)]
    alternate = [f"alt/k{i:02d}/x" for i in range(40)]
    dead = [k for i, k in enumerate(hours) if i % 10] + orders[:600] + alternate[::2]
    return [*hours, *orders, *alternate, "logs/README"], dead


@pytest.mark.parametrize("workers", ["1", "2"])
def test_adjacent_empty_siblings_over_the_budget_go_in_one_run_as_ranges(
    tmp_path: Path, workers: str
) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    put, dead = mass_delete_dataset()
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "put.txt", put))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "dead.txt", dead))).exit_code == 0
    every, live = expected_dirs(put, dead)
    empty = every - live
    assert len(empty) == 608 + 600 + 20
    audit = tmp_path / "audit.jsonl"
    budget = 150
    # --fpr 1e-6: with a false positive (p ≈ 0.001 here) an empty directory would stay behind.
    result = run_eagerly(
        url,
        audit,
        "--fpr",
        "0.000001",
        "--max-tombstones-per-partition",
        str(budget),
        "--workers",
        workers,
        "--json",
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["clean"]["plan"]
    # 68 runs of up to nine hour-shards and one run of 600 orders are ranges; the 20 lone
    # empties of alt/ are rows. More than 150 empties per parent, nothing deferred.
    assert (plan["range_deletes"], plan["row_deletes"], plan["deferred"]) == (69, 20, 0)
    assert plan["max_row_tombstones_in_a_partition"] == 2 * 68
    remaining = listed(url)
    # Every truly empty directory is gone in one run, and nothing else: precision 100%.
    assert remaining == live
    entries = audit_entries(audit)
    assert {e["dir"] for e in entries} == empty
    assert len(entries) == len(empty)
    per_partition = tombstones_per_partition(entries)
    assert per_partition == {
        ("default", "logs/2026-04-11/"): 136,
        ("default", "orders/"): 2,
        ("default", "alt/"): 20,
    }
    # The store's own count of tombstones (2 per range) agrees and keeps within the budget.
    with open_store(url) as store:
        for (bucket, parent), spent in per_partition.items():
            assert store.tombstones_in_partition(bucket, parent) == spent <= budget


def test_the_summary_reports_range_deletes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    put, dead = mass_delete_dataset()
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "put.txt", put))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "dead.txt", dead))).exit_code == 0
    result = run_eagerly(url, tmp_path / "a.jsonl", "--fpr", "0.000001")
    assert result.exit_code == 0, result.output
    assert (
        "plan    1,228 directories to delete = 0 in 0 dead partitions + 20 by row deletes"
        " + 1,208 in 69 ranges + 0 in 0 rewritten partitions (0 rows copied); 0 more deferred"
        " by the budget N\n"
        "        89 tombstones = 0 partition + 20 row + 69 range (each counts 2 against N)"
        " + 0 of rewritten partitions\n"
    ) in result.output
    assert (
        ": 0 partition, 20 row and 69 range deletes, 0 rewrites of 0 rows; 0 retries\n"
        in result.output
    )
    assert (
        "budget  N = 500: the per-partition live-tombstone budget, the tombstones one live"
        " partition may hold within the grace period (10 days, default); N is half the"
        " default tombstone_warn_threshold (1000)\n"
    ) in result.output
