"""Prometheus text-format metrics for node_exporter's textfile collector."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dircleaner.cli.night_metrics import CHURN, FULL, ChurnFigures, night_gauges
from dircleaner.job.prefix import PrefixCleanReport
from dircleaner.model import KindTally
from dircleaner.pipeline.backlog import BACKLOG, BROKEN, UNCLEAR, SampleFigures, judge
from dircleaner.pipeline.delete import DeleteStats
from dircleaner.pipeline.plan import PlanSummary
from dircleaner.pipeline.sweep import SweepTotals
from dircleaner.scanrate import ScanStats

if TYPE_CHECKING:
    # Types only: the store-wide job and the build pull in numpy and the filter modules,
    # which `clean --prefix` and the data commands start without.
    from dircleaner.job.changed import ChangedCleanReport
    from dircleaner.job.clean import CleanReport, NightEnd
    from dircleaner.job.run import RunReport
    from dircleaner.pipeline.build import BuildResult

PREFIX = "dircleaner_"


@dataclass(frozen=True)
class RunMetrics:
    """What a run tells monitoring, taken from the job's own reports (nothing: a failed run)."""

    build: BuildResult | None = None
    sweep: SweepTotals | None = None
    dropped_nonempty: int | None = None
    plan: PlanSummary | None = None
    #: a clean ran: its delete counts are 0, not absent, when it deleted nothing
    cleaned: bool = False
    deleted: DeleteStats | None = None
    phase_seconds: Mapping[str, float] = field(default_factory=dict)
    #: a restore's directory entries selected for this store, written back (0 in a dry run),
    #: and log entries skipped (another store's, or recording none)
    restore_selected: int | None = None
    restored: int | None = None
    restore_skipped: int | None = None
    #: the store tells removed entries from requested ones (SQLite; not Cassandra)
    removal_known: bool = False
    #: each pass's scan (``build``, ``sweep``, ``walk``), and the re-check's reads (``verify``)
    scans: Mapping[str, ScanStats] = field(default_factory=dict)
    #: the kind of night (``night_metrics``: churn or full), and a churn night's journal
    night: str | None = None
    churn: ChurnFigures | None = None
    #: a random sample of the candidates, re-checked (a store-wide clean's, refused or not)
    sample: SampleFigures | None = None
    #: the night's deadline and what it left (None: none given)
    night_end: NightEnd | None = None
    #: a refused night's plan at --rate, in seconds (None: unthrottled, or not refused)
    estimated_delete_s: float | None = None

    @classmethod
    def of_clean(
        cls, report: CleanReport, removal_known: bool, build: BuildResult | None = None
    ) -> RunMetrics:
        """A clean's figures, and those of the build before it (``run``); ``removal_known``:
        the store tells removed entries from requested ones."""
        phases = {} if build is None else {"build": round(build.seconds, 3)}
        phases.update((k, round(v, 3)) for k, v in report.phase_seconds.items())
        scans = {"sweep": report.sweep.scan}
        if report.verified:
            scans["verify"] = report.recheck  # the re-check's reads, under the same cap
        if build is not None:
            scans["build"] = build.scan
        return cls(
            scans=scans,
            build=build,
            sweep=report.sweep.result,
            dropped_nonempty=report.dropped_nonempty,
            plan=report.plan,
            cleaned=True,
            deleted=report.deleted,
            phase_seconds=phases,
            removal_known=removal_known,
            sample=report.sample,
            night_end=report.night_end,
        )

    @classmethod
    def of_run(cls, report: RunReport, removal_known: bool) -> RunMetrics:
        """The nightly job's figures (no build figures when it reused an interrupted build)."""
        return replace(cls.of_clean(report.clean, removal_known, report.build), night=FULL)

    @classmethod
    def of_changed_clean(cls, report: ChangedCleanReport, removal_known: bool) -> RunMetrics:
        """A churn night's figures: its plan and deletes, and the journal's."""
        return cls(
            plan=report.plan,
            cleaned=True,
            deleted=report.deleted,
            phase_seconds={k: round(v, 3) for k, v in report.phase_seconds.items()},
            removal_known=removal_known,
            night=CHURN,
            churn=ChurnFigures.of(report),
        )

    @classmethod
    def of_restore(cls, selected: int, restored: int | None, skipped: int) -> RunMetrics:
        """A restore's figures (``restored`` None: a dry run, which wrote nothing)."""
        return cls(restore_selected=selected, restored=restored or 0, restore_skipped=skipped)

    @classmethod
    def of_refusal(cls, details: Mapping[str, object]) -> RunMetrics:
        """What a refused run had found, from its refusal's details: the sweep's rows and
        candidates, and the candidates the re-check found non-empty (nothing, when it was
        refused before its sweep: the filter's checks, the lease, the bucket); refused over
        --max-delete-fraction, its sample of candidates and the plan it made."""
        swept, candidates = details.get("swept_dirs"), details.get("candidates")
        nonempty = details.get("verified_nonempty")
        sweep = None
        if isinstance(swept, int) and isinstance(candidates, int):
            sweep = SweepTotals(swept_rows=swept, partitions=0, candidates=candidates, seconds=0.0)
        sample, plan = details.get("sample"), details.get("plan")
        eta = details.get("estimated_delete_seconds")
        return cls(
            sweep=sweep,
            dropped_nonempty=nonempty if isinstance(nonempty, int) else None,
            sample=_sample_of(sample) if isinstance(sample, dict) else None,
            plan=_plan_of(plan) if isinstance(plan, dict) else None,
            estimated_delete_s=float(eta) if isinstance(eta, int | float) else None,
        )

    @classmethod
    def of_prefix_clean(cls, report: PrefixCleanReport, removal_known: bool) -> RunMetrics:
        """A prefix clean's figures: no build and no sweep."""
        return cls(
            plan=report.plan,
            cleaned=True,
            deleted=report.deleted,
            phase_seconds={k: round(v, 3) for k, v in report.phase_seconds.items()},
            removal_known=removal_known,
            scans={"walk": report.walk.scan},
        )


def _sample_of(figures: Mapping[str, object]) -> SampleFigures:
    """A sample's figures from a refusal's details (``SampleFigures.summary``)."""

    def count(key: str) -> int:
        value = figures.get(key)
        return value if isinstance(value, int) else 0

    return SampleFigures(count("candidates"), count("sampled"), count("holding_objects"))


def _plan_of(plan: Mapping[str, object]) -> PlanSummary:
    """A plan's counts from a refusal's details (``backlog.explain``)."""

    def count(key: str) -> int:
        value = plan.get(key)
        return value if isinstance(value, int) else 0

    return PlanSummary(
        directories=count("directories"),
        deletes=KindTally(
            partition=count("partition_deletes"),
            row=count("row_deletes"),
            range=count("range_deletes"),
            rewrite=count("rewrites"),
        ),
        deferred=count("deferred"),
    )


Reading = Callable[[RunMetrics], float | None]


def _of_build(read: Callable[[BuildResult], float]) -> Reading:
    return lambda m: None if m.build is None else read(m.build)


def _of_sweep(read: Callable[[SweepTotals], float]) -> Reading:
    return lambda m: None if m.sweep is None else read(m.sweep)


def _of_deletes(read: Callable[[DeleteStats], float | None]) -> Reading:
    """A delete figure: absent without a clean, 0 when the clean deleted nothing."""
    return lambda m: None if not m.cleaned else 0 if m.deleted is None else read(m.deleted)


def _where_the_store_tells(read: Callable[[DeleteStats], int | None]) -> Reading:
    """A figure only a store that can tell removed from requested has (absent elsewhere, as
    it would otherwise read 0 and look like nothing went)."""

    def reading(m: RunMetrics) -> float | None:
        if not m.cleaned:
            return None
        if m.deleted is None:
            return 0 if m.removal_known else None
        return read(m.deleted)

    return reading


# (metric name, help, how to read it from the run)
_GAUGES: tuple[tuple[str, str, Reading], ...] = (
    (
        "object_partitions_scanned",
        "Objects-table partitions scanned by the build.",
        _of_build(lambda b: b.partitions_scanned),
    ),
    (
        "filter_directories",
        "Ancestor keys inserted into the filter (a directory once per partition under it).",
        _of_build(lambda b: b.keys_inserted),
    ),
    ("filter_bytes", "Size of the filter body.", _of_build(lambda b: b.filter_bytes)),
    (
        "filter_fill_ratio",
        "Share of filter bits set.",
        _of_build(lambda b: round(b.fill_ratio, 6)),
    ),
    ("filter_fpr_target", "Target false-positive rate.", _of_build(lambda b: b.header.target_p)),
    (
        "filter_fpr_estimated",
        "Effective false-positive rate estimated from the fill.",
        _of_build(lambda b: b.estimated_fpr),
    ),
    ("directories_scanned", "Folder-index rows swept.", _of_sweep(lambda s: s.swept_rows)),
    ("candidates", "Directories absent from the filter.", _of_sweep(lambda s: s.candidates)),
    (
        "verified_nonempty",
        "Candidates found non-empty on re-check and kept.",
        lambda m: m.dropped_nonempty,
    ),
    (
        "delete_requested_directories",
        "Directory entries delete requests were issued for (at the delete timestamp T).",
        _of_deletes(lambda d: d.directories),
    ),
    (
        "removed_directories",
        "Directory entries the deletes removed (only where the store can tell).",
        _where_the_store_tells(lambda d: d.rows_removed),
    ),
    (
        "kept_written_after_delete_timestamp",
        "Directory entries deletes were requested for and the store kept: written after T"
        " (only where the store can tell).",
        _where_the_store_tells(lambda d: d.kept_written_after_t),
    ),
    (
        "partition_tombstones",
        "Partition deletes issued.",
        _of_deletes(lambda d: d.deletes.partition),
    ),
    ("row_tombstones", "Row deletes issued.", _of_deletes(lambda d: d.deletes.row)),
    (
        "range_tombstones",
        "Range deletes issued (each counts as two tombstones against the budget).",
        _of_deletes(lambda d: d.deletes.range),
    ),
    (
        "deferred_by_budget",
        "Directories held back by the per-partition live-tombstone budget (the next run's).",
        lambda m: None if m.plan is None else m.plan.deferred,
    ),
    (
        "planned_directories",
        "Directories the night's plan deletes (a refused night's: what it would delete).",
        lambda m: None if m.plan is None else m.plan.directories,
    ),
    (
        "planned_deletes",
        "Delete requests of the plan (partition, row and range deletes and rewrites: the unit"
        " --rate counts).",
        lambda m: None if m.plan is None else m.plan.tombstones,
    ),
    (
        "estimated_delete_seconds",
        "A refused night's plan at --rate: how long its deletes would take.",
        lambda m: m.estimated_delete_s,
    ),
    (
        "candidates_sampled",
        "Candidates sampled at random and re-checked (what tells a backlog from a broken filter).",
        lambda m: None if m.sample is None else m.sample.sampled,
    ),
    (
        "candidates_sampled_holding_objects",
        "Sampled candidates found holding an object (a sound filter's hold almost none).",
        lambda m: None if m.sample is None else m.sample.holding,
    ),
    (
        "deadline_timestamp_seconds",
        "The night's deadline (--deadline, --max-run-time; Unix time).",
        lambda m: None if m.night_end is None else m.night_end.at_us / 1e6,
    ),
    (
        "deadline_reached",
        "1 if the night stopped deleting at its deadline (the rest left for the next run).",
        lambda m: None if m.night_end is None else float(m.night_end.reached),
    ),
    (
        "left_at_deadline_directories",
        "Directories the deadline left for the next run (of the plan, and of slices not planned).",
        lambda m: None if m.night_end is None else m.night_end.left_total,
    ),
    (
        "delete_retries",
        "Deletes retried after timeouts or overload.",
        _of_deletes(lambda d: d.retries),
    ),
    (
        "restore_selected_directories",
        "Directory entries of this store the restore selected from the audit log.",
        lambda m: m.restore_selected,
    ),
    (
        "restored_directories",
        "Directory entries the restore wrote back (0 in a dry run).",
        lambda m: m.restored,
    ),
    (
        "restore_skipped_entries",
        "Audit-log entries the restore skipped: another store's, or recording no store.",
        lambda m: m.restore_skipped,
    ),
    (
        "delete_rate",
        "Delete rate (per second) the adaptive throttle ended at.",
        _of_deletes(lambda d: round(d.final_rate, 1)),
    ),
)


#: per pass of the scans (label ``pass``)
_SCAN_GAUGES: tuple[tuple[str, str, Callable[[ScanStats], float]], ...] = (
    ("scan_rows", "Rows the scan read.", lambda s: s.rows),
    ("scan_rows_per_second", "Rows the scan read per second.", lambda s: round(s.rows_per_s, 1)),
    (
        "scan_rate",
        "Rows per second the scan's adaptive rate ended at (0: no cap, never backed off).",
        lambda s: round(s.final_rate, 1),
    ),
    ("scan_rate_cap", "Rows per second the scan was capped at (0: none).", lambda s: s.cap),
    (
        "scan_backoffs",
        "Times the scan halved its rate (slow pages, timeouts, overload).",
        lambda s: s.backoffs,
    ),
    (
        "scan_page_latency_mean_seconds",
        "Mean latency of the scan's pages.",
        lambda s: round(s.mean_latency_s, 6),
    ),
)


def render(
    metrics: RunMetrics,
    *,
    success: bool,
    finished_at: float,
    refused: bool = False,
    labels: Mapping[str, str] | None = None,
) -> str:
    """The run's figures in Prometheus text exposition format.

    ``refused``: the run ended with exit code 3 (a safety guard, a corrupt or foreign filter,
    another run's lease), or it was a dry run whose real run would have been. ``labels``: on
    every sample, first (the kind of run and its store: two files never carry one series)."""
    lines: list[str] = []
    common = [f'{name}="{escape_label(value)}"' for name, value in (labels or {}).items()]

    def gauge(name: str, help_text: str, value: float, own: str = "") -> None:
        full = PREFIX + name
        if not any(line.startswith(f"# TYPE {full} ") for line in lines):
            lines.append(f"# HELP {full} {help_text}")
            lines.append(f"# TYPE {full} gauge")
        pairs = ",".join(common + ([own] if own else []))
        lines.append(
            f"{full}{{{pairs}}} {float(value):.15g}" if pairs else f"{full} {float(value):.15g}"
        )

    gauge("last_run_success", "1 if the last run finished without error.", 1.0 if success else 0.0)
    gauge(
        "last_run_refused",
        "1 if the last run was refused (exit 3: a guard, the filter, the lease), else 0.",
        1.0 if refused else 0.0,
    )
    gauge("last_run_timestamp_seconds", "When the last run finished (Unix time).", finished_at)
    for name, help_text, read in _GAUGES:
        value = read(metrics)
        if value is not None:
            gauge(name, help_text, value)
    for name, help_text, value, own in night_gauges(metrics.night, metrics.churn):
        gauge(name, help_text, value, own)
    if metrics.sample is not None and metrics.sample.sampled:
        looks = judge(metrics.sample)
        for verdict in (BACKLOG, UNCLEAR, BROKEN):
            gauge(
                "candidates_look_like",
                "1 for what the sampled candidates look like: a backlog (almost none hold an"
                " object), a broken filter (many do), or unclear.",
                1.0 if verdict == looks else 0.0,
                f'verdict="{verdict.replace(" ", "_")}"',
            )
    for phase, seconds in sorted(metrics.phase_seconds.items()):
        gauge("phase_seconds", "Duration of each phase.", seconds, f'phase="{phase}"')
    for name, help_text, scan_reading in _SCAN_GAUGES:
        for scan_pass, scan in sorted(metrics.scans.items()):
            gauge(name, help_text, scan_reading(scan), f'pass="{scan_pass}"')
    for scan_pass, scan in sorted(metrics.scans.items()):
        for quantile in (0.5, 0.99):
            gauge(
                "scan_page_latency_seconds",
                "Latency of the scan's pages (quantiles, to the histogram's ~19% buckets).",
                scan.latency_quantile_s(quantile),
                f'pass="{scan_pass}",quantile="{quantile:g}"',
            )
    return "\n".join(lines) + "\n"


def escape_label(value: str) -> str:
    """A label value as the text format wants it: backslash, double quote and newline
    escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so the collector never reads half a file.

    The file is created 0666 less the umask (0644 under the usual 022), as any file a program
    writes: node_exporter runs as another user and must be able to read it. (``mkstemp``
    would create it 0600, and the rename would carry that over an existing 0644 file.)
    ``prometheus_client.write_to_textfile`` does the same temporary-file-and-rename; our own
    renderer keeps the metric names in one table and needs no extra dependency."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
