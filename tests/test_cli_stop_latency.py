"""SIGINT and SIGTERM stop every command promptly, however slowly it was told to go.

A run capped at one scanned row a second, or throttled to half a delete a second, spends its
time waiting for the cap; each test sends the signal once the run is seen in that wait (its
``-vv`` debug line, or on Dask the tasks' own stacks), and measures how long the command takes
to exit: the bound, 2 s, is a safety bound (the wait notices a stop within 50 ms), not a
benchmark. Then the next run, unthrottled, finishes the job with nothing lost.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dircleaner.audit import audit_scope
from dircleaner.cli.interrupted import interrupted_line
from dircleaner.paths import directories_of
from dircleaner.restore import RESTORE_BATCH, AuditSelection, plan_restore
from dircleaner.store import open_store
from dircleaner.workers.interrupt import Interrupted
from tests.daskcluster import ROOT, LoopbackCluster
from tests.helpers import audit_entries, invoke, write_lines

#: how long a stopped command may take to exit
STOP_BOUND_S = 2.0
#: what the throttles log (``-vv``) before a wait of a second or more
SCAN_WAIT = re.compile(r"DEBUG dircleaner\.scanrate: scan cap .*: waiting")
DELETE_WAIT = re.compile(r"DEBUG dircleaner\.pipeline\.deleterate: delete rate .*: waiting")

KEYS = [f"p{i % 40}/{i}/x" for i in range(1200)]
DEAD = KEYS[:800]
LIVE = {d for key in KEYS[800:] for d in directories_of(key)}


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k", KEYS))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "d", DEAD))).exit_code == 0
    return url


def _directories(tmp_path: Path) -> set[str]:
    with sqlite3.connect(tmp_path / "meta.db") as conn:
        rows = conn.execute("SELECT parent, name FROM folders").fetchall()
    conn.close()
    return {f"{parent}{name}/" for parent, name in rows}


class Command:
    """The CLI in a process of its own, its stderr read line by line as it comes."""

    def __init__(self, *args: str) -> None:
        command = [sys.executable, "-m", "dircleaner", *args]
        self.proc = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self._seen = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._seen:
                self.lines.append(line)
                self._seen.notify_all()

    def wait_for(self, pattern: re.Pattern[str], timeout_s: float = 120.0) -> None:
        """Until a line of stderr matches ``pattern``; fails if the command ends first."""
        deadline = time.monotonic() + timeout_s
        with self._seen:
            while not any(pattern.search(line) for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    self.proc.kill()
                    pytest.fail(f"never said {pattern.pattern!r}:\n{''.join(self.lines)}")
                self._seen.wait(min(left, 0.1))

    def stop(self, signum: int) -> float:
        """Send ``signum``; seconds until the process exited."""
        sent = time.monotonic()
        self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        took = time.monotonic() - sent
        self._reader.join(10)
        return took

    @property
    def last_line(self) -> str:
        return self.lines[-1].rstrip("\n") if self.lines else ""

    def said(self) -> str:
        return "".join(self.lines)


def assert_stopped(command: Command, signum: int, took: float) -> None:
    """Exit 128 + signal within the bound, the one line, no traceback."""
    name = signal.Signals(signum).name
    assert command.proc.returncode == 128 + signum, command.said()
    assert took < STOP_BOUND_S, f"{took:.2f}s to stop:\n{command.said()}"
    assert re.fullmatch(f"Error: interrupted by {name}: stopped .*", command.last_line), (
        command.said()
    )
    assert "Traceback" not in command.said()


# -- on this machine: one process, and two workers -----------------------------------------------

RUN = ["--min-age", "0", "--max-delete-fraction", "1", "--fpr", "1e-7"]

#: (command, its throttle, what it says while it waits, whether a filter is built first)
CASES: dict[str, tuple[list[str], re.Pattern[str], bool]] = {
    "build --scan-rate 1": (["build", "--scan-rate", "1"], SCAN_WAIT, False),
    "sweep --scan-rate 1": (["sweep", "--scan-rate", "1"], SCAN_WAIT, True),
    "clean --scan-rate 1": (["clean", *RUN[:4], "--scan-rate", "1"], SCAN_WAIT, True),
    "clean --rate 0.5": (["clean", *RUN[:4], "--rate", "0.5"], DELETE_WAIT, True),
    "run --scan-rate 1": (["run", *RUN, "--scan-rate", "1"], SCAN_WAIT, False),
    "run --rate 0.5": (["run", *RUN, "--rate", "0.5"], DELETE_WAIT, False),
}


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_throttled_command_stops_within_the_bound_and_the_next_run_resumes(
    tmp_path: Path, case: str, workers: str
) -> None:
    url = _store(tmp_path)
    args, waiting, needs_filter = CASES[case]
    if needs_filter:
        assert invoke(url, "build", "--fpr", "1e-7").exit_code == 0
    audit = tmp_path / "audit.jsonl"
    extra = ["--audit-log", str(audit)] if args[0] in ("run", "clean") else []
    command = Command("--store", url, "-vv", *args, "--workers", workers, *extra)
    command.wait_for(waiting)
    signum = signal.SIGTERM if workers == "1" else signal.SIGINT
    took = command.stop(signum)
    assert_stopped(command, signum, took)
    left = _directories(tmp_path)
    assert left >= LIVE  # nothing that holds an object went
    assert not {entry["dir"] for entry in audit_entries(audit)} & left  # every delete audited ran
    again = invoke(url, "run", *RUN, "--rate", "0", "--audit-log", str(audit))
    assert again.exit_code == 0, again.output
    assert _directories(tmp_path) == LIVE


PREFIX_KEYS = [f"big/{i:04d}/x" for i in range(400)]
PREFIX_DEAD = PREFIX_KEYS[1::2]


@pytest.mark.parametrize(
    ("throttle", "waiting"), [(["--scan-rate", "1"], SCAN_WAIT), (["--rate", "0.5"], DELETE_WAIT)]
)
def test_a_throttled_prefix_clean_stops_within_the_bound(
    tmp_path: Path, throttle: list[str], waiting: re.Pattern[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k", PREFIX_KEYS))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "d", PREFIX_DEAD))).exit_code == 0
    args = ["clean", "--prefix", "big/", "--min-age", "0", "--audit-log", str(tmp_path / "a")]
    command = Command("--store", url, "-vv", *args, *throttle)
    command.wait_for(waiting)
    took = command.stop(signal.SIGTERM)
    assert_stopped(command, signal.SIGTERM, took)
    again = invoke(url, *args)
    assert again.exit_code == 0, again.output
    assert _directories(tmp_path) == {d for key in PREFIX_KEYS[::2] for d in directories_of(key)}


def test_a_long_restore_stops_between_batches_and_restores_again(tmp_path: Path) -> None:
    """Restore has no throttle, but a long log takes a while: it stops between its batches."""
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k", ["keep/x"]))).exit_code == 0
    with open_store(url) as store:
        scope = audit_scope(store)
    count = 200_000
    log = tmp_path / "audit.jsonl"
    with log.open("w") as out:
        for i in range(count):
            parent, name = f"gone/{i % 500}/", f"{i}"
            entry = {
                "bucket": "default",
                "dir": f"{parent}{name}/",
                "parent": parent,
                "name": name,
                "via": "row",
                "issued": "2026-11-26T07:28:00Z",
                "delete_ts_us": 1_795_000_000_000_000,
                "generation": "20261126T072800.000000Z-00000000",
                "run_started": "2026-11-26T07:27:00Z",
                "scope": scope,
            }
            out.write(json.dumps(entry) + "\n")
    command = Command("--store", url, "-v", "restore", str(log))
    command.wait_for(re.compile("INFO dircleaner: restore: started"))
    took = command.stop(signal.SIGTERM)
    assert_stopped(command, signal.SIGTERM, took)
    assert re.search(r"stopped after [0-9,]+ of 200,000 entries restored", command.last_line)
    assert len(_directories(tmp_path)) < count
    again = invoke(url, "restore", str(log))
    assert again.exit_code == 0, again.output
    assert len(_directories(tmp_path)) == count + 1  # and keep/


# -- on a Dask cluster: the client stops, and so do its tasks ------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    started = LoopbackCluster(tmp_path_factory.mktemp("dask"), workers=2)
    try:
        yield started
    finally:
        started.close()


def _running_stacks(cluster: LoopbackCluster) -> dict[str, str]:
    """Each running task (by key) and its stack, on every worker."""
    with cluster.client() as client:
        stacks = client.call_stack()
    return {key: "".join(frames) for keys in stacks.values() for key, frames in keys.items()}


def _wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(what)
        time.sleep(0.1)


#: a task's stack in a throttle's wait
IN_SCAN_WAIT = re.compile(r"scanrate\.py.*in (page|reserve)\n", re.DOTALL)
IN_DELETE_WAIT = re.compile(r"deleterate\.py.*in acquire\n", re.DOTALL)

DASK_CASES: dict[str, tuple[list[str], re.Pattern[str], bool]] = {
    "build --scan-rate 1": (["build", "--scan-rate", "1"], IN_SCAN_WAIT, False),
    "sweep --scan-rate 1": (["sweep", "--scan-rate", "1"], IN_SCAN_WAIT, True),
    "run --scan-rate 1": (["run", *RUN, "--scan-rate", "1"], IN_SCAN_WAIT, False),
    "run --rate 0.5": (["run", *RUN, "--rate", "0.5"], IN_DELETE_WAIT, False),
}


@pytest.mark.parametrize("case", sorted(DASK_CASES))
def test_on_dask_the_client_and_its_tasks_stop_within_the_bound(
    cluster: LoopbackCluster, tmp_path: Path, case: str
) -> None:
    cluster.wait_for_workers(2)
    url = _store(tmp_path)
    args, waiting, needs_filter = DASK_CASES[case]
    if needs_filter:
        assert invoke(url, "build", "--fpr", "1e-7").exit_code == 0
    audit = tmp_path / "audit.jsonl"
    extra = ["--audit-log", str(audit)] if args[0] == "run" else []
    command = Command("--store", url, *args, "--scheduler", cluster.address, *extra)

    def every_task_waits() -> bool:
        assert command.proc.poll() is None, command.said()
        stacks = _running_stacks(cluster)
        return len(stacks) == 2 and all(waiting.search(stack) for stack in stacks.values())

    _wait_until(every_task_waits, 120, f"the tasks never waited: {_running_stacks(cluster)}")
    took = command.stop(signal.SIGTERM)
    assert_stopped(command, signal.SIGTERM, took)
    # The tasks stopped too (a cancel alone leaves a running task's thread asleep): the
    # workers are free for the next run.
    _wait_until(lambda: not _running_stacks(cluster), STOP_BOUND_S, "tasks left running")
    again = invoke(
        url, "run", *RUN, "--rate", "0", "--audit-log", str(audit), "--scheduler", cluster.address
    )
    assert again.exit_code == 0, again.output
    assert _directories(tmp_path) == LIVE


@pytest.mark.parametrize("command", ["run", "clean"])
def test_a_run_stopped_before_its_first_batch_says_nothing_was_deleted(command: str) -> None:
    """Stopped in its first throttled wait, a run has reported no batch yet: it deleted
    nothing, and says so."""
    line = interrupted_line(command, Interrupted(signal.SIGTERM), None)
    assert line == (
        "interrupted by SIGTERM: stopped before its first batch; nothing was deleted yet;"
        " the next run resumes"
    )


def test_a_restore_plan_reports_its_reading_and_sorting_where_a_stop_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long log's plan reports every RESTORE_BATCH entries read, then sorted: the progress
    hook is where a signal stops it, and a stop there lets go of the sort's files."""
    count = 3 * RESTORE_BATCH + 1
    lines = [
        json.dumps(
            {
                "bucket": "b",
                "dir": f"p/{i}/",
                "parent": "p/",
                "name": str(i),
                "via": "row",
                "delete_ts_us": 5,
                "generation": "g",
            }
        )
        + "\n"
        for i in range(count)
    ]
    heard: list[tuple[str, int]] = []
    with plan_restore(
        lines, AuditSelection(), progress=lambda phase, done, _t: heard.append((phase, done))
    ) as plan:
        assert len(plan.rows) == count
    assert [done for phase, done in heard if phase == "read"] == [1000, 2000, 3000]
    assert [done for phase, done in heard if phase == "sort"] == [1000, 2000, 3000]

    def stop(phase: str, _done: int, _total: int | None) -> None:
        if phase == "sort":
            raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the sort spills
    with pytest.raises(Interrupted):
        plan_restore(lines, AuditSelection(), progress=stop, chunk_entries=500)
    assert not list(tmp_path.iterdir())  # no sort file left behind
