"""One slice's clean: sweep and re-check (phase 1), then plan and delete what every slice found
still empty (phase 2); and the slices' delete statistics merged into one."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from dircleaner.filter.engines import Filter
from dircleaner.model import FolderRow, PartitionFacts, PartitionKey, Shard
from dircleaner.paths import dir_of_row
from dircleaner.pipeline.budget import LedgerRead, charged_so_far, ledger_keys
from dircleaner.pipeline.build import BuildConfig, build_filter
from dircleaner.pipeline.delete import DeleteStats, ThrottleConfig
from dircleaner.pipeline.slice import (
    DeleteOrders,
    merge_delete_stats,
    plan_and_delete,
    plan_slice,
    sweep_and_recheck,
    sweep_recheck_and_read_ledger,
)
from dircleaner.progress import no_progress
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.records import TombstoneCharge
from dircleaner.timeutil import now_us

B = "b"
KEEP = ["keep/a/x"]
GONE = ["gone/b/y", "gone/c/z", "late/d/w"]


@pytest.fixture
def swept(tmp_path: Path) -> Iterator[tuple[Store, Filter]]:
    """A store whose GONE objects were deleted, its filter built; then an object put into
    late/d/ after the build, as a writer may at any time."""
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        store.put_objects(B, KEEP + GONE, 1)
        store.delete_objects(B, GONE, 2)
        built = build_filter(store, BuildConfig(persist=False)).in_memory
        assert built is not None
        store.put_objects(B, ["late/d/w2"], 3)
        yield store, built[1]


def orders(dry_run: bool = False) -> DeleteOrders:
    return DeleteOrders(
        max_row_tombstones=100,
        ledger_ttl_s=3600.0,
        max_rewrite_rows=0,
        delete_timestamp_us=now_us(),
        generation="g",
        throttle=ThrottleConfig(rate=0),
        audit_log=None,
        dry_run=dry_run,
    )


def listed(store: Store) -> set[str]:
    return {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows(B)}


def test_the_recheck_keeps_a_directory_that_gained_an_object(
    swept: tuple[Store, Filter],
) -> None:
    store, filt = swept
    first, facts = sweep_and_recheck(store, Shard(), None, filt, True, no_progress)
    assert first.totals.candidates == 5  # gone/ gone/b/ gone/c/ late/ late/d/
    assert first.nonempty == {(B, "late/d/")}
    cleaned = plan_and_delete(store, facts, first.nonempty, orders(), no_progress)
    assert cleaned.deleted is not None and cleaned.deleted.directories == 3
    assert listed(store) == {"keep/", "keep/a/", "late/", "late/d/"}


def test_without_the_recheck_nothing_is_found_non_empty(swept: tuple[Store, Filter]) -> None:
    store, filt = swept
    first, facts = sweep_and_recheck(store, Shard(), None, filt, False, no_progress)
    assert (first.nonempty, first.checked) == (frozenset(), 0)
    candidates = {dir_of_row(r.parent, r.name) for f in facts for r in f.candidates}
    assert candidates == {"gone/", "gone/b/", "gone/c/", "late/", "late/d/"}


def test_a_dry_run_plans_and_deletes_nothing(swept: tuple[Store, Filter]) -> None:
    store, filt = swept
    before = listed(store)
    first, facts = sweep_and_recheck(store, Shard(), None, filt, True, no_progress)
    cleaned = plan_and_delete(store, facts, first.nonempty, orders(dry_run=True), no_progress)
    assert cleaned.deleted is None and cleaned.plan.directories == 3
    assert listed(store) == before


def test_a_store_read_from_threads_reads_the_ledger_during_the_recheck(
    swept: tuple[Store, Filter],
) -> None:
    """Where reads overlap, phase 1 reads the candidates' ledger charges while it re-checks;
    phase 2 plans on them as it would have on its own reads."""
    store, filt = swept
    store.charge_tombstones([TombstoneCharge(B, "", "old", "c1", 7)], 3600.0)
    _first, facts_alone, alone = sweep_recheck_and_read_ledger(
        store, Shard(), None, filt, True, no_progress
    )
    assert alone is None  # SQLite runs one statement at a time: nothing to overlap
    store.traits = dataclasses.replace(store.traits, concurrent_reads=True)
    first, facts, ledger = sweep_recheck_and_read_ledger(
        store, Shard(), None, filt, True, no_progress
    )
    assert ledger is not None
    assert ledger.keys == frozenset(ledger_keys(facts)) == {(B, "")}
    assert ledger.charged == {(B, ""): 7}
    ahead = plan_slice(store, facts, first.nonempty, orders(), ledger)
    assert ahead == plan_slice(store, facts_alone, first.nonempty, orders())


def test_the_plan_reads_only_the_partitions_the_read_ahead_missed() -> None:
    """A partition the read ahead skipped (dead then, live once a non-empty find from another
    slice dropped a row) is read by the plan; the others are not read again."""
    asked: list[list[tuple[str, str]]] = []

    class Ledger:
        def tombstones_charged(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
            asked.append(list(keys))
            return {key: 3 for key in keys}

    facts = _facts_of_two_partitions()
    read = LedgerRead(frozenset({(B, "live/")}), {(B, "live/"): 5})
    charged = charged_so_far(Ledger(), facts, read)
    assert asked == [[(B, "dead/")]]
    assert charged == {(B, "live/"): 5, (B, "dead/"): 3}


def _facts_of_two_partitions() -> list[PartitionFacts]:
    """A live partition (one of its two rows a candidate) and one that a dropped row left
    live (not every row a candidate any more)."""
    return [
        PartitionFacts(
            key=PartitionKey(1, B, "live/"),
            total_rows=2,
            candidates=(FolderRow(1, B, "live/", "a"),),
            ordinals=(0,),
        ),
        PartitionFacts(
            key=PartitionKey(2, B, "dead/"),
            total_rows=2,
            candidates=(FolderRow(2, B, "dead/", "b"),),
            ordinals=(1,),
        ),
    ]


def test_merged_delete_stats_add_up_and_rates_sum() -> None:
    a = DeleteStats(row_deletes=2, directories=3, final_rate=10.0, seconds=4.0, rows_removed=3)
    b = DeleteStats(range_deletes=1, directories=2, final_rate=5.0, seconds=6.0, rows_removed=1)
    merged = merge_delete_stats([a, None, b])
    assert merged is not None
    assert (merged.row_deletes, merged.range_deletes, merged.directories) == (2, 1, 5)
    assert (merged.final_rate, merged.seconds, merged.rows_removed) == (15.0, 6.0, 4)
    blind = merge_delete_stats([a, DeleteStats(directories=1, failures=["x"])])
    assert blind is not None and blind.rows_removed is None and blind.failures == ["x"]
    assert merge_delete_stats([None, None]) is None
