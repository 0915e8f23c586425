"""``--bulk`` on the command line (``cli/bulk.py``): a usage error on SQLite or with ``--bulk-via``
alone, and the summary of a load (the loads themselves are in ``test_cassandra_bulkload.py``)."""

from __future__ import annotations

from pathlib import Path

from dircleaner.cli.bulk import bulk_summary
from dircleaner.store.cassandra.bulkload import BulkLoadReport, WriteReport
from tests.helpers import invoke


def test_bulk_on_sqlite_or_bulk_via_alone_is_a_usage_error(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    result = invoke(f"sqlite:///{db}", "gen", "--dirs", "100", "--bulk")
    assert result.exit_code == 2 and "--bulk loads a Cassandra store" in result.stderr
    assert not db.exists()
    result = invoke(f"sqlite:///{db}", "gen", "--dirs", "100", "--bulk-via", "sstableloader")
    assert result.exit_code == 2 and "--bulk-via needs --bulk" in result.stderr


def test_the_bulk_summary_says_rows_sstables_and_both_phases() -> None:
    report = BulkLoadReport(
        via="sstableloader",
        write=WriteReport(
            rows={"k/objects": 600, "k/folders": 400},
            sstables=2,
            sstable_bytes=3 * 2**20,
            seconds=2.0,
            peak_rss=700 * 2**20,
        ),
        load_seconds=1.5,
    )
    summary, line = bulk_summary(report)
    assert line == (
        "bulk load: 1,000 rows written as 2 sstables (3.0 MiB) in 2.0s (500 rows/s),"
        " loaded by sstableloader in 1.5s"
    )
    assert summary["rows"] == 1000 and summary["writer_peak_rss_bytes"] == 700 * 2**20
