"""The job commands' option values turned into the library's frozen configs: a command's values
taken as one typed object (``CleanValues.of(ctx)``), made of the option groups it shares with
other commands, and one typed function per config (durations and paths as typed)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Self

import click

from dircleaner.errors import UsageError
from dircleaner.job.prefix import PrefixCleanConfig
from dircleaner.model import Shard
from dircleaner.paths import DEFAULT_BUCKET
from dircleaner.pipeline.deleterate import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.pipeline.prefix import normalise_prefix
from dircleaner.pipeline.spillfile import DEFAULT_PLAN_CHUNK, SpillConfig
from dircleaner.scanrate import ScanRate
from dircleaner.timeutil import parse_duration

if TYPE_CHECKING:
    # The store-wide job pulls in numpy and the filter modules: it is imported where a config
    # is built, so that `clean --prefix` starts without it.
    from dircleaner.job.changed import ChangedCleanConfig
    from dircleaner.job.clean import CleanConfig
    from dircleaner.job.sweep import SweepConfig
    from dircleaner.pipeline.build import BuildConfig
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


@dataclass(frozen=True, kw_only=True)
class ScanValues:
    """Which bucket a job command reads, in how many local processes or cluster tasks, how
    fast (``bucket_option``, ``workers_option``, ``scan_rate_option``, ``scheduler_option``)."""

    bucket: str | None
    workers: int
    scan_rate: float | None
    scheduler: str | None
    slices: int | None

    def scan(self) -> ScanRate:
        return ScanRate(rows_per_s=self.scan_rate)


@dataclass(frozen=True, kw_only=True)
class FilterBuildValues:
    """How the filter is built (``build_options``: build's and run's)."""

    fpr: float
    expected_dirs: int | None
    engine: str


@dataclass(frozen=True, kw_only=True)
class FilterChoiceValues:
    """Which stored filter a sweep uses, over which slice of the ring (``sweep_options`` and
    ``shard_option``: sweep's and clean's)."""

    generation: str | None
    max_filter_age: str
    shard: str | None


@dataclass(frozen=True, kw_only=True)
class DeleteValues:
    """How a clean deletes (``clean_options``: clean's, in each of its modes, and run's)."""

    min_age: str
    max_tombstones_per_partition: int | None
    max_rewrite_rows: int
    grace_period: str | None
    max_delete_fraction: float
    verify: bool
    dry_run: bool
    rate: float
    concurrency: int
    audit_log: str | None
    force: bool
    spill_dir: str | None
    spill_after: int
    lease_ttl: str

    def guards(self, max_filter_age: str | None = None) -> GuardConfig:
        return guard_config(
            max_delete_fraction=self.max_delete_fraction,
            max_filter_age=max_filter_age,
            force=self.force,
        )

    def throttle(self) -> ThrottleConfig:
        return ThrottleConfig(rate=self.rate, concurrency=self.concurrency)


class CommandValues:
    """The values of every option of one command, typed (a frozen dataclass of them)."""

    @classmethod
    def of(cls, ctx: click.Context) -> Self:
        """The values click converted, each to its option's type (a field per parameter:
        tests/test_cli_configs.py checks them against the command's signature)."""
        return cls(**ctx.params)


@dataclass(frozen=True, kw_only=True)
class BuildValues(CommandValues, FilterBuildValues, ScanValues):
    """``build``'s options."""

    shard: str | None
    build_generation: str | None
    as_json: bool

    def config(self) -> BuildConfig:
        return build_config(
            self, self, shard=parse_shard(self.shard), generation=self.build_generation
        )


@dataclass(frozen=True, kw_only=True)
class SweepValues(CommandValues, FilterChoiceValues, ScanValues):
    """``sweep``'s options."""

    out: str | None
    as_json: bool

    def config(self) -> SweepConfig:
        return sweep_config(self, guard_config(max_filter_age=self.max_filter_age), self)


@dataclass(frozen=True, kw_only=True)
class CleanValues(CommandValues, DeleteValues, FilterChoiceValues, ScanValues):
    """``clean``'s options, in each of its modes (the option table refused those given where
    they do not apply: the others hold their defaults)."""

    prefix: str | None
    max_deletes: int
    changed: bool
    settle: str
    as_json: bool

    def store_config(self) -> CleanConfig:
        """The store-wide clean's."""
        return clean_config(sweep_config(self, self.guards(self.max_filter_age), self), self)

    def prefix_config(self) -> PrefixCleanConfig:
        """``--prefix``'s: the subtree, the default bucket when --bucket is not given."""
        assert self.prefix is not None  # the mode --prefix chose
        return prefix_clean_config(
            self.prefix,
            self,
            bucket=self.bucket,
            max_deletes=self.max_deletes,
            scan_rate=self.scan_rate,
        )

    def changed_config(self) -> ChangedCleanConfig:
        """``--changed``'s: the churn night."""
        return changed_clean_config(self, bucket=self.bucket, settle=self.settle)


@dataclass(frozen=True, kw_only=True)
class RunValues(CommandValues, DeleteValues, FilterBuildValues, ScanValues):
    """``run``'s options: the build's and the clean's (every bucket's ring, the new filter)."""

    as_json: bool

    def build_config(self) -> BuildConfig:
        return build_config(self, self)

    def clean_config(self) -> CleanConfig:
        return clean_config(sweep_config(self, self.guards()), self)


def sweep_config(
    scan: ScanValues, guards: GuardConfig, choice: FilterChoiceValues | None = None
) -> SweepConfig:
    """Which filter a sweep uses, over which slice, how fast (sweep's, or a clean's sweep);
    ``choice`` None: the filter ``run`` has just built, over the whole ring."""
    from dircleaner.job.sweep import SweepConfig

    return SweepConfig(
        bucket=scan.bucket,
        shard=Shard() if choice is None else parse_shard(choice.shard),
        generation=None if choice is None else choice.generation,
        guards=guards,
        workers=scan.workers,
        scan=scan.scan(),
    )


def build_config(
    build: FilterBuildValues,
    scan: ScanValues,
    *,
    shard: Shard | None = None,
    generation: str | None = None,
) -> BuildConfig:
    """The build's config (``build``'s, or the one ``run`` builds first)."""
    from dircleaner.pipeline.build import BuildConfig

    return BuildConfig(
        fpr=build.fpr,
        expected_dirs=build.expected_dirs,
        engine=build.engine,
        generation=generation,
        bucket=scan.bucket,
        shard=shard or Shard(),
        workers=scan.workers,
        scan=scan.scan(),
    )


def clean_config(sweep: SweepConfig, deletes: DeleteValues) -> CleanConfig:
    """The store-wide clean's config (``clean``'s and ``run``'s); its audit log is None until
    the store is open, when --audit-log was not given (``store_audit_log``)."""
    from dircleaner.job.clean import CleanConfig

    return CleanConfig(
        sweep=sweep,
        min_age_s=parse_duration(deletes.min_age),
        max_tombstones_per_partition=deletes.max_tombstones_per_partition,
        verify=deletes.verify,
        dry_run=deletes.dry_run,
        throttle=deletes.throttle(),
        audit_log=_given_audit_log(deletes.audit_log),
        max_rewrite_rows=deletes.max_rewrite_rows,
        lease_ttl_s=_positive_duration(deletes.lease_ttl, "--lease-ttl"),
        grace_period_s=_optional_duration(deletes.grace_period),
        # A relative --spill-dir is where the command was started (a Dask worker's directory
        # is its own); without one, each host that runs a slice uses its own default.
        spill=SpillConfig(
            directory=None if deletes.spill_dir is None else Path(deletes.spill_dir).absolute(),
            memory_candidates=deletes.spill_after,
            # A chunk of the plan is never more than a process keeps in memory.
            plan_chunk=max(1, min(DEFAULT_PLAN_CHUNK, deletes.spill_after)),
        ),
    )


def prefix_clean_config(
    prefix: str,
    deletes: DeleteValues,
    *,
    bucket: str | None,
    max_deletes: int,
    scan_rate: float | None,
) -> PrefixCleanConfig:
    """The --prefix clean's config; its bucket is the default one when --bucket is not
    given."""
    return PrefixCleanConfig(
        prefix=normalise_prefix(prefix),
        bucket=bucket or DEFAULT_BUCKET,
        min_age_s=parse_duration(deletes.min_age),
        max_tombstones_per_partition=deletes.max_tombstones_per_partition,
        max_rewrite_rows=deletes.max_rewrite_rows,
        lease_ttl_s=_positive_duration(deletes.lease_ttl, "--lease-ttl"),
        grace_period_s=_optional_duration(deletes.grace_period),
        max_deletes=max_deletes,
        dry_run=deletes.dry_run,
        throttle=deletes.throttle(),
        audit_log=_given_audit_log(deletes.audit_log),
        scan=ScanRate(rows_per_s=scan_rate),
    )


def changed_clean_config(
    deletes: DeleteValues, *, bucket: str | None, settle: str
) -> ChangedCleanConfig:
    """The --changed night's config."""
    from dircleaner.job.changed import ChangedCleanConfig

    return ChangedCleanConfig(
        bucket=bucket,
        settle_s=parse_duration(settle),
        min_age_s=parse_duration(deletes.min_age),
        max_tombstones_per_partition=deletes.max_tombstones_per_partition,
        grace_period_s=_optional_duration(deletes.grace_period),
        guards=deletes.guards(),
        dry_run=deletes.dry_run,
        throttle=deletes.throttle(),
        audit_log=_given_audit_log(deletes.audit_log),
        lease_ttl_s=_positive_duration(deletes.lease_ttl, "--lease-ttl"),
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
