"""kill -9 at random points; the next run resumes and ends as an uninterrupted run would.

Runs on both backends: the embedded store, and a real Cassandra node (one bucket per test, row
tombstones counted by Cassandra's own tracing).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from dircleaner.paths import dir_of_row, directories_of
from dircleaner.store import open_store
from dircleaner.timeutil import now_us

PARENTS = 12
CHILDREN = 50
BUDGET = 30
LIVE = [f"p{i:02d}/live/obj" for i in range(PARENTS)]
DEAD = [f"p{i:02d}/c{j:03d}/x/obj" for i in range(PARENTS) for j in range(CHILDREN)]
LIVE_DIRS = {d for k in LIVE for d in directories_of(k)}


@dataclass(frozen=True)
class Target:
    """One store and bucket holding wide live parents full of empty children."""

    url: str
    bucket: str

    def listed(self) -> set[str]:
        with open_store(self.url) as store:
            return {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows(self.bucket)}

    def max_row_tombstones(self) -> int:
        with open_store(self.url) as store:
            count = store.tombstones_in_partition
            return max(int(count(self.bucket, f"p{i:02d}/")) for i in range(PARENTS))


def make_target(backend: str, tmp: Path, request: pytest.FixtureRequest) -> Target:
    if backend == "sqlite":
        url, bucket = f"sqlite:///{tmp / 'meta.db'}", "default"
    else:
        base: str = request.getfixturevalue("cassandra_url")
        url, bucket = base.rsplit("/", 1)[0] + "/dircleaner_test_resume", f"r{uuid.uuid4().hex}"
    with open_store(url, create=True) as store:
        store.put_objects(bucket, LIVE + DEAD, now_us() - 3_600_000_000)
        store.delete_objects(bucket, DEAD, now_us() - 3_600_000_000)
    return Target(url, bucket)


def run_cli(target: Target, tmp: Path) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "dircleaner", "--store", target.url, "run",
        "--bucket", target.bucket, "--min-age", "0", "--fpr", "0.0001",
        "--max-delete-fraction", "1", "--rate", "150", "--concurrency", "8",
        "--max-tombstones-per-partition", str(BUDGET), "--audit-log", str(tmp / "audit.jsonl"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def finish(proc: subprocess.Popen[bytes]) -> None:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, (out + err).decode()


UNINTERRUPTED: dict[str, set[str]] = {}


def uninterrupted(backend: str, tmp: Path, request: pytest.FixtureRequest) -> set[str]:
    """What a run that nobody killed leaves behind, once per backend."""
    if backend not in UNINTERRUPTED:
        (tmp / "whole").mkdir()
        target = make_target(backend, tmp / "whole", request)
        finish(run_cli(target, tmp / "whole"))
        UNINTERRUPTED[backend] = target.listed()
    return UNINTERRUPTED[backend]


CASES = [("sqlite", seed) for seed in range(5)] + [
    pytest.param("cassandra", seed, marks=pytest.mark.cassandra) for seed in range(3)
]


@pytest.mark.parametrize(("backend", "seed"), CASES)
def test_a_killed_run_resumes_to_the_same_result(
    tmp_path: Path, backend: str, seed: int, request: pytest.FixtureRequest
) -> None:
    expected = uninterrupted(backend, tmp_path, request)
    target = make_target(backend, tmp_path, request)
    proc = run_cli(target, tmp_path)
    time.sleep(random.Random(seed).uniform(0.3, 2.0))
    assert proc.poll() is None, "the run finished before the kill: slow it down"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert target.listed() >= LIVE_DIRS
    finish(run_cli(target, tmp_path))
    remaining = target.listed()
    assert remaining >= LIVE_DIRS, "a non-empty directory lost its entry"
    # One generation, one budget: the killed attempt and the resumed one share it.
    assert target.max_row_tombstones() <= BUDGET
    # Same filter (same salt), same budget accounting: the same directories are gone. A kill
    # inside a delete batch may leave that batch's few entries for the next night, never more.
    assert expected <= remaining
    assert len(remaining - expected) <= 8
