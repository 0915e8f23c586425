"""The options the commands share, each declared once (configs.py turns their values into the
library's typed configs)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from dircleaner.cli.context import note_json, note_metrics_file
from dircleaner.cli.values import Duration, FiniteFloat
from dircleaner.deadline import Deadline, night_end
from dircleaner.errors import UsageError
from dircleaner.filter import ENGINE_NAMES
from dircleaner.filter.sizing import DEFAULT_FPR
from dircleaner.job.orders import DEFAULT_MAX_REWRITE_ROWS
from dircleaner.job.prefix import DEFAULT_MAX_DELETES
from dircleaner.paths import DEFAULT_BUCKET
from dircleaner.pipeline.spillfile import DEFAULT_MEMORY_CANDIDATES
from dircleaner.timeutil import now_us, parse_duration

F = TypeVar("F", bound=Callable[..., Any])

#: where the audit log goes when --audit-log is not given (under $XDG_STATE_HOME)
AUDIT_LOG_DISPLAY = (
    "one file per store, named after it, audit-<store>.jsonl.gz in $XDG_STATE_HOME/dircleaner/"
    " (~/.local/state/dircleaner/ without XDG_STATE_HOME)"
)


def _apply(options: list[Callable[[F], F]]) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    is_eager=True,
    callback=note_json,
    help='Print a JSON summary (on an error or refusal: {"ok": false, "error": …}).',
)
metrics_option = click.option(
    "--metrics-file",
    type=click.Path(dir_okay=False),
    is_eager=True,
    expose_value=False,
    callback=note_metrics_file,
    help="Write Prometheus text-format metrics here (node_exporter textfile collector),"
    " labelled with the command and the store; its directory is checked writable before"
    " anything is done; on any failure (a bad option too) dircleaner_last_run_success 0.",
)


def bucket_option(
    help_text: str = "Only this bucket (default: every bucket).", default: str | None = None
) -> Callable[[F], F]:
    """--bucket, defined once: which bucket a command reads or cleans (None: every bucket), or,
    with a ``default`` (shown in the help), the bucket the keys a command writes belong to;
    ``help_text`` says what the bucket changes in the command's output."""
    if default is None:
        return click.option("--bucket", help=help_text)
    return click.option("--bucket", default=default, show_default=True, help=help_text)


#: worker processes allowed per core: more only contend for the same cores and connections
WORKERS_PER_CORE = 4


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _check_workers(_ctx: click.Context, _param: click.Parameter, value: int) -> int:
    cores = usable_cores()
    if value > WORKERS_PER_CORE * cores:
        raise UsageError(
            f"--workers {value} is more than {WORKERS_PER_CORE} per core"
            f" ({WORKERS_PER_CORE * cores} on {cores} cores): extra processes only contend;"
            f" try --workers {cores}"
        )
    return value


workers_option = click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    callback=_check_workers,
    help=f"Processes that scan slices of the ring in parallel (e.g. one per core; at most"
    f" {WORKERS_PER_CORE} per core).",
)
scheduler_option = _apply(
    [
        click.option(
            "--scheduler",
            envvar="DIRCLEANER_SCHEDULER",
            help="Run the slices as tasks on this Dask scheduler (tcp://host:8786) instead of"
            " local processes. Env: DIRCLEANER_SCHEDULER.",
        ),
        click.option(
            "--slices",
            type=click.IntRange(min=1),
            help="With --scheduler: slices of the ring, one task each (default: one per worker"
            " thread for a build, four per thread for a sweep or clean).",
        ),
    ]
)
scan_rate_option = click.option(
    "--scan-rate",
    type=FiniteFloat(min=0),
    default=None,
    help="Rows per second the scans may read, all workers and tasks together (0 = no cap;"
    " default: the store config's scan_rate, else 0). Either way a scan backs off while pages"
    " are slow or the cluster times out or is overloaded, and recovers gently.",
)
shard_option = click.option(
    "--shard", help="Only slice i of n of the token ring, e.g. 0/4 (default: all of it)."
)

build_options = _apply(
    [
        click.option(
            "--fpr",
            type=FiniteFloat(),
            default=DEFAULT_FPR,
            show_default=True,
            help="Target false-positive rate of the filter.",
        ),
        click.option(
            "--expected-dirs",
            type=int,
            help="Size the filter for this many directories (default: counted or estimated).",
        ),
        click.option(
            "--engine",
            type=click.Choice(sorted(ENGINE_NAMES)),
            default="mmh3",
            show_default=True,
            help="Filter engine; pybloom-live is the slow reference.",
        ),
    ]
)

sweep_options = _apply(
    [
        click.option("--generation", help="Filter generation to use (default: newest complete)."),
        click.option(
            "--max-filter-age",
            type=Duration(),
            default="24h",
            show_default=True,
            help="Refuse a filter older than this (e.g. 90m, 24h).",
        ),
    ]
)

clean_options = _apply(
    [
        click.option(
            "--min-age",
            type=Duration(),
            default="10m",
            show_default=True,
            help="Delete at (build start - this, with its unit: 10m, 90s): entries written later"
            " always survive.",
        ),
        click.option(
            "--max-tombstones-per-partition",
            type=click.IntRange(min=0),
            default=None,
            help=(
                "Our tombstones one live partition may hold within the folders table's grace"
                " period, over all runs (a row delete counts 1, a range delete 2); the rest is"
                " deferred. Default: half the cluster's tombstone_warn_threshold (500)."
            ),
        ),
        click.option(
            "--max-rewrite-rows",
            type=click.IntRange(min=0),
            default=DEFAULT_MAX_REWRITE_ROWS,
            show_default=True,
            help=(
                "Rewrite a live partition whose deletes exceed its budget when it has at most"
                " this many live rows to copy (0: never; the rest is deferred)."
            ),
        ),
        click.option(
            "--grace-period",
            type=Duration(),
            default=None,
            hidden=True,
            help="How long a tombstone counts (default: the table's gc_grace_seconds; 10d).",
        ),
        click.option(
            "--max-delete-fraction",
            type=FiniteFloat(0, 1),
            default=0.10,
            show_default=True,
            help="Refuse if more than this share of directories would go.",
        ),
        click.option(
            "--verify/--no-verify",
            default=True,
            show_default=True,
            help="Re-check each candidate's objects partition before deleting.",
        ),
        click.option("--dry-run", is_flag=True, help="Plan and report; delete nothing."),
        click.option(
            "--rate",
            type=FiniteFloat(min=0),
            default=1000.0,
            show_default=True,
            help="Deletes per second at most (0 = unlimited); starts lower and ramps up.",
        ),
        click.option(
            "--concurrency",
            type=click.IntRange(min=1),
            default=32,
            show_default=True,
            help=(
                "Bounds the delete requests in flight at once, per process: the next starts"
                " as one completes (a request deletes a row, a range, or on Cassandra up to 32"
                " partitions). Each group of that many requests is lease-checked, charged and"
                " audited before any of it is sent."
            ),
        ),
        click.option(
            "--audit-log",
            type=click.Path(dir_okay=False),
            help="Append every deleted directory here, kept across runs (JSON lines, written"
            " compressed when FILE ends in .gz)."
            f" Default: {AUDIT_LOG_DISPLAY}.",
        ),
        click.option("--force", is_flag=True, help="Override the safety guards (think twice)."),
        click.option(
            "--spill-dir",
            type=click.Path(file_okay=False),
            help="Where a slice's candidates go beyond what a process keeps in memory"
            f" ({DEFAULT_MEMORY_CANDIDATES:,} candidates), as files that vanish with the run."
            " Default: $DIRCLEANER_SPILL_DIR, else $XDG_STATE_HOME/dircleaner/spill"
            " (~/.local/state/dircleaner/spill), on the host that runs the slice.",
        ),
        click.option(
            "--spill-after",
            type=click.IntRange(min=0),
            default=DEFAULT_MEMORY_CANDIDATES,
            hidden=True,
            help="Candidates a process keeps in memory before a slice spills (tests lower it).",
        ),
        click.option(
            "--lease-ttl",
            type=Duration(),
            default="60s",
            hidden=True,
            help="How long the run lease outlives its last heartbeat (tests shorten it).",
        ),
    ]
)

prefix_options = _apply(
    [
        click.option(
            "--prefix",
            help=(
                "Clean only this directory and what is under it, now, by an exact walk (after a"
                " mass delete); 'logs/2025' means 'logs/2025/'. Uses --bucket (default"
                f" {DEFAULT_BUCKET!r}); no filter is read."
            ),
        ),
        click.option(
            "--max-deletes",
            type=click.IntRange(min=1),
            default=DEFAULT_MAX_DELETES,
            show_default=True,
            help="With --prefix: refuse (nothing deleted) a subtree of more directories.",
        ),
    ]
)

#: ``ctx.meta`` key: the night's end the window options resolved to (µs), once given
WINDOW = "dircleaner.window"


def _note_window(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Callback of --deadline and --max-run-time: the instant each asks for, resolved when the
    command starts (a deadline already past is a usage error now, before anything runs); with
    both, the earlier."""
    if value is None or ctx.resilient_parsing:
        return
    started = now_us()
    if param.name == "deadline":
        end = night_end(value, None, started)
    else:
        end = night_end(None, parse_duration(value), started)
    assert end is not None
    ctx.meta[WINDOW] = min(end, ctx.meta.get(WINDOW, end))


def window_of(ctx: click.Context) -> Deadline | None:
    """The night's end --deadline and --max-run-time ask for (None: neither was given)."""
    end = ctx.meta.get(WINDOW)
    return None if end is None else Deadline(end)


window_options = _apply(
    [
        click.option(
            "--max-run-time",
            type=Duration(),
            expose_value=False,
            callback=_note_window,
            help="Start no delete this long after the run began (e.g. 5h): the deletes in flight"
            " end, the rest is left for the next run, which resumes; exit 0 ('stopped at the"
            " deadline, N left'). The build and the sweep always finish.",
        ),
        click.option(
            "--deadline",
            expose_value=False,
            callback=_note_window,
            help="As --max-run-time, at a time: HH:MM (the next such local time, e.g. 06:00) or"
            " a full one (2026-11-27T06:00:00Z); with both, the earlier wins.",
        ),
    ]
)

changed_options = _apply(
    [
        click.option(
            "--changed",
            is_flag=True,
            help="The churn night: check only the directories the journal names (the parents"
            " of deleted objects, and theirs once emptied), exactly, and delete the empty ones"
            " (no filter is used; the weekly full night is the safety net).",
        ),
        click.option(
            "--settle",
            type=Duration(),
            default="15m",
            show_default=True,
            help="With --changed: read the journal's hourly slots once this long past their"
            " hour, for writers still in flight ('0s': everything journaled so far, the"
            " current hour included).",
        ),
    ]
)
