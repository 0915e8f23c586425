"""build, sweep, clean, run: the job's commands."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from dircleaner.cli.configs import (
    BuildValues,
    CleanValues,
    RunValues,
    ScanValues,
    SweepValues,
    audit_log_path,
    store_audit_log,
)
from dircleaner.cli.context import (
    TerminalProgress,
    emit,
    note,
    obj,
    refused_without_json,
    verdict_keys,
    warn_if_bucket_missing,
    write_metrics,
)
from dircleaner.cli.metrics import RunMetrics
from dircleaner.cli.options import (
    bucket_option,
    build_options,
    changed_options,
    clean_options,
    json_option,
    metrics_option,
    prefix_options,
    scan_rate_option,
    scheduler_option,
    shard_option,
    sweep_options,
    window_of,
    window_options,
    workers_option,
)
from dircleaner.cli.report import (
    build_lines,
    build_summary,
    clean_lines,
    clean_summary,
    prefix_lines,
    prefix_summary,
    run_build_lines,
    run_summary,
    sweep_lines,
    sweep_summary,
)
from dircleaner.job.prefix import run_prefix_clean
from dircleaner.paths import dir_of_row
from dircleaner.pipeline.guards import check_scan_consistency
from dircleaner.store.base import require_bucket

if TYPE_CHECKING:
    from dircleaner.job.clean import CleanConfig
    from dircleaner.store.base import Store
    from dircleaner.workers.base import Workers

# The build and the store-wide job (numpy, the filter modules) are imported in the commands
# that run them: `clean --prefix` starts without them.


@click.command()
@build_options
@bucket_option()
@workers_option
@scan_rate_option
@scheduler_option
@shard_option
@click.option(
    "--generation",
    "build_generation",
    help="Contribute shards to this generation (hosts sharing a build; see 'filters new-id').",
)
@json_option
@metrics_option
@click.pass_context
def build(
    ctx: click.Context,
    /,
    fpr: float,
    expected_dirs: int | None,
    engine: str,
    bucket: str | None,
    workers: int,
    scan_rate: float | None,
    scheduler: str | None,
    slices: int | None,
    shard: str | None,
    build_generation: str | None,
    as_json: bool,
) -> None:
    """Pass 1: scan object partitions into a Bloom filter and store it.

    \b
    Example:
      dircleaner --store sqlite:///meta.db build --fpr 0.001
    """
    from dircleaner.pipeline.build import build_filter

    values = BuildValues.of(ctx)
    progress = TerminalProgress()
    with obj(ctx).open(writes=True) as store, workers_for(values) as pool:
        warn_if_bucket_missing(store, values.bucket)
        result = build_filter(store, values.config(), progress, workers=pool)
    progress.close()
    phases = {"build": round(result.seconds, 3)}
    scans = {"build": result.scan}
    write_metrics(ctx, RunMetrics(build=result, phase_seconds=phases, scans=scans), success=True)
    emit(build_summary(result), build_lines(result), values.as_json)


@click.command("sweep")
@sweep_options
@bucket_option()
@workers_option
@scan_rate_option
@scheduler_option
@shard_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write every candidate directory to this file ('-' for stdout): BUCKET<TAB>PATH"
    " lines, or only the PATH with --bucket (as list-dirs).",
)
@json_option
@metrics_option
@click.pass_context
def sweep_cmd(
    ctx: click.Context,
    /,
    generation: str | None,
    max_filter_age: str,
    bucket: str | None,
    workers: int,
    scan_rate: float | None,
    scheduler: str | None,
    slices: int | None,
    shard: str | None,
    out: str | None,
    as_json: bool,
) -> None:
    """Pass 2: list the directories absent from the filter (deletes nothing).

    \b
    Example:
      dircleaner --store sqlite:///meta.db sweep --out candidates.txt
    """
    from dircleaner.job.sweep import run_sweep

    values = SweepValues.of(ctx)
    progress = TerminalProgress()
    with obj(ctx).open() as store, workers_for(values) as pool:
        warn_if_bucket_missing(store, values.bucket)
        report = run_sweep(store, values.config(), progress, pool)
    progress.close()
    if values.out is not None:
        # As list-dirs: BUCKET<TAB>PATH, or only the PATH when --bucket says which bucket.
        with click.open_file(values.out, "w", encoding="utf-8") as stream:
            for row in report.result.candidate_rows():
                path = dir_of_row(row.parent, row.name)
                shown = path if values.bucket is not None else f"{row.bucket}\t{path}"
                stream.write(shown + "\n")
    totals = report.result.totals()
    phases = {"sweep": round(totals.seconds, 3)}
    scans = {"sweep": report.scan}
    write_metrics(ctx, RunMetrics(sweep=totals, phase_seconds=phases, scans=scans), success=True)
    if values.out != "-":
        emit(sweep_summary(report), sweep_lines(report), values.as_json)


@click.command()
@sweep_options
@clean_options
@window_options
@prefix_options
@changed_options
@bucket_option()
@workers_option
@scan_rate_option
@scheduler_option
@shard_option
@json_option
@metrics_option
@click.pass_context
def clean(
    ctx: click.Context,
    /,
    generation: str | None,
    max_filter_age: str,
    min_age: str,
    max_tombstones_per_partition: int | None,
    max_rewrite_rows: int,
    grace_period: str | None,
    max_delete_fraction: float,
    verify: bool,
    dry_run: bool,
    rate: float,
    concurrency: int,
    audit_log: str | None,
    force: bool,
    spill_dir: str | None,
    spill_after: int,
    lease_ttl: str,
    prefix: str | None,
    max_deletes: int,
    changed: bool,
    settle: str,
    bucket: str | None,
    workers: int,
    scan_rate: float | None,
    scheduler: str | None,
    slices: int | None,
    shard: str | None,
    as_json: bool,
) -> None:
    """Sweep with the newest stored filter and delete the empty directories, safely.

    With --prefix, clean one subtree now (after a mass delete): walk the folder index under
    PREFIX, check each directory's objects, and delete the empty ones (no filter is used).
    With --changed, the churn night: check only the directories the journal names.

    \b
    Example:
      dircleaner --store sqlite:///meta.db clean --dry-run
      dircleaner --store sqlite:///meta.db clean --prefix logs/2025/ --bucket b
      dircleaner --store sqlite:///meta.db clean --changed --settle 15m
    """
    values = CleanValues.of(ctx)
    if values.changed:
        from dircleaner.cli.changed import clean_changed

        clean_changed(ctx, values)
    elif values.prefix is not None:
        _clean_prefix(ctx, values)
    else:
        _clean_store(ctx, values)


@click.command()
@build_options
@clean_options
@window_options
@bucket_option()
@workers_option
@scan_rate_option
@scheduler_option
@json_option
@metrics_option
@click.pass_context
def run(
    ctx: click.Context,
    /,
    fpr: float,
    expected_dirs: int | None,
    engine: str,
    min_age: str,
    max_tombstones_per_partition: int | None,
    max_rewrite_rows: int,
    grace_period: str | None,
    max_delete_fraction: float,
    verify: bool,
    dry_run: bool,
    rate: float,
    concurrency: int,
    audit_log: str | None,
    force: bool,
    spill_dir: str | None,
    spill_after: int,
    lease_ttl: str,
    bucket: str | None,
    workers: int,
    scan_rate: float | None,
    scheduler: str | None,
    slices: int | None,
    as_json: bool,
) -> None:
    """The nightly job: build + sweep + clean (never prompts).

    \b
    Example:
      dircleaner --store sqlite:///meta.db run --fpr 0.001 --rate 500
    """
    from dircleaner.job.run import run_job

    values = RunValues.of(ctx)
    if values.dry_run and values.scheduler is not None:
        # The host's environment names the cluster the nightly job runs on (the documented
        # "try it by hand" sources that file): a dry run is run here instead (--scheduler
        # itself, or --slices, is refused before: the option table).
        note(
            "note: run --dry-run runs in this process, not on DIRCLEANER_SCHEDULER's cluster"
            " (its filter stays in memory, where the cluster's workers could not load it)"
        )
        values = replace(values, scheduler=None)
    progress = TerminalProgress()
    config = values.clean_config()
    with store_to_clean(ctx, config, values.audit_log, values) as (store, config, pool, shown):
        report = run_job(store, values.build_config(), config, progress, pool)
    progress.close()
    known = store.rows_removed is not None
    metrics = RunMetrics.of_run(report, known)
    lines = run_build_lines(report) + clean_lines(report.clean, shown, values.min_age)
    verdict = report.clean.would_be_refused
    _end(ctx, run_summary(report, known), lines, metrics, verdict, values.as_json)


@contextlib.contextmanager
def store_to_clean(
    ctx: click.Context, config: CleanConfig, audit_log: str | None, scan: ScanValues
) -> Iterator[tuple[Store, CleanConfig, Workers, str]]:
    """The store a clean deletes in (named first), checked before any worker starts: the
    scans' consistency (a usage error before any refusal), the bucket, and the audit log
    (--audit-log, else the store's default, as the report names it)."""
    with obj(ctx).open(writes=not config.dry_run) as store:
        check_scan_consistency(store, config.verify)
        require_bucket(store, config.sweep.bucket)
        shown = store_audit_log(audit_log, store)
        config = replace(config, audit_log=audit_log_path(shown), deadline=window_of(ctx))
        with workers_for(scan) as pool:
            yield store, config, pool, shown


def _end(
    ctx: click.Context,
    summary: dict[str, Any],
    lines: list[str],
    metrics: RunMetrics,
    verdict: str | None,
    as_json: bool,
) -> None:
    """The metrics, then the summary; exit 3 when a real run would have been refused."""
    write_metrics(ctx, metrics, success=verdict is None, refused=verdict is not None)
    emit({**summary, **verdict_keys(verdict)}, lines, as_json, ok=verdict is None)
    if verdict is not None:
        raise refused_without_json(verdict)


@contextlib.contextmanager
def workers_for(scan: ScanValues) -> Iterator[Workers]:
    """The workers --workers, --scheduler and --slices ask for; on a cluster, say where the
    tasks run and where to watch them before any of them starts."""
    pool = open_workers(scan)
    try:
        if pool.outlives_client:
            where = f"dashboard {pool.dashboard}" if pool.dashboard else "no dashboard"
            note(f"{pool.description}; {where}")
            if pool.advice:
                note(f"note: {pool.advice}")
        yield pool
    finally:
        pool.close()


def open_workers(scan: ScanValues) -> Workers:
    """The mechanism --workers, --scheduler and --slices ask for: a Dask cluster's tasks, or
    local processes (the option table refused those that do not go together)."""
    if scan.scheduler is None:
        from dircleaner.workers.base import LocalWorkers

        return LocalWorkers(scan.workers)
    from dircleaner.workers.daskcluster import DaskWorkers

    return DaskWorkers(scan.scheduler, scan.slices)


def _clean_store(ctx: click.Context, values: CleanValues) -> None:
    """The store-wide ``clean``: a sweep with the stored filter, then the plan and deletes."""
    from dircleaner.job.clean import run_clean

    progress = TerminalProgress()
    config = values.store_config()
    with store_to_clean(ctx, config, values.audit_log, values) as (store, config, pool, shown):
        report = run_clean(store, config, progress, workers=pool)
    progress.close()
    known = store.rows_removed is not None
    metrics = RunMetrics.of_clean(report, known)
    lines = clean_lines(report, shown, values.min_age)
    verdict = report.would_be_refused
    _end(ctx, clean_summary(report, known), lines, metrics, verdict, values.as_json)


def _clean_prefix(ctx: click.Context, values: CleanValues) -> None:
    """``clean --prefix``: the exact subtree walk, then the nightly clean's plan and deletes."""
    progress = TerminalProgress()
    config = values.prefix_config()
    with obj(ctx).open(writes=not config.dry_run) as store:
        require_bucket(store, config.bucket)
        shown = store_audit_log(values.audit_log, store)
        config = replace(config, audit_log=audit_log_path(shown))
        report = run_prefix_clean(store, config, progress)
    progress.close()
    known = store.rows_removed is not None
    summary = prefix_summary(report, known)
    write_metrics(ctx, RunMetrics.of_prefix_clean(report, known), success=True)
    emit(summary, prefix_lines(report, shown, values.min_age), values.as_json)
