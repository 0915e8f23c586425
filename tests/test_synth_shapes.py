"""The shapes ``gen`` makes: the share of empty directories asked for, counted by the ground
truth, at any share up to 0.9; the backlog's look (runs of empty siblings under live parents,
whole empty subtrees, wide parents); a steady cluster's handful of lone empties; determinism."""

from __future__ import annotations

import sqlite3
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dircleaner.paths import parent_of_dir
from dircleaner.store.sqlite import SqliteStore
from dircleaner.synth import MAX_EMPTY_FRACTION, SHAPES, SynthSpec, generate
from tests.test_synth_runner import independent_truth, make, max_empty_subtree_depth

TS = 1_700_000_000_000_000


@dataclass(frozen=True)
class Counted:
    """A generated store as its own rows and truth file count it."""

    folder_rows: int
    truth: list[str]
    children: dict[str, list[str]]

    @property
    def fraction(self) -> float:
        return len(self.truth) / self.folder_rows


def counted(spec: SynthSpec, *, workers: int = 1) -> Counted:
    """Generate ``spec`` into a fresh SQLite file; count its folder rows and truth lines."""
    with tempfile.TemporaryDirectory() as tmp:
        db, truth_path = Path(tmp) / "meta.db", Path(tmp) / "truth.txt"
        with SqliteStore.open(f"sqlite:///{db}", create=True) as store:
            result = generate(store, spec, truth_path, workers=workers)
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT parent, name FROM folders").fetchall()
        conn.close()
        truth = truth_path.read_text(encoding="utf-8").splitlines()
    assert result.dirs == len(rows) and result.empty_dirs == len(truth)
    children: defaultdict[str, list[str]] = defaultdict(list)
    for parent, name in rows:
        children[parent].append(name)
    return Counted(len(rows), truth, dict(children))


# -- the share -------------------------------------------------------------------------------------


@settings(max_examples=8, deadline=None)
@given(
    fraction=st.floats(min_value=0.0, max_value=MAX_EMPTY_FRACTION),
    dirs=st.integers(min_value=20_000, max_value=100_000),
    seed=st.integers(min_value=0, max_value=1_000),
)
def test_the_share_of_empty_directories_is_the_one_asked_for(
    fraction: float, dirs: int, seed: int
) -> None:
    data = counted(SynthSpec(dirs=dirs, seed=seed, empty_fraction=fraction))
    assert abs(data.fraction - fraction) <= 0.01
    assert abs(data.folder_rows - dirs) <= 0.02 * dirs


@pytest.mark.parametrize("dirs", [20_000, 100_000])
@pytest.mark.parametrize("fraction", [SHAPES["backlog"], MAX_EMPTY_FRACTION])
def test_large_shares_come_out_within_a_point(dirs: int, fraction: float) -> None:
    assert (
        abs(counted(SynthSpec(dirs=dirs, seed=3, empty_fraction=fraction)).fraction - fraction)
        <= 0.01
    )


def test_no_share_no_empty_directory() -> None:
    assert counted(SynthSpec(dirs=50_000, seed=4, empty_fraction=0.0)).truth == []


def test_a_share_of_a_few_directories_comes_out_within_two() -> None:
    data = counted(SynthSpec(dirs=50_000, seed=5, empty_fraction=0.0001))
    assert abs(len(data.truth) - 5) <= 2


def test_a_steady_clusters_empties_are_small_and_under_live_parents() -> None:
    data = counted(SynthSpec(dirs=200_000, seed=6, empty_fraction=150 / 200_000))
    empty = set(data.truth)
    assert abs(len(empty) - 150) <= 2
    # No mass delete, no set piece: a lone directory, at most with its own hour directory.
    assert max_empty_subtree_depth(empty) <= 2


# -- the backlog's look ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def backlog() -> Counted:
    return counted(SynthSpec(dirs=50_000, seed=1, empty_fraction=SHAPES["backlog"]))


def empty_runs(data: Counted) -> dict[str, int]:
    """Per live parent, its longest run of adjacent (in name order) empty children."""
    empty = set(data.truth)
    longest: dict[str, int] = {}
    for parent, names in data.children.items():
        if parent in empty:
            continue
        run = best = 0
        for name in sorted(names):
            run = run + 1 if parent + name + "/" in empty else 0
            best = max(best, run)
        longest[parent] = best
    return longest


def test_the_backlog_is_as_empty_as_the_talks(backlog: Counted) -> None:
    assert abs(backlog.fraction - 16 / 25) <= 0.01


def test_the_backlog_has_days_a_lazy_delete_left_behind(backlog: Counted) -> None:
    # Like the talk's 11.04.2026/AA/ … ZZ/: live days with long runs of empty children.
    runs = empty_runs(backlog)
    days = [p for p, run in runs.items() if p.startswith("logs/") and run >= 20]
    assert len(days) >= 5, sorted(runs.items(), key=lambda kv: -kv[1])[:10]
    assert max(runs.values()) >= 500  # retention of the oldest orders: one run of thousands


def test_the_backlog_has_whole_empty_subtrees(backlog: Counted) -> None:
    empty = set(backlog.truth)
    assert max_empty_subtree_depth(empty) >= 3
    expired_days = [d for d in empty if d.startswith("logs/") and d.count("/") == 5]
    assert len(expired_days) >= 5
    assert all(parent_of_dir(c) in empty for c in empty if parent_of_dir(c) in expired_days)


def test_the_backlog_has_wide_parents_over_the_tombstone_budget(backlog: Counted) -> None:
    empty = set(backlog.truth)
    wide = {
        parent: sum(1 for name in names if parent + name + "/" in empty)
        for parent, names in backlog.children.items()
        if len(names) >= 100 and parent not in empty
    }
    # Live parents with more empty children than the default budget of 500 tombstones: the
    # night must rewrite them, or defer.
    assert sum(1 for n in wide.values() if n > 500) >= 2, wide
    assert max(len(backlog.children[p]) for p in wide) >= 1_000
    # Wide parents mostly emptied, not one set piece.
    assert sum(1 for p, n in wide.items() if n >= len(backlog.children[p]) / 2) >= 5


# -- exact and deterministic -----------------------------------------------------------------------


def test_the_backlogs_truth_is_exact_and_the_same_for_any_worker_count(tmp_path: Path) -> None:
    spec = SynthSpec(dirs=20_000, seed=8, empty_fraction=SHAPES["backlog"], timestamp_us=TS)
    one = make(tmp_path / "one", spec, workers=1)
    two = make(tmp_path / "two", spec, workers=2)
    assert one.truth == independent_truth(one)
    assert two.truth == one.truth
    assert two.folder_rows == one.folder_rows and two.object_rows == one.object_rows
    other = make(tmp_path / "other", SynthSpec(dirs=20_000, seed=9, empty_fraction=0.64))
    assert other.truth != one.truth
