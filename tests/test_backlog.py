"""Telling a backlog from a broken filter (``dircleaner.pipeline.backlog``), without a store: the
sample is uniform over the candidates, the slices' samples add up, the verdict's thresholds,
and the refusal's words and details."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from dircleaner.errors import TooManyCandidates
from dircleaner.model import FolderRow, KindTally, PartitionFacts, PartitionKey
from dircleaner.pipeline.backlog import (
    BACKLOG,
    BROKEN,
    UNCLEAR,
    CandidateSample,
    SampleFigures,
    add_samples,
    estimated_delete_s,
    explain,
    judge,
    sample_sizes,
    suggested_fraction,
)
from dircleaner.pipeline.plan import PlanSummary


def facts(sizes: list[int]) -> list[PartitionFacts]:
    """Partitions of ``sizes`` candidate rows each, named so that row i of all is ``d{i}``."""
    out, i = [], 0
    for n, size in enumerate(sizes):
        rows = tuple(FolderRow(0, "b", f"p{n}/", f"d{i + j}") for j in range(size))
        out.append(PartitionFacts(PartitionKey(0, "b", f"p{n}/"), size, rows))
        i += size
    return out


def sampled(sizes: list[int], size: int, seed: int) -> CandidateSample:
    kept: list[PartitionFacts] = []
    sample = CandidateSample(kept, size, random.Random(seed))
    for fact in facts(sizes):
        sample.append(fact)
    assert kept == facts(sizes)  # every fact goes on to the slice's candidates
    return sample


def index_of(directory: tuple[str, str]) -> int:
    return int(directory[1].rsplit("/d", 1)[1].rstrip("/"))


def test_fewer_candidates_than_the_sample_are_all_taken() -> None:
    sample = sampled([3, 0, 2], 10, 1)
    assert sorted(map(index_of, sample.sample)) == [0, 1, 2, 3, 4]
    assert sample.seen == 5
    assert sampled([4, 4], 0, 1).sample == []


def test_the_sample_is_uniform_over_candidates_in_partitions_of_any_size() -> None:
    sizes = [1, 700, 3, 3, 50, 1200, 1, 40] * 5  # 9,990 candidates
    total = sum(sizes)
    counts: Counter[int] = Counter()
    rounds, size = 300, 100
    for seed in range(rounds):
        sample = sampled(sizes, size, seed)
        assert len(sample.sample) == size and len(set(sample.sample)) == size
        counts.update(index_of(d) for d in sample.sample)
    # Each tenth of the candidates is drawn a tenth of the time (30,000 draws; within 8%).
    expected = rounds * size / 10
    for tenth in range(10):
        drawn = sum(c for i, c in counts.items() if i * 10 // total == tenth)
        assert abs(drawn - expected) < 0.08 * expected, (tenth, drawn)


def test_the_figures_count_the_members_holding_an_object() -> None:
    sample = sampled([5, 5], 10, 3)
    holding = {sample.sample[0], sample.sample[3], ("b", "elsewhere/")}
    assert sample.figures(holding) == SampleFigures(10, 10, 2)


def test_slices_samples_add_up_weighted_by_their_candidates() -> None:
    # A slice of 9,000 candidates sampled 10 of them, one of 1,000 sampled 10 too.
    big, small = SampleFigures(9000, 10, 0), SampleFigures(1000, 10, 5)
    together = add_samples([big, small])
    assert (together.candidates, together.sampled, together.holding) == (10_000, 20, 5)
    assert together.share == 0.25
    assert together.estimated() == pytest.approx(0.05)  # 500 of 10,000, not a quarter
    assert add_samples([]) == SampleFigures()
    assert sample_sizes(4096, 8) == 512 and sample_sizes(4096, 3) == 1366
    assert sample_sizes(4096, 0) == 4096


@pytest.mark.parametrize(
    ("holding", "sampled", "verdict"),
    [
        (0, 4096, BACKLOG),
        (4, 4096, BACKLOG),  # 0.1%: writes racing the night
        (5, 4096, UNCLEAR),
        (40, 4096, UNCLEAR),
        (41, 4096, BROKEN),  # 1%
        (3000, 4096, BROKEN),
        (0, 0, BACKLOG),
        (2, 10, UNCLEAR),  # 20%, but two finds are not yet a pattern
        (3, 10, BROKEN),
    ],
)
def test_the_verdict(holding: int, sampled: int, verdict: str) -> None:
    assert judge(SampleFigures(10_000, sampled, holding)) == verdict


def test_the_suggested_fraction_is_the_next_step_with_room() -> None:
    assert suggested_fraction(0.64) == 0.7
    assert suggested_fraction(0.65) == 0.7
    assert suggested_fraction(0.66) == 0.7
    assert suggested_fraction(0.69) == 0.75
    assert suggested_fraction(0.12) == 0.15
    assert suggested_fraction(0.99) == 1.0


PLAN = PlanSummary(
    directories=16_000_000,
    deletes=KindTally(partition=2_000_000, row=6_000_000, range=950_000, rewrite=50_000),
    deferred=12,
)


def refusal() -> TooManyCandidates:
    details: dict[str, object] = {
        "swept_dirs": 25_000_000,
        "candidates": 16_000_000,
        "max_delete_fraction": 0.1,
    }
    return TooManyCandidates("over the guard", details=details)


def test_a_backlog_s_refusal_says_so_and_what_clearing_it_takes() -> None:
    assert estimated_delete_s(PLAN, 1000.0) == 9000.0
    assert estimated_delete_s(PLAN, 0.0) is None
    explained = explain(refusal(), SampleFigures(16_000_000, 4096, 0), PLAN, 1000.0)
    text = str(explained)
    assert text.startswith(
        "16,000,000 of 25,000,000 directories (64.0%) would be deleted, over"
        " --max-delete-fraction 0.1. It looks like a backlog, not a broken filter: 0 of 4,096"
        " candidates sampled hold an object"
    )
    assert (
        "The plan: 16,000,000 directories in 9,000,000 deletes (2,000,000 partition,"
        " 6,000,000 row, 950,000 range, 50,000 rewrites), about 2h30m at --rate 1000." in text
    )
    assert "--max-delete-fraction 0.7" in text and "--max-run-time 5h (one night" in text
    assert "\n" not in text  # one line
    details = explained.details
    assert details["looks_like"] == BACKLOG
    assert details["suggested_max_delete_fraction"] == 0.7
    assert details["estimated_delete_seconds"] == 9000.0
    assert details["sample"] == {
        "candidates": 16_000_000,
        "sampled": 4096,
        "holding_objects": 0,
        "estimated_share_holding_objects": 0.0,
        "looks_like": BACKLOG,
    }
    assert details["plan"] == {
        "directories": 16_000_000,
        "deletes": 9_000_000,
        "partition_deletes": 2_000_000,
        "row_deletes": 6_000_000,
        "range_deletes": 950_000,
        "rewrites": 50_000,
        "deferred": 12,
    }
    # Slower, it takes several nights of the suggested window.
    slow = str(explain(refusal(), SampleFigures(16_000_000, 4096, 0), PLAN, 100.0))
    assert "about 25h00m at --rate 100" in slow and "(about 5 nights at this rate" in slow


def test_a_broken_filter_s_refusal_suggests_no_higher_fraction() -> None:
    explained = explain(refusal(), SampleFigures(16_000_000, 4096, 2900), PLAN, 1000.0)
    text = str(explained)
    assert "It looks like a broken filter, not a backlog: 2,900 of 4,096 candidates" in text
    assert "Do not raise --max-delete-fraction for this" in text
    assert "--max-run-time" not in text
    assert explained.details["suggested_max_delete_fraction"] is None
    unclear = str(explain(refusal(), SampleFigures(16_000_000, 4096, 9), PLAN, 0.0))
    assert "It may be a backlog with writes racing the night" in unclear
    assert "unthrottled" in unclear
