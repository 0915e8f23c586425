"""Faults on a real 3-node cluster (RF 3, QUORUM): run by `make test-faults`, not `make test`.

Needs `scripts/cassandra start --nodes 3` (the make target does it) and DIRCLEANER_FAULTS=1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daskcluster import LoopbackCluster
from tests.helpers import audit_lines_written, expected_dirs, invoke, write_lines

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cassandra"
URL = "cassandra://127.0.0.1,127.0.0.2,127.0.0.3:9042/dircleaner_faults"
LEASE_TTL_S = 5.0

# Collected only with DIRCLEANER_FAULTS=1 (`make test-faults`; see tests/conftest.py).


def node(action: str, number: int) -> None:
    subprocess.run([str(SCRIPT), action, str(number)], check=True, capture_output=True)


def put_then_delete(tmp_path: Path, bucket: str, put: list[str], dead: list[str]) -> None:
    """The schema, then ``put`` written as S3 puts and ``dead`` deleted lazily, in ``bucket``."""
    assert invoke(URL, "init-schema").exit_code == 0
    for command, keys in (("import-keys", put), ("delete-keys", dead)):
        lines = write_lines(tmp_path / command, keys)
        result = invoke(URL, command, "--bucket", bucket, str(lines))
        assert result.exit_code == 0, result.output


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[tuple[Path, set[str]]]:
    """A fresh bucket on the RF 3 keyspace, every node up before and after."""
    config = tmp_path / "rf3.toml"
    config.write_text("[cassandra]\nreplication_factor = 3\n")
    os.environ["DIRCLEANER_CONFIG"] = str(config)
    bucket = f"b{time.time_ns()}"
    # Empty children between live ones: no two adjacent, so they go as 240 row deletes (a run of
    # adjacent empties would go as one range delete, over before a node could be stopped).
    empty = [f"wide/c{i:03d}a/obj" for i in range(240)]
    put = [*empty, *(f"wide/c{i:03d}b/obj" for i in range(240)), "wide/live/obj", "keep/obj"]
    dead = empty
    put_then_delete(tmp_path, bucket, put, dead)
    _, live = expected_dirs(put, dead)
    (tmp_path / "bucket").write_text(bucket)
    try:
        yield tmp_path, live
    finally:
        for number in (2, 3):
            node("start-node", number)
        os.environ.pop("DIRCLEANER_CONFIG", None)


def start_run(
    tmp: Path, workers: int = 1, scheduler: str | None = None, rate: int = 40
) -> subprocess.Popen[bytes]:
    bucket = (tmp / "bucket").read_text()
    args = [
        sys.executable,
        "-m",
        "dircleaner",
        "--store",
        URL,
        "run",
        "--bucket",
        bucket,
        "--min-age",
        "0",
        "--max-delete-fraction",
        "1",
        "--rate",
        str(rate),
        "--concurrency",
        "4",
        # Every empty directory must go (remaining == live), and a resumed run reuses the
        # filter: at the default 0.01 (sized for as few as 1,000 directories, holding 243) one of
        # the 240 empties is a false positive up to once in 1,500 runs; at 1e-7, never in practice.
        "--fpr",
        "1e-7",
        "--audit-log",
        str(tmp / "audit.jsonl"),
        *(["--scheduler", scheduler] if scheduler else ["--workers", str(workers)]),
        # a run stopped by the fault cannot release its lease (no quorum): the next run waits
        # for it to expire
        "--lease-ttl",
        f"{LEASE_TTL_S:g}s",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def listed(tmp: Path) -> set[str]:
    result = invoke(URL, "list-dirs", "--bucket", (tmp / "bucket").read_text())
    assert result.exit_code == 0, result.output
    return set(result.stdout.splitlines())


def wait_for_deletes(tmp: Path, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while audit_lines_written(tmp / "audit.jsonl") < count:
        assert time.monotonic() < deadline, "the clean never started deleting"
        time.sleep(0.2)


@pytest.mark.parametrize("workers", [1, 2])
def test_one_node_down_mid_clean_the_run_completes_at_quorum(
    cluster: tuple[Path, set[str]], workers: int
) -> None:
    tmp, live = cluster
    proc = start_run(tmp, workers)
    wait_for_deletes(tmp, 20)
    node("stop-node", 3)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (out + err).decode()
    remaining = listed(tmp)
    assert live <= remaining
    assert remaining == live  # every empty directory went, with one replica down


def test_one_node_down_mid_clean_three_dask_workers_complete_the_run(
    cluster: tuple[Path, set[str]],
) -> None:
    """The clean as tasks on a Dask cluster (a scheduler and three workers on loopback): each
    task has its own connection to the 3-node cluster, and a node stopped mid-clean is one
    replica fewer for every one of them."""
    tmp, live = cluster
    dask = LoopbackCluster(tmp, workers=3)
    try:
        proc = start_run(tmp, scheduler=dask.address)
        wait_for_deletes(tmp, 20)
        node("stop-node", 3)
        out, err = proc.communicate(timeout=300)
    finally:
        dask.close()
    assert proc.returncode == 0, (out + err).decode()
    assert f"Dask scheduler {dask.address}: 3 workers" in err.decode()
    remaining = listed(tmp)
    assert live <= remaining
    assert remaining == live


@pytest.mark.parametrize("workers", [1, 2])
def test_two_nodes_down_the_run_stops_cleanly_and_resumes_when_they_return(
    cluster: tuple[Path, set[str]], workers: int
) -> None:
    tmp, live = cluster
    # The run must still be deleting once both nodes are down, and `stop-node` returns only
    # when its node has exited (a drain: several seconds, more on a loaded machine). At --rate
    # 40 the 240 deletes took about 17 s after the first batch was audited, node 3's stop and
    # then node 2's had to fit in; at 10 they take about a minute.
    proc = start_run(tmp, workers, rate=10)
    wait_for_deletes(tmp, 20)
    node("stop-node", 3)
    node("stop-node", 2)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, (out + err).decode()
    message = [line for line in err.decode().splitlines() if line.startswith("Error: ")]
    assert len(message) == 1 and ("still failing" in message[0] or "Unavailable" in message[0])
    node("start-node", 2)
    node("start-node", 3)
    remaining = listed(tmp)
    assert live <= remaining, "a non-empty directory lost its entry"
    assert remaining != live  # it really stopped part-way
    deadline = time.monotonic() + 60
    while True:  # the stopped run's lease expires LEASE_TTL_S after its last heartbeat
        proc = start_run(tmp, workers)
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 3 or time.monotonic() > deadline:
            break
        assert b"holds this store's lease" in err, err.decode()
        time.sleep(1)
    assert proc.returncode == 0, (out + err).decode()
    assert "resumed: reusing generation" in out.decode()
    assert listed(tmp) == live
