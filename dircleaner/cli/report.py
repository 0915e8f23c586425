"""Summaries of a job: a plain dict for ``--json`` and aligned lines for people."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dircleaner.job.prefix import PrefixCleanReport
from dircleaner.pipeline.budget import TombstoneBudget
from dircleaner.pipeline.delete import DeleteStats
from dircleaner.pipeline.plan import PlanSummary
from dircleaner.scanrate import ScanStats
from dircleaner.timeutil import format_duration, format_utc, format_utc_us

if TYPE_CHECKING:
    # Types only: the store-wide job and the build pull in numpy and the filter modules,
    # which `clean --prefix` and the data commands start without.
    from dircleaner.job.clean import CleanReport, CleanSweep, NightEnd
    from dircleaner.job.run import RunReport
    from dircleaner.job.sweep import SweepReport
    from dircleaner.pipeline.build import BuildResult

Summary = dict[str, Any]


def build_summary(result: BuildResult) -> Summary:
    header = result.header
    return {
        "generation": result.generation,
        "engine": header.engine,
        "partitions_scanned": result.partitions_scanned,
        "keys_inserted": result.keys_inserted,
        "sized_for": header.expected_n,
        "sizing_method": result.sizing.method,
        "m_bits": header.m,
        "k": header.k,
        "filter_bytes": result.filter_bytes,
        "fill_ratio": round(result.fill_ratio, 6),
        "fpr_target": header.target_p,
        "fpr_estimated": result.estimated_fpr,
        "shard": f"{header.shard_index}/{header.shard_count}",
        "built_shards": list(result.built_shards),
        "reused_shards": list(result.reused_shards),
        "seconds": round(result.seconds, 3),
        "scan": result.scan.summary(),
    }


def sweep_summary(report: SweepReport | CleanSweep) -> Summary:
    result = report.result
    return {
        "generation": report.loaded.generation,
        "fpr_estimated": report.loaded.estimated_fpr,
        "swept_dirs": result.swept_rows,
        "partitions": result.partitions,
        "candidates": result.candidates,
        "seconds": round(result.seconds, 3),
        "scan": report.scan.summary(),
    }


def plan_summary(plan: PlanSummary) -> Summary:
    return {
        "directories": plan.directories,
        # The directories above, by the action that removes them (they add up).
        "directories_by_action": {
            "partition": plan.dirs.partition,
            "row": plan.dirs.row,
            "range": plan.dirs.range,
            "rewrite": plan.dirs.rewrite,
        },
        # The tombstones, by kind (they add up to "tombstones").
        "tombstones": plan.tombstones,
        "partition_deletes": plan.deletes.partition,
        "row_deletes": plan.deletes.row,
        "range_deletes": plan.deletes.range,
        "rewrites": plan.deletes.rewrite,
        "rewrite_rows": plan.rewrite_rows,
        "deferred": plan.deferred,
        "max_row_tombstones_in_a_partition": plan.max_row_tombstones_in_a_partition,
    }


def deleted_summary(deleted: DeleteStats | None, plan: PlanSummary, removal_known: bool) -> Summary:
    """What the deletes did, the same keys for the nightly and the prefix clean.

    ``delete_requested_dirs`` counts the directories delete requests were issued (and
    acknowledged) for; ``removed_dirs`` those the store removed, where it can tell (None where a
    delete is a blind tombstone); the rest were written after the delete timestamp and kept."""
    return {
        "delete_requested_dirs": deleted.directories if deleted else 0,
        "removed_dirs": deleted.rows_removed if deleted else 0 if removal_known else None,
        "kept_written_after_t": (
            deleted.kept_written_after_t if deleted else 0 if removal_known else None
        ),
        "deferred_by_budget": plan.deferred,
        "partition_tombstones": deleted.deletes.partition if deleted else 0,
        "row_tombstones": deleted.deletes.row if deleted else 0,
        "range_tombstones": deleted.deletes.range if deleted else 0,
        "partitions_rewritten": deleted.deletes.rewrite if deleted else 0,
        "rows_rewritten": deleted.rows_rewritten if deleted else 0,
        "retries": deleted.retries if deleted else 0,
        "final_rate": round(deleted.final_rate, 1) if deleted else 0.0,
    }


def clean_summary(report: CleanReport, removal_known: bool) -> Summary:
    return {
        "sweep": sweep_summary(report.sweep),
        "delete_timestamp_us": report.delete_timestamp_us,
        "verified": report.verified,
        "verified_parents": report.verified_parents,
        # the re-check's reads (rows: directories read), under the scans' cap
        "verify_reads": report.recheck.summary(),
        "dropped_nonempty": report.dropped_nonempty,
        "plan": plan_summary(report.plan),
        "dry_run": report.dry_run,
        **deleted_summary(report.deleted, report.plan, removal_known),
        "phase_seconds": {k: round(v, 3) for k, v in report.phase_seconds.items()},
        "slices_already_clean": list(report.slices_already_clean),
        "would_be_refused": report.would_be_refused,
        "budget": budget_summary(report.budget),
        "spill": spill_summary(report),
        # a random sample of the candidates, re-checked: a backlog's hold almost no object
        "sample": report.sample.summary(),
        "deadline": night_end_summary(report.night_end),
    }


def night_end_summary(end: NightEnd | None) -> Summary | None:
    """The night's deadline and what it left (None: no --deadline or --max-run-time)."""
    if end is None:
        return None
    return {
        "at": format_utc(end.at_us),
        "at_us": end.at_us,
        "reached": end.reached,
        "before_deletes": end.before_deletes,
        "left_dirs": end.left_total,
        "left_planned_dirs": end.left,
        "left_unplanned_candidates": end.unplanned,
    }


def night_end_lines(end: NightEnd | None) -> list[str]:
    """What the night's deadline did, for people."""
    if end is None:
        return []
    at = format_utc(end.at_us)
    if end.before_deletes:
        return [
            f"clean   stopped at the deadline {at} before any delete (the sweep and the re-check"
            f" ran past it): nothing deleted, {_n(end.left_total)} candidates left; the next run"
            " resumes"
        ]
    if end.reached:
        unplanned = (
            f", {_n(end.unplanned)} of them candidates of slices not planned"
            if end.unplanned
            else ""
        )
        return [
            f"        stopped at the deadline {at}, {_n(end.left_total)} left{unplanned}; the next"
            " run resumes"
        ]
    return [f"        deadline {at} not reached: every delete of the plan was issued"]


def spill_summary(report: CleanReport) -> Summary:
    """What went to spill files beyond the processes' memory budget (zeros: nothing)."""
    return {
        "candidates": report.spilled,
        "bytes": report.spill_bytes,
        "bytes_per_candidate": (
            round(report.spill_bytes / report.spilled, 1) if report.spilled else None
        ),
        "plan_bytes": report.plan_spill_bytes,
    }


def budget_summary(budget: TombstoneBudget | None) -> Summary | None:
    if budget is None:
        return None
    return {
        "max_tombstones_per_partition": budget.per_partition,
        "source": budget.source,
        "grace_seconds": budget.grace_s,
        "grace_source": budget.grace_source,
    }


def run_summary(report: RunReport, removal_known: bool) -> Summary:
    built = report.build
    if built is None:
        build = {"resumed": report.resumed_generation}
    else:
        build = {**build_summary(built), "resumed": report.resumed_generation}
    return {
        "build": build,
        "clean": clean_summary(report.clean, removal_known),
        "garbage_collected": report.garbage_collected,
    }


def _grace(seconds: float) -> str:
    return f"{seconds / 86400:g} days" if seconds >= 86400 else format_duration(seconds)


def _n(value: int) -> str:
    return f"{value:,}"


def counted(value: int, noun: str, plural: str | None = None) -> str:
    """``1 key``, ``2 keys``, ``1,024 lines``: a count with its noun in the right number."""
    return f"{value:,} {noun if value == 1 else plural or noun + 's'}"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.2f} MiB"


def build_lines(result: BuildResult) -> list[str]:
    h = result.header
    return [
        f"build   generation {result.generation}"
        f" ({h.engine}, shard {h.shard_index}/{h.shard_count})",
        f"        {_n(result.partitions_scanned)} object partitions scanned,"
        f" {_n(result.keys_inserted)} ancestor keys inserted in {result.seconds:.1f}s",
        f"        filter {_mib(result.filter_bytes)} (m={_n(h.m)}, k={h.k}) sized for"
        f" {_n(h.expected_n)} dirs ({result.sizing.method})",
        f"        fill {result.fill_ratio:.4g}, effective false-positive rate"
        f" {result.estimated_fpr:.4g} (target {h.target_p:g}), as 'filters list' shows them",
        scan_line(result.scan),
    ]


def run_build_lines(report: RunReport) -> list[str]:
    built = report.build
    if built is None:
        return [
            f"build   resumed: reusing generation {report.resumed_generation} of an interrupted run"
        ]
    lines = build_lines(built)
    if built.reused_shards:
        reused, scanned = _shards(built.reused_shards), _shards(built.built_shards)
        lines.insert(
            1,
            f"        resumed: an interrupted run's build, reused shards {reused}"
            f" of {built.header.shard_count} as stored, built {scanned}",
        )
    return lines


def scan_line(scan: ScanStats) -> str:
    """How a scan read: its rate against the cap, its page latency, its back-offs."""
    cap = f"cap {_n(round(scan.cap))}/s" if scan.cap else "no cap"
    if scan.final_rate:
        cap += f", ended at {_n(round(scan.final_rate))}/s"
    return (
        f"        scan {_n(round(scan.rows_per_s))} rows/s ({cap}); pages mean"
        f" {_ms(scan.mean_latency_s)}, p99 {_ms(scan.p99_latency_s)}; {_n(scan.backoffs)}"
        f" back-off{'' if scan.backoffs == 1 else 's'} (pages over {scan.slow_page_s:g}s,"
        f" {_n(scan.errors)} timeouts or overload)"
    )


def reads_line(reads: ScanStats) -> str:
    """How the re-check read: directories read per second, against the scans' cap."""
    cap = f"cap {_n(round(reads.cap))}/s, shared with the scans" if reads.cap else "no cap"
    return (
        f"        reads {_n(round(reads.rows_per_s))} directories/s ({cap}); batches mean"
        f" {_ms(reads.mean_latency_s)}, p99 {_ms(reads.p99_latency_s)}"
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f}s"


def _shards(indices: tuple[int, ...]) -> str:
    return ",".join(map(str, indices)) or "none"


def sweep_lines(report: SweepReport | CleanSweep) -> list[str]:
    result = report.result
    return [
        f"sweep   {_n(result.swept_rows)} directories in {_n(result.partitions)} partitions"
        f" against filter {report.loaded.generation}: {_n(result.candidates)} candidates"
        f" ({result.seconds:.1f}s)",
        scan_line(report.scan),
    ]


def clean_lines(report: CleanReport, audit_log: str | None, min_age: str = "?") -> list[str]:
    plan = report.plan
    lines = []
    if report.slices_already_clean:
        lines.append(
            "resume  slices "
            + ", ".join(map(str, report.slices_already_clean))
            + " were cleaned by the interrupted run; the others are swept again"
        )
    lines += sweep_lines(report.sweep)
    if report.verified:
        candidates = report.verified - report.verified_parents
        what = f"{_n(report.verified)} candidates re-checked for objects"
        if report.verified_parents:
            what = (
                f"{_n(report.verified)} directories re-checked for objects: the"
                f" {_n(candidates)} candidates and {_n(report.verified_parents)} of their parent"
                " directories (partitions found empty whose own row another slice holds)"
            )
        lines.append(
            f"verify  {what}; {_n(report.dropped_nonempty)} found non-empty and kept"
            " (with their ancestors)"
        )
        lines.append(reads_line(report.recheck))
    if report.spilled:
        lines.append(
            f"spill   {_n(report.spilled)} candidates spilled to disk, their slices over a"
            f" process's memory budget: {_mib(report.spill_bytes)}"
            f" ({report.spill_bytes / report.spilled:.1f} bytes per candidate), their plan"
            f" {_mib(report.plan_spill_bytes)}"
        )
    lines += plan_and_delete_lines(
        plan,
        report.budget,
        report.dry_run,
        report.deleted,
        report.delete_timestamp_us,
        audit_log,
        f"build start - --min-age {min_age}",
    )
    if report.night_end is not None and report.night_end.before_deletes:
        lines = [line for line in lines if line != NOTHING_TO_DELETE]
    return lines + night_end_lines(report.night_end)


#: the clean line of a plan with nothing in it
NOTHING_TO_DELETE = "clean   nothing to delete"


def plan_and_delete_lines(
    plan: PlanSummary,
    budget: TombstoneBudget | None,
    dry_run: bool,
    deleted: DeleteStats | None,
    delete_timestamp_us: int,
    audit_log: str | None,
    timestamp_origin: str,
) -> list[str]:
    """The plan, budget and clean lines, the same for the nightly and the prefix clean;
    ``timestamp_origin`` says how the delete timestamp was chosen."""
    lines = plan_lines(plan)
    if budget is not None:
        lines.append(
            f"budget  N = {_n(budget.per_partition)}: the per-partition live-tombstone budget,"
            f" the tombstones one live partition may hold within the grace period"
            f" ({_grace(budget.grace_s)}, {budget.grace_source}); N is {budget.source}"
        )
    if dry_run:
        lines.append("clean   dry run: nothing deleted")
    elif deleted is None:
        lines.append(NOTHING_TO_DELETE)
    else:
        d = deleted
        lines.append(
            f"clean   delete requests issued for {_n(d.directories)} directories in"
            f" {d.seconds:.1f}s at T = {format_utc_us(delete_timestamp_us)}"
            f" ({timestamp_origin}): {_n(d.deletes.partition)} partition, {_n(d.deletes.row)}"
            f" row and {_n(d.deletes.range)} range deletes, {_n(d.deletes.rewrite)} rewrites of"
            f" {_n(d.rows_rewritten)} rows; {_n(d.retries)} retries"
        )
        kept = d.kept_written_after_t
        if d.rows_removed is None or kept is None:
            lines.append(
                "        requested, not counted as removed: this store's deletes are blind"
                " tombstones (an entry written after T survives its delete)"
            )
        else:
            lines.append(
                f"        {_n(d.rows_removed)} directories removed; {_n(kept)} kept: written"
                " after T, so they survive, as they must"
            )
        if audit_log:
            lines.append(f"        audit log: {audit_log}")
    return lines


def plan_lines(plan: PlanSummary) -> list[str]:
    """The plan in two units, each line's parts adding up to its total: the directories by the
    action that removes them, and the tombstones by kind."""
    return [
        f"plan    {_n(plan.directories)} directories to delete ="
        f" {_n(plan.dirs.partition)} in {_n(plan.deletes.partition)} dead partitions"
        f" + {_n(plan.dirs.row)} by row deletes"
        f" + {_n(plan.dirs.range)} in {_n(plan.deletes.range)} ranges"
        f" + {_n(plan.dirs.rewrite)} in {_n(plan.deletes.rewrite)} rewritten partitions"
        f" ({_n(plan.rewrite_rows)} rows copied);"
        f" {_n(plan.deferred)} more deferred by the budget N",
        f"        {_n(plan.tombstones)} tombstones = {_n(plan.deletes.partition)} partition"
        f" + {_n(plan.deletes.row)} row + {_n(plan.deletes.range)} range (each counts 2"
        f" against N) + {_n(plan.deletes.rewrite)} of rewritten partitions",
    ]


def prefix_summary(report: PrefixCleanReport, removal_known: bool) -> Summary:
    walk = report.walk
    return {
        "prefix": walk.prefix,
        "bucket": walk.bucket,
        "generation": report.generation,
        "walk": {
            "directories": walk.directories,
            "empty_directories": walk.empty_directories,
            "with_objects": walk.with_objects,
            "partitions": walk.partitions,
            "folder_rows": walk.folder_rows,
            "depth": walk.depth,
            "prefix_empty": walk.prefix_empty,
            "seconds": round(walk.seconds, 3),
            "scan": walk.scan.summary(),
        },
        "delete_timestamp_us": report.delete_timestamp_us,
        "plan": plan_summary(report.plan),
        "budget": budget_summary(report.budget),
        "dry_run": report.dry_run,
        **deleted_summary(report.deleted, report.plan, removal_known),
        "phase_seconds": {k: round(v, 3) for k, v in report.phase_seconds.items()},
    }


def prefix_lines(report: PrefixCleanReport, audit_log: str | None, min_age: str) -> list[str]:
    walk, plan = report.walk, report.plan
    lines = [
        f"walk    {walk.prefix} in bucket {walk.bucket}: {_n(walk.directories)} directories,"
        f" {walk.depth} levels deep, {_n(walk.with_objects)} holding objects,"
        f" {_n(walk.empty_directories)} empty ({walk.seconds:.1f}s)",
        scan_line(walk.scan),
    ]
    lines += plan_and_delete_lines(
        plan,
        report.budget,
        report.dry_run,
        report.deleted,
        report.delete_timestamp_us,
        audit_log,
        f"walk start - --min-age {min_age}",
    )
    if plan.deferred:
        lines.append("        run the same command again to delete what the budget deferred")
    return lines
