"""Sharing a dataset's empty directories among the layouts and the set pieces (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dircleaner.synth.layouts import TMP_DIRS, TMP_EMPTIES, WIDE_CHILDREN
from dircleaner.synth.shares import (
    SET_PIECES_MIN_EMPTIES,
    WIDE_DAY_MAX_SHARE,
    WIDE_DAY_MIN_CHILDREN,
    share_empties,
)
from dircleaner.synth.spec import LAYOUT_MIX, MAX_EMPTY_FRACTION


def budgets_for(dirs: int) -> dict[str, int]:
    """The layout budgets plan_jobs gives ``dirs`` directories."""
    total = max(0, dirs - TMP_DIRS)
    budgets = {name: int(total * share) for name, share in LAYOUT_MIX}
    budgets["ids"] += total - sum(budgets.values())
    budgets["tmp"] = TMP_DIRS
    return budgets


def empties_of(dirs: int, fraction: float) -> dict[str, float]:
    budgets = budgets_for(dirs)
    shares = share_empties(dirs, fraction, budgets)
    return {name: f * budgets[name] for name, f in shares.fractions.items()}


@settings(max_examples=300, deadline=None)
@given(
    dirs=st.integers(min_value=10_000, max_value=40_000_000),
    fraction=st.floats(min_value=0.0, max_value=MAX_EMPTY_FRACTION),
)
def test_whole_numbers_of_empties_add_up_to_the_share(dirs: int, fraction: float) -> None:
    empties = empties_of(dirs, fraction)
    assert all(abs(n - round(n)) < 1e-6 and n >= 0 for n in empties.values())
    assert round(sum(empties.values())) == round(fraction * dirs)
    budgets = budgets_for(dirs)
    assert all(empties[name] <= budgets[name] for name in empties)


def test_a_share_of_a_few_directories_in_millions_is_not_rounded_away() -> None:
    # The talk's steady cluster: 352 empty of 31.5M, 88 of them in a layout of 7.9M.
    empties = empties_of(31_500_000, 352 / 31_500_000)
    assert sum(empties.values()) == 352
    one = empties_of(5_000_000, 1 / 5_000_000)
    assert sorted(one.values()) == [0, 0, 0, 0, 0, 1]


def test_no_share_no_set_pieces() -> None:
    shares = share_empties(1_000_000, 0.0, budgets_for(1_000_000))
    assert set(shares.fractions.values()) == {0.0}
    assert shares.wide_children == 0 and not shares.set_pieces


@pytest.mark.parametrize(
    ("dirs", "fraction", "pieces"),
    [
        (10_000, 0.05, True),  # 500 empties: room for the small pieces
        (10_000, 0.04, False),  # 400: not
        (31_500_000, 352 / 31_500_000, False),
    ],
)
def test_the_small_set_pieces_need_room(dirs: int, fraction: float, pieces: bool) -> None:
    shares = share_empties(dirs, fraction, budgets_for(dirs))
    assert shares.set_pieces is pieces is (fraction * dirs >= SET_PIECES_MIN_EMPTIES)
    assert shares.fractions["tmp"] * TMP_DIRS == (TMP_EMPTIES if pieces else 0)


@pytest.mark.parametrize(
    ("dirs", "fraction", "children"),
    [
        (1_000_000, 0.05, WIDE_CHILDREN),  # the whole wide day, a small part of the share
        (10_000, 0.05, 395),  # 80% of the 494 empties besides tmp/, one directory a child
        (10_000, 0.02, 0),  # 200 empties: 160 children would be too few to make the day
        (2_000, 0.9, 0),  # 500 directories of dates cannot hold a 677-directory day
        (31_500_000, 352 / 31_500_000, 0),
    ],
)
def test_the_wide_day_takes_at_most_its_share(dirs: int, fraction: float, children: int) -> None:
    budgets = budgets_for(dirs)
    shares = share_empties(dirs, fraction, budgets)
    assert shares.wide_children == children
    assert children == 0 or children >= WIDE_DAY_MIN_CHILDREN
    dates_empties = shares.fractions["dates"] * budgets["dates"]
    assert dates_empties >= children
    assert children <= WIDE_DAY_MAX_SHARE * fraction * dirs
