"""kill -9 at random points; the next run resumes and ends as an uninterrupted run would."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dircleaner.paths import dir_of_row, directories_of
from dircleaner.store import open_store
from dircleaner.store.sqlite import SqliteStore
from dircleaner.timeutil import now_us

PARENTS = 12
CHILDREN = 50
BUDGET = 30


def make_store(path: Path) -> tuple[str, set[str], set[str]]:
    """Wide live parents full of empty children, plus a few deep empty subtrees."""
    url = f"sqlite:///{path}"
    live = [f"p{i:02d}/live/obj" for i in range(PARENTS)]
    dead = [f"p{i:02d}/c{j:03d}/x/obj" for i in range(PARENTS) for j in range(CHILDREN)]
    with open_store(url, create=True) as store:
        store.put_objects("default", live + dead, now_us() - 3_600_000_000)
        store.delete_objects("default", dead, now_us() - 3_600_000_000)
    every = {d for k in live + dead for d in directories_of(k)}
    live_dirs = {d for k in live for d in directories_of(k)}
    return url, every, live_dirs


def run_cli(url: str, tmp: Path, *extra: str) -> subprocess.Popen[bytes]:
    args = [
        sys.executable,
        "-m",
        "dircleaner",
        "--store",
        url,
        "run",
        "--min-age",
        "0",
        "--fpr",
        "0.0001",
        "--max-delete-fraction",
        "1",
        "--rate",
        "600",
        "--concurrency",
        "8",
        "--max-tombstones-per-partition",
        str(BUDGET),
        "--audit-log",
        str(tmp / "audit.jsonl"),
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def finish(proc: subprocess.Popen[bytes]) -> None:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out + err).decode()


def listed(url: str) -> set[str]:
    with open_store(url) as store:
        return {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows()}


def max_row_tombstones(url: str) -> int:
    with open_store(url) as store:
        assert isinstance(store, SqliteStore)
        return max(store.tombstones_in_partition("default", f"p{i:02d}/") for i in range(PARENTS))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    tmp = tmp_path_factory.mktemp("whole")
    url, _, _ = make_store(tmp / "meta.db")
    finish(run_cli(url, tmp))
    return listed(url)


@pytest.mark.parametrize("seed", range(5))
def test_a_killed_run_resumes_to_the_same_result(
    tmp_path: Path, seed: int, uninterrupted: set[str]
) -> None:
    url, _, live_dirs = make_store(tmp_path / "meta.db")
    proc = run_cli(url, tmp_path)
    time.sleep(random.Random(seed).uniform(0.3, 2.0))
    assert proc.poll() is None, "the run finished before the kill: slow it down"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert live_dirs <= listed(url)
    finish(run_cli(url, tmp_path))
    remaining = listed(url)
    assert live_dirs <= remaining, "a non-empty directory lost its entry"
    # One generation, one budget: the killed attempt and the resumed one share it.
    assert max_row_tombstones(url) <= BUDGET
    # Same filter (same salt), same budget accounting: the same directories are gone. A kill
    # inside a delete batch may leave that batch's few entries for the next night, never more.
    assert uninterrupted <= remaining
    assert len(remaining - uninterrupted) <= 8
