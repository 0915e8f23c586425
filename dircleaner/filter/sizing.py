"""Sizing a filter from the last one: how many distinct directories it really held.

A filter holds only the directories that contain objects, while the folder index also lists the
empty ones the job is about to remove. Sized for every folder row, the filter gets more bits per
key than the target rate needs. The last build knows better: its merged filter's fill gives the
number of distinct keys it holds (``-m/k * ln(1 - X/m)``). Scaled by how much the index grew
since that build (or since its clean removed the empties it found), that count sizes the next
filter.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

from dircleaner.store.base import Store
from dircleaner.store.records import DirCountEstimate

#: The filter's target false-positive rate: 11.0 bits and 8 hashes per directory. At 0.01 (9.6
#: bits, 7 hashes) the false positives alone held a run's recall at 0.99, and a synthetic 30M
#: store whose wide partitions defer a few thousand directories to the next grace period
#: ended at 0.987; at 0.005 it ends at 0.991, for a filter 15% larger and a few per cent more
#: time per filter test or insert (bench/filter_fpr.py: at most ~2 s of CPU at 30M).
DEFAULT_FPR = 0.005


@dataclass(frozen=True)
class SizingRecord:
    """What a generation held, and the folder rows it was built against (or its clean left)."""

    generation: str
    folder_rows: int
    #: distinct directories in the generation's merged filter (estimated from its fill)
    held: float


def _key(scope: str) -> str:
    return f"sizing|{scope}"


def save_sizing_record(store: Store, scope: str, record: SizingRecord) -> None:
    data = {"generation": record.generation, "folder_rows": record.folder_rows, "held": record.held}
    store.put_state(_key(scope), json.dumps(data))


def load_sizing_record(store: Store, scope: str) -> SizingRecord | None:
    raw = store.get_state(_key(scope))
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return SizingRecord(str(data["generation"]), int(data["folder_rows"]), float(data["held"]))
    except (ValueError, KeyError, TypeError):
        return None  # an unreadable record only costs the plain folder-row sizing


def record_clean(store: Store, scope: str, generation: str, folder_rows_left: int) -> None:
    """After a clean with ``generation``: the folder rows it left are the new base for growth."""
    record = load_sizing_record(store, scope)
    if record is not None and record.generation == generation:
        save_sizing_record(store, scope, replace(record, folder_rows=folder_rows_left))


def distinct_keys(m: int, k: int, fill: float) -> float | None:
    """Distinct keys a filter of ``m`` bits and ``k`` hashes holds at ``fill`` (None if full)."""
    if not 0.0 <= fill < 1.0:
        return None
    return -m / k * math.log1p(-fill)


def size_from_last_filter(
    store: Store, scope: str, folder_rows_now: int
) -> DirCountEstimate | None:
    """The last filter's distinct directories times the index's growth since; None if unknown."""
    record = load_sizing_record(store, scope)
    if record is None or record.folder_rows <= 0 or not record.held > 0:
        return None
    growth = folder_rows_now / record.folder_rows
    return DirCountEstimate(
        math.ceil(record.held * growth),
        f"last filter's {record.held:,.0f} directories x index growth {growth:.3f}"
        f" ({record.folder_rows:,} -> {folder_rows_now:,} folder rows)",
    )
