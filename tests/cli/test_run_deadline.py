"""The night's end through the command line: --max-run-time and --deadline stop the deletes
cleanly (exit 0, 'stopped at the deadline, N left', the audit log exact), the next run resumes
with the same T and finishes the job, a deadline passed during the sweep deletes nothing, and
the options are checked before anything runs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from dircleaner.audit import read_audit_log
from tests.helpers import invoke, samples_of

DIRS = 6000


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Half the directories empty: thousands of deletes, several seconds at --rate 300."""
    tmp = tmp_path_factory.mktemp("window")
    url = f"sqlite:///{tmp / 'meta.db'}"
    result = invoke(
        url, "gen", "--dirs", str(DIRS), "--empty-fraction", "0.5", "--truth", str(tmp / "t")
    )
    assert result.exit_code == 0, result.output
    return tmp


def copy(dataset: Path, tmp_path: Path) -> tuple[str, Path]:
    db = tmp_path / "meta.db"
    db.write_bytes((dataset / "meta.db").read_bytes())
    return f"sqlite:///{db}", db


def directories(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT parent, name FROM folders").fetchall()
    conn.close()
    return {f"{parent}{name}/" for parent, name in rows}


def truly_empty(dataset: Path) -> set[str]:
    return {line.split("\t")[-1] for line in (dataset / "t").read_text().splitlines()}


NIGHT = ["--min-age", "0", "--max-delete-fraction", "1", "--fpr", "1e-6", "--json"]


def test_the_deletes_stop_at_the_deadline_and_the_next_night_finishes(
    dataset: Path, tmp_path: Path
) -> None:
    url, db = copy(dataset, tmp_path)
    before = directories(db)
    audit = tmp_path / "audit.jsonl"
    first = invoke(
        url, "run", *NIGHT, "--rate", "300", "--workers", "2", "--max-run-time", "4s",
        "--audit-log", str(audit), "--metrics-file", str(tmp_path / "m.prom"),
    )  # fmt: skip
    assert first.exit_code == 0, first.output
    clean = json.loads(first.stdout)["clean"]
    deadline = clean["deadline"]
    assert deadline["reached"] and not deadline["before_deletes"]
    requested = clean["delete_requested_dirs"]
    assert requested > 0 and deadline["left_dirs"] > 0
    # What stopped is exact: every delete issued is in the audit log, and nothing else went.
    entries = list(read_audit_log(audit))
    assert len(entries) == requested == clean["removed_dirs"]
    gone = before - directories(db)
    assert gone == {str(e["dir"]) for e in entries}
    assert gone <= truly_empty(dataset)
    # What is left is what the deadline said: the plan's rest and the slices not planned.
    assert (
        deadline["left_dirs"]
        == deadline["left_planned_dirs"] + deadline["left_unplanned_candidates"]
    )
    metrics = samples_of((tmp_path / "m.prom").read_text())
    assert metrics["dircleaner_deadline_reached"] == 1
    assert metrics["dircleaner_left_at_deadline_directories"] == deadline["left_dirs"]
    assert metrics["dircleaner_deadline_timestamp_seconds"] == pytest.approx(
        deadline["at_us"] / 1e6
    )
    assert metrics["dircleaner_last_run_success"] == 1

    # The next night resumes the same generation, with its T, and finishes.
    second = invoke(url, "run", *NIGHT, "--rate", "0", "--workers", "2", "--audit-log", str(audit))
    assert second.exit_code == 0, second.output
    report = json.loads(second.stdout)
    assert report["build"]["resumed"] is not None
    assert report["clean"]["delete_timestamp_us"] == clean["delete_timestamp_us"]
    assert report["clean"]["deadline"] is None
    gone = before - directories(db)
    assert gone <= truly_empty(dataset)  # precision 1.0
    assert len(gone) > 0.98 * len(truly_empty(dataset))
    assert {str(e["dir"]) for e in read_audit_log(audit)} == gone


def test_a_deadline_passed_during_the_sweep_deletes_nothing_and_says_so(
    dataset: Path, tmp_path: Path
) -> None:
    url, db = copy(dataset, tmp_path)
    before = directories(db)
    # The scans read 3,000 rows a second: the build and the sweep outlast the second given.
    args = [*NIGHT[:-1], "--scan-rate", "3000", "--max-run-time", "1s"]
    result = invoke(url, "run", *args, "--audit-log", str(tmp_path / "a.jsonl"))
    assert result.exit_code == 0, result.output
    assert "stopped at the deadline" in result.stdout
    assert "before any delete (the sweep and the re-check ran past it): nothing deleted" in (
        result.stdout
    )
    assert directories(db) == before
    # With time enough, the night does everything and says the deadline was not reached.
    args = ["--min-age", "0", "--max-delete-fraction", "1", "--rate", "0"]
    again = invoke(url, "run", *args, "--max-run-time", "1h", "--audit-log", str(tmp_path / "b"))
    assert again.exit_code == 0, again.output
    assert "not reached: every delete of the plan was issued" in again.stdout
    assert len(before - directories(db)) > 0.98 * len(truly_empty(dataset))


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["run", "--deadline", "25:00"], "no such time of day"),
        (["run", "--deadline", "tomorrow"], "invalid --deadline 'tomorrow'"),
        (["clean", "--deadline", "2020-01-01T00:00:00Z"], "has passed already"),
        (["run", "--max-run-time", "5"], "has no unit"),
        (["run", "--max-run-time", "0"], "--max-run-time must be more than 0"),
        (["clean", "--prefix", "a/", "--max-run-time", "1h"], "--max-run-time does not apply"),
        (["clean", "--changed", "--deadline", "06:00"], "--deadline does not apply"),
    ],
)
def test_a_bad_window_is_a_usage_error(tmp_path: Path, args: list[str], fragment: str) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    assert invoke(url, "import-keys", "-", input="a/b/c\n").exit_code == 0
    result = invoke(url, *args)
    assert result.exit_code == 2, result.output
    assert fragment in result.output


def test_dask_tasks_stop_at_the_deadline_and_the_next_night_finishes(
    dataset: Path, tmp_path: Path
) -> None:
    from tests.daskcluster import LoopbackCluster

    url, db = copy(dataset, tmp_path)
    before = directories(db)
    audit = tmp_path / "audit.jsonl"
    cluster = LoopbackCluster(tmp_path, workers=2)
    try:
        cluster.wait_for_workers(2)
        on_dask = ["--scheduler", cluster.address, "--audit-log", str(audit)]
        first = invoke(url, "run", *NIGHT, "--rate", "300", "--max-run-time", "5s", *on_dask)
        assert first.exit_code == 0, first.output
        clean = json.loads(first.stdout)["clean"]
        assert clean["deadline"]["reached"] and clean["deadline"]["left_dirs"] > 0
        assert len(list(read_audit_log(audit))) == clean["delete_requested_dirs"]
        second = invoke(url, "run", *NIGHT, "--rate", "0", *on_dask)
        assert second.exit_code == 0, second.output
        assert json.loads(second.stdout)["build"]["resumed"] is not None
    finally:
        cluster.close()
    gone = before - directories(db)
    assert gone <= truly_empty(dataset)
    assert len(gone) > 0.98 * len(truly_empty(dataset))


def test_a_dry_run_has_no_deadline_to_meet(dataset: Path, tmp_path: Path) -> None:
    url, _db = copy(dataset, tmp_path)
    result = invoke(url, "run", "--dry-run", *NIGHT, "--max-run-time", "1s", "--scan-rate", "3000")
    assert result.exit_code == 0, result.output
    clean = json.loads(result.stdout)["clean"]
    assert clean["deadline"] is None
    assert clean["plan"]["directories"] > 0.45 * DIRS  # planned in full, past the second
