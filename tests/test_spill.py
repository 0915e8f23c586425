"""A slice's candidates between the clean's phases: kept in memory within the process's budget,
else spilled and read back exactly; a spilled slice planned in chunks deletes what one process
with every candidate in memory deletes, re-checks the same directories, and holds its plan in
a file read back in the plan's order."""

from __future__ import annotations

import gc
import pickle
import random
from dataclasses import replace
from pathlib import Path

import pytest

from dircleaner.model import ActionKind, FolderRow, PartitionFacts, PartitionKey, Shard
from dircleaner.pipeline.build import BuildConfig, build_filter
from dircleaner.pipeline.plan import plan_deletions
from dircleaner.pipeline.slice import sweep_and_recheck
from dircleaner.pipeline.spill import BLOCK_CANDIDATES, Candidates, SpilledActions
from dircleaner.pipeline.spillfile import MemoryBudget, SpillConfig, SpillFile
from dircleaner.progress import no_progress
from dircleaner.store import open_store
from dircleaner.store.records import murmur_token
from tests.test_parallel_clean import BUCKET, OLD, chain_across_shards, clean_copy, make_db


def fact(
    parent: str,
    total: int,
    names: list[str],
    ordinals: tuple[int, ...] = (),
    *,
    bucket: str = "b",
    absent: bool = False,
    parent_absent: bool = False,
) -> PartitionFacts:
    token = murmur_token(bucket, parent)
    rows = tuple(FolderRow(token, bucket, parent, n) for n in names)
    return PartitionFacts(
        PartitionKey(token, bucket, parent), total, rows, absent, ordinals, parent_absent
    )


#: every shape a partition's facts take: ordinals unknown, 0 … n-1, or any; either directory
#: absent; names that are empty, not ASCII, or hold a NUL (which the fast encoding cannot)
FACTS = [
    fact("a/", 5, ["x", "y"], (1, 3)),
    fact("a/b/", 3, ["p", "q", "r"], (0, 1, 2), absent=True, parent_absent=True),
    fact("", 9, ["top"], (4,), bucket="other"),
    fact("a/c/", 2, ["", "é—ü"], (0, 1), parent_absent=True),
    fact("a/d/", 4, ["m"]),
    fact("a/e/", 6, ["n\0ul", "z"], (2, 5)),
    fact("a/f/", 1, ["one"], (0,), absent=True),
]


def spilled(tmp_path: Path, facts: list[PartitionFacts], **config: int) -> Candidates:
    held = Candidates(SpillConfig(tmp_path / "spill", memory_candidates=0, **config))
    for one in facts:
        held.append(one)
    held.finish(plan_room=False)
    return held


def test_spilled_facts_come_back_exactly(tmp_path: Path) -> None:
    held = spilled(tmp_path, FACTS)
    assert held.spilled and held.spill_bytes > 0
    assert (held.partitions, held.candidates, len(held)) == (7, 12, 7)
    assert list(held) == FACTS
    assert list(held) == FACTS  # read again: a stream each time, not consumed
    dirs = [(r.bucket, r.parent + r.name + "/") for f in FACTS for r in f.candidates]
    assert list(held.candidate_dirs()) == dirs
    # Nothing in the directory: the file is unlinked, its room goes with the process.
    assert list((tmp_path / "spill").iterdir()) == []


def test_many_blocks_and_chunks_of_whole_partitions(tmp_path: Path) -> None:
    facts = [
        fact(f"p{i:05d}/", 3, [f"c{j}" for j in range(i % 3 + 1)], tuple(range(i % 3 + 1)))
        for i in range(BLOCK_CANDIDATES)
    ]
    held = spilled(tmp_path, facts, plan_chunk=1000)
    assert list(held) == facts
    chunks = list(held.chunks())
    assert [f for c in chunks for f in c] == facts
    sizes = [sum(len(f.candidates) for f in c) for c in chunks]
    assert all(1000 <= size < 1003 for size in sizes[:-1]) and 0 < sizes[-1] < 1003
    assert held.chunked


def test_in_memory_the_candidates_are_the_sweeps_own_objects(tmp_path: Path) -> None:
    held = Candidates(SpillConfig(tmp_path / "spill"), MemoryBudget())
    for one in FACTS:
        held.append(one)
    held.finish(plan_room=True)
    assert not held.spilled and held.spill_bytes == 0 and not held.chunked
    assert all(a is b for a, b in zip(held, FACTS, strict=True))
    assert not (tmp_path / "spill").exists()


def test_the_slice_that_outgrows_the_process_budget_spills_and_gives_it_back(
    tmp_path: Path,
) -> None:
    budget = MemoryBudget()
    config = SpillConfig(tmp_path / "spill", memory_candidates=40_000)
    wide = [fact(f"w{i}/", 5000, [f"n{j}" for j in range(5000)]) for i in range(6)]
    first, second = Candidates(config, budget), Candidates(config, budget)
    for one in wide[:4]:
        first.append(one)  # 20,000: within the budget
    assert not first.spilled and 20_000 <= budget.held <= 40_000
    for one in wide[4:]:
        second.append(one)  # 10,000 more would pass it (the budget is asked for in steps)
    assert second.spilled and not first.spilled
    assert list(second) == wide[4:]
    first.release()
    assert budget.held == 0 and list(first) == []
    # Dropped without being released (a refused run's slices): the budget comes back too.
    third = Candidates(config, budget)
    third.append(wide[0])
    assert budget.held > 0
    del third
    gc.collect()
    assert budget.held == 0


def test_spilled_candidates_travel_to_another_process_in_their_bytes(tmp_path: Path) -> None:
    """What a Dask worker fetching another's task data receives: the same candidates, in a
    spill file of its own."""
    held = spilled(tmp_path, FACTS)
    copy = pickle.loads(pickle.dumps(held))
    assert copy.spilled and list(copy) == FACTS and copy.candidates == held.candidates
    held.release()
    assert list(copy) == FACTS
    memory = Candidates(SpillConfig(tmp_path / "spill"), MemoryBudget())
    memory.append(FACTS[0])
    assert list(pickle.loads(pickle.dumps(memory))) == [FACTS[0]]


def test_a_plan_file_reads_back_in_the_plans_order(tmp_path: Path) -> None:
    """Every rewrite, then every partition deletion, then the row and range deletes, each in
    the order the chunks planned them: as one plan of the whole slice orders them."""
    dead = [fact(f"d{i}/", 2, ["a", "b"], (0, 1), absent=True) for i in range(3)]
    live = [
        fact(f"l{i}/", 20, [f"r{j}" for j in range(8)], (0, 1, 2, 5, 9, 11, 12, 13))
        for i in range(3)
    ]
    # Twelve lone candidates cost 12, over the budget of 10: the partition is rewritten.
    wide = fact("wide/", 30, [f"w{j}" for j in range(12)], tuple(range(0, 24, 2)))
    plans = [
        plan_deletions([dead[0], live[0], wide], 10, max_rewrite_rows=100),
        plan_deletions([dead[1], live[1]], 10, max_rewrite_rows=100),
        plan_deletions([live[2], dead[2]], 10, max_rewrite_rows=100),
    ]
    out = SpilledActions(SpillFile(tmp_path / "spill"))
    for plan in plans:
        out.add(plan)
    actions = [a for p in plans for a in p.actions]
    order = {ActionKind.REWRITE: 0, ActionKind.PARTITION: 1, ActionKind.ROW: 2, ActionKind.RANGE: 2}
    expected = sorted(actions, key=lambda a: order[a.kind])  # stable: chunk order kept
    assert {a.kind for a in actions} == set(ActionKind)
    assert list(out.actions()) == expected
    out.close()


def test_a_chunked_plan_fits_the_room_reserved_before_the_decision(tmp_path: Path) -> None:
    """The worst a plan does against its facts: long keys, a partition's key in every one of
    its many actions, the lengths a NUL makes a block carry, incompressible names. It still
    fits the room ``finish`` reserved (so a full disk is met before the decision)."""
    rng = random.Random(5)

    def noise(length: int) -> str:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(length))

    facts = []
    for i in range(60):
        parent = f"{noise(200)}/{i}/"
        names = [noise(12) for _ in range(40)]
        names[0] = "nul\0" + names[0]
        facts.append(fact(parent, 200, sorted(names), tuple(range(0, 200, 5))))
    held = spilled(tmp_path, facts, plan_chunk=300)
    held.finish(plan_room=True)
    file = held.plan_file()
    assert file.reserved > 0
    out = SpilledActions(file)
    for chunk in held.chunks():
        out.add(plan_deletions(chunk, 1000))
    actions = list(out.actions())
    assert len(actions) == 60 * 40  # every candidate alone: an action each
    assert out.spill_bytes <= file.reserved
    out.close()


# -- a spilled clean against the same clean in memory ------------------------------------------


SPILL_ALL = {"memory_candidates": 0, "plan_chunk": 40}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_spilled_clean_deletes_what_the_clean_in_memory_deletes(
    tmp_path: Path, workers: int, dry_run: bool
) -> None:
    db, generation = make_db(tmp_path)
    spill = SpillConfig(tmp_path / "spill", **SPILL_ALL)
    kept, left, audit = clean_copy(tmp_path, db, generation, workers, dry_run=dry_run)
    report, spilled_left, spilled_audit = clean_copy(
        tmp_path, db, generation, workers, dry_run=dry_run, spill=spill
    )
    assert kept.spilled == 0 and report.spilled == report.sweep.result.candidates > 400
    assert report.plan == kept.plan and report.plan.directories > 400
    assert spilled_left == left
    assert sorted((e["dir"], e["via"]) for e in spilled_audit) == sorted(
        (e["dir"], e["via"]) for e in audit
    )
    assert (report.verified, report.verified_parents) == (kept.verified, kept.verified_parents)
    assert 0 < report.spill_bytes < 40 * report.spilled
    assert (report.plan_spill_bytes > 0) is not dry_run
    assert list((tmp_path / "spill").iterdir()) == []


def test_each_slice_re_checks_the_same_directories_spilled_or_not(tmp_path: Path) -> None:
    """Spilled, the partitions found empty whose own row is in another slice are kept aside as
    digests; the same directories are re-checked as with every candidate in memory, and the
    same non-empty ones found."""
    db, _ = make_db(tmp_path)
    chain = chain_across_shards(3)
    with open_store(f"sqlite:///{db}") as store:
        store.put_objects(BUCKET, [chain[-1] + "gone"], OLD)
        store.delete_objects(BUCKET, [chain[-1] + "gone"], OLD)
        built = build_filter(store, BuildConfig(fpr=0.001, salt=7, persist=False)).in_memory
        assert built is not None
        filt = built[1]
        store.write_object_rows([(BUCKET, chain[-1], "late")], OLD)
        parents = 0
        found: set[tuple[str, str]] = set()
        for shard in Shard().split(3):
            one, held = sweep_and_recheck(store, shard, None, filt, True, no_progress)
            many, spilt = sweep_and_recheck(
                store, shard, None, filt, True, no_progress, spill=SpillConfig(tmp_path, 0)
            )
            assert spilt.spilled and not held.spilled
            assert list(spilt) == list(held)
            same = ("checked", "checked_parents", "nonempty")
            assert [getattr(many, f) for f in same] == [getattr(one, f) for f in same]
            assert many.totals.candidates == one.totals.candidates
            parents += many.checked_parents
            found |= many.nonempty
    assert parents > 0  # some slice held partitions whose own row another slice holds
    assert found == {(BUCKET, chain[-1])}


def test_replace_keeps_a_spill_config_valid() -> None:
    with pytest.raises(ValueError, match="plan chunk"):
        replace(SpillConfig(), plan_chunk=0)
