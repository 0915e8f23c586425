"""The clean's decisions as pure functions (``dircleaner.job.clean``), tested without a store:
the final rate, the guard decision between the phases, which slices to do, and
what the parent records between them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dircleaner.deadline import Deadline
from dircleaner.errors import FilterSuspiciouslyEmpty, TooManyCandidates
from dircleaner.filter.format import FilterHeader
from dircleaner.job.clean import CleanConfig, decide, deletes_of, slices_to_do
from dircleaner.job.decision import (
    Checkpoints,
    Decision,
    Go,
    add_totals,
    decide_clean,
    worth_checkpointing,
)
from dircleaner.job.resume import MAX_CHECKPOINTED_NONEMPTY, CleanCheckpoint, CleanProgress
from dircleaner.pipeline.delete import DeleteStats
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.pipeline.plan import PlanSummary
from dircleaner.pipeline.slice import SliceCleaned, SliceSwept
from dircleaner.pipeline.sweep import SweepTotals

HEADER = FilterHeader(
    engine="mmh3",
    hash_name="murmur3_x64_128",
    salt=1234,
    m=958_506,
    k=7,
    expected_n=100_000,
    target_p=0.01,
    snapshot_us=1_767_225_600_000_000,
    shard_index=0,
    shard_count=1,
    items=80_000,
    scope="sqlite:objects,folders",
    body_len=119_814,
    body_crc=0xDEADBEEF,
)
FRESH = CleanProgress(4, frozenset(), frozenset())


def swept(
    rows: int, candidates: int, *nonempty: tuple[str, str], seconds: float = 1.0
) -> SliceSwept:
    return SliceSwept(
        SweepTotals(rows, rows // 10, candidates, seconds), 0, 0.0, frozenset(nonempty)
    )


def cleaned(rate: float | None, directories: int = 10) -> SliceCleaned:
    deleted = None if rate is None else DeleteStats(directories=directories, final_rate=rate)
    return SliceCleaned(PlanSummary(), deleted, delete_s=1.0)


# -- the final rate --------------------------------------------------------------------------


def test_the_deletes_of_every_slice_sum_up_with_the_phase_time_and_the_final_rate() -> None:
    assert deletes_of([cleaned(None), cleaned(None)], 5.0) is None
    merged = deletes_of([cleaned(100.0, 3), cleaned(None), cleaned(80.0, 4), cleaned(90.0)], 5.0)
    assert merged is not None
    assert merged.directories == 17
    assert merged.seconds == 5.0  # the phase's time, not a slice's
    # Each slice's final rate is the total it made with the slices sharing --rate: their mean.
    assert merged.final_rate == pytest.approx(90.0)


# -- the guard decision ------------------------------------------------------------------------


def test_a_sweep_within_the_guards_pools_every_slice_s_finds_with_the_earlier_attempt_s() -> None:
    previous = replace(FRESH, done=frozenset({3}), nonempty=frozenset({("b", "old/")}))
    tallies = [swept(1000, 10, ("b", "x/")), swept(1000, 20), swept(500, 5, ("b", "y/"))]
    decision = decide_clean(tallies, HEADER, GuardConfig(), previous, dry_run=False)
    nonempty = {("b", "old/"), ("b", "x/"), ("b", "y/")}
    assert decision.progress == replace(previous, nonempty=nonempty)
    assert decision.go == Go(frozenset(nonempty))
    assert decision.verdict is None


def test_a_sweep_over_the_guard_refuses_the_whole_clean_on_the_totals() -> None:
    # No single slice is over 10%, their sum is.
    tallies = [swept(1000, 90), swept(1000, 90), swept(100, 50)]
    decided = decide_clean(
        tallies, HEADER, GuardConfig(max_delete_fraction=0.1), FRESH, dry_run=False
    )
    # Raised once the slices have planned (the refusal then says what the plan would take).
    assert isinstance(decided.refusal, TooManyCandidates)
    assert decided.refusal.details["candidates"] == 230
    assert decided.verdict is None


def test_a_dry_run_over_the_guard_plans_on_and_says_why_a_real_run_would_refuse() -> None:
    tallies = [swept(1000, 300, ("b", "x/"))]
    decision = decide_clean(tallies, HEADER, GuardConfig(), FRESH, dry_run=True)
    assert decision.verdict is not None and "--max-delete-fraction" in decision.verdict
    assert decision.progress.nonempty == {("b", "x/")}


def test_an_empty_filter_is_refused_and_force_lets_everything_through() -> None:
    empty = replace(HEADER, items=0)
    with pytest.raises(FilterSuspiciouslyEmpty):
        decide_clean([swept(100, 100)], empty, GuardConfig(), FRESH, dry_run=False)
    forced = decide_clean([swept(100, 100)], empty, GuardConfig(force=True), FRESH, dry_run=False)
    assert forced.verdict is None
    # No slice (all done by an interrupted attempt): nothing swept, nothing refused.
    assert decide_clean([], HEADER, GuardConfig(), FRESH, dry_run=False).go == Go(frozenset())


# -- which slices, and what is recorded --------------------------------------------------------


def test_a_fresh_clean_does_every_slice_slowest_first() -> None:
    previous, todo = slices_to_do(None, 4, [0.5, None, 2.0, 1.0])
    assert previous == FRESH
    assert todo == [2, 3, 0, 1]


def test_a_resumed_clean_skips_the_finished_slices_unless_the_ring_was_cut_otherwise() -> None:
    interrupted = CleanProgress(4, frozenset({0, 2}), frozenset({("b", "x/")}))
    previous, todo = slices_to_do(interrupted, 4, [None] * 4)
    assert (previous, todo) == (interrupted, [1, 3])
    previous, todo = slices_to_do(interrupted, 8, [None] * 8)
    assert previous == CleanProgress(8, frozenset(), frozenset())
    assert todo == list(range(8))


def test_progress_is_checkpointed_unless_a_dry_run_or_too_many_finds_to_store() -> None:
    assert worth_checkpointing(FRESH)
    many = frozenset(("b", f"{i}/") for i in range(MAX_CHECKPOINTED_NONEMPTY + 1))
    assert not worth_checkpointing(replace(FRESH, nonempty=many))
    assert worth_checkpointing(replace(FRESH, nonempty=many - {("b", "0/")}))


class Parent:
    """The parent between the phases: ``decide`` on a clean's config, recorded."""

    def __init__(
        self,
        saved: list[CleanProgress],
        *,
        dry_run: bool = False,
        deadline: Deadline | None = None,
    ) -> None:
        self.config = CleanConfig(dry_run=dry_run, deadline=deadline)
        checkpoint = CleanCheckpoint(None, saved.append)
        self.records = Checkpoints(checkpoint, [2, 0, 3, 1], dry_run=dry_run)

    def decide(self, tallies: list[SliceSwept]) -> Go:
        return decide(self.config, HEADER, FRESH, self.records, tallies)

    @property
    def decision(self) -> Decision:
        assert self.records.decision is not None
        return self.records.decision


def parent(
    saved: list[CleanProgress], *, dry_run: bool = False, deadline: Deadline | None = None
) -> Parent:
    return Parent(saved, dry_run=dry_run, deadline=deadline)


DONE = SliceCleaned(PlanSummary(), None, 1.0)


def test_the_parent_records_the_decision_before_any_delete_then_each_finished_slice() -> None:
    saved: list[CleanProgress] = []
    decision = parent(saved)
    assert decision.decide([swept(100, 1, ("b", "x/"))]) == Go(frozenset({("b", "x/")}))
    assert saved == [replace(FRESH, nonempty=frozenset({("b", "x/")}))]
    decision.records.slice_done(0, DONE)  # the first slice to do: slice 2
    decision.records.slice_done(2, DONE)  # slice 3
    assert saved[-1].done == {2, 3}
    assert len(saved) == 3
    dry = parent(saved, dry_run=True)
    dry.decide([swept(100, 1)])
    dry.records.slice_done(0, DONE)
    assert len(saved) == 3  # a dry run leaves nothing to resume


def test_a_refused_night_plans_without_deleting_and_records_nothing() -> None:
    saved: list[CleanProgress] = []
    decision = parent(saved)
    go = decision.decide([swept(1000, 650, ("b", "x/"))])
    assert go == Go(frozenset({("b", "x/")}), deletes=False, plans=True)
    assert isinstance(decision.decision.refusal, TooManyCandidates)
    assert saved == []


def test_a_deadline_past_at_the_decision_lets_every_slice_go_unplanned() -> None:
    saved: list[CleanProgress] = []
    decision = parent(saved, deadline=Deadline(100, clock=lambda: 101))
    assert decision.decide([swept(100, 1)]) == Go(frozenset(), deletes=False, plans=False)
    assert decision.decision.stopped_before_deletes
    assert len(saved) == 1  # the decision is recorded: the next run resumes from it
    # A slice the deadline stopped is not done: the next run does it again.
    decision.records.slice_done(0, SliceCleaned.not_planned(5))
    assert len(saved) == 1 and saved[-1].done == frozenset()
    # Before it, the night deletes.
    early = parent([], deadline=Deadline(100, clock=lambda: 99))
    assert early.decide([swept(100, 1)]) == Go(frozenset())


def test_the_slices_totals_add_up_and_the_slowest_slice_is_the_time() -> None:
    total = add_totals([SweepTotals(10, 2, 1, 0.5), SweepTotals(30, 5, 4, 1.5)])
    assert total == SweepTotals(40, 7, 5, 1.5)
    assert add_totals([]) == SweepTotals(0, 0, 0, 0.0)
