"""``clean --changed``, the churn night, from the command line (``clean`` hands over here):
the night, its metrics and its summary, a plain dict for ``--json`` and aligned lines for people
(the plan and delete lines are the full night's own, ``report.plan_and_delete_lines``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from dircleaner.cli.configs import CleanValues, audit_log_path, store_audit_log
from dircleaner.cli.context import (
    TerminalProgress,
    emit,
    obj,
    refused_without_json,
    verdict_keys,
    write_metrics,
)
from dircleaner.cli.metrics import RunMetrics
from dircleaner.cli.report import (
    budget_summary,
    deleted_summary,
    plan_and_delete_lines,
    plan_summary,
)
from dircleaner.job.changed import ChangedCleanReport, run_changed_clean
from dircleaner.store.base import require_bucket
from dircleaner.timeutil import format_duration, format_utc

Summary = dict[str, Any]


def clean_changed(ctx: click.Context, values: CleanValues) -> None:
    """The night, its metrics, its summary; exit 3 when a real night would be refused."""
    progress = TerminalProgress()
    config = values.changed_config()
    with obj(ctx).open(writes=not config.dry_run) as store:
        require_bucket(store, config.bucket)
        shown = store_audit_log(values.audit_log, store)
        config = replace(config, audit_log=audit_log_path(shown))
        report = run_changed_clean(store, config, progress)
    progress.close()
    known = store.rows_removed is not None
    verdict = report.would_be_refused
    write_metrics(
        ctx,
        RunMetrics.of_changed_clean(report, known),
        success=verdict is None,
        refused=verdict is not None,
    )
    emit(
        {**changed_summary(report, known), **verdict_keys(verdict)},
        changed_lines(report, shown, values.min_age),
        values.as_json,
        ok=verdict is None,
    )
    if verdict is not None:
        raise refused_without_json(verdict)


def _n(value: int) -> str:
    return f"{value:,}"


def _slot_span(slots: list[int]) -> str:
    if not slots:
        return "none"
    first, last = format_utc(slots[0] * 1_000_000), format_utc(slots[-1] * 1_000_000)
    return first if first == last else f"{first} to {last}"


def changed_summary(report: ChangedCleanReport, removal_known: bool) -> Summary:
    t = report.totals
    return {
        "night": "churn",
        "generation": report.generation,
        "journal": {
            "slots_read": len(report.slots.read),
            "first_slot": report.slots.read[0] if report.slots.read else None,
            "last_slot": report.slots.read[-1] if report.slots.read else None,
            "open_slot_read": report.slots.open_slot is not None,
            "slots_done": len(report.slots_done),
            "oldest_entry_age_seconds": round(report.oldest_entry_age_s, 1),
            "settle_seconds": report.settle_s,
            "entries": t.entries,
            "batches": t.batches,
        },
        "check": {
            "journaled": t.journaled,
            "parents": t.parents,
            "with_objects": t.with_objects,
            "with_subdirectories": t.with_subdirectories,
            "empty": t.empty,
            "already_gone": t.already_gone,
            "deferred_tombstones": t.deferred_tombstones,
            "deferred_unread": t.deferred_unread,
            "reads": {
                "objects": t.reads.objects,
                "folders": t.reads.folders,
                "rows": t.reads.rows,
                "total": t.reads.total,
            },
        },
        "deferred": report.deferred,
        "delete_timestamp_us": report.delete_timestamp_us,
        "plan": plan_summary(report.plan),
        "budget": budget_summary(report.budget),
        "directory_count": report.directory_count,
        "directory_count_source": report.directory_count_source or None,
        "dry_run": report.dry_run,
        **deleted_summary(report.deleted, report.plan, removal_known),
        "phase_seconds": {k: round(v, 3) for k, v in report.phase_seconds.items()},
        "would_be_refused": report.would_be_refused,
    }


def changed_lines(report: ChangedCleanReport, audit_log: str | None, min_age: str) -> list[str]:
    t, slots = report.totals, report.slots
    still_open = " (the hour still open included)" if slots.open_slot is not None else ""
    settle = format_duration(report.settle_s) if report.settle_s else "0s"
    lines = [
        f"journal {_n(len(slots.read))} slots ({_slot_span(slots.read)}){still_open},"
        f" settled {settle}: {_n(t.entries)} rows naming"
        f" {_n(t.journaled)} directories ({report.phase_seconds.get('journal', 0.0):.1f}s)",
        f"check   {_n(t.journaled + t.parents)} directories = {_n(t.journaled)} journaled +"
        f" {_n(t.parents)} parents of emptied ones: {_n(t.with_objects)} hold objects,"
        f" {_n(t.with_subdirectories)} subdirectories, {_n(t.empty)} empty"
        f" ({_n(t.already_gone)} of them already gone from the index),"
        f" {_n(t.deferred_tombstones)} deferred for their tombstones"
        f" ({report.phase_seconds.get('check', 0.0):.1f}s)",
        f"        reads: {_n(t.reads.objects)} objects partitions, {_n(t.reads.folders)}"
        f" folders partitions, {_n(t.reads.rows)} folder rows",
    ]
    lines += plan_and_delete_lines(
        report.plan,
        report.budget,
        report.dry_run,
        report.deleted,
        report.delete_timestamp_us,
        audit_log,
        f"night start - --min-age {min_age}",
    )
    if report.deferred and not report.dry_run:
        lines.append(
            f"        {_n(report.deferred)} directories put back in the journal for a night"
            f" one grace period from now (tombstones, budget)"
        )
    return lines
