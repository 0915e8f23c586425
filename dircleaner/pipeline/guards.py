"""Safety guards: pure checks that refuse a clean before anything is deleted."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dircleaner.errors import (
    FilterStale,
    FilterSuspiciouslyEmpty,
    FilterTooFull,
    TooManyCandidates,
    UsageError,
)
from dircleaner.timeutil import format_duration

if TYPE_CHECKING:
    from dircleaner.filter.format import FilterHeader  # numpy, through the engines
    from dircleaner.store.base import Store


@dataclass(frozen=True)
class GuardConfig:
    """Thresholds; ``force`` turns every refusal into a pass (the operator's explicit call)."""

    max_delete_fraction: float = 0.10
    max_filter_age_s: float = 24 * 3600.0
    #: refuse a filter whose effective false-positive rate exceeds target × this factor
    max_fpr_factor: float = 4.0
    force: bool = False

    def __post_init__(self) -> None:
        # ``not (a <= x <= b)`` holds for nan too: a nan fraction would pass every comparison.
        if not 0 <= self.max_delete_fraction <= 1:
            raise UsageError(
                f"--max-delete-fraction must be from 0 to 1, not {self.max_delete_fraction}"
            )
        if not 0 <= self.max_filter_age_s < math.inf:
            raise UsageError("--max-filter-age must be a finite duration of at least 0")


def check_scan_consistency(store: Store, verify: bool) -> None:
    """Refuse a clean whose scans could miss what keeps a directory (UsageError).

    A build read below a quorum may miss an object partition: its directories become
    candidates, and only the re-check (at a quorum) finds the object. That needs the re-check,
    and a sweep that lists every folder row: a row it missed is never re-checked, and the
    partition delete of a subtree the build saw as empty would take it.
    """
    if store.traits.build_sees_every_write:
        return
    if not verify:
        raise UsageError(
            "--no-verify needs the build to read at a quorum: set [cassandra.consistency]"
            ' build = "LOCAL_QUORUM" (below it only the re-check finds the objects it missed)'
        )
    if not store.traits.sweep_sees_every_write:
        raise UsageError(
            "[cassandra.consistency] build and sweep both read below a quorum: a directory"
            " whose objects and folder row both sit on a lagging replica would be deleted;"
            ' set sweep = "LOCAL_QUORUM"'
        )


def check_filter(
    header: FilterHeader, estimated_fpr: float, now_us: int, config: GuardConfig
) -> None:
    """Refuse a stale, overfull or suspiciously empty filter."""
    if config.force:
        return
    age_s = (now_us - header.snapshot_us) / 1e6
    if age_s > config.max_filter_age_s:
        raise FilterStale(
            f"the filter is {format_duration(age_s)} old, over --max-filter-age"
            f" {format_duration(config.max_filter_age_s)}; rebuild it with 'dircleaner build'"
        )
    if estimated_fpr > header.target_p * config.max_fpr_factor:
        raise FilterTooFull(
            f"the filter's effective false-positive rate {estimated_fpr:.4g} is over"
            f" {config.max_fpr_factor:g}x its target {header.target_p:g} (it was sized for"
            f" {header.expected_n:,} directories); rebuild with a larger --expected-dirs"
        )


def check_sweep(
    header: FilterHeader, swept_rows: int, candidates: int, config: GuardConfig
) -> None:
    """Refuse when the filter looks empty or too much of the index would go."""
    if config.force or swept_rows == 0:
        return
    if header.items == 0:
        raise FilterSuspiciouslyEmpty(
            f"the filter holds no directory while the folder index has {swept_rows:,} rows"
            " (is the objects table empty or the mapping wrong?); if everything really went,"
            " rerun with --force"
        )
    fraction = candidates / swept_rows
    if fraction > config.max_delete_fraction:
        raise TooManyCandidates(
            f"{candidates:,} of {swept_rows:,} directories ({fraction:.1%}) would be deleted, over"
            f" --max-delete-fraction {config.max_delete_fraction:g}; check the store, then rerun"
            " with a higher --max-delete-fraction or --force",
            details={
                "swept_dirs": swept_rows,
                "candidates": candidates,
                "max_delete_fraction": config.max_delete_fraction,
            },
        )
