"""The default live-tombstone budget follows the lowest tombstone warning the cluster has set."""

from __future__ import annotations

import pytest

from dircleaner.pipeline.budget import resolve_budget
from dircleaner.store import open_store
from dircleaner.store.cassandra.deletes import lowest_warn_threshold


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        # Cassandra 5.0's defaults: the guardrail off, the read-time warning at 1000
        (
            {"partition_tombstones_warn_threshold": "-1", "tombstone_warn_threshold": "1000"},
            (1000, "tombstone_warn_threshold"),
        ),
        # the guardrail set lower: its warning comes first
        (
            {"partition_tombstones_warn_threshold": "400", "tombstone_warn_threshold": "1000"},
            (400, "partition_tombstones_warn_threshold"),
        ),
        (
            {"partition_tombstones_warn_threshold": "5000", "tombstone_warn_threshold": "1000"},
            (1000, "tombstone_warn_threshold"),
        ),
        # a node before 5.0: no guardrail row
        ({"tombstone_warn_threshold": "1000"}, (1000, "tombstone_warn_threshold")),
        (
            {"partition_tombstones_warn_threshold": "300"},
            (300, "partition_tombstones_warn_threshold"),
        ),
        ({"tombstone_warn_threshold": "-1"}, None),
        ({"tombstone_warn_threshold": "null"}, None),
        ({}, None),
    ],
)
def test_lowest_warn_threshold(
    settings: dict[str, object], expected: tuple[int, str] | None
) -> None:
    assert lowest_warn_threshold(settings) == expected


@pytest.mark.cassandra
def test_the_budget_names_the_setting_it_came_from(cassandra_url: str) -> None:
    from tests.test_cassandra_end_to_end import _init_keyspace

    url = _init_keyspace(cassandra_url, "scancons")
    with open_store(url) as store:
        budget = resolve_budget(store, None)
        threshold = store.tombstone_warn_threshold()
    assert threshold is not None
    value, where = threshold
    assert where.endswith("in system_views.settings")
    assert where.split()[0] in ("tombstone_warn_threshold", "partition_tombstones_warn_threshold")
    assert budget.per_partition == value // 2
    assert budget.source == f"half of {value}, {where}"
