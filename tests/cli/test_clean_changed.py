"""``clean --changed`` through the CLI on SQLite: its options, its lines, its metrics."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dircleaner.lease import lease_name
from dircleaner.store import open_store
from tests.helpers import invoke, said


def gauges(text: str) -> dict[str, float]:
    """The metrics file's samples by name (each name once here)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            out[series.split("{", 1)[0]] = float(value)
    return out


NIGHT = ("clean", "--changed", "--settle", "0s", "--min-age", "0s", "--rate", "0")


@pytest.fixture()
def url(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path}/meta.db"
    keys = "".join(f"keep{i}/x\n" for i in range(40)) + "gone/a/x\ngone/b/y\n"
    assert invoke(store, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(store, "delete-keys", "-", input="gone/a/x\ngone/b/y\n").exit_code == 0
    return store


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--settle", "5m"], "--settle does not apply without --changed"),
        (["--changed", "--prefix", "x/"], "--prefix does not apply with --changed"),
        (["--changed", "--workers", "2"], "--workers does not apply with --changed"),
        (["--changed", "--max-rewrite-rows", "9"], "--max-rewrite-rows does not apply with"),
        (["--changed", "--no-verify"], "--no-verify does not apply with --changed"),
        (["--changed", "--shard", "0/2"], "--shard does not apply with --changed"),
        (["--changed", "--spill-dir", "/tmp"], "--spill-dir does not apply with --changed"),
        (["--prefix", "x/", "--changed"], "--prefix does not apply with --changed"),
        (["--changed", "--settle", "soon"], "--settle: invalid duration 'soon'"),
        (["--changed", "--settle", "15"], "--settle: "),
    ],
)
def test_options_that_do_not_apply_are_refused(url: str, args: list[str], message: str) -> None:
    result = invoke(url, "clean", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_night_says_what_it_read_checked_and_deleted(url: str, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    metrics = tmp_path / "churn.prom"
    result = invoke(url, *NIGHT, "--audit-log", str(audit), "--metrics-file", str(metrics))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert (
        lines[0].startswith("journal ")
        and "(the hour still open included), settled 0s:" in lines[0]
    )
    assert " 2 rows naming 2 directories" in lines[0]
    assert lines[1].startswith(
        "check   3 directories = 2 journaled + 1 parents of emptied ones: 0 hold objects,"
        " 0 subdirectories, 3 empty (0 of them already gone from the index), 0 deferred"
    )
    assert lines[2] == "        reads: 3 objects partitions, 3 folders partitions, 1 folder rows"
    assert lines[3].startswith("plan    3 directories to delete = 2 in 1 dead partitions + 1 by")
    assert "(night start - --min-age 0s)" in result.stdout
    text = metrics.read_text()
    assert re.search(
        r'^dircleaner_night\{command="clean --changed",store="[^"]+",kind="churn"\} 1$', text, re.M
    )
    values = gauges(text)
    assert values["dircleaner_journal_entries_read"] == 2
    assert values["dircleaner_journal_checked_directories"] == 3
    assert values["dircleaner_journal_backlog_directories"] == 0
    assert values["dircleaner_delete_requested_directories"] == 3
    assert said(invoke(url, "list-dirs", "--sort")) == ""


def test_a_full_night_says_which_kind_it_was(url: str, tmp_path: Path) -> None:
    metrics = tmp_path / "full.prom"
    result = invoke(
        url, "run", "--min-age", "0s", "--max-delete-fraction", "1", "--rate", "0",
        "--audit-log", str(tmp_path / "a.jsonl"), "--metrics-file", str(metrics),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = metrics.read_text()
    assert re.search(r'^dircleaner_night\{command="run",store="[^"]+",kind="full"\} 1$', text, re.M)
    assert "dircleaner_journal_" not in text


def test_a_night_over_the_fraction_is_refused_and_a_dry_run_says_so(url: str) -> None:
    result = invoke(url, *NIGHT, "--max-delete-fraction", "0.05")
    assert result.exit_code == 3
    assert "this churn night would delete 3 of the store's 43 directories (7.0%)" in said(result)
    dry = invoke(url, *NIGHT, "--max-delete-fraction", "0.05", "--dry-run")
    assert dry.exit_code == 3
    assert "a real run would be refused: this churn night would delete 3" in said(dry)
    assert "clean   dry run: nothing deleted" in dry.stdout


def test_a_night_waits_for_no_lease_it_does_not_hold(url: str) -> None:
    with open_store(url) as store:
        assert store.try_acquire_lease(lease_name(store), "someone-else", 60) is None
    result = invoke(url, *NIGHT)
    assert result.exit_code == 3
    assert "lease" in said(result)
