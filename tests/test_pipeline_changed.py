"""The churn night's check: its pure decisions, and the check itself on SQLite (the conformance
suite covers the reads it makes on every backend; test_changed_clean.py the night on both)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dircleaner.model import FolderRow, PartitionFacts, PartitionKey
from dircleaner.pipeline.changed import (
    check_changed,
    deferred_unread,
    depth_of,
    is_empty,
    live_partition_facts,
    read_tombstone_limit,
)
from dircleaner.pipeline.plan import plan_deletions
from dircleaner.store import Store, open_store

B = "b"


def row(parent: str, name: str, token: int = 7) -> FolderRow:
    return FolderRow(token, B, parent, name)


def test_is_empty_when_every_row_read_is_a_child_found_empty() -> None:
    assert is_empty([], set())
    assert is_empty([row("p/", "a")], {"a", "b"})
    assert not is_empty([row("p/", "a")], set())  # a subdirectory nobody found empty
    assert not is_empty([row("p/", "a"), row("p/", "c")], {"a", "b"})
    # k + 1 rows read, all known: cannot happen unless a name repeats; still not empty
    assert not is_empty([row("p/", "a"), row("p/", "a")], {"a"})


def test_depth_and_the_journals_count() -> None:
    assert [depth_of(d) for d in ("a/", "a/b/", "a//c/")] == [1, 2, 3]
    assert deferred_unread({(B, "x/"): 501, (B, "y/"): 500, (B, "z/"): 0}, 500) == {(B, "x/")}


def test_live_partition_facts_are_rows_without_ordinals_never_dead() -> None:
    rows = [row("p/", "c", 1), row("q/", "a", 2), row("p/", "a", 1)]
    facts = live_partition_facts(rows)
    assert facts == [
        PartitionFacts(PartitionKey(1, B, "p/"), 2, (row("p/", "a", 1), row("p/", "c", 1))),
        PartitionFacts(PartitionKey(2, B, "q/"), 1, (row("q/", "a", 2),)),
    ]
    # Planned as row deletes in a live partition, however the budget and ranges are set.
    plan = plan_deletions(facts, 10, ranges=True, max_rewrite_rows=0)
    assert (plan.deletes.row, plan.deletes.partition, plan.deletes.range) == (3, 0, 0)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as opened:
        yield opened


def hints(*dirs: str, deleted: int = 1) -> dict[tuple[str, str], int]:
    return {(B, d): deleted for d in dirs}


def test_the_check_cascades_to_the_root_and_keeps_what_holds_anything(store: Store) -> None:
    put = ["a/b/c/x", "a/b/d/y", "a/e/z", "m/n/o", "m/keep", "q/r/s"]
    store.put_objects(B, put, 1)
    store.delete_objects(B, ["a/b/c/x", "a/b/d/y", "a/e/z", "m/n/o", "q/r/s"], 2)
    check = check_changed(store, hints("a/b/c/", "a/b/d/", "a/e/", "m/n/", "q/r/", ""), 500)
    # a/ emptied through two levels; m/ holds an object; q/ emptied; the root is none.
    assert (check.journaled, check.parents) == (5, 4)  # + a/b/, a/, m/, q/
    assert (check.empty, check.with_objects, check.with_subdirectories) == (8, 1, 0)
    plan = plan_deletions(check.facts, 500, max_rewrite_rows=0)
    deleted = {r.parent + r.name + "/" for a in plan.actions for r in a.rows}
    assert deleted == {"a/b/c/", "a/b/d/", "a/e/", "a/b/", "a/", "m/n/", "q/r/", "q/"}
    assert check.levels == 3 and check.already_gone == 0
    assert check.reads.objects == 9 and check.reads.rows == 3  # rows of a/, m/n/ and q/


def test_an_unjournaled_empty_child_keeps_its_parent(store: Store) -> None:
    store.put_objects(B, ["p/a/x", "p/b/y"], 1)
    store.delete_objects(B, ["p/a/x", "p/b/y"], 2)
    check = check_changed(store, hints("p/a/"), 500)  # p/b/'s row was dropped
    assert (check.empty, check.with_subdirectories) == (1, 1)
    assert {r.name for f in check.facts for r in f.candidates} == {"a"}


def test_tombstone_heavy_partitions_wait_read_or_not(store: Store) -> None:
    store.put_objects(B, [f"h/{i}" for i in range(30)] + ["l/x"], 1)
    store.delete_objects(B, [f"h/{i}" for i in range(30)] + ["l/x"], 2)
    check = check_changed(store, {(B, "h/"): 1, (B, "l/"): 1}, 20)
    assert check.deferred == {(B, "h/")} and check.deferred_unread == 0
    assert check.empty == 1  # l/
    counted = check_changed(store, {(B, "h/"): 25, (B, "l/"): 1}, 20)
    assert counted.deferred == {(B, "h/")} and counted.deferred_unread == 1
    assert counted.reads.objects == 1  # h/ was not read


def test_the_read_limit_is_half_the_warning(store: Store) -> None:
    assert read_tombstone_limit(store) == 500
