"""--scan-rate holds across workers: one process, several processes, Dask tasks; both backends.

Each pass reads a few thousand rows at a cap that makes it last a few seconds. The bounds are
generous (a busy machine only makes a scan slower): the rows read per second stay at or
under the cap (a scan that ignored it would read these rows in milliseconds) and above a
fraction of it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dircleaner.job.sweep import SweepConfig, run_sweep
from dircleaner.pipeline.build import BuildConfig, build_filter
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.scanrate import ScanRate, ScanStats
from dircleaner.store import open_store
from dircleaner.timeutil import now_us
from dircleaner.workers.base import LocalWorkers, Workers
from tests.helpers import invoke, samples_of, write_lines

OLD = now_us() - 10**10
KEYS = [f"s/{i % 11}/{i % 97}/{i}/o" for i in range(2000)]
#: folder rows: s/, 11 + 1067 directories below it, 2000 leaves
FOLDER_ROWS = 1 + 11 + 1067 + 2000
OBJECT_PARTITIONS = 2000
#: the cap, rows/s: each pass takes 1.3 to 2 s
CAP = 1500.0
#: over the cap by at most this much (the last page's rows are paid as it arrives)
OVER = 1.15
#: and not slower than this share of it
UNDER = 0.3


@dataclass
class Data:
    url: str
    bucket: str
    #: whether the store holds only this bucket's rows (a Cassandra keyspace is shared)
    alone: bool


@pytest.fixture(params=["sqlite", "cassandra"])
def data(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Data]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'meta.db'}"
        with open_store(url, create=True) as store:
            store.put_objects("default", KEYS, OLD)
        yield Data(url, "default", alone=True)
        return
    from tests.test_cassandra_end_to_end import _init_keyspace, forget_bucket

    url = _init_keyspace(request.getfixturevalue("cassandra_url"), "scancap")
    bucket = f"cap-{secrets.token_hex(4)}"
    with open_store(url) as store:
        store.put_objects(bucket, KEYS, OLD)
        try:
            yield Data(url, bucket, alone=False)
        finally:
            forget_bucket(store, bucket)  # type: ignore[arg-type]


def assert_capped(scan: ScanStats, rows: int, alone: bool) -> None:
    """The pass read its rows at the cap, within the generous bounds."""
    if alone:
        assert scan.rows == rows
    else:
        assert scan.rows >= rows  # the table's other buckets are read (and skipped) too
    assert scan.cap == pytest.approx(CAP)
    assert scan.rows / scan.seconds <= CAP * OVER, scan
    assert scan.rows / scan.seconds >= CAP * UNDER, scan
    assert scan.pages > 0 and scan.backoffs == 0


def build_and_sweep(data: Data, workers: Workers, worker_count: int = 1) -> None:
    rate = ScanRate(CAP)
    with open_store(data.url) as store:
        built = build_filter(
            store,
            BuildConfig(bucket=data.bucket, workers=worker_count, scan=rate),
            workers=workers,
        )
        assert_capped(built.scan, OBJECT_PARTITIONS, data.alone)
        swept = run_sweep(
            store,
            SweepConfig(
                bucket=data.bucket,
                generation=built.generation,
                guards=GuardConfig(max_delete_fraction=1.0),
                workers=worker_count,
                scan=rate,
            ),
            workers=workers,
        )
    assert swept.result.swept_rows == FOLDER_ROWS
    assert_capped(swept.scan, FOLDER_ROWS, data.alone)


@pytest.mark.parametrize("worker_count", [1, 2])
def test_the_cap_holds_for_local_workers(data: Data, worker_count: int) -> None:
    build_and_sweep(data, LocalWorkers(worker_count), worker_count)


def test_the_cap_holds_for_dask_tasks(data: Data, tmp_path: Path) -> None:
    from dircleaner.workers.daskcluster import DaskWorkers
    from tests.daskcluster import LoopbackCluster

    cluster = LoopbackCluster(tmp_path, workers=2)
    try:
        cluster.wait_for_workers(2)
        pool = DaskWorkers(cluster.address)
        try:
            assert pool.parallelism >= 2
            build_and_sweep(data, pool)
        finally:
            pool.close()
    finally:
        cluster.close()


def test_run_reports_each_scan_and_takes_the_cap_from_the_option(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    keys = write_lines(tmp_path / "keys", KEYS)
    assert invoke(url, "import-keys", str(keys)).exit_code == 0
    result = invoke(url, "run", "--scan-rate", str(CAP), "--workers", "2", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    build_scan, sweep_scan = summary["build"]["scan"], summary["clean"]["sweep"]["scan"]
    assert build_scan["rows"] == OBJECT_PARTITIONS
    assert sweep_scan["rows"] == FOLDER_ROWS
    for scan in (build_scan, sweep_scan):
        assert scan["cap_rows_per_s"] == CAP
        assert CAP * UNDER <= scan["rows_per_s"] <= CAP * OVER
        assert set(scan) >= {"mean_page_latency_s", "p99_page_latency_s", "backoffs"}
    text = invoke(url, "run", "--scan-rate", "0", "--dry-run")
    assert text.exit_code == 0, text.output
    assert "scan " in text.output and "rows/s (no cap)" in text.output
    assert "back-offs (pages over 1s" in text.output


def test_a_negative_scan_rate_is_refused(tmp_path: Path) -> None:
    result = invoke(f"sqlite:///{tmp_path / 'meta.db'}", "sweep", "--scan-rate", "-5")
    assert result.exit_code != 0
    assert "--scan-rate" in result.output


def test_the_prefix_walk_reads_at_the_cap(tmp_path: Path) -> None:
    from dircleaner.job.prefix import PrefixCleanConfig, run_prefix_clean

    url = f"sqlite:///{tmp_path / 'meta.db'}"
    with open_store(url, create=True) as store:
        store.put_objects("default", KEYS, OLD)
        config = PrefixCleanConfig(prefix="s/", dry_run=True, scan=ScanRate(CAP))
        report = run_prefix_clean(store, config)
    scan = report.walk.scan
    # Every directory under s/ probed once, and its folder rows read once.
    assert scan.rows == report.walk.directories + report.walk.folder_rows
    assert scan.rows > 2 * CAP
    assert CAP * UNDER <= scan.rows / scan.seconds <= CAP * OVER, scan


@pytest.mark.parametrize("worker_count", [1, 2])
def test_the_recheck_reads_at_the_cap_and_reports_its_rate(
    data: Data, worker_count: int, tmp_path: Path
) -> None:
    """The re-check's reads (one per candidate, at a quorum, and one of the folders partition
    of each candidate the filter holds) go through the same cap."""
    with open_store(data.url) as store:
        store.delete_objects(data.bucket, KEYS[::2], OLD)  # 1,000 leaf directories emptied
    metrics = tmp_path / "m.prom"
    result = invoke(
        data.url, "run", "--bucket", data.bucket, "--scan-rate", str(CAP),
        "--workers", str(worker_count), "--max-delete-fraction", "1", "--dry-run", "--json",
        "--metrics-file", str(metrics),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    clean = json.loads(result.stdout)["clean"]
    reads = clean["verify_reads"]
    assert clean["verified"] >= 1000
    # the folders reads are the filter's false positives under an absent directory: a few
    assert clean["verified"] <= reads["rows"] <= clean["verified"] * 1.05
    assert reads["cap_rows_per_s"] == pytest.approx(CAP)
    assert CAP * UNDER <= reads["rows_per_s"] <= CAP * OVER, reads
    exposed = samples_of(metrics.read_text())
    assert exposed['dircleaner_scan_rows{pass="verify"}'] == reads["rows"]
    assert exposed['dircleaner_scan_rows_per_second{pass="verify"}'] == reads["rows_per_s"]
    assert exposed['dircleaner_scan_rate_cap{pass="verify"}'] == CAP
