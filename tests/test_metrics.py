"""Prometheus textfile metrics: the format node_exporter reads, written on success and failure."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from dircleaner.cli.metrics import RunMetrics, render
from dircleaner.pipeline.delete import DeleteStats
from dircleaner.pipeline.plan import PlanSummary
from dircleaner.pipeline.sweep import SweepTotals
from tests.helpers import invoke, run_labels, samples_of, write_lines

LABEL = r'[a-z]+="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"^dircleaner_[a-z_]+(\{{{LABEL}(,{LABEL})*\}})? -?[0-9.e+-]+$")


def parse(text: str) -> dict[str, float]:
    """The samples (by name and own labels, as ``samples_of``), each line checked to be
    the text format."""
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) dircleaner_[a-z_]+ ", line), line
        else:
            assert SAMPLE.match(line), line
    return samples_of(text)


def test_render_keeps_full_precision_and_labels_phases() -> None:
    metrics = RunMetrics(
        sweep=SweepTotals(swept_rows=12, partitions=3, candidates=5, seconds=0.25),
        plan=PlanSummary(deferred=7),
        cleaned=True,
        deleted=DeleteStats(directories=3, final_rate=123.45),
        phase_seconds={"build": 1.5, "sweep": 0.25},
    )
    values = parse(render(metrics, success=True, finished_at=1795329648.0))
    assert values["dircleaner_last_run_timestamp_seconds"] == 1795329648.0
    assert values["dircleaner_directories_scanned"] == 12
    assert values["dircleaner_candidates"] == 5
    assert values["dircleaner_delete_requested_directories"] == 3
    assert values["dircleaner_deferred_by_budget"] == 7
    assert values["dircleaner_delete_rate"] == 123.5  # as the summary rounds it
    assert values['dircleaner_phase_seconds{phase="build"}'] == 1.5
    assert values['dircleaner_phase_seconds{phase="sweep"}'] == 0.25
    # No build ran: no build figures; blind deletes: nothing about removed rows.
    assert "dircleaner_object_partitions_scanned" not in values
    assert "dircleaner_removed_directories" not in values
    assert "dircleaner_kept_written_after_delete_timestamp" not in values


def test_every_sample_carries_the_run_labels_escaped_before_its_own() -> None:
    metrics = RunMetrics(phase_seconds={"sweep": 0.25}, plan=PlanSummary(deferred=2))
    labels = {"command": "clean --prefix", "store": 'sqlite:///x "a"\\b\nc.db'}
    text = render(metrics, success=True, finished_at=1.0, labels=labels)
    shown = 'command="clean --prefix",store="sqlite:///x \\"a\\"\\\\b\\nc.db"'
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert samples == [
        f"dircleaner_last_run_success{{{shown}}} 1",
        f"dircleaner_last_run_refused{{{shown}}} 0",
        f"dircleaner_last_run_timestamp_seconds{{{shown}}} 1",
        f"dircleaner_deferred_by_budget{{{shown}}} 2",
        f"dircleaner_planned_directories{{{shown}}} 0",
        f"dircleaner_planned_deletes{{{shown}}} 0",
        f'dircleaner_phase_seconds{{{shown},phase="sweep"}} 0.25',
    ]
    assert run_labels(text) == {shown}
    parse(text)


def test_a_refusal_keeps_what_it_had_found_and_nothing_it_had_not() -> None:
    details = {"swept_dirs": 2008, "candidates": 469, "verified_nonempty": 3, "generation": "g"}
    found = parse(render(RunMetrics.of_refusal(details), success=False, finished_at=1.0))
    assert (found["dircleaner_directories_scanned"], found["dircleaner_candidates"]) == (2008, 469)
    assert found["dircleaner_verified_nonempty"] == 3
    assert parse(render(RunMetrics.of_refusal({"owner": "x"}), success=False, finished_at=1.0)) == {
        "dircleaner_last_run_success": 0.0,
        "dircleaner_last_run_refused": 0.0,
        "dircleaner_last_run_timestamp_seconds": 1.0,
    }


def test_a_clean_that_deleted_nothing_reports_zero_and_a_failed_run_nothing() -> None:
    nothing = parse(
        render(RunMetrics(plan=PlanSummary(), cleaned=True), success=True, finished_at=1.0)
    )
    assert nothing["dircleaner_delete_requested_directories"] == 0
    assert "dircleaner_removed_directories" not in nothing  # a store that cannot tell
    assert nothing["dircleaner_row_tombstones"] == 0
    failed = parse(render(RunMetrics(), success=False, finished_at=1.0))
    assert failed == {
        "dircleaner_last_run_success": 0.0,
        "dircleaner_last_run_refused": 0.0,
        "dircleaner_last_run_timestamp_seconds": 1.0,
    }


def test_run_writes_metrics_and_a_refusal_marks_the_run_failed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = [f"m/{i}/obj" for i in range(40)]
    invoke(url, "import-keys", str(write_lines(tmp_path / "k.txt", keys)))
    invoke(url, "delete-keys", str(write_lines(tmp_path / "d.txt", keys[:10])))
    metrics = tmp_path / "textfile" / "dircleaner.prom"
    result = invoke(
        url,
        "run",
        "--min-age",
        "0",
        "--max-delete-fraction",
        "1",
        "--metrics-file",
        str(metrics),
        "--audit-log",
        str(tmp_path / "a.jsonl"),
    )
    assert result.exit_code == 0, result.output
    values = parse(metrics.read_text())
    assert values["dircleaner_last_run_success"] == 1
    assert values["dircleaner_last_run_refused"] == 0
    assert values["dircleaner_directories_scanned"] == 41
    assert values["dircleaner_delete_requested_directories"] == 10
    assert values["dircleaner_removed_directories"] == 10
    assert values["dircleaner_candidates"] == 10
    # m/4/ … m/9/ are adjacent in clustering order (after m/39/): one range; 0, 1, 2, 3: rows.
    assert values["dircleaner_range_tombstones"] == 1
    assert values["dircleaner_row_tombstones"] == 4

    invoke(url, "delete-keys", str(write_lines(tmp_path / "d2.txt", keys[10:20])))
    result = invoke(
        url, "run", "--min-age", "0", "--max-delete-fraction", "0", "--metrics-file", str(metrics)
    )
    assert result.exit_code == 3
    refused = parse(metrics.read_text())
    assert refused["dircleaner_last_run_success"] == 0
    assert refused["dircleaner_last_run_refused"] == 1
    # The backlog behind the refusal stays visible: what the refused run swept and found.
    assert refused["dircleaner_directories_scanned"] == 31
    assert refused["dircleaner_candidates"] == 10
    assert refused["dircleaner_verified_nonempty"] == 0
    assert "dircleaner_delete_requested_directories" not in refused  # it deleted nothing
    # A dry run whose real run would be refused says so too (it exits 3 after its plan).
    result = invoke(
        url,
        "run",
        "--dry-run",
        "--min-age",
        "0",
        "--max-delete-fraction",
        "0",
        "--metrics-file",
        str(metrics),
    )
    assert result.exit_code == 3
    assert parse(metrics.read_text())["dircleaner_last_run_refused"] == 1


def _dataset(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = [f"m/{i}/obj" for i in range(40)]
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k.txt", keys))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "d.txt", keys[:2]))).exit_code == 0
    return url


def test_the_file_is_readable_by_node_exporter_and_honours_the_umask(tmp_path: Path) -> None:
    url = _dataset(tmp_path)
    metrics = tmp_path / "dircleaner.prom"
    metrics.write_text("old\n")
    metrics.chmod(0o644)
    audit = str(tmp_path / "a.jsonl")
    old = os.umask(0o022)
    try:
        result = invoke(url, "run", "--metrics-file", str(metrics), "--audit-log", audit)
        assert result.exit_code == 0, result.output
        assert stat.S_IMODE(metrics.stat().st_mode) == 0o644
        os.umask(0o027)
        invoke(url, "run", "--metrics-file", str(metrics), "--audit-log", audit)
        assert stat.S_IMODE(metrics.stat().st_mode) == 0o640
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir() if "prom" in p.name) == ["dircleaner.prom"]


def test_an_unexpected_exception_still_marks_the_run_failed(tmp_path: Path) -> None:
    url = _dataset(tmp_path)
    metrics = tmp_path / "dircleaner.prom"
    ok = invoke(url, "run", "--metrics-file", str(metrics), "--audit-log", str(tmp_path / "a"))
    assert ok.exit_code == 0
    assert parse(metrics.read_text())["dircleaner_last_run_success"] == 1
    (tmp_path / "file").write_text("")  # its audit log cannot be created: not a library error
    audit = str(tmp_path / "file" / "audit.jsonl")
    args = ["--min-age", "0", "--metrics-file", str(metrics), "--audit-log", audit]
    result = invoke(url, "run", *args)
    assert result.exit_code != 0
    assert parse(metrics.read_text())["dircleaner_last_run_success"] == 0


@pytest.mark.parametrize(
    "bad",
    [
        ("run", "--min-age", "bogus"),  # refused by our own parsing
        ("run", "--rate", "abc"),  # refused by click's
        ("run", "--workers", "1000"),  # refused by an option's own check
        ("clean", "--prefix", "a/", "--shard", "0/2"),
    ],
)
def test_a_run_refused_for_its_options_is_a_failed_run(
    tmp_path: Path, bad: tuple[str, ...]
) -> None:
    """A cron line edited wrong fails every night: monitoring must see it, not last week's 1."""
    url = _dataset(tmp_path)
    metrics = tmp_path / "dircleaner.prom"
    ok = invoke(url, "run", "--metrics-file", str(metrics), "--audit-log", str(tmp_path / "a"))
    assert parse(metrics.read_text())["dircleaner_last_run_success"] == 1, ok.output
    result = invoke(url, *bad, "--metrics-file", str(metrics))
    assert result.exit_code == 2, result.output
    assert parse(metrics.read_text())["dircleaner_last_run_success"] == 0


def test_help_leaves_the_metrics_alone(tmp_path: Path) -> None:
    metrics = tmp_path / "dircleaner.prom"
    metrics.write_text("dircleaner_last_run_success 1\n")
    result = invoke(f"sqlite:///{tmp_path}/m.db", "run", "--metrics-file", str(metrics), "--help")
    assert result.exit_code == 0
    assert metrics.read_text() == "dircleaner_last_run_success 1\n"


def test_a_refusal_over_the_fraction_keeps_its_sample_plan_and_estimate() -> None:
    details: dict[str, object] = {
        "swept_dirs": 1000,
        "candidates": 640,
        "sample": {"candidates": 640, "sampled": 512, "holding_objects": 0},
        "plan": {
            "directories": 630,
            "partition_deletes": 10,
            "row_deletes": 200,
            "range_deletes": 5,
        },
        "estimated_delete_seconds": 0.2,
    }
    values = parse(render(RunMetrics.of_refusal(details), success=False, finished_at=1.0))
    assert values["dircleaner_candidates"] == 640
    assert values["dircleaner_planned_directories"] == 630
    assert values["dircleaner_planned_deletes"] == 215
    assert values["dircleaner_estimated_delete_seconds"] == 0.2
    assert values["dircleaner_candidates_sampled"] == 512
    assert values["dircleaner_candidates_sampled_holding_objects"] == 0
    assert values['dircleaner_candidates_look_like{verdict="backlog"}'] == 1
    assert values['dircleaner_candidates_look_like{verdict="broken_filter"}'] == 0
    # Refused before its sweep: nothing of the kind.
    bare = parse(render(RunMetrics.of_refusal({}), success=False, finished_at=1.0))
    assert not [name for name in bare if "candidates" in name or "planned" in name]


def test_the_night_s_deadline_and_what_it_left() -> None:
    from dircleaner.job.clean import NightEnd

    end = NightEnd(1_795_329_648_000_000, reached=True, left=1200, unplanned=34)
    values = parse(render(RunMetrics(night_end=end), success=True, finished_at=1.0))
    assert values["dircleaner_deadline_timestamp_seconds"] == 1795329648.0
    assert values["dircleaner_deadline_reached"] == 1
    assert values["dircleaner_left_at_deadline_directories"] == 1234
    assert "dircleaner_deadline_reached" not in parse(
        render(RunMetrics(), success=True, finished_at=1.0)
    )
