"""One slice's clean: sweep and re-check (phase 1), then plan and delete what every slice found
still empty (phase 2); and the slices' delete statistics merged into one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dircleaner.filter.engines import Filter
from dircleaner.model import KindTally, Shard
from dircleaner.paths import dir_of_row
from dircleaner.pipeline.build import BuildConfig, build_filter
from dircleaner.pipeline.delete import DeleteStats, ThrottleConfig
from dircleaner.pipeline.slice import (
    DeleteOrders,
    merge_delete_stats,
    plan_and_delete,
    sweep_and_recheck,
)
from dircleaner.progress import no_progress
from dircleaner.store import open_store
from dircleaner.store.base import Store
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


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_candidates_go_once_planned_whoever_holds_their_list(
    swept: tuple[Store, Filter], dry_run: bool
) -> None:
    """The deletes hold only the plan: the candidates the first phase kept (still referred to
    by the worker's state between the phases) are let go once planned, so a slice's candidates
    do not stay in memory beside its plan through the deletes."""
    store, filt = swept
    first, facts = sweep_and_recheck(store, Shard(), None, filt, True, no_progress)
    kept = (facts, first.nonempty)
    assert len(kept[0]) == 3  # gone/, gone/'s own partition, late/
    cleaned = plan_and_delete(store, kept[0], first.nonempty, orders(dry_run), no_progress)
    assert cleaned.plan.directories == 3
    assert len(kept[0]) == 0 and list(kept[0]) == []


def test_merged_delete_stats_add_up_and_shared_rates_average() -> None:
    a = DeleteStats(
        deletes=KindTally(row=2), directories=3, final_rate=10.0, seconds=4.0, rows_removed=3
    )
    b = DeleteStats(
        deletes=KindTally(range=1), directories=2, final_rate=5.0, seconds=6.0, rows_removed=1
    )
    merged = merge_delete_stats([a, None, b], 6.0)
    assert merged is not None
    assert (merged.deletes.row, merged.deletes.range, merged.directories) == (2, 1, 5)
    # each slice reports the rate all slices made together under the shared --rate
    assert (merged.final_rate, merged.seconds, merged.rows_removed) == (7.5, 6.0, 4)
    blind = merge_delete_stats([a, DeleteStats(directories=1, failures=["x"])], 1.0)
    assert blind is not None and blind.rows_removed is None and blind.failures == ["x"]
    assert merge_delete_stats([None, None], 1.0) is None
