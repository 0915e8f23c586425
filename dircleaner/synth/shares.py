"""How a dataset's empty directories are shared among its layouts and its set pieces (pure).

The set pieces are deletions at known places that tests and demos look for: the wide day's
emptied children (the talk's ``11.04.2026/AA/`` … ``ZZ/``), and the small ones (the deleted
``tmp/`` uploads, a third of the odd names, user ``u000003``'s deep chain). Each is made only when
the dataset's share of empties has room for it, so that any share, down to a handful of
directories in millions, comes out as asked; every layout then aims at what is left, by its own
feedback.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from dircleaner.synth.layouts import (
    DEEP_CHAIN_MAX,
    ODD_EMPTIES,
    TMP_EMPTIES,
    WIDE_CHILDREN,
    wide_day_empties,
)

#: The small set pieces are made when the dataset is to hold at least this many empties (they
#: are then at most an eighth of them).
SET_PIECES_MIN_EMPTIES = 8 * (TMP_EMPTIES + ODD_EMPTIES + DEEP_CHAIN_MAX)
#: The wide day takes at most this share of the dataset's empties ...
WIDE_DAY_MAX_SHARE = 0.8
#: ... and is emptied only if that leaves at least this many of its children to empty.
WIDE_DAY_MIN_CHILDREN = 200


@dataclass(frozen=True)
class EmptyShares:
    """Each layout's share of its own directories to leave empty, and the set pieces to make."""

    fractions: Mapping[str, float]
    wide_children: int
    set_pieces: bool


def share_empties(
    dirs: int, empty_fraction: float, budgets: Mapping[str, int], tmp_layout: str = "tmp"
) -> EmptyShares:
    """Split ``empty_fraction`` of ``dirs`` directories among layouts of these ``budgets``.

    The dates layout carries the wide day (``wide_children`` of its children emptied), so it aims
    at least that high; the tmp layout's empties are fixed; every other layout aims at the same
    share of what is left. Each layout is given a whole number of empties, together the nearest
    whole number to ``empty_fraction`` of ``dirs``, so a tiny share is not lost to rounding in
    every layout.
    """
    wanted = empty_fraction * dirs
    set_pieces = wanted >= SET_PIECES_MIN_EMPTIES
    fixed = float(TMP_EMPTIES) if set_pieces else 0.0
    dates = budgets.get("dates", 0)
    per_child = wide_day_empties(dates, 1) if dates else 1.0
    room = WIDE_DAY_MAX_SHARE * max(0.0, wanted - fixed)
    wide_children = min(WIDE_CHILDREN, math.floor(room / per_child)) if dates else 0
    if wide_children < WIDE_DAY_MIN_CHILDREN or 1 + 676 * per_child > dates / 2:
        wide_children = 0  # (too few to make a wide day, or a dates layout too small for one)
    dates_empties = max(empty_fraction * dates, wide_children * per_child)
    others = sum(b for name, b in budgets.items() if name not in ("dates", tmp_layout))
    other_fraction = max(0.0, wanted - fixed - dates_empties) / max(1, others)
    counts = {
        name: (
            dates_empties
            if name == "dates"
            else fixed
            if name == tmp_layout
            else other_fraction * budget
        )
        for name, budget in budgets.items()
        if budget > 0
    }
    # The counts add up to ``wanted`` unless the wide day needs more; their float sum may sit a
    # hair above it, which must not round the total up past round(wanted).
    needed = sum(counts.values())
    total = round(needed) if needed - wanted > 1e-6 * max(1.0, wanted) else round(wanted)
    whole = _whole_numbers(counts, total)
    fractions = {name: whole[name] / budgets[name] for name in counts}
    return EmptyShares(fractions, wide_children, set_pieces)


def _whole_numbers(counts: Mapping[str, float], total: int) -> dict[str, int]:
    """``counts`` rounded to whole numbers adding up to ``total`` (largest remainders first;
    ties by name, so the result does not depend on the mapping's order)."""
    floors = {name: math.floor(c) for name, c in counts.items()}
    short = total - sum(floors.values())
    by_remainder = sorted(counts, key=lambda name: (floors[name] - counts[name], name))
    for name in by_remainder[: max(0, short)]:
        floors[name] += 1
    return floors
