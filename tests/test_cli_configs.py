"""cli/configs.py: the job commands' option values become the library's configs, typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from dircleaner.cli.configs import (
    clean_config,
    guard_config,
    parse_shard,
    prefix_clean_config,
    store_audit_log,
    sweep_config,
)
from dircleaner.errors import UsageError
from dircleaner.job.clean import CleanConfig
from dircleaner.job.sweep import SweepConfig
from dircleaner.model import Shard
from dircleaner.paths import DEFAULT_BUCKET
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.scanrate import ScanRate
from dircleaner.store import open_store

SWEEP = sweep_config(
    bucket="b", shard=Shard(), generation=None, guards=GuardConfig(), workers=1, scan_rate=None
)


def a_clean(
    *,
    min_age: str = "10m",
    lease_ttl: str = "60s",
    grace_period: str | None = None,
    audit_log: str | None = None,
    rate: float = 1000.0,
    verify: bool = True,
) -> CleanConfig:
    """clean_config given what clean and run are given when no option is, but these."""
    return clean_config(
        SWEEP,
        min_age=min_age,
        max_tombstones_per_partition=None,
        max_rewrite_rows=100_000,
        grace_period=grace_period,
        verify=verify,
        dry_run=False,
        rate=rate,
        concurrency=32,
        audit_log=audit_log,
        lease_ttl=lease_ttl,
    )


def test_a_command_without_a_guard_option_gets_the_guards_defaults() -> None:
    assert guard_config() == GuardConfig()
    assert guard_config(max_filter_age="90m", force=True) == GuardConfig(
        max_filter_age_s=5400.0, force=True
    )


def test_the_sweep_config_holds_each_option() -> None:
    guards = guard_config(max_delete_fraction=0.2)
    config = sweep_config(
        bucket=None,
        shard=parse_shard("1/4"),
        generation="g",
        guards=guards,
        workers=2,
        scan_rate=10.0,
    )
    assert config == SweepConfig(
        shard=Shard(1, 4),
        generation="g",
        guards=GuardConfig(max_delete_fraction=0.2),
        workers=2,
        scan=ScanRate(rows_per_s=10.0),
    )


def test_the_clean_options_defaults_are_the_library_defaults() -> None:
    assert a_clean() == CleanConfig(sweep=SWEEP)


def test_the_clean_config_parses_durations_and_makes_the_audit_log_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = a_clean(grace_period="1d", audit_log="audit.jsonl", rate=5.0, verify=False)
    assert (config.min_age_s, config.lease_ttl_s, config.grace_period_s) == (600, 60, 86400)
    assert config.audit_log == tmp_path / "audit.jsonl"
    assert config.throttle == ThrottleConfig(rate=5.0, concurrency=32)
    assert not config.verify


def test_a_bad_value_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--lease-ttl must be more than 0"):
        a_clean(lease_ttl="0")
    with pytest.raises(UsageError, match="invalid duration 'soon'"):
        a_clean(min_age="soon")
    with pytest.raises(UsageError, match="--rate must be a finite number >= 0"):
        a_clean(rate=-1.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_the_library_configs_refuse_what_is_not_finite_too(bad: float) -> None:
    """The CLI refuses these first; a caller of the library gets the same answer, never a
    guard that a nan passes."""
    with pytest.raises(UsageError, match="--max-delete-fraction must be from 0 to 1"):
        GuardConfig(max_delete_fraction=bad)
    with pytest.raises(UsageError, match="--rate must be a finite number >= 0"):
        ThrottleConfig(rate=bad)
    with pytest.raises(UsageError, match="--scan-rate must be a finite number >= 0"):
        ScanRate(rows_per_s=bad)
    with pytest.raises(UsageError, match="slow-page threshold must be a finite number"):
        ScanRate(slow_page_s=bad)


def test_the_prefix_clean_takes_the_default_bucket_and_a_normalised_prefix() -> None:
    config = prefix_clean_config(
        "logs/2025",
        bucket=None,
        min_age="1h",
        max_tombstones_per_partition=9,
        max_rewrite_rows=0,
        grace_period=None,
        max_deletes=7,
        dry_run=True,
        rate=0.0,
        concurrency=4,
        audit_log=None,
        lease_ttl="2m",
        scan_rate=50.0,
    )
    assert (config.prefix, config.bucket, config.max_deletes) == ("logs/2025/", DEFAULT_BUCKET, 7)
    assert (config.min_age_s, config.lease_ttl_s, config.max_tombstones_per_partition) == (
        3600,
        120,
        9,
    )
    assert config.throttle == ThrottleConfig(rate=0.0, concurrency=4)
    assert config.scan == ScanRate(rows_per_s=50.0)
    assert config.dry_run and config.audit_log is None


def test_the_audit_log_is_the_given_one_else_the_stores_own(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        assert store_audit_log("mine.jsonl", store) == "mine.jsonl"
        default = Path(store_audit_log(None, store))
    assert default.parent.name == "dircleaner"
    assert default.name.startswith("audit-") and default.suffixes[-2:] == [".jsonl", ".gz"]
