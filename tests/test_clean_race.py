"""The race: objects put into empty directories while a clean runs never lose their entries."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from dircleaner.job.clean import CleanConfig, run_clean
from dircleaner.job.sweep import SweepConfig, run_sweep
from dircleaner.paths import dir_of_row, directories_of
from dircleaner.pipeline.build import BuildConfig, build_filter
from dircleaner.pipeline.delete import ThrottleConfig, execute_plan
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.pipeline.plan import plan_deletions
from dircleaner.store import Store, open_store
from dircleaner.store.sqlite import SqliteStore
from dircleaner.timeutil import now_us
from tests.helpers import audit_entries

N = 1500
#: puts the writer lands between the plan and the first delete
RACED_PUTS = 200


def make_store(path: Path) -> str:
    url = f"sqlite:///{path}"
    with open_store(url, create=True) as store:
        keys = [f"r/{i:04d}/sub/obj" for i in range(N)] + ["r/keep"]
        store.put_objects("default", keys, now_us() - 3_600_000_000)
        store.delete_objects("default", keys[:-1], now_us() - 3_600_000_000)
    return url


def listed(store: Store) -> set[str]:
    return {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows()}


class Writer(threading.Thread):
    """Puts objects into (empty) directories until told to stop; remembers what it put.

    It starts when the clean issues its first delete, and that delete waits for its first
    RACED_PUTS puts: the race is forced into the window between the plan and the deletes,
    whatever the scheduler does with the two threads, and goes on while the deletes run.
    """

    def __init__(self, url: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.order = list(range(N))
        random.Random(seed).shuffle(self.order)
        self.put: list[str] = []
        self.stop = threading.Event()
        self.deleting = threading.Event()
        self.raced = threading.Event()

    def run(self) -> None:
        with open_store(self.url) as store:
            self.deleting.wait(timeout=120)
            for i in self.order:
                if self.stop.is_set():
                    break
                key = f"r/{i:04d}/sub/new"
                store.put_objects("default", [key], now_us())
                self.put.append(key)
                if len(self.put) == RACED_PUTS:
                    self.raced.set()
        self.raced.set()


class RacingStore(SqliteStore):
    """The SQLite store, whose first delete of any kind lets the writer race it first."""

    writer: Writer

    def _race(self) -> None:
        if not self.writer.deleting.is_set():
            self.writer.deleting.set()
            assert self.writer.raced.wait(timeout=120), "the writer never put its objects"

    def delete_folder_rows(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._race()
        return super().delete_folder_rows(*args, **kwargs)

    def delete_folder_ranges(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._race()
        return super().delete_folder_ranges(*args, **kwargs)

    def delete_folder_partitions(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._race()
        return super().delete_folder_partitions(*args, **kwargs)

    def rewrite_folder_partition(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._race()
        return super().rewrite_folder_partition(*args, **kwargs)


def clean_config(verify: bool, audit: Path) -> CleanConfig:
    return CleanConfig(
        sweep=SweepConfig(guards=GuardConfig(force=True)),
        min_age_s=0,
        verify=verify,
        throttle=ThrottleConfig(rate=3000, concurrency=8),
        max_tombstones_per_partition=N,
        audit_log=audit,
    )


@pytest.mark.parametrize("verify", [True, False], ids=["verify", "no-verify"])
def test_puts_during_a_clean_keep_their_directories(tmp_path: Path, verify: bool) -> None:
    url = make_store(tmp_path / "meta.db")
    with RacingStore.open(url) as store:
        build_filter(store, BuildConfig(fpr=0.001))
        writer = Writer(url, seed=7)
        assert isinstance(store, RacingStore)
        store.writer = writer
        writer.start()
        audit = tmp_path / "audit.jsonl"
        run_clean(store, clean_config(verify, audit))
        writer.stop.set()
        writer.join()
        remaining = listed(store)
    # What the clean set out to delete: every delete is audited before it is issued.
    planned = {e["dir"] for e in audit_entries(audit)}
    raced = {d for key in writer.put for d in directories_of(key)} & planned
    # The race really happened: directories the clean set out to delete received objects.
    assert len(raced) > 50, len(raced)
    lost = [d for key in writer.put for d in directories_of(key) if d not in remaining]
    assert lost == []


def test_deletes_stamped_after_the_puts_would_lose_them(tmp_path: Path) -> None:
    """Negative control: the protection above comes from deleting at T, before the puts."""
    url = make_store(tmp_path / "meta.db")
    with open_store(url) as store:
        build_filter(store, BuildConfig(fpr=0.001))
        swept = run_sweep(store, SweepConfig(guards=GuardConfig(force=True)))
        plan = plan_deletions(swept.result.facts, N)
        store.put_objects("default", ["r/0001/sub/new"], now_us())
        execute_plan(store, plan, now_us() + 1, ThrottleConfig(rate=0))
        assert "r/0001/sub/" not in listed(store)
