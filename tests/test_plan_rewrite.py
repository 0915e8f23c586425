"""The partition rewrite and the budget over the grace period, as pure planner decisions.

A rewrite copies every row of a live partition but its verified candidates at T+1 and then
deletes the partition at T. These properties check, on random trees, that what it removes is
exactly the verified candidates (never a row that is not one, nor a row written after T), that
the planner picks it by cost, and that a partition's tombstones summed over the runs of one grace
period (the ledger) never exceed the budget.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dircleaner.model import ActionKind, FolderRow, PartitionFacts, PartitionKey
from dircleaner.paths import dir_of_row
from dircleaner.pipeline.plan import (
    MIN_RANGE_ROWS,
    DeletionPlan,
    choose_rewrite,
    dead_partitions,
    deletes_cost,
    drop_nonempty,
    plan_deletions,
    with_ancestors,
)
from tests.test_plan import empty_dirs_of, perfect_facts, worlds

World = tuple[dict[tuple[str, str], list[FolderRow]], set[tuple[str, str]]]


def rewrite_survivors(
    rows: list[FolderRow], keep_out: set[str], written_after_t: set[str]
) -> set[str]:
    """What the store holds after a rewrite, as Cassandra reconciles it: rows not left out are
    copied at T+1, rows (re)written after T are newer than the delete, the rest go at T."""
    return {r.name for r in rows if r.name not in keep_out} | written_after_t


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(worlds(), worlds(wide=True)),
    st.integers(0, 6),
    st.integers(0, 12),
    st.data(),
)
def test_a_rewrite_never_drops_a_row_that_is_not_a_verified_candidate(
    world: World, budget: int, max_rewrite_rows: int, data: st.DataObject
) -> None:
    partitions, nonempty_at_build = world
    fs, _absent = perfect_facts(partitions, nonempty_at_build, data)
    empty = sorted(empty_dirs_of(fs))
    # Objects land in some empty directories after the build: the re-check drops them.
    revived = data.draw(st.lists(st.sampled_from(empty), unique=True)) if empty else []
    nonempty_now = nonempty_at_build | with_ancestors(revived)
    verified = drop_nonempty(fs, revived)
    plan = plan_deletions(verified, budget, max_rewrite_rows=max_rewrite_rows)
    candidates = {(f.key.bucket, f.key.parent): {r.name for r in f.candidates} for f in verified}
    for action in plan.actions:
        if action.kind is not ActionKind.REWRITE:
            continue
        pk = (action.partition.bucket, action.partition.parent)
        left_out = {r.name for r in action.rows}
        assert left_out <= candidates[pk]
        # Rows the front end (re)writes after T: revived directories' rows, new siblings.
        all_names = [r.name for r in partitions[pk]]
        newer = set(data.draw(st.lists(st.sampled_from([*all_names, "new-sibling"]))))
        after = rewrite_survivors(partitions[pk], left_out, newer)
        removed = {r.name for r in partitions[pk]} - after
        assert removed <= left_out
        for name in removed:
            assert (pk[0], dir_of_row(pk[1], name)) not in nonempty_now
        # Every row that is not a verified candidate is still listed.
        assert {r.name for r in partitions[pk]} - candidates[pk] <= after


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(worlds(), worlds(wide=True)),
    st.integers(0, 6),
    st.integers(0, 12),
    st.dictionaries(st.integers(0, 40), st.integers(0, 8)),
    st.data(),
)
def test_the_planner_rewrites_exactly_the_partitions_over_budget_it_may_copy(
    world: World,
    budget: int,
    max_rewrite_rows: int,
    spent_by_index: dict[int, int],
    data: st.DataObject,
) -> None:
    partitions, nonempty = world
    fs, _absent = perfect_facts(partitions, nonempty, data)
    keys = sorted((f.key.bucket, f.key.parent) for f in fs)
    used = {keys[i]: n for i, n in spent_by_index.items() if i < len(keys)}
    plan = plan_deletions(fs, budget, used, max_rewrite_rows=max_rewrite_rows)
    dead = dead_partitions(fs)
    rewritten = {
        (a.partition.bucket, a.partition.parent)
        for a in plan.actions
        if a.kind is ActionKind.REWRITE
    }
    for fact in fs:
        pk = (fact.key.bucket, fact.key.parent)
        if pk in dead:
            assert pk not in rewritten
            continue
        left = max(0, budget - used.get(pk, 0))
        copy = fact.total_rows - len(fact.candidates)
        expected = max_rewrite_rows > 0 and choose_rewrite(
            deletes_cost(fact), left, copy, max_rewrite_rows
        )
        assert (pk in rewritten) == expected
        if expected:
            # The rewrite takes every candidate at once, and no row or range delete.
            (action,) = [a for a in plan.actions if a.partition == fact.key]
            assert action.rows == fact.candidates
        else:
            assert plan.row_tombstones.get(pk, 0) <= left
    assert plan.rewrite_rows == sum(
        f.total_rows - len(f.candidates) for f in fs if (f.key.bucket, f.key.parent) in rewritten
    )
    # Rewrites come first: a store that cannot copy the columns refuses before any delete.
    kinds = [a.kind for a in plan.actions]
    assert kinds == sorted(kinds, key=lambda k: k is not ActionKind.REWRITE)


def test_choose_rewrite_by_cost_and_size() -> None:
    assert choose_rewrite(cost=11, budget_left=10, rows_to_copy=5, max_rewrite_rows=5)
    assert not choose_rewrite(cost=10, budget_left=10, rows_to_copy=5, max_rewrite_rows=5)
    assert not choose_rewrite(cost=11, budget_left=10, rows_to_copy=6, max_rewrite_rows=5)
    assert choose_rewrite(cost=1, budget_left=0, rows_to_copy=0, max_rewrite_rows=1)


def wide(parent: str, total: int, empties: list[int]) -> PartitionFacts:
    key = PartitionKey(7, "b", parent)
    rows = tuple(FolderRow(7, "b", parent, f"c{i:05d}") for i in empties)
    return PartitionFacts(key, total, rows, False, tuple(empties))


def test_a_wide_partition_is_rewritten_in_one_run_and_costs_no_tombstone() -> None:
    # 60 empty children scattered among 120 live ones (every third row): 60 row deletes.
    fact = wide("usr/share/doc/", 180, list(range(0, 180, 3)))
    assert deletes_cost(fact) == 60
    plan = plan_deletions([fact], 25, max_rewrite_rows=1000)
    (action,) = plan.actions
    assert action.kind is ActionKind.REWRITE and action.tombstones == 0
    assert plan.deferred == () and plan.rewrite_rows == 120
    assert dict(plan.row_tombstones) == {}
    # Too many rows to copy: deletes within the budget, the rest deferred.
    capped = plan_deletions([fact], 25, max_rewrite_rows=119)
    assert capped.deletes.rewrite == 0 and capped.row_tombstones[("b", "usr/share/doc/")] == 25
    assert len(capped.deferred) == 35
    # A sweep that may not see every row: no rewrite (as no range).
    assert plan_deletions([fact], 25, ranges=False, max_rewrite_rows=1000).deletes.rewrite == 0


def test_runs_count_ranges_as_two_in_the_cost() -> None:
    fact = wide("p/", 20, [0, 1, 2, 3, 5, 7, 8])  # a run of four, a single, a pair
    assert deletes_cost(fact) == 2 + 1 + 2
    assert deletes_cost(fact, min_range=10**9) == 7
    assert MIN_RANGE_ROWS == 3


def run_in_window(
    fs: list[PartitionFacts], budget: int, ledger: Counter[tuple[str, str]], rewrite: int
) -> tuple[DeletionPlan, list[PartitionFacts]]:
    """One run: plan with what the ledger holds, charge it; the facts left for the next run."""
    plan = plan_deletions(fs, budget, dict(ledger), max_rewrite_rows=rewrite)
    ledger.update(plan.row_tombstones)
    gone = {r for a in plan.actions for r in a.rows}
    left = []
    for fact in fs:
        keep = [i for i, r in enumerate(fact.candidates) if r not in gone]
        if keep:
            rows = tuple(fact.candidates[i] for i in keep)
            ordinals = tuple(fact.ordinals[i] for i in keep) if fact.ordinals else ()
            left.append(PartitionFacts(fact.key, fact.total_rows, rows, fact.dir_absent, ordinals))
    return plan, left


@settings(max_examples=150, deadline=None)
@given(st.one_of(worlds(), worlds(wide=True)), st.integers(0, 6), st.integers(1, 6), st.data())
def test_runs_within_one_grace_period_never_exceed_the_budget_together(
    world: World, budget: int, runs: int, data: st.DataObject
) -> None:
    """The ledger sums every run of the window: row and range deletes of all runs together
    stay within the budget of each partition, rewrites or not."""
    partitions, nonempty = world
    fs, _absent = perfect_facts(partitions, nonempty, data)
    rewrite = data.draw(st.sampled_from([0, 3, 1000]))
    ledger: Counter[tuple[str, str]] = Counter()
    for _ in range(runs):
        _plan, fs = run_in_window(fs, budget, ledger, rewrite)
    assert all(n <= budget for n in ledger.values())


@pytest.mark.parametrize("budget", [0, 1, 5])
def test_with_rewrites_one_run_clears_every_partition_it_may_copy(budget: int) -> None:
    facts = [wide(f"w{i}/", 40, list(range(0, 40, 2))) for i in range(3)]
    plan = plan_deletions(facts, budget, max_rewrite_rows=20)
    assert plan.deferred == () and plan.deletes.rewrite == 3
