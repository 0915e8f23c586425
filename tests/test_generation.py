"""Generation ids round-trip their snapshot and salt."""

from __future__ import annotations

import pytest

from dircleaner.errors import UsageError
from dircleaner.filter.generation import new_generation_id, parse_generation_id


@pytest.mark.parametrize(
    ("snapshot_us", "salt"),
    [(1_795_329_648_248_000, 0xCB491AB7), (0, 0), (1_795_329_648_000_001, 1)],
)
def test_round_trip(snapshot_us: int, salt: int) -> None:
    assert parse_generation_id(new_generation_id(snapshot_us, salt)) == (snapshot_us, salt)


def test_ids_sort_by_time() -> None:
    ids = [new_generation_id(t, 0xFFFFFFFF - t % 7) for t in (10**15, 10**15 + 1, 2 * 10**15)]
    assert ids == sorted(ids)


@pytest.mark.parametrize(
    "bad", ["", "nightly", "20261122T021500Z-5f3a9c01", "20261122T021500.000000Z-5F3A9C0"]
)
def test_malformed_ids_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError, match="invalid generation id"):
        parse_generation_id(bad)
