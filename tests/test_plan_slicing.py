"""The plan does not depend on how the ring is sliced between workers.

A partition whose own directory is a filter false positive is still known empty when its parent
directory is absent from the filter (every row of an absent directory's partition is a
candidate, its own row included). One process saw that row as a candidate of the parent's
partition; a worker holding only the child partition did not, and fell back to row deletes.
The sweep now records whether each partition's parent directory is absent, so the decision is
local to the partition and every slicing plans exactly what one process plans.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from dircleaner.model import DeleteAction, FolderRow, PartitionFacts, PartitionKey
from dircleaner.paths import dir_of_row, parent_of_dir
from dircleaner.pipeline.plan import drop_nonempty, plan_deletions
from tests.test_plan import worlds

World = tuple[dict[tuple[str, str], list[FolderRow]], set[tuple[str, str]]]


def swept(
    partitions: dict[tuple[str, str], list[FolderRow]], in_filter: set[tuple[str, str]]
) -> list[PartitionFacts]:
    """The facts the sweep builds with a filter holding ``in_filter`` (the root always in)."""

    def absent(bucket: str, directory: str) -> bool:
        return directory != "" and (bucket, directory) not in in_filter

    out = []
    for (bucket, parent), rows in sorted(partitions.items()):
        dir_absent = absent(bucket, parent)
        cands = [
            (i, r)
            for i, r in enumerate(rows)
            if dir_absent or absent(bucket, dir_of_row(r.parent, r.name))
        ]
        if cands or dir_absent:
            out.append(
                PartitionFacts(
                    PartitionKey(rows[0].token, bucket, parent),
                    len(rows),
                    tuple(r for _, r in cands),
                    dir_absent,
                    tuple(i for i, _ in cands),
                    parent_dir_absent=bool(parent) and absent(bucket, parent_of_dir(parent)),
                )
            )
    return out


@settings(max_examples=300, deadline=None)
@given(st.one_of(worlds(), worlds(wide=True)), st.integers(0, 6), st.integers(2, 5), st.data())
def test_every_slicing_plans_exactly_what_one_process_plans(
    world: World, budget: int, slices: int, data: st.DataObject
) -> None:
    partitions, nonempty = world
    every = {(r.bucket, dir_of_row(r.parent, r.name)) for rows in partitions.values() for r in rows}
    empty = sorted(every - nonempty)
    # False positives: empty directories the filter reports present.
    positives = set(data.draw(st.lists(st.sampled_from(empty), unique=True))) if empty else set()
    facts = swept(partitions, nonempty | positives)
    revived = data.draw(st.lists(st.sampled_from(empty), unique=True, max_size=2)) if empty else []
    if revived:
        facts = drop_nonempty(facts, revived)
    rewrite = data.draw(st.sampled_from([0, 4]))
    whole = plan_deletions(facts, budget, max_rewrite_rows=rewrite)
    # Slices are token ranges: a partition is in exactly one; here, a random cut of the facts
    # (sorted by token, as the sweep hands them over) into consecutive pieces.
    ordered = sorted(facts, key=lambda f: (f.key.token, f.key.bucket, f.key.parent))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ordered)), max_size=slices - 1)))
    bounds = [0, *cuts, len(ordered)]
    pieces = [ordered[a:b] for a, b in itertools.pairwise(bounds)]
    sliced = [plan_deletions(piece, budget, max_rewrite_rows=rewrite) for piece in pieces]

    def as_tuples(
        actions: list[DeleteAction],
    ) -> list[tuple[str, PartitionKey, tuple[FolderRow, ...]]]:
        return sorted((a.kind.value, a.partition, a.rows) for a in actions)

    assert as_tuples([a for p in sliced for a in p.actions]) == as_tuples(list(whole.actions))
    assert sorted(r for p in sliced for r in p.deferred) == sorted(whole.deferred)
