"""The clean's slices handed out longest first, by what each took in the last run.

Slices are equal token widths, but a wide partition is never split, so one slice can take twice
as long as the others (the 2M benchmark set's ``orders/``, 240k rows, in the last of 8 slices:
one process idled 0.42 s of a 3.0 s sweep). Workers take slices in the order they are given, so
the slowest should go first (longest processing time first). The metastore changes little from
one night to the next, so each run records its slices' first-phase seconds in the store's state
and the next run with the same slices sorts by them. A hint only: a missing, stale or unreadable
record leaves the ring order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from dircleaner.model import Shard
from dircleaner.store.base import Store


def slice_seconds_key(scope: str, shard: Shard, slices: int) -> str:
    """State key of the first-phase seconds of ``shard`` cut into ``slices`` slices."""
    return f"clean_slice_seconds|{scope}|{shard.index}/{shard.count}|{slices}"


def recorded_seconds(store: Store, key: str, slices: int) -> list[float | None]:
    """Each slice's seconds in the last run (None where it did not run, or nothing is known)."""
    unknown: list[float | None] = [None] * slices
    raw = store.get_state(key)
    if raw is None:
        return unknown
    try:
        values = json.loads(raw)
    except ValueError:
        return unknown
    if not isinstance(values, list) or len(values) != slices:
        return unknown
    return [_seconds(v) for v in values]


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def longest_first(todo: Sequence[int], seconds: Sequence[float | None]) -> list[int]:
    """``todo`` (slice indexes) with the slices known to be slowest first; the unknown ones
    after them in ring order (sorting is stable)."""

    def slowest_first(index: int) -> float:
        known = seconds[index]
        return math.inf if known is None else -known

    return sorted(todo, key=slowest_first)


def record_seconds(
    store: Store, key: str, previous: Sequence[float | None], ran: dict[int, float]
) -> None:
    """Remember the slices' first-phase seconds: this run's where they ran, else the last."""
    values = [ran.get(i, old) for i, old in enumerate(previous)]
    store.put_state(key, json.dumps([None if v is None else round(v, 3) for v in values]))
