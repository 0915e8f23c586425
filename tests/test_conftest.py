"""CI's summary shows 0 skipped: what does not apply is not collected rather than skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collected(*args: str, faults: bool = False) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "DIRCLEANER_FAULTS"}
    if faults:
        env["DIRCLEANER_FAULTS"] = "1"
    command = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *args]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_two_bucket_cases_are_not_collected_for_a_single_bucket_mapping() -> None:
    ids = collected("tests/test_cassandra_store.py", "tests/test_sqlite_store.py")
    two_bucket_cases = {"test_bucket_filter_on_scans", "test_estimate_per_bucket"}
    for cls in ("TestSqlite", "TestCassandra"):
        assert two_bucket_cases <= {i.split("::")[-1] for i in ids if f"::{cls}::" in i}
    single = {i.split("::")[-1] for i in ids if "::TestCassandraCustomMapping::" in i}
    assert "test_empty_store" in single
    assert not two_bucket_cases & single


def test_fault_tests_are_collected_only_for_make_test_faults() -> None:
    assert not [i for i in collected("tests") if i.startswith("tests/faults/")]
    faults = collected("tests/faults", faults=True)
    assert faults and all(i.startswith("tests/faults/") for i in faults)


def test_ci_runs_the_fault_tests_after_stopping_the_single_node() -> None:
    steps = [
        line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and line[0] != "#"
    ]
    assert steps[-3:] == ["make test", "scripts/cassandra stop", "make test-faults"]
