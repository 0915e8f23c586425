"""Prometheus text-format metrics for node_exporter's textfile collector."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PREFIX = "dircleaner_"

# (metric name, help, path into the run summary)
_GAUGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "object_partitions_scanned",
        "Objects-table partitions scanned by the build.",
        ("build", "partitions_scanned"),
    ),
    (
        "filter_directories",
        "Ancestor keys inserted into the filter (a directory once per partition under it).",
        ("build", "keys_inserted"),
    ),
    ("filter_bytes", "Size of the filter body.", ("build", "filter_bytes")),
    ("filter_fill_ratio", "Share of filter bits set.", ("build", "fill_ratio")),
    ("filter_fpr_target", "Target false-positive rate.", ("build", "fpr_target")),
    (
        "filter_fpr_estimated",
        "Effective false-positive rate estimated from the fill.",
        ("build", "fpr_estimated"),
    ),
    ("directories_scanned", "Folder-index rows swept.", ("clean", "sweep", "swept_dirs")),
    ("candidates", "Directories absent from the filter.", ("clean", "sweep", "candidates")),
    (
        "verified_nonempty",
        "Candidates found non-empty on re-check and kept.",
        ("clean", "dropped_nonempty"),
    ),
    (
        "deleted_directories",
        "Directory entries deletes were issued for (at the delete timestamp).",
        ("clean", "deleted_dirs"),
    ),
    (
        "rows_removed",
        "Folder rows the deletes removed (embedded store only).",
        ("clean", "rows_removed"),
    ),
    (
        "kept_written_after_delete_timestamp",
        "Candidates kept: written after the delete timestamp (embedded store only).",
        ("clean", "kept_written_after_t"),
    ),
    ("partition_tombstones", "Partition deletes issued.", ("clean", "partition_tombstones")),
    ("row_tombstones", "Row deletes issued.", ("clean", "row_tombstones")),
    (
        "range_tombstones",
        "Range deletes issued (each counts as two tombstones against the budget).",
        ("clean", "range_tombstones"),
    ),
    (
        "deferred_by_budget",
        "Candidates held back by --max-tombstones-per-partition.",
        ("clean", "plan", "deferred"),
    ),
    ("delete_retries", "Deletes retried after timeouts or overload.", ("clean", "retries")),
    (
        "delete_rate",
        "Delete rate (per second) the adaptive throttle ended at.",
        ("clean", "final_rate"),
    ),
)


def _lookup(summary: Mapping[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = summary
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def render(summary: Mapping[str, Any], *, success: bool, finished_at: float) -> str:
    """The run summary (as printed by ``--json``) in Prometheus text exposition format."""
    lines: list[str] = []

    def gauge(name: str, help_text: str, value: float, labels: str = "") -> None:
        full = PREFIX + name
        if not any(line.startswith(f"# TYPE {full} ") for line in lines):
            lines.append(f"# HELP {full} {help_text}")
            lines.append(f"# TYPE {full} gauge")
        lines.append(f"{full}{labels} {value:.15g}")

    gauge("last_run_success", "1 if the last run finished without error.", 1.0 if success else 0.0)
    gauge("last_run_timestamp_seconds", "When the last run finished (Unix time).", finished_at)
    for name, help_text, path in _GAUGES:
        value = _lookup(summary, path)
        if value is not None:
            gauge(name, help_text, value)
    phases: dict[str, float] = {}
    build_seconds = _lookup(summary, ("build", "seconds"))
    if build_seconds is not None:
        phases["build"] = build_seconds
    clean = summary.get("clean", summary)
    if isinstance(clean, Mapping):
        for phase, seconds in dict(clean.get("phase_seconds", {})).items():
            phases[str(phase)] = float(seconds)
    for phase, seconds in sorted(phases.items()):
        gauge("phase_seconds", "Duration of each phase.", seconds, f'{{phase="{phase}"}}')
    return "\n".join(lines) + "\n"


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
