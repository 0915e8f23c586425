"""Tests of the safety guards: stale, overfull and empty filters, too many candidates, --force."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from dircleaner.errors import (
    FilterStale,
    FilterSuspiciouslyEmpty,
    FilterTooFull,
    GuardRefused,
    TooManyCandidates,
)
from dircleaner.filter.format import FilterHeader
from dircleaner.pipeline.guards import GuardConfig, check_filter, check_sweep

NOW_US = 1_767_225_600_000_000
HOUR_US = 3_600_000_000
DAY_US = 24 * HOUR_US

HEADER = FilterHeader(
    engine="mmh3",
    hash_name="murmur3_x64_128",
    salt=1234,
    m=958_506,
    k=7,
    expected_n=100_000,
    target_p=0.01,
    snapshot_us=NOW_US - HOUR_US,
    shard_index=0,
    shard_count=1,
    items=80_000,
    scope="sqlite:objects,folders",
    body_len=119_814,
    body_crc=0xDEADBEEF,
)
DEFAULT = GuardConfig()
FORCE = GuardConfig(force=True)


def aged(age_us: int) -> FilterHeader:
    return replace(HEADER, snapshot_us=NOW_US - age_us)


def test_defaults() -> None:
    expected = GuardConfig(
        max_delete_fraction=0.10, max_filter_age_s=86_400.0, max_fpr_factor=4.0, force=False
    )
    assert expected == DEFAULT


def test_every_refusal_is_a_guard_refusal_with_exit_code_3() -> None:
    for cls in (FilterStale, FilterSuspiciouslyEmpty, FilterTooFull, TooManyCandidates):
        assert issubclass(cls, GuardRefused)
        assert cls.exit_code == 3


# -- check_filter: staleness -----------------------------------------------------------------------


def test_a_fresh_filter_passes() -> None:
    check_filter(HEADER, 0.01, NOW_US, DEFAULT)  # does not raise


def test_a_filter_exactly_max_age_old_passes() -> None:
    check_filter(aged(DAY_US), 0.01, NOW_US, DEFAULT)  # does not raise


def test_a_filter_one_microsecond_over_max_age_is_stale() -> None:
    with pytest.raises(FilterStale, match="--max-filter-age"):
        check_filter(aged(DAY_US + 1), 0.01, NOW_US, DEFAULT)


def test_stale_message_names_the_option_and_the_fix() -> None:
    config = GuardConfig(max_filter_age_s=3600.0)
    with pytest.raises(FilterStale) as caught:
        check_filter(aged(2 * DAY_US), 0.01, NOW_US, config)
    assert str(caught.value) == (
        "the filter is 48h00m old, over --max-filter-age 1h00m; rebuild it with 'dircleaner build'"
    )


def test_a_filter_from_the_future_is_not_stale() -> None:
    # Clock skew between the building host and this one must not trip the guard.
    check_filter(aged(-HOUR_US), 0.01, NOW_US, DEFAULT)  # does not raise


def test_max_filter_age_zero_refuses_any_age() -> None:
    config = GuardConfig(max_filter_age_s=0.0)
    check_filter(aged(0), 0.01, NOW_US, config)  # same instant: 0 s old, passes
    with pytest.raises(FilterStale):
        check_filter(aged(1), 0.01, NOW_US, config)


# -- check_filter: fullness ------------------------------------------------------------------------


def test_fpr_exactly_at_the_limit_passes() -> None:
    limit = HEADER.target_p * DEFAULT.max_fpr_factor
    check_filter(HEADER, limit, NOW_US, DEFAULT)  # does not raise


def test_fpr_just_above_the_limit_is_too_full() -> None:
    limit = HEADER.target_p * DEFAULT.max_fpr_factor
    with pytest.raises(FilterTooFull) as caught:
        check_filter(HEADER, math.nextafter(limit, 1.0), NOW_US, DEFAULT)
    assert str(caught.value) == (
        "the filter's effective false-positive rate 0.04 is over 4x its target 0.01"
        " (it was sized for 100,000 directories); rebuild with a larger --expected-dirs"
    )


def test_fpr_factor_is_configurable() -> None:
    config = GuardConfig(max_fpr_factor=1.5)
    check_filter(HEADER, 0.015, NOW_US, config)  # does not raise
    with pytest.raises(FilterTooFull, match=r"over 1\.5x its target"):
        check_filter(HEADER, 0.0151, NOW_US, config)


def test_staleness_is_checked_before_fullness() -> None:
    with pytest.raises(FilterStale):
        check_filter(aged(2 * DAY_US), 0.9, NOW_US, DEFAULT)


def test_force_bypasses_the_filter_checks() -> None:
    check_filter(aged(365 * DAY_US), 0.9, NOW_US, FORCE)  # does not raise


# -- check_sweep -----------------------------------------------------------------------------------


def test_sweep_within_the_fraction_passes() -> None:
    check_sweep(HEADER, 1000, 0, DEFAULT)
    check_sweep(HEADER, 1000, 99, DEFAULT)  # does not raise


@pytest.mark.parametrize(
    ("fraction", "swept", "at_limit"),
    [(0.10, 100, 10), (0.10, 1000, 100), (0.3, 10, 3), (0.07, 100, 7), (0.5, 2, 1), (1.0, 7, 7)],
)
def test_candidates_exactly_at_the_fraction_pass(
    fraction: float, swept: int, at_limit: int
) -> None:
    check_sweep(HEADER, swept, at_limit, GuardConfig(max_delete_fraction=fraction))


@pytest.mark.parametrize(
    ("fraction", "swept", "over"),
    [(0.10, 100, 11), (0.10, 1000, 101), (0.3, 10, 4), (0.07, 100, 8), (0.0, 1000, 1)],
)
def test_candidates_just_above_the_fraction_are_refused(
    fraction: float, swept: int, over: int
) -> None:
    with pytest.raises(TooManyCandidates, match="--max-delete-fraction"):
        check_sweep(HEADER, swept, over, GuardConfig(max_delete_fraction=fraction))


def test_too_many_candidates_message_names_the_options() -> None:
    with pytest.raises(TooManyCandidates) as caught:
        check_sweep(HEADER, 200, 50, DEFAULT)
    assert str(caught.value) == (
        "50 of 200 directories (25.0%) would be deleted, over --max-delete-fraction 0.1;"
        " check the store, then rerun with a higher --max-delete-fraction or --force"
    )


def test_the_counts_of_a_refusal_are_separated_by_thousands() -> None:
    """As every other count the job prints: 130,022 of 200,034, not 130022 of 200034."""
    with pytest.raises(TooManyCandidates) as caught:
        check_sweep(HEADER, 200_034, 130_022, DEFAULT)
    assert str(caught.value).startswith("130,022 of 200,034 directories (65.0%) would be deleted")
    with pytest.raises(FilterSuspiciouslyEmpty) as empty:
        check_sweep(replace(HEADER, items=0), 12_345, 0, DEFAULT)
    assert "while the folder index has 12,345 rows" in str(empty.value)


def test_an_empty_filter_over_a_non_empty_index_is_suspicious() -> None:
    empty = replace(HEADER, items=0)
    with pytest.raises(FilterSuspiciouslyEmpty) as caught:
        check_sweep(empty, 500, 0, DEFAULT)
    message = str(caught.value)
    assert message.startswith("the filter holds no directory while the folder index has 500 rows")
    assert "--force" in message  # the option that overrides the guard


def test_the_empty_filter_check_comes_before_the_fraction() -> None:
    with pytest.raises(FilterSuspiciouslyEmpty):
        check_sweep(replace(HEADER, items=0), 500, 500, DEFAULT)


def test_nothing_swept_passes_even_with_an_empty_filter() -> None:
    check_sweep(replace(HEADER, items=0), 0, 0, DEFAULT)  # does not raise


def test_force_bypasses_the_sweep_checks() -> None:
    check_sweep(replace(HEADER, items=0), 500, 500, FORCE)  # does not raise
    check_sweep(HEADER, 100, 100, GuardConfig(max_delete_fraction=0.0, force=True))
