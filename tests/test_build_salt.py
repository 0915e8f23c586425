"""A new salt each generation: tonight's false positives are caught by a later run."""

from __future__ import annotations

from pathlib import Path

from dircleaner.job.clean import CleanConfig
from dircleaner.job.run import run_job
from dircleaner.job.sweep import SweepConfig
from dircleaner.paths import dir_of_row
from dircleaner.pipeline.build import BuildConfig
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.store import Store, open_store

FPR = 0.25  # high on purpose, so one run leaves many survivors to follow


def empty_dirs_left(store: Store) -> set[str]:
    return {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows() if r.parent == "e/"}


def two_runs(tmp_path: Path, salts: tuple[int | None, int | None]) -> tuple[int, int, int]:
    url = f"sqlite:///{tmp_path}/meta.db"
    with open_store(url, create=True) as store:
        dead = [f"e/{i:05d}/obj" for i in range(4000)]
        # e/keep makes e/ itself non-empty, so its children are judged one by one.
        live = ["e/keep", *(f"live/{i}/obj" for i in range(4000))]
        store.put_objects("default", [*dead, *live], 1)
        store.delete_objects("default", dead, 2)
        config = CleanConfig(
            sweep=SweepConfig(guards=GuardConfig(force=True)),
            min_age_s=0,
            throttle=ThrottleConfig(rate=0),
            max_tombstones_per_partition=10_000,
        )
        counts = [len(empty_dirs_left(store))]
        for salt in salts:
            # Size for the live directories only, so the fill matches the target rate.
            run_job(store, BuildConfig(fpr=FPR, expected_dirs=4002, salt=salt), config)
            counts.append(len(empty_dirs_left(store)))
    return counts[0], counts[1], counts[2]


def test_a_new_salt_catches_last_nights_false_positives(tmp_path: Path) -> None:
    start, after_one, after_two = two_runs(tmp_path, (None, None))
    assert start == 4000
    # About FPR of the empty directories survive one run, about FPR² survive two.
    assert 0.15 * start < after_one < 0.35 * start
    assert after_two < 0.45 * after_one
    assert after_two < 0.12 * start


def test_the_same_salt_would_hide_the_same_directories_forever(tmp_path: Path) -> None:
    """Control: with the salt pinned, the second run removes nothing new."""
    _, after_one, after_two = two_runs(tmp_path, (42, 42))
    assert after_one > 0
    assert after_two == after_one
