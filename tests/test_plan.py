"""Tests of the pure deletion planner: subtree collapse, budgets, round robin, re-check drops."""

from __future__ import annotations

import itertools
import pickle
from collections import Counter
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dircleaner.model import (
    RANGE_TOMBSTONES,
    ActionKind,
    DeleteAction,
    FolderRange,
    FolderRow,
    KindTally,
    PartitionFacts,
    PartitionKey,
)
from dircleaner.paths import dir_of_row, directories_of, folder_row_of
from dircleaner.pipeline.plan import (
    MIN_RANGE_ROWS,
    DeletionPlan,
    PlanSummary,
    drop_nonempty,
    plan_deletions,
    round_robin,
    with_ancestors,
)
from dircleaner.store.records import murmur_token

B = "bkt"

# Hand-picked tokens so that ordering expectations are readable; parents not listed get 1000+.
TOKENS = {"": 50, "x/": 10, "x/y/": 20, "x/z/": 30, "a/": 40, "p/": 1, "q/": 2, "r/": 3}


def empty_dirs_of(facts: Iterable[PartitionFacts]) -> set[tuple[str, str]]:
    """Every directory the facts show to be empty: candidates and absent partition dirs (what
    the planner's answers are checked against)."""
    out: set[tuple[str, str]] = set()
    for fact in facts:
        if fact.dir_absent:
            out.add((fact.key.bucket, fact.key.parent))
        out.update((row.bucket, dir_of_row(row.parent, row.name)) for row in fact.candidates)
    return out


def tok(parent: str, bucket: str = B) -> int:
    return TOKENS.get(parent, 1000 + len(parent)) if bucket == B else murmur_token(bucket, parent)


def row(parent: str, name: str, bucket: str = B) -> FolderRow:
    return FolderRow(tok(parent, bucket), bucket, parent, name)


def key(parent: str, bucket: str = B) -> PartitionKey:
    return PartitionKey(tok(parent, bucket), bucket, parent)


def facts(
    parent: str,
    total: int,
    names: Iterable[str],
    absent: bool = False,
    bucket: str = B,
    ordinals: Iterable[int] = (),
) -> PartitionFacts:
    return PartitionFacts(
        key(parent, bucket),
        total,
        tuple(row(parent, n, bucket) for n in names),
        absent,
        tuple(ordinals),
    )


def part(parent: str, names: Iterable[str], bucket: str = B) -> DeleteAction:
    return DeleteAction(
        ActionKind.PARTITION, key(parent, bucket), tuple(row(parent, n, bucket) for n in names)
    )


def rowdel(parent: str, name: str, bucket: str = B) -> DeleteAction:
    return DeleteAction(ActionKind.ROW, key(parent, bucket), (row(parent, name, bucket),))


def rangedel(parent: str, names: Iterable[str], bucket: str = B) -> DeleteAction:
    return DeleteAction(
        ActionKind.RANGE, key(parent, bucket), tuple(row(parent, n, bucket) for n in names)
    )


# -- PartitionFacts and plan basics ----------------------------------------------------------------


def test_partition_facts_refuse_more_candidates_than_rows() -> None:
    with pytest.raises(ValueError, match="'x/': more candidates than rows"):
        facts("x/", 1, ["a", "b"])


def test_partition_facts_allow_as_many_candidates_as_rows() -> None:
    assert len(facts("x/", 2, ["a", "b"]).candidates) == 2


def test_unchecked_facts_are_the_facts_the_class_builds() -> None:
    """The sweep's constructor sets every field, equal and pickled alike; a new field added to
    the class without it fails here."""
    from dataclasses import fields

    from dircleaner.model import unchecked_facts

    args = (key("x/"), 4, (row("x/", "a"), row("x/", "c")), True, (0, 2), True)
    fact = unchecked_facts(*args)
    assert fact == PartitionFacts(*args)
    assert [getattr(fact, f.name) for f in fields(PartitionFacts)] == list(args)
    assert pickle.loads(pickle.dumps(fact)) == fact
    # Pickling names every field (a field it left out would come back as its default).
    assert fact.__reduce__()[1] == tuple(getattr(fact, f.name) for f in fields(PartitionFacts))
    with pytest.raises(AttributeError):
        fact.total_rows = 5  # type: ignore[misc]


def test_unchecked_facts_takes_the_fields_in_field_order() -> None:
    import inspect
    from dataclasses import fields

    from dircleaner.model import unchecked_facts

    params = list(inspect.signature(unchecked_facts).parameters)
    assert params == [f.name for f in fields(PartitionFacts)]


def test_a_field_unchecked_facts_does_not_take_is_refused() -> None:
    """A field added to the class, one moved, or a parameter renamed: the setters are refused
    (at import, for ``PartitionFacts``) rather than leaving a field unset or set from another."""
    from dataclasses import dataclass

    from dircleaner.model import _field_setters, unchecked_facts

    @dataclass(frozen=True, slots=True)
    class Grown(PartitionFacts):
        extra: int = 0

    with pytest.raises(TypeError, match="does not take Grown's fields"):
        _field_setters(Grown, unchecked_facts)

    def moved(
        key: object,
        total_rows: object,
        candidates: object,
        ordinals: object,
        dir_absent: object,
        parent_dir_absent: object,
    ) -> PartitionFacts:
        raise AssertionError("never called")

    with pytest.raises(TypeError, match=r"^moved\('key', 'total_rows', 'candidates', 'ordinals'"):
        _field_setters(PartitionFacts, moved)


def test_no_facts_give_an_empty_plan() -> None:
    plan = plan_deletions([], 10)
    assert plan.actions == ()
    assert plan.deferred == ()
    assert dict(plan.row_tombstones) == {}
    assert (plan.deletes.partition, plan.deletes.row, plan.directories) == (0, 0, 0)


def test_a_lone_candidates_row_delete_holds_its_facts_tuple_not_a_copy() -> None:
    """The plan lives beside the candidates until the deletes: a live partition's lone
    candidate (the common case) is deleted by an action holding the fact's own one-row tuple."""
    lone = facts("p/", 5, ["b"], ordinals=[1])
    apart = facts("q/", 5, ["a", "c"], ordinals=[0, 2])
    plan = plan_deletions([lone, apart], max_row_tombstones=10)
    assert plan.actions == (rowdel("p/", "b"), rowdel("q/", "a"), rowdel("q/", "c"))
    assert plan.actions[0].rows is lone.candidates


def test_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="max_row_tombstones must be >= 0"):
        plan_deletions([facts("a/", 3, ["k"])], -1)


def test_plan_counters() -> None:
    plan = DeletionPlan(
        (part("x/", ["y", "z"]), part("x/y/", ["q"]), rowdel("", "x"), rowdel("a/", "k")),
        (row("a/", "m"),),
    )
    assert plan.deletes.partition == 2
    assert plan.deletes.row == 2
    assert plan.directories == 5


# -- subtree collapse ------------------------------------------------------------------------------
#
# The tree used below (bucket B):
#
#   ""      rows: a (live), x (empty)
#   x/      rows: y, z            (x/ is empty: absent from the filter)
#   x/y/    rows: q               (absent)
#   x/y/q/  no rows; x/z/ no rows


def collapse_facts() -> list[PartitionFacts]:
    return [
        facts("", 2, ["x"]),
        facts("x/", 2, ["y", "z"], absent=True),
        facts("x/y/", 1, ["q"], absent=True),
    ]


def test_maximal_empty_subtree_collapses_to_one_row_delete_and_partition_deletes() -> None:
    plan = plan_deletions(collapse_facts(), 10)
    assert plan.actions == (
        part("x/", ["y", "z"]),  # token 10
        part("x/y/", ["q"]),  # token 20
        rowdel("", "x"),  # the subtree's root entry, in its live parent partition
    )
    assert plan.deferred == ()
    assert dict(plan.row_tombstones) == {(B, ""): 1}
    assert (plan.deletes.partition, plan.deletes.row, plan.directories) == (2, 1, 4)


def test_collapse_does_not_depend_on_the_order_of_facts() -> None:
    forward = plan_deletions(collapse_facts(), 10)
    backward = plan_deletions(collapse_facts()[::-1], 10)
    assert backward.actions == forward.actions
    assert backward.deferred == forward.deferred


def test_partition_of_an_empty_dir_is_deleted_when_the_dir_is_a_candidate_row() -> None:
    # x/ is a candidate in the root partition; its own facts do not say dir_absent (e.g. the sweep
    # saw its rows as individual candidates); all rows are candidates → still a dead partition.
    plan = plan_deletions([facts("", 3, ["x"]), facts("x/", 2, ["y", "z"])], 10)
    assert plan.actions == (part("x/", ["y", "z"]), rowdel("", "x"))
    assert dict(plan.row_tombstones) == {(B, ""): 1}


def test_partition_of_an_absent_dir_is_deleted_even_if_its_parent_row_is_not_a_candidate() -> None:
    # e.g. the parent partition belongs to another shard: dir_absent alone proves x/ empty.
    plan = plan_deletions([facts("x/", 2, ["y", "z"], absent=True)], 10)
    assert plan.actions == (part("x/", ["y", "z"]),)
    assert dict(plan.row_tombstones) == {}


def test_partition_not_all_candidates_is_not_partition_deleted() -> None:
    # x/ is empty, but the sweep only holds 2 of its 3 rows: a partition tombstone would remove a
    # row the audit log cannot put back, so the two candidates get row deletes instead.
    plan = plan_deletions([facts("", 2, ["x"]), facts("x/", 3, ["y", "z"], absent=True)], 10)
    assert plan.deletes.partition == 0
    assert plan.actions == (rowdel("x/", "y"), rowdel("", "x"), rowdel("x/", "z"))
    assert dict(plan.row_tombstones) == {(B, "x/"): 2, (B, ""): 1}


def test_partition_whose_own_dir_is_not_empty_gets_row_deletes() -> None:
    # Every row of a/ is a candidate, but a/ itself holds objects: a/ must stay listed.
    plan = plan_deletions([facts("a/", 2, ["k", "m"])], 10)
    assert plan.actions == (rowdel("a/", "k"), rowdel("a/", "m"))
    assert dict(plan.row_tombstones) == {(B, "a/"): 2}


def test_root_partition_is_never_partition_deleted() -> None:
    # Even if the facts claim the root absent and all its rows are candidates.
    plan = plan_deletions([facts("", 2, ["x", "a"], absent=True)], 10)
    assert plan.deletes.partition == 0
    assert plan.actions == (rowdel("", "x"), rowdel("", "a"))


def test_empty_dir_in_another_bucket_does_not_kill_a_partition() -> None:
    # x/ is empty in bucket "other" only; B's x/ partition holds all-candidate rows but B's x/
    # is not known empty, so it keeps its partition.
    plan = plan_deletions(
        [
            facts("x/", 1, ["y"], absent=True, bucket="other"),
            facts("x/", 2, ["y", "z"]),
        ],
        10,
    )
    kinds = {(a.partition.bucket, a.kind) for a in plan.actions}
    assert kinds == {("other", ActionKind.PARTITION), (B, ActionKind.ROW)}
    assert part("x/", ["y"], bucket="other") in plan.actions
    assert [a for a in plan.actions if a.kind is ActionKind.ROW] == [
        rowdel("x/", "y"),
        rowdel("x/", "z"),
    ]


def test_partition_deletes_do_not_use_the_row_budget() -> None:
    plan = plan_deletions(collapse_facts(), 0)
    assert plan.actions == (part("x/", ["y", "z"]), part("x/y/", ["q"]))
    assert plan.deferred == (row("", "x"),)
    assert dict(plan.row_tombstones) == {}


def test_partition_deletes_come_first_in_token_order() -> None:
    plan = plan_deletions(
        [
            facts("r/", 1, ["c"], absent=True),
            facts("", 3, ["p", "q", "r"]),
            facts("p/", 1, ["a"], absent=True),
            facts("q/", 1, ["b"], absent=True),
        ],
        10,
    )
    assert plan.actions == (
        part("p/", ["a"]),
        part("q/", ["b"]),
        part("r/", ["c"]),
        rowdel("", "p"),
        rowdel("", "q"),
        rowdel("", "r"),
    )


# -- per-partition budget --------------------------------------------------------------------------

NAMES = ["n0", "n1", "n2", "n3", "n4"]


@pytest.mark.parametrize(
    ("budget", "planned"),
    [(0, 0), (1, 1), (4, 4), (5, 5), (6, 5), (1000, 5)],
)
def test_budget_in_one_live_partition(budget: int, planned: int) -> None:
    plan = plan_deletions([facts("a/", 9, NAMES)], budget)
    assert plan.actions == tuple(rowdel("a/", n) for n in NAMES[:planned])
    # The held-back rows are the last ones in clustering order, reported for the next run.
    assert plan.deferred == tuple(row("a/", n) for n in NAMES[planned:])
    assert len(plan.deferred) == 5 - planned
    expected_tombstones = {(B, "a/"): planned} if planned else {}
    assert dict(plan.row_tombstones) == expected_tombstones


@pytest.mark.parametrize("budget", [0, 1, 2, 3, 4])
def test_budget_applies_to_each_partition_separately(budget: int) -> None:
    sizes = {"p/": 4, "q/": 1, "r/": 3}
    plan = plan_deletions(
        [facts(p, 10, [f"{p[0]}{i}" for i in range(n)]) for p, n in sizes.items()], budget
    )
    per_partition = Counter((a.partition.bucket, a.partition.parent) for a in plan.actions)
    assert dict(plan.row_tombstones) == dict(per_partition)
    for parent, size in sizes.items():
        assert per_partition[(B, parent)] == min(size, budget)
        assert max(per_partition.values(), default=0) <= budget
        deferred_here = [r for r in plan.deferred if r.parent == parent]
        assert len(deferred_here) == size - min(size, budget)
    assert len(plan.actions) + len(plan.deferred) == sum(sizes.values())


def test_budget_exactly_n_and_n_minus_one_with_collapse() -> None:
    # Root holds 3 candidate rows; one of them roots a collapsed subtree.
    base = [
        facts("", 4, ["x", "m", "n"]),
        facts("x/", 2, ["y", "z"], absent=True),
        facts("x/y/", 1, ["q"], absent=True),
    ]
    exact = plan_deletions(base, 3)
    assert exact.deferred == ()
    assert dict(exact.row_tombstones) == {(B, ""): 3}
    assert exact.deletes.row == 3 and exact.deletes.partition == 2

    short = plan_deletions(base, 2)
    assert short.deferred == (row("", "n"),)
    assert dict(short.row_tombstones) == {(B, ""): 2}
    assert short.deletes.row == 2 and short.deletes.partition == 2


# -- round robin -----------------------------------------------------------------------------------


def test_row_deletes_round_robin_across_partitions_in_token_order() -> None:
    plan = plan_deletions(
        [
            facts("r/", 9, ["r1", "r2"]),
            facts("p/", 9, ["p1", "p2", "p3"]),
            facts("q/", 9, ["q1"]),
        ],
        10,
    )
    order = [(a.partition.parent, a.rows[0].name) for a in plan.actions]
    assert order == [
        ("p/", "p1"),
        ("q/", "q1"),
        ("r/", "r1"),
        ("p/", "p2"),
        ("r/", "r2"),
        ("p/", "p3"),
    ]
    # Consecutive deletes only hit the same partition once no other partition is left.
    parents = [p for p, _ in order]
    assert all(a != b for a, b in itertools.pairwise(parents))


def test_without_spread_row_deletes_go_partition_by_partition_in_key_order() -> None:
    fs = [
        facts("r/", 9, ["r1", "r2"]),
        facts("p/", 9, ["p1", "p2", "p3"]),
        facts("q/", 9, ["q1"]),
        facts("z/", 2, ["z1", "z2"], absent=True),
    ]
    plan = plan_deletions(fs, 2, spread=False)
    order = [(a.kind, a.partition.parent, a.rows[0].name) for a in plan.actions]
    row = ActionKind.ROW
    assert order == [
        (ActionKind.PARTITION, "z/", "z1"),
        (row, "p/", "p1"),
        (row, "p/", "p2"),
        (row, "q/", "q1"),
        (row, "r/", "r1"),
        (row, "r/", "r2"),
    ]
    # The same deletes and the same budget as the spread plan: only the order differs.
    spread = plan_deletions(fs, 2)
    assert sorted(plan.actions, key=repr) == sorted(spread.actions, key=repr)
    assert plan.deferred == spread.deferred == (fs[1].candidates[2],)
    assert plan.row_tombstones == spread.row_tombstones


def test_round_robin_orders_by_token_not_by_path() -> None:
    tokens = {"zz/": -5, "aa/": 7, "mm/": 3}
    fs = [
        PartitionFacts(PartitionKey(t, B, p), 5, (FolderRow(t, B, p, "1"), FolderRow(t, B, p, "2")))
        for p, t in tokens.items()
    ]
    plan = plan_deletions(fs, 10)
    assert [a.partition.parent for a in plan.actions] == ["zz/", "mm/", "aa/"] * 2


def test_partitions_with_equal_tokens_are_ordered_by_bucket_then_parent() -> None:
    fs = [
        PartitionFacts(PartitionKey(0, b, p), 5, (FolderRow(0, b, p, "n"),))
        for b, p in [("b2", "a/"), ("b1", "z/"), ("b1", "a/")]
    ]
    plan = plan_deletions(fs, 10)
    assert [(a.partition.bucket, a.partition.parent) for a in plan.actions] == [
        ("b1", "a/"),
        ("b1", "z/"),
        ("b2", "a/"),
    ]


def test_round_robin_helper() -> None:
    a = [row("p/", "a1"), row("p/", "a2"), row("p/", "a3")]
    b = [row("q/", "b1")]
    c: list[FolderRow] = []
    d = [row("r/", "d1"), row("r/", "d2")]
    assert round_robin([a, b, c, d]) == [a[0], b[0], d[0], a[1], d[1], a[2]]
    assert round_robin([]) == []
    assert round_robin([c]) == []


def test_row_action_partition_is_the_rows_own_partition() -> None:
    plan = plan_deletions([facts("a/", 3, ["k"])], 10)
    (action,) = plan.actions
    assert action.partition == PartitionKey(tok("a/"), B, "a/")
    assert action.rows == (row("a/", "k"),)


# -- range deletes of adjacent candidates ---------------------------------------------------------


def names(n: int, prefix: str = "n") -> list[str]:
    return [f"{prefix}{i:02d}" for i in range(n)]


def test_adjacent_candidates_become_one_range_costing_two() -> None:
    plan = plan_deletions([facts("a/", 10, names(5), ordinals=range(2, 7))], 10)
    assert plan.actions == (rangedel("a/", names(5)),)
    assert plan.deferred == ()
    assert dict(plan.row_tombstones) == {(B, "a/"): RANGE_TOMBSTONES}
    assert (plan.deletes.range, plan.deletes.row, plan.directories) == (1, 0, 5)
    (action,) = plan.actions
    assert action.tombstones == 2
    assert action.folder_range() == FolderRange(tok("a/"), B, "a/", "n00", "n04")


@pytest.mark.parametrize(
    ("ordinals", "expected"),
    [
        # (run lengths as the plan deletes them: "R" a range of its rows, "r" a row each)
        ((0, 1, 2, 4, 5, 6, 7, 9), ["R3", "R4", "r1"]),
        ((0, 1, 3, 4, 6, 7), ["r1", "r1", "r1", "r1", "r1", "r1"]),
        ((0, 2, 4, 6, 8, 10), ["r1"] * 6),
        ((3, 4, 5, 6, 7, 8), ["R6"]),
        ((0, 1, 2, 3, 4, 10), ["R5", "r1"]),
        ((0, 5, 6, 7, 9, 10), ["r1", "R3", "r1", "r1"]),
    ],
)
def test_runs_come_from_consecutive_ordinals_only(
    ordinals: tuple[int, ...], expected: list[str]
) -> None:
    cands = names(len(ordinals))
    plan = plan_deletions([facts("a/", 12, cands, ordinals=ordinals)], 100)
    got = [("R" if a.kind is ActionKind.RANGE else "r") + str(len(a.rows)) for a in plan.actions]
    assert got == expected
    # Every candidate once, in clustering order; a range is a slice of consecutive ordinals.
    assert [r for a in plan.actions for r in a.rows] == [row("a/", n) for n in cands]
    position = dict(zip(cands, ordinals, strict=True))
    for action in plan.actions:
        if action.kind is ActionKind.RANGE:
            ords = [position[r.name] for r in action.rows]
            assert ords == list(range(ords[0], ords[0] + len(ords)))
            assert len(ords) >= MIN_RANGE_ROWS


def test_runs_of_one_and_two_stay_row_deletes() -> None:
    plan = plan_deletions([facts("a/", 9, names(5), ordinals=(0, 1, 3, 5, 6))], 10)
    assert plan.actions == tuple(rowdel("a/", n) for n in names(5))
    assert dict(plan.row_tombstones) == {(B, "a/"): 5}


def test_without_ranges_a_run_goes_row_by_row() -> None:
    """A sweep that may have missed rows (a Cassandra sweep below quorum) gets no ranges."""
    fact = facts("a/", 10, names(5), ordinals=range(2, 7))
    plan = plan_deletions([fact], 10, ranges=False)
    assert [a.kind for a in plan.actions] == [ActionKind.ROW] * 5
    assert [a.rows for a in plan.actions] == [(r,) for r in fact.candidates]
    assert plan.row_tombstones == {(B, "a/"): 5} and plan.deletes.range == 0
    assert plan_deletions([fact], 10).deletes.range == 1


def test_without_ordinals_no_candidates_count_as_adjacent() -> None:
    plan = plan_deletions([facts("a/", 5, names(5))], 10)
    assert plan.actions == tuple(rowdel("a/", n) for n in names(5))


def test_a_row_dropped_as_nonempty_splits_its_run() -> None:
    fs = [facts("a/", 9, names(7), ordinals=range(1, 8))]
    # n03 gained an object after the build: its ordinal goes missing, the run splits around it.
    kept = drop_nonempty(fs, [(B, "a/n03/")])
    assert kept == [facts("a/", 9, [*names(3), "n04", "n05", "n06"], ordinals=(1, 2, 3, 5, 6, 7))]
    plan = plan_deletions(kept, 10)
    assert plan.actions == (rangedel("a/", names(3)), rangedel("a/", ["n04", "n05", "n06"]))
    # n01 instead: a lone row, then a range of the other five.
    plan = plan_deletions(drop_nonempty(fs, [(B, "a/n01/")]), 10)
    assert plan.actions == (
        rowdel("a/", "n00"),
        rangedel("a/", ["n02", "n03", "n04", "n05", "n06"]),
    )


def test_drop_nonempty_keeps_facts_it_does_not_touch_as_they_are() -> None:
    fs = [facts("a/", 9, names(3), ordinals=(0, 1, 2)), facts("b/", 9, ["x"], ordinals=(4,))]
    got = drop_nonempty(fs, [(B, "b/x/")])
    assert got == fs[:1]
    assert got[0] is fs[0]


# Runs of 3, 1, 4, 2 and 3 candidates: costs 2, 1, 2, 1+1 and 2 (9 in all).
RUNS_ORDINALS = (0, 1, 2, 4, 6, 7, 8, 9, 11, 12, 14, 15, 16)
RUNS = names(len(RUNS_ORDINALS))
R1, LONE, R2, PAIR, R3 = RUNS[0:3], RUNS[3], RUNS[4:8], RUNS[8:10], RUNS[10:13]


@pytest.mark.parametrize("budget", range(11))
def test_budget_counts_two_per_range_and_defers_the_last_rows(budget: int) -> None:
    fact = facts("a/", 20, RUNS, ordinals=RUNS_ORDINALS)
    plan = plan_deletions([fact], budget)
    every = [
        rangedel("a/", R1),
        rowdel("a/", LONE),
        rangedel("a/", R2),
        rowdel("a/", PAIR[0]),
        rowdel("a/", PAIR[1]),
        rangedel("a/", R3),
    ]
    expected = greedy(every, budget)
    assert list(plan.actions) == expected
    spent = sum(a.tombstones for a in plan.actions)
    assert spent <= budget
    assert dict(plan.row_tombstones) == ({(B, "a/"): spent} if spent else {})
    done = sum(len(a.rows) for a in plan.actions)
    # What is held back is always the last rows, in clustering order.
    assert plan.deferred == fact.candidates[done:]
    if plan.deferred:
        assert spent == budget  # nothing is deferred while a tombstone of budget is left
    assert (plan.deferred == ()) == (budget >= 9)


def greedy(every: list[DeleteAction], budget: int) -> list[DeleteAction]:
    """The reference: actions in order while they fit; a range that does not fit in the one
    tombstone left gives its first row."""
    out: list[DeleteAction] = []
    left = budget
    for action in every:
        if action.tombstones <= left:
            out.append(action)
            left -= action.tombstones
            continue
        if left == 1:
            out.append(DeleteAction(ActionKind.ROW, action.partition, action.rows[:1]))
        break
    return out


def test_budget_greedy_examples() -> None:
    fact = facts("a/", 20, RUNS, ordinals=RUNS_ORDINALS)
    assert plan_deletions([fact], 1).actions == (rowdel("a/", R1[0]),)
    assert plan_deletions([fact], 4).actions == (
        rangedel("a/", R1),
        rowdel("a/", LONE),
        rowdel("a/", R2[0]),
    )
    assert plan_deletions([fact], 9).actions == (
        rangedel("a/", R1),
        rowdel("a/", LONE),
        rangedel("a/", R2),
        rowdel("a/", PAIR[0]),
        rowdel("a/", PAIR[1]),
        rangedel("a/", R3),
    )


@pytest.mark.parametrize(("used", "left"), [(0, 9), (2, 7), (5, 4), (8, 1), (9, 0), (20, 0)])
def test_already_used_budget_counts_ranges_as_two(used: int, left: int) -> None:
    fact = facts("a/", 20, RUNS, ordinals=RUNS_ORDINALS)
    resumed = plan_deletions([fact], 9, already_used={(B, "a/"): used})
    fresh = plan_deletions([fact], left)
    assert resumed.actions == fresh.actions
    assert resumed.deferred == fresh.deferred
    assert sum(a.tombstones for a in resumed.actions) + used <= max(9, used)


def test_ranges_and_rows_round_robin_across_partitions_and_in_key_order_without_spread() -> None:
    fs = [
        facts("r/", 9, ["r0", "r1", "r2"], ordinals=(0, 1, 2)),
        facts("p/", 9, ["p0", "p1", "p2", "p3"], ordinals=(0, 1, 2, 5)),
        facts("q/", 9, ["q0"], ordinals=(3,)),
        facts("z/", 2, ["z1", "z2"], absent=True, ordinals=(0, 1)),
    ]
    spread = plan_deletions(fs, 10)
    assert spread.actions == (
        part("z/", ["z1", "z2"]),
        rangedel("p/", ["p0", "p1", "p2"]),
        rowdel("q/", "q0"),
        rangedel("r/", ["r0", "r1", "r2"]),
        rowdel("p/", "p3"),
    )
    in_order = plan_deletions(fs, 10, spread=False)
    assert in_order.actions == (
        part("z/", ["z1", "z2"]),
        rangedel("p/", ["p0", "p1", "p2"]),
        rowdel("p/", "p3"),
        rowdel("q/", "q0"),
        rangedel("r/", ["r0", "r1", "r2"]),
    )
    assert (
        in_order.row_tombstones
        == spread.row_tombstones
        == {
            (B, "p/"): 3,
            (B, "q/"): 1,
            (B, "r/"): 2,
        }
    )
    assert (spread.deletes.partition, spread.deletes.row, spread.deletes.range) == (1, 2, 2)


def test_a_dead_partition_is_one_partition_delete_whatever_its_ordinals() -> None:
    fs = [facts("", 3, ["x"], ordinals=(1,)), facts("x/", 5, names(5), True, ordinals=range(5))]
    plan = plan_deletions(fs, 10)
    assert plan.actions == (part("x/", names(5)), rowdel("", "x"))


def test_plan_summary_counts_range_deletes() -> None:
    fs = [facts("p/", 9, ["p0", "p1", "p2", "p3"], ordinals=(0, 1, 2, 5))]
    summary = PlanSummary.of(plan_deletions(fs, 10))
    assert summary == PlanSummary(
        directories=4,
        deletes=KindTally(row=1, range=1),
        dirs=KindTally(row=1, range=3),
        max_row_tombstones_in_a_partition=3,
    )
    assert (summary + summary).deletes.range == 2
    assert summary.dirs.row + summary.dirs.range == summary.directories


def test_partition_facts_check_their_ordinals() -> None:
    with pytest.raises(ValueError, match="ordinals do not fit"):
        facts("x/", 5, ["a", "b"], ordinals=(0,))
    with pytest.raises(ValueError, match="ordinals do not fit"):
        facts("x/", 2, ["a", "b"], ordinals=(1, 2))
    with pytest.raises(ValueError, match="ordinals out of order"):
        plan_deletions([facts("x/", 5, ["a", "b", "c"], ordinals=(0, 2, 1))], 10)


def test_partition_facts_pickle_with_their_ordinals() -> None:
    fact = facts("x/", 9, names(3), True, ordinals=(2, 3, 7))
    assert pickle.loads(pickle.dumps(fact)) == fact


# -- with_ancestors, empty_dirs_of, drop_nonempty --------------------------------------------------


def test_with_ancestors() -> None:
    got = with_ancestors([(B, "a/b/c/"), (B, "a/x/"), ("other", "a/"), (B, "a/b/")])
    assert got == {
        (B, "a/b/c/"),
        (B, "a/b/"),
        (B, "a/"),
        (B, "a/x/"),
        ("other", "a/"),
    }


def test_with_ancestors_of_nothing_and_of_the_root() -> None:
    assert with_ancestors([]) == set()
    assert with_ancestors([(B, "")]) == set()


def test_with_ancestors_after_a_shared_prefix_still_walks_new_branches() -> None:
    # The early stop must not skip ancestors that were not yet added.
    assert with_ancestors([(B, "a/"), (B, "a/b/c/d/")]) == {
        (B, "a/"),
        (B, "a/b/"),
        (B, "a/b/c/"),
        (B, "a/b/c/d/"),
    }


def test_empty_dirs_of() -> None:
    got = empty_dirs_of(
        [
            facts("", 3, ["x", "w"]),
            facts("x/", 3, ["y"], absent=True),
            facts("k/", 2, ["m"], bucket="other"),
        ]
    )
    assert got == {(B, "x/"), (B, "w/"), (B, "x/y/"), ("other", "k/m/")}


def test_empty_dirs_of_includes_an_absent_partition_without_candidates() -> None:
    assert empty_dirs_of([facts("x/", 2, [], absent=True)]) == {(B, "x/")}


def test_drop_nonempty_removes_the_dir_and_all_its_ancestors() -> None:
    fs = [
        facts("", 2, ["x"]),
        facts("x/", 2, ["y", "z"], absent=True),
        facts("x/y/", 1, ["q"], absent=True),
    ]
    # An object appeared in x/y/q/ after the build: q, y and x are no longer empty.
    got = drop_nonempty(fs, [(B, "x/y/q/")])
    assert got == [PartitionFacts(key("x/"), 2, (row("x/", "z"),), False)]
    plan = plan_deletions(got, 10)
    assert plan.actions == (rowdel("x/", "z"),)


def test_drop_nonempty_clears_dir_absent_of_an_ancestor_partition() -> None:
    fs = [facts("x/", 2, ["y", "z"], absent=True)]
    # x/ itself turned out non-empty (an object directly in it); its children may still go.
    got = drop_nonempty(fs, [(B, "x/")])
    assert got == [PartitionFacts(key("x/"), 2, (row("x/", "y"), row("x/", "z")), False)]
    assert plan_deletions(got, 10).actions == (rowdel("x/", "y"), rowdel("x/", "z"))


def test_drop_nonempty_keeps_an_absent_partition_without_candidates_left_only_if_absent() -> None:
    fs = [facts("x/", 1, ["y"], absent=True), facts("w/", 1, ["v"], absent=True)]
    got = drop_nonempty(fs, [(B, "x/y/")])
    # x/ lost its only candidate and its absence; w/ is untouched.
    assert got == [facts("w/", 1, ["v"], absent=True)]


def test_drop_nonempty_keeps_an_absent_partition_even_without_candidates() -> None:
    fs = [facts("w/", 0, [], absent=True)]
    assert drop_nonempty(fs, [(B, "x/")]) == fs


def test_drop_nonempty_with_nothing_nonempty_changes_nothing() -> None:
    fs = collapse_facts()
    assert drop_nonempty(fs, []) == fs


def test_drop_nonempty_respects_buckets() -> None:
    fs = [facts("", 2, ["x"]), facts("", 2, ["x"], bucket="other")]
    assert drop_nonempty(fs, [("other", "x/")]) == [facts("", 2, ["x"])]


def test_drop_nonempty_of_a_deeper_dir_not_in_the_facts_still_drops_ancestors() -> None:
    fs = [facts("", 2, ["x"]), facts("x/", 2, ["y", "z"], absent=True)]
    got = drop_nonempty(fs, [(B, "x/z/deep/er/")])
    assert got == [PartitionFacts(key("x/"), 2, (row("x/", "y"),), False)]


# -- property: a random tree, a perfect sweep, some hidden candidates, a random budget ------------

SEGMENTS = st.sampled_from(["a", "b", "c", ""])
LEAVES = st.sampled_from(["f", "g", ""])  # "" → a directory marker
WIDE_SEGMENTS = st.sampled_from([*"abcdefghijkl", ""])
LIVE_WIDE = st.sampled_from([True, False, False, False])  # mostly deleted: many empty siblings


@st.composite
def object_keys(
    draw: st.DrawFn, segments: st.SearchStrategy[str] = SEGMENTS, depth: int = 4
) -> str:
    segs = draw(st.lists(segments, max_size=depth))
    leaf = draw(LEAVES)
    if not segs and not leaf:
        leaf = "f"
    return "".join(s + "/" for s in segs) + leaf


@st.composite
def worlds(
    draw: st.DrawFn, wide: bool = False
) -> tuple[dict[tuple[str, str], list[FolderRow]], set[tuple[str, str]]]:
    """(folders partitions → rows, truly non-empty dirs) of a random store; a ``wide`` one has
    fewer levels and more siblings, so runs of adjacent empty directories are common."""
    keys = object_keys(WIDE_SEGMENTS, 2) if wide else object_keys()
    objects = draw(
        st.lists(
            st.tuples(st.sampled_from(["b1", "b2"]), keys, LIVE_WIDE if wide else st.booleans()),
            min_size=20 if wide else 1,
            max_size=60 if wide else 25,
        )
    )
    all_dirs = {(b, d) for b, k, _live in objects for d in directories_of(k)}
    nonempty = {(b, d) for b, k, live in objects if live for d in directories_of(k)}
    partitions: dict[tuple[str, str], list[FolderRow]] = {}
    for bucket, directory in sorted(all_dirs):
        parent, name = folder_row_of(directory)
        partitions.setdefault((bucket, parent), []).append(
            FolderRow(murmur_token(bucket, parent), bucket, parent, name)
        )
    for rows in partitions.values():
        rows.sort(key=lambda r: r.name)
    return partitions, nonempty


def perfect_facts(
    partitions: dict[tuple[str, str], list[FolderRow]],
    nonempty: set[tuple[str, str]],
    hide: st.DataObject | None,
) -> tuple[list[PartitionFacts], set[tuple[str, str]]]:
    """Facts as a perfect sweep builds them, optionally hiding candidates of non-absent
    partitions (a false positive); also returns the absent partitions."""
    out: list[PartitionFacts] = []
    absent_parts: set[tuple[str, str]] = set()
    for (bucket, parent), rows in sorted(partitions.items()):
        absent = parent != "" and (bucket, parent) not in nonempty
        cands = [
            (i, r)
            for i, r in enumerate(rows)
            if (bucket, dir_of_row(r.parent, r.name)) not in nonempty
        ]
        if absent:
            absent_parts.add((bucket, parent))
            assert len(cands) == len(rows)  # an empty dir has only empty children
        elif hide is not None and cands:
            keep = hide.draw(st.lists(st.booleans(), min_size=len(cands), max_size=len(cands)))
            cands = [c for c, k in zip(cands, keep, strict=True) if k]
        if cands or absent:
            out.append(
                PartitionFacts(
                    PartitionKey(rows[0].token, bucket, parent),
                    len(rows),
                    tuple(r for _, r in cands),
                    absent,
                    tuple(i for i, _ in cands),  # each row's position: its ordinal
                )
            )
    return out, absent_parts


def check_plan(
    plan: DeletionPlan,
    fs: list[PartitionFacts],
    partitions: dict[tuple[str, str], list[FolderRow]],
    nonempty: set[tuple[str, str]],
    budget: int,
) -> set[tuple[str, str]]:
    """The invariants every plan must hold; returns the directories it removes."""
    removed: list[FolderRow] = []
    dead: set[tuple[str, str]] = set()
    for action in plan.actions:
        pk = (action.partition.bucket, action.partition.parent)
        for r in action.rows:
            assert (r.token, r.bucket, r.parent) == tuple(action.partition)
        if action.kind is ActionKind.PARTITION:
            assert action.partition.parent != "", "the root partition is never deleted"
            # A partition tombstone removes every row of the partition: all must be in the action.
            assert sorted(action.rows) == sorted(partitions[pk])
            assert pk not in dead
            dead.add(pk)
            removed.extend(partitions[pk])
        elif action.kind is ActionKind.RANGE:
            # What the store removes: every row of the partition between the bounds. It must
            # be exactly the action's rows (the audit log records those, restore puts them back).
            span = action.folder_range()
            covered = [r for r in partitions[pk] if span.low <= r.name <= span.high]
            assert covered == list(action.rows)
            assert len(covered) >= MIN_RANGE_ROWS
            removed.extend(covered)
        else:
            assert len(action.rows) == 1
            removed.extend(action.rows)
    # Nothing non-empty is ever removed.
    removed_dirs = [(r.bucket, dir_of_row(r.parent, r.name)) for r in removed]
    assert not set(removed_dirs) & nonempty
    assert len(removed_dirs) == len(set(removed_dirs)), "a directory is removed twice"
    # Row and range deletes never hit a partition that is deleted whole, and their tombstones
    # (1 a row, 2 a range) stay within the budget.
    row_counts: Counter[tuple[str, str]] = Counter()
    for a in plan.actions:
        if a.kind is not ActionKind.PARTITION:
            row_counts[(a.partition.bucket, a.partition.parent)] += a.tombstones
    assert not set(row_counts) & dead
    assert dict(plan.row_tombstones) == dict(row_counts)
    assert all(n <= budget for n in row_counts.values())
    # Every candidate is planned exactly once or deferred; nothing is lost or invented.
    candidates = Counter(r for f in fs for r in f.candidates)
    planned = Counter(r for a in plan.actions for r in a.rows)
    assert planned + Counter(plan.deferred) == candidates
    assert not set(planned) & set(plan.deferred)
    # Deferred rows are only those over budget in live partitions.
    for r in plan.deferred:
        assert row_counts[(r.bucket, r.parent)] == budget
    # Partition deletes first, then row and range deletes in round-robin order by token.
    kinds = [a.kind for a in plan.actions]
    assert kinds == sorted(kinds, key=lambda k: k is not ActionKind.PARTITION)
    row_parts = [
        (a.partition.token, a.partition.bucket, a.partition.parent)
        for a in plan.actions
        if a.kind is not ActionKind.PARTITION
    ]
    first_seen = list(dict.fromkeys(row_parts))
    assert first_seen == sorted(first_seen)
    for i in range(len(row_parts) - 1):
        if row_parts[i] == row_parts[i + 1]:
            assert set(row_parts[i:]) == {row_parts[i]}, "consecutive deletes in one partition"
    return set(removed_dirs)


@settings(max_examples=200, deadline=None)
@given(st.one_of(worlds(), worlds(wide=True)), st.integers(0, 6), st.booleans(), st.data())
def test_plan_of_a_random_tree_is_safe_and_complete(
    world: tuple[dict[tuple[str, str], list[FolderRow]], set[tuple[str, str]]],
    budget: int,
    hide_some: bool,
    data: st.DataObject,
) -> None:
    partitions, nonempty = world
    fs, absent_parts = perfect_facts(partitions, nonempty, data if hide_some else None)
    shuffled = data.draw(st.permutations(fs))
    plan = plan_deletions(shuffled, budget)
    removed = check_plan(plan, fs, partitions, nonempty, budget)

    # Subtree collapse: exactly the partitions of empty directories are deleted whole.
    dead = {
        (a.partition.bucket, a.partition.parent)
        for a in plan.actions
        if a.kind is ActionKind.PARTITION
    }
    assert dead == absent_parts
    # The order in which the sweep handed over its facts does not matter.
    again = plan_deletions(fs, budget)
    assert again.actions == plan.actions
    assert again.deferred == plan.deferred

    if not hide_some:
        # A perfect sweep: every empty directory is removed now or deferred, and only the
        # row budget of live partitions defers anything.
        empty = {
            (b, dir_of_row(r.parent, r.name)) for (b, _p), rows in partitions.items() for r in rows
        } - nonempty
        deferred = {(r.bucket, dir_of_row(r.parent, r.name)) for r in plan.deferred}
        assert removed | deferred == empty
        assert not removed & deferred
        costliest_live = max(
            (full_cost(f) for f in fs if (f.key.bucket, f.key.parent) not in absent_parts),
            default=0,
        )
        assert (plan.deferred == ()) == (budget >= costliest_live)


def full_cost(fact: PartitionFacts) -> int:
    """Tombstones to delete all of a live partition's candidates: runs of consecutive ordinals
    of 3 or more cost 2, every other candidate 1."""
    runs: list[int] = []
    for i, ordinal in enumerate(fact.ordinals):
        if i and ordinal == fact.ordinals[i - 1] + 1:
            runs[-1] += 1
        else:
            runs.append(1)
    return sum(RANGE_TOMBSTONES if n >= MIN_RANGE_ROWS else n for n in runs)


@settings(max_examples=200, deadline=None)
@given(st.one_of(worlds(), worlds(wide=True)), st.integers(0, 6), st.data())
def test_objects_put_after_the_build_are_protected_by_drop_nonempty(
    world: tuple[dict[tuple[str, str], list[FolderRow]], set[tuple[str, str]]],
    budget: int,
    data: st.DataObject,
) -> None:
    partitions, nonempty_at_build = world
    fs, _absent = perfect_facts(partitions, nonempty_at_build, None)
    empty = sorted(empty_dirs_of(fs))
    # Objects land in some of the empty directories after the build; the re-check finds them.
    revived = data.draw(st.lists(st.sampled_from(empty), unique=True)) if empty else []
    nonempty_now = nonempty_at_build | with_ancestors(revived)
    kept = drop_nonempty(fs, revived)
    for fact in kept:
        assert fact.candidates or fact.dir_absent
        if fact.dir_absent:
            assert (fact.key.bucket, fact.key.parent) not in nonempty_now
    plan = plan_deletions(kept, budget)
    check_plan(plan, kept, partitions, nonempty_now, budget)
    assert not empty_dirs_of(kept) & nonempty_now
