"""The build's scan at LOCAL_ONE on a 3-node cluster (RF 3): a replica that missed writes.

Run by `make test-faults` (3 nodes, DIRCLEANER_FAULTS=1), not `make test`.

Node 3 is stopped, with hinted handoff off on the other two, while objects are put at
LOCAL_QUORUM: their rows land on nodes 1 and 2 only, and node 3 never hears of them. Back up,
node 3 is the first replica of about a third of the ring, and the build's LOCAL_ONE reads of a
range go to its first replica (``RangeAwarePolicy``), which reads its own copy (the test nodes
keep ring order: SimpleSnitch, no dynamic snitch). The fixture checks that node 3 lacks them;
the build misses the objects in node 3's ranges, so their directories are absent from the filter
and become candidates. The objects were written before the run (``--min-age 0``: T is the
build's start), so the delete timestamp alone would not save them; the re-check at LOCAL_QUORUM
reads two replicas, at least one of which holds each object, and keeps every one of those
directories (precision 1).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.test_cluster_faults import SCRIPT, URL, listed, node, put_then_delete
from tests.helpers import expected_dirs, invoke, write_lines

# Collected only with DIRCLEANER_FAULTS=1 (`make test-faults`; see tests/conftest.py).

#: directories whose objects only nodes 1 and 2 hold: about a third are in node 3's ranges
HIDDEN = 300


def three_nodes_up() -> bool:
    """Whether the 3-node loopback cluster answers (never stop or start a lone node)."""
    from cassandra.cluster import Cluster

    cluster = Cluster(["127.0.0.1"])
    try:
        cluster.connect()
        hosts = cluster.metadata.all_hosts()
        return len(hosts) == 3 and all(host.is_up for host in hosts)
    except Exception:
        return False
    finally:
        cluster.shutdown()


def missing_on_node_3(bucket: str, parents: list[str]) -> int:
    """How many of ``parents`` (each holding one object) node 3 lacks among those it is first
    replica of: read at ONE with node 3 as coordinator, which (SimpleSnitch, no dynamic snitch)
    reads the first replica, itself. Reads at ONE repair nothing."""
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    profile = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy(["127.0.0.3"]),
        consistency_level=ConsistencyLevel.ONE,
    )
    cluster = Cluster(["127.0.0.3"], execution_profiles={EXEC_PROFILE_DEFAULT: profile})
    try:
        session = cluster.connect("dircleaner_faults")
        select = session.prepare("SELECT name FROM objects WHERE bucket = ? AND parent = ?")
        token_map = cluster.metadata.token_map
        missing = 0
        for parent in parents:
            bound = select.bind((bucket, parent))
            token = token_map.token_class.from_key(bound.routing_key)
            first = token_map.get_replicas("dircleaner_faults", token)[0]
            if first.address == "127.0.0.3" and not session.execute(bound).all():
                missing += 1
        return missing
    finally:
        cluster.shutdown()


def nodetool(number: int, *args: str) -> None:
    subprocess.run(
        [str(SCRIPT), "nodetool", "--node", str(number), *args], check=True, capture_output=True
    )


@pytest.fixture()
def lagging_replica(tmp_path: Path) -> Iterator[tuple[Path, set[str], set[str]]]:
    """A bucket whose ``hidden/`` objects node 3 missed; (tmp, live dirs, hidden dirs)."""
    if not three_nodes_up():
        pytest.fail("needs the 3-node cluster of `make test-faults`")
    config = tmp_path / "rf3.toml"
    # The defaults under test: the build at LOCAL_ONE, the sweep and the re-check at a quorum.
    config.write_text("[cassandra]\nreplication_factor = 3\n")
    os.environ["DIRCLEANER_CONFIG"] = str(config)
    bucket = f"lag{time.time_ns()}"
    (tmp_path / "bucket").write_text(bucket)
    empty = [f"seen/e{i:03d}/obj" for i in range(100)]
    seen = [*empty, "seen/live/obj", "keep/obj"]
    hidden = [f"hidden/h{i:03d}/obj" for i in range(HIDDEN)]
    put_then_delete(tmp_path, bucket, seen, empty)
    try:
        for number in (1, 2):
            nodetool(number, "disablehandoff")  # node 3 must not get them later as hints
        node("stop-node", 3)
        put = invoke(
            URL, "import-keys", "--bucket", bucket, str(write_lines(tmp_path / "h", hidden))
        )
        assert put.exit_code == 0, put.output
        node("start-node", 3)
        # Node 3 must be up in the driver's eyes too before the build, or the build's reads of
        # its ranges go to the next replica, which holds every object, and nothing is missed.
        deadline = time.monotonic() + 60
        while not three_nodes_up() and time.monotonic() < deadline:
            time.sleep(1)
        # The premise, checked before the run: node 3 lacks the objects of the directories it is
        # first replica of (about a third of them), where the build's reads of its ranges go.
        missed = missing_on_node_3(bucket, [key.rsplit("/", 1)[0] + "/" for key in hidden])
        assert missed > 0, "node 3 holds every hidden object: it was not cut off from the writes"
        (tmp_path / "missed").write_text(str(missed))
        _, live = expected_dirs([*seen, *hidden], empty)
        hidden_dirs = {d for d in live if d.startswith("hidden/")}
        yield tmp_path, live, hidden_dirs
    finally:
        node("start-node", 3)
        for number in (1, 2):
            nodetool(number, "enablehandoff")
        os.environ.pop("DIRCLEANER_CONFIG", None)


def test_a_local_one_build_misses_objects_and_the_quorum_recheck_keeps_them(
    lagging_replica: tuple[Path, set[str], set[str]],
) -> None:
    tmp, live, _hidden = lagging_replica
    bucket = (tmp / "bucket").read_text()
    result = invoke(
        URL,
        "run",
        "--bucket",
        bucket,
        "--min-age",
        "0",
        "--max-delete-fraction",
        "1",
        "--fpr",
        "1e-7",
        "--rate",
        "0",
        "--audit-log",
        str(tmp / "audit.jsonl"),
        "--json",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["clean"]
    # The scan really read past the objects node 3 lacks: the filter lacked them, and the
    # re-check found them non-empty (a build that saw every object leaves none to find); only
    # those (node 3 holds every other object).
    missed = int((tmp / "missed").read_text())
    assert 0 < summary["dropped_nonempty"] <= missed, (missed, summary)
    remaining = listed(tmp)
    assert live <= remaining, sorted(live - remaining)[:10]  # precision 1
    assert remaining == live  # and every empty directory went


def test_without_the_recheck_a_local_one_build_is_refused(
    lagging_replica: tuple[Path, set[str], set[str]],
) -> None:
    """The counter-example the guard prevents: with --no-verify the same build would have
    deleted the directories whose objects it missed (they are older than T)."""
    tmp, live, _hidden = lagging_replica
    bucket = (tmp / "bucket").read_text()
    result = invoke(URL, "run", "--bucket", bucket, "--min-age", "0", "--no-verify")
    assert result.exit_code == 2, result.output
    assert "--no-verify needs the build to read at a quorum" in result.output
    assert live <= listed(tmp)
