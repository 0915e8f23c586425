"""Sizing a filter from the last one: how many distinct directories it really held.

A filter holds only the directories that contain objects, while the folder index also lists the
empty ones the job is about to remove. Sized for every folder row, the filter gets more bits per
key than the target rate needs. The last complete generation knows better: its fill gives the
number of distinct keys it holds (``-m/k * ln(1 - X/m)``). Scaled by how much the index grew
since that build (or since its clean removed the empties it found), that count sizes the next
filter.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from dircleaner.filterstore import GenerationInfo, list_generations
from dircleaner.store.base import DirCountEstimate, Store


@dataclass(frozen=True)
class SizingRecord:
    """The folder rows a generation was built against (or left behind by its clean)."""

    generation: str
    folder_rows: int


def _key(scope: str) -> str:
    return f"sizing|{scope}"


def save_sizing_record(store: Store, scope: str, record: SizingRecord) -> None:
    data = {"generation": record.generation, "folder_rows": record.folder_rows}
    store.put_state(_key(scope), json.dumps(data))


def load_sizing_record(store: Store, scope: str) -> SizingRecord | None:
    raw = store.get_state(_key(scope))
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return SizingRecord(str(data["generation"]), int(data["folder_rows"]))
    except (ValueError, KeyError, TypeError):
        return None  # an unreadable record only costs the plain folder-row sizing


def distinct_keys(info: GenerationInfo) -> float | None:
    """Distinct keys a complete generation holds, from its shards' set bits.

    Shards cover disjoint slices of the ring, so their key sets are disjoint and the counts add.
    """
    header = info.header
    if header is None or not info.complete:
        return None
    total = 0.0
    for shard in info.shards:
        if shard.set_bits is None or shard.set_bits >= header.m:
            return None
        total += -header.m / header.k * math.log1p(-shard.set_bits / header.m)
    return total


def size_from_last_filter(
    store: Store, scope: str, folder_rows_now: int
) -> DirCountEstimate | None:
    """The last filter's distinct directories times the index's growth since; None if unknown."""
    record = load_sizing_record(store, scope)
    if record is None or record.folder_rows <= 0:
        return None
    info = next((g for g in list_generations(store) if g.generation == record.generation), None)
    if info is None or info.header is None or info.header.scope != scope:
        return None
    held = distinct_keys(info)
    if held is None or held <= 0:
        return None
    growth = folder_rows_now / record.folder_rows
    count = math.ceil(held * growth)
    return DirCountEstimate(
        count,
        f"last filter's {held:,.0f} directories x index growth {growth:.3f}"
        f" ({record.folder_rows:,} -> {folder_rows_now:,} folder rows)",
    )
