"""build, sweep, clean, run: the job's commands."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

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
    NOT_WITH_PREFIX,
    ONLY_WITH_PREFIX,
    bucket_option,
    build_config,
    build_options,
    clean_config,
    clean_options,
    json_option,
    metrics_option,
    open_workers,
    parse_shard,
    prefix_clean_config,
    prefix_options,
    refuse_given,
    scan_rate_option,
    scheduler_option,
    shard_option,
    store_audit_log,
    sweep_config,
    sweep_options,
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
from dircleaner.errors import UsageError
from dircleaner.job.prefix import run_prefix_clean
from dircleaner.paths import dir_of_row
from dircleaner.pipeline.guards import check_scan_consistency
from dircleaner.store.base import require_bucket

if TYPE_CHECKING:
    from dircleaner.job.run import CleanConfig
    from dircleaner.store.base import Store
    from dircleaner.workers.base import Workers

# The build and the store-wide job (numpy, the filter modules) are imported in the commands
# that run them: `clean --prefix` starts without them.


@click.command()
@build_options
@bucket_option
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
def build(ctx: click.Context, /, as_json: bool, shard: str | None, **params: Any) -> None:
    """Pass 1: scan object partitions into a Bloom filter and store it.

    \b
    Example:
      dircleaner --store sqlite:///meta.db build --fpr 0.001
    """
    from dircleaner.pipeline.build import build_filter

    progress = TerminalProgress()
    with obj(ctx).open(writes=True) as store, workers_for(params) as workers:
        warn_if_bucket_missing(store, params["bucket"])
        config = build_config(params, parse_shard(shard))
        result = build_filter(store, config, progress, workers=workers)
    progress.close()
    phases = {"build": round(result.seconds, 3)}
    scans = {"build": result.scan}
    write_metrics(ctx, RunMetrics(build=result, phase_seconds=phases, scans=scans), success=True)
    emit(build_summary(result), build_lines(result), as_json)


@click.command("sweep")
@sweep_options
@bucket_option
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
    ctx: click.Context, /, as_json: bool, shard: str | None, out: str | None, **params: Any
) -> None:
    """Pass 2: list the directories absent from the filter (deletes nothing).

    \b
    Example:
      dircleaner --store sqlite:///meta.db sweep --out candidates.txt
    """
    from dircleaner.job.run import run_sweep

    if out == "-" and as_json:
        raise UsageError("--json and --out - both write to stdout: give --out a file")
    progress = TerminalProgress()
    bucket = params["bucket"]
    with obj(ctx).open() as store, workers_for(params) as workers:
        warn_if_bucket_missing(store, bucket)
        report = run_sweep(store, sweep_config(params, parse_shard(shard)), progress, workers)
    progress.close()
    if out is not None:
        # As list-dirs: BUCKET<TAB>PATH, or only the PATH when --bucket says which bucket.
        with click.open_file(out, "w", encoding="utf-8") as stream:
            for row in report.result.candidate_rows():
                path = dir_of_row(row.parent, row.name)
                stream.write((path if bucket is not None else f"{row.bucket}\t{path}") + "\n")
    totals = report.result.totals()
    phases = {"sweep": round(totals.seconds, 3)}
    scans = {"sweep": report.scan}
    write_metrics(ctx, RunMetrics(sweep=totals, phase_seconds=phases, scans=scans), success=True)
    if out != "-":
        emit(sweep_summary(report), sweep_lines(report), as_json)


@click.command()
@sweep_options
@clean_options
@prefix_options
@bucket_option
@workers_option
@scan_rate_option
@scheduler_option
@shard_option
@json_option
@metrics_option
@click.pass_context
def clean(ctx: click.Context, /, as_json: bool, shard: str | None, **params: Any) -> None:
    """Sweep with the newest stored filter and delete the empty directories, safely.

    With --prefix, clean one subtree now (after a mass delete): walk the folder index under
    PREFIX, check each directory's objects, and delete the empty ones (no filter is used).

    \b
    Example:
      dircleaner --store sqlite:///meta.db clean --dry-run
      dircleaner --store sqlite:///meta.db clean --prefix logs/2025/ --bucket b
    """
    if params["prefix"] is not None:
        refuse_given(ctx, NOT_WITH_PREFIX, "with --prefix")
        _clean_prefix(ctx, TerminalProgress(), as_json, params)
        return
    refuse_given(ctx, ONLY_WITH_PREFIX, "without --prefix")
    progress = TerminalProgress()
    from dircleaner.job.run import run_clean

    config = clean_config(params, parse_shard(shard))
    with store_to_clean(ctx, params, config) as (store, config, pool):
        report = run_clean(store, config, progress, workers=pool)
    progress.close()
    known = store.rows_removed is not None
    lines = clean_lines(report, params["audit_log"], params["min_age"])
    metrics = RunMetrics.of_clean(report, known)
    _end(ctx, clean_summary(report, known), lines, metrics, report.would_be_refused, as_json)


@click.command()
@build_options
@clean_options
@bucket_option
@workers_option
@scan_rate_option
@scheduler_option
@json_option
@metrics_option
@click.pass_context
def run(ctx: click.Context, /, as_json: bool, **params: Any) -> None:
    """The nightly job: build + sweep + clean (never prompts).

    \b
    Example:
      dircleaner --store sqlite:///meta.db run --fpr 0.001 --rate 500
    """
    from dircleaner.job.run import run_job

    if params["dry_run"] and params["scheduler"] is not None:
        # Checked before connecting: the library refuses it too, once the cluster is up.
        raise UsageError(
            "run --dry-run keeps its filter in memory, where a cluster's workers cannot load"
            " it: run it without --scheduler (and DIRCLEANER_SCHEDULER)"
        )
    progress = TerminalProgress()
    whole = parse_shard(None)
    config = clean_config(params, whole)
    with store_to_clean(ctx, params, config) as (store, config, pool):
        report = run_job(store, build_config(params, whole), config, progress, pool)
    progress.close()
    known = store.rows_removed is not None
    lines = run_build_lines(report) + clean_lines(
        report.clean, params["audit_log"], params["min_age"]
    )
    metrics = RunMetrics.of_run(report, known)
    _end(ctx, run_summary(report, known), lines, metrics, report.clean.would_be_refused, as_json)


@contextlib.contextmanager
def store_to_clean(
    ctx: click.Context, params: dict[str, Any], config: CleanConfig
) -> Iterator[tuple[Store, CleanConfig, Workers]]:
    """The store a clean deletes in (named first), checked before any worker starts: the
    scans' consistency (a usage error before any refusal), the bucket, and the audit log."""
    with obj(ctx).open(writes=not params["dry_run"]) as store:
        check_scan_consistency(store, config.verify)
        require_bucket(store, params["bucket"])
        config = replace(config, audit_log=store_audit_log(params, store))
        with workers_for(params) as pool:
            yield store, config, pool


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
def workers_for(params: dict[str, Any]) -> Iterator[Workers]:
    """The workers the options ask for; on a cluster, say where the tasks run and where to
    watch them before any of them starts."""
    workers = open_workers(params)
    try:
        if workers.outlives_client:
            where = f"dashboard {workers.dashboard}" if workers.dashboard else "no dashboard"
            note(f"{workers.description}; {where}")
            if workers.advice:
                note(f"note: {workers.advice}")
        yield workers
    finally:
        workers.close()


def _clean_prefix(
    ctx: click.Context,
    progress: TerminalProgress,
    as_json: bool,
    params: dict[str, Any],
) -> None:
    """``clean --prefix``: the exact subtree walk, then the nightly clean's plan and deletes."""
    config = prefix_clean_config(params)
    with obj(ctx).open(writes=not params["dry_run"]) as store:
        require_bucket(store, config.bucket)
        config = replace(config, audit_log=store_audit_log(params, store))
        report = run_prefix_clean(store, config, progress)
    progress.close()
    known = store.rows_removed is not None
    summary = prefix_summary(report, known)
    write_metrics(ctx, RunMetrics.of_prefix_clean(report, known), success=True)
    emit(summary, prefix_lines(report, params["audit_log"], params["min_age"]), as_json)
