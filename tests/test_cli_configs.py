"""cli/configs.py: the job commands' option values become the library's configs, typed."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from dircleaner.cli import cli
from dircleaner.cli.configs import (
    BuildValues,
    CleanValues,
    DeleteValues,
    FilterChoiceValues,
    RunValues,
    ScanValues,
    SweepValues,
    clean_config,
    guard_config,
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
    ScanValues(bucket="b", workers=1, scan_rate=None, scheduler=None, slices=None), GuardConfig()
)

#: each job command's values, one field per parameter of its function
VALUES_OF: dict[str, type[BuildValues | SweepValues | CleanValues | RunValues]] = {
    "build": BuildValues,
    "sweep": SweepValues,
    "clean": CleanValues,
    "run": RunValues,
}


def given_nothing(command: str) -> dict[str, Any]:
    """What a command's function is given when no option is."""
    return cli.commands[command].make_context(command, [], resilient_parsing=True).params


def deletes(**changes: Any) -> DeleteValues:
    """The deletes' values clean and run are given when no option is, but ``changes``."""
    defaults = given_nothing("clean")
    return DeleteValues(**{**{f.name: defaults[f.name] for f in fields(DeleteValues)}, **changes})


def a_clean(**changes: Any) -> CleanConfig:
    """clean_config given what clean and run are given when no option is, but these."""
    return clean_config(SWEEP, deletes(**changes))


@pytest.mark.parametrize("command", sorted(VALUES_OF))
def test_a_commands_values_are_its_parameters_with_their_types(command: str) -> None:
    """``CleanValues.of(ctx)`` takes every parameter, typed as the function's signature says
    (the signature is what mypy checks and what click fills in)."""
    callback = cli.commands[command].callback
    assert callback is not None
    signature = inspect.signature(callback)
    parameters = {name: p.annotation for name, p in signature.parameters.items() if name != "ctx"}
    assert {f.name: f.type for f in fields(VALUES_OF[command])} == parameters


def test_a_command_without_a_guard_option_gets_the_guards_defaults() -> None:
    assert guard_config() == GuardConfig()
    assert guard_config(max_filter_age="90m", force=True) == GuardConfig(
        max_filter_age_s=5400.0, force=True
    )


def test_the_sweep_config_holds_each_option() -> None:
    guards = guard_config(max_delete_fraction=0.2)
    config = sweep_config(
        ScanValues(bucket=None, workers=2, scan_rate=10.0, scheduler=None, slices=None),
        guards,
        FilterChoiceValues(generation="g", max_filter_age="24h", shard="1/4"),
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
    assert RunValues(**given_nothing("run")).clean_config() == CleanConfig(
        sweep=sweep_config(
            ScanValues(bucket=None, workers=1, scan_rate=None, scheduler=None, slices=None),
            GuardConfig(),
        )
    )


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
        deletes(
            min_age="1h",
            max_tombstones_per_partition=9,
            max_rewrite_rows=0,
            grace_period=None,
            dry_run=True,
            rate=0.0,
            concurrency=4,
            audit_log=None,
            lease_ttl="2m",
        ),
        bucket=None,
        max_deletes=7,
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
