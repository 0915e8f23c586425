"""The job commands' option values turned into the library's frozen configs: one typed function
per config, each taking the values a command was given (durations and paths as typed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from dircleaner.errors import UsageError
from dircleaner.job.prefix import PrefixCleanConfig
from dircleaner.model import Shard
from dircleaner.paths import DEFAULT_BUCKET
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.pipeline.prefix import normalise_prefix
from dircleaner.pipeline.spillfile import (
    DEFAULT_MEMORY_CANDIDATES,
    DEFAULT_PLAN_CHUNK,
    SpillConfig,
)
from dircleaner.scanrate import ScanRate
from dircleaner.timeutil import parse_duration

if TYPE_CHECKING:
    # The store-wide job pulls in numpy and the filter modules: it is imported where a config
    # is built, so that `clean --prefix` starts without it.
    from dircleaner.job.changed import ChangedCleanConfig
    from dircleaner.job.clean import CleanConfig
    from dircleaner.job.sweep import SweepConfig
    from dircleaner.store.base import Store


def parse_shard(text: str | None) -> Shard:
    """``i/n`` → Shard(i, n); None → the whole ring."""
    if text is None:
        return Shard()
    try:
        index, count = (int(part) for part in text.split("/"))
        return Shard(index, count)
    except ValueError as exc:
        raise UsageError(f"invalid --shard {text!r} (expected i/n with 0 <= i < n)") from exc


def guard_config(
    *,
    max_delete_fraction: float = GuardConfig.max_delete_fraction,
    max_filter_age: str | None = None,
    force: bool = False,
) -> GuardConfig:
    """--max-delete-fraction, --max-filter-age, --force (a command without one: its default)."""
    return GuardConfig(
        max_delete_fraction=max_delete_fraction,
        max_filter_age_s=(
            GuardConfig.max_filter_age_s
            if max_filter_age is None
            else parse_duration(max_filter_age)
        ),
        force=force,
    )


def sweep_config(
    *,
    bucket: str | None,
    shard: Shard,
    generation: str | None,
    guards: GuardConfig,
    workers: int,
    scan_rate: float | None,
) -> SweepConfig:
    """Which filter a sweep uses, over which slice, how fast (a clean's sweep, or sweep's)."""
    from dircleaner.job.sweep import SweepConfig

    return SweepConfig(
        bucket=bucket,
        shard=shard,
        generation=generation,
        guards=guards,
        workers=workers,
        scan=ScanRate(rows_per_s=scan_rate),
    )


def clean_config(
    sweep: SweepConfig,
    *,
    min_age: str,
    max_tombstones_per_partition: int | None,
    max_rewrite_rows: int,
    grace_period: str | None,
    verify: bool,
    dry_run: bool,
    rate: float,
    concurrency: int,
    audit_log: str | None,
    lease_ttl: str,
    spill_dir: str | None = None,
    spill_after: int = DEFAULT_MEMORY_CANDIDATES,
) -> CleanConfig:
    """The store-wide clean's config; its audit log is None until the store is open, when
    --audit-log was not given (``store_audit_log``)."""
    from dircleaner.job.clean import CleanConfig

    return CleanConfig(
        sweep=sweep,
        min_age_s=parse_duration(min_age),
        max_tombstones_per_partition=max_tombstones_per_partition,
        verify=verify,
        dry_run=dry_run,
        throttle=ThrottleConfig(rate=rate, concurrency=concurrency),
        audit_log=_given_audit_log(audit_log),
        max_rewrite_rows=max_rewrite_rows,
        lease_ttl_s=_positive_duration(lease_ttl, "--lease-ttl"),
        grace_period_s=_optional_duration(grace_period),
        # A relative --spill-dir is where the command was started (a Dask worker's directory
        # is its own); without one, each host that runs a slice uses its own default.
        spill=SpillConfig(
            directory=None if spill_dir is None else Path(spill_dir).absolute(),
            memory_candidates=spill_after,
            # A chunk of the plan is never more than a process keeps in memory.
            plan_chunk=max(1, min(DEFAULT_PLAN_CHUNK, spill_after)),
        ),
    )


def prefix_clean_config(
    prefix: str,
    *,
    bucket: str | None,
    min_age: str,
    max_tombstones_per_partition: int | None,
    max_rewrite_rows: int,
    grace_period: str | None,
    max_deletes: int,
    dry_run: bool,
    rate: float,
    concurrency: int,
    audit_log: str | None,
    lease_ttl: str,
    scan_rate: float | None,
) -> PrefixCleanConfig:
    """The --prefix clean's config (the options it refuses are checked by the command); its
    bucket is the default one when --bucket is not given."""
    return PrefixCleanConfig(
        prefix=normalise_prefix(prefix),
        bucket=bucket or DEFAULT_BUCKET,
        min_age_s=parse_duration(min_age),
        max_tombstones_per_partition=max_tombstones_per_partition,
        max_rewrite_rows=max_rewrite_rows,
        lease_ttl_s=_positive_duration(lease_ttl, "--lease-ttl"),
        grace_period_s=_optional_duration(grace_period),
        max_deletes=max_deletes,
        dry_run=dry_run,
        throttle=ThrottleConfig(rate=rate, concurrency=concurrency),
        audit_log=_given_audit_log(audit_log),
        scan=ScanRate(rows_per_s=scan_rate),
    )


def changed_clean_config(
    *,
    bucket: str | None,
    settle: str,
    min_age: str,
    max_tombstones_per_partition: int | None,
    grace_period: str | None,
    max_delete_fraction: float,
    force: bool,
    dry_run: bool,
    rate: float,
    concurrency: int,
    audit_log: str | None,
    lease_ttl: str,
) -> ChangedCleanConfig:
    """The --changed night's config (the options it refuses are checked by the command)."""
    from dircleaner.job.changed import ChangedCleanConfig

    return ChangedCleanConfig(
        bucket=bucket,
        settle_s=parse_duration(settle),
        min_age_s=parse_duration(min_age),
        max_tombstones_per_partition=max_tombstones_per_partition,
        grace_period_s=_optional_duration(grace_period),
        guards=guard_config(max_delete_fraction=max_delete_fraction, force=force),
        dry_run=dry_run,
        throttle=ThrottleConfig(rate=rate, concurrency=concurrency),
        audit_log=_given_audit_log(audit_log),
        lease_ttl_s=_positive_duration(lease_ttl, "--lease-ttl"),
    )


def default_audit_log(scope: str) -> str:
    """``$XDG_STATE_HOME/dircleaner/audit-<store>.jsonl.gz``, else under ``~/.local/state``: a
    nightly job's state belongs in one place, not in whatever directory cron started it in; one
    file per store, so that no store's restore can read another's deletes."""
    from dircleaner.audit import audit_log_name

    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(state) / "dircleaner" / audit_log_name(scope))


def store_audit_log(given: str | None, store: Store) -> str:
    """--audit-log as given, or the store's default one (as the report names it)."""
    from dircleaner.audit import audit_scope

    return given if given is not None else default_audit_log(audit_scope(store))


def audit_log_path(text: str) -> Path:
    """The audit log where the command was started: a Dask task (``--scheduler``) writes it
    from a worker, whose directory is its own, so a relative path is made absolute here."""
    return Path(text).absolute()


def _given_audit_log(text: str | None) -> Path | None:
    """--audit-log if given; else None until the store is open (``store_audit_log``)."""
    return None if text is None else audit_log_path(text)


def _optional_duration(text: str | None) -> float | None:
    return parse_duration(text) if text is not None else None


def _positive_duration(text: str, option: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise UsageError(f"{option} must be more than 0")
    return seconds
