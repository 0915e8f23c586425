"""The next filter is sized for the directories the last one really held, not every folder row."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dircleaner.filter.sizing import load_sizing_record
from dircleaner.job.clean import CleanConfig
from dircleaner.job.run import run_job
from dircleaner.job.sweep import SweepConfig
from dircleaner.pipeline.build import BuildConfig, build_filter, scope_of
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.store import open_store
from dircleaner.store.sqlite import SqliteStore
from dircleaner.timeutil import now_us

OLD = now_us() - 10**10


def make_store(tmp_path: Path) -> SqliteStore:
    store = open_store(f"sqlite:///{tmp_path}/meta.db", create=True)
    assert isinstance(store, SqliteStore)
    keys = [f"t/{i % 17}/{i % 211}/{i}/obj" for i in range(6000)]
    store.put_objects("default", keys, OLD)
    # A fifth of the leaf directories lose their only object: empty entries the filter lacks.
    store.delete_objects("default", keys[::5], OLD)
    return store


def nonempty_dirs(store: SqliteStore) -> int:
    (count,) = store.db.conn.execute(
        "SELECT count(*) FROM folders AS f WHERE EXISTS (SELECT 1 FROM objects AS o"
        " WHERE o.bucket = f.bucket AND o.parent LIKE f.parent || f.name || '/%')"
    ).fetchone()
    return int(count)


def test_the_first_build_sizes_for_every_folder_row(tmp_path: Path) -> None:
    with make_store(tmp_path) as store:
        built = build_filter(store, BuildConfig(salt=1))
        assert built.sizing.count == store.estimate_directory_count().count
        record = load_sizing_record(store, scope_of(store, None))
        assert record is not None and record.generation == built.generation
        assert record.folder_rows == built.sizing.count


def test_the_next_build_sizes_for_the_directories_the_last_filter_held(tmp_path: Path) -> None:
    with make_store(tmp_path) as store:
        rows = store.estimate_directory_count().count
        held = nonempty_dirs(store)
        assert held < 0.9 * rows  # the dataset really has empties to size away
        first = build_filter(store, BuildConfig(salt=1, workers=2))
        record = load_sizing_record(store, scope_of(store, None))
        assert record is not None and record.generation == first.generation
        # Two workers insert the ancestors they share twice: the count is the merged filter's.
        assert abs(record.held - held) < 0.03 * held
        second = build_filter(store, BuildConfig(salt=2))
        assert "last filter" in second.sizing.method
        assert abs(second.sizing.count - held) < 0.03 * held
        # Sized for what it holds, the filter fills to the optimum's ~50% instead of less.
        assert second.fill_ratio > first.fill_ratio + 0.02
        assert second.header.m < first.header.m


def test_after_a_clean_growth_is_measured_from_what_the_clean_left(tmp_path: Path) -> None:
    with make_store(tmp_path) as store:
        held = nonempty_dirs(store)
        clean = CleanConfig(min_age_s=0, max_tombstones_per_partition=10_000)
        clean = replace(clean, sweep=SweepConfig(guards=GuardConfig(force=True)))
        report = run_job(store, BuildConfig(salt=1), clean)
        assert report.clean.deleted is not None and report.clean.deleted.directories > 0
        record = load_sizing_record(store, scope_of(store, None))
        assert record is not None
        assert record.folder_rows == store.estimate_directory_count().count
        # The index shrank by the empties removed, not by directories with objects: the next
        # filter is still sized for the directories that hold objects.
        again = build_filter(store, BuildConfig(salt=2))
        assert abs(again.sizing.count - held) < 0.03 * held


@pytest.mark.parametrize("broken", ["{", '{"generation": "g", "folder_rows": 5}', "[1, 2]"])
def test_a_missing_or_unreadable_record_falls_back_to_the_folder_rows(
    tmp_path: Path, broken: str
) -> None:
    with make_store(tmp_path) as store:
        build_filter(store, BuildConfig(salt=1))
        store.put_state(f"sizing|{scope_of(store, None)}", broken)
        built = build_filter(store, BuildConfig(salt=2))
        assert built.sizing.count == store.estimate_directory_count().count


def test_a_run_counts_the_folder_rows_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build counts the folder rows to size its filter; the sweep's progress then expects
    that count instead of counting the table a second time (no sweep has left its own count)."""
    with make_store(tmp_path) as store:
        rows = store.estimate_directory_count().count
        counts: list[int] = []
        count = store.estimate_directory_count

        def counting(bucket: str | None = None) -> object:
            counts.append(1)
            return count(bucket)

        monkeypatch.setattr(store, "estimate_directory_count", counting)
        totals: list[int | None] = []

        def progress(phase: str, done: int, total: int | None) -> None:
            if phase == "sweep":
                totals.append(total)

        clean = CleanConfig(min_age_s=0, dry_run=True)
        clean = replace(clean, sweep=SweepConfig(guards=GuardConfig(force=True)))
        run_job(store, BuildConfig(salt=1), clean, progress)
        assert len(counts) == 1
        assert totals and set(totals) == {rows}
