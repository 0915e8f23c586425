"""The spill through the command line: a run killed between its phases resumes and deletes what
one run deletes; no spill is held once a run ends, whatever ended it; a spill that cannot be
written is one line, exit 1, and nothing deleted."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dircleaner.pipeline.slice as slice_module
import dircleaner.pipeline.spillfile as spillfile
from dircleaner.errors import StoreUnavailable
from dircleaner.job.resume import PHASE_CLEAN, RunState, load_run_state, save_run_state
from dircleaner.pipeline.build import scope_of
from dircleaner.store import open_store
from dircleaner.workers import interrupt
from tests.helpers import EAGER, invoke, said
from tests.test_parallel_clean import listed, make_db

ROOT = Path(__file__).resolve().parents[2]


def dataset(tmp_path: Path) -> Path:
    """make_db's store, its filter recorded as an interrupted run's: every ``run`` on a copy
    cleans with that one filter (the same candidates), so their results compare exactly."""
    db, generation = make_db(tmp_path)
    with open_store(f"sqlite:///{db}") as store:
        save_run_state(store, scope_of(store, None), RunState(generation, PHASE_CLEAN))
    return db


def copy(db: Path, name: str) -> str:
    target = db.with_name(f"{name}.db")
    shutil.copyfile(db, target)
    return f"sqlite:///{target}"


def left(url: str) -> set[str]:
    with open_store(url) as store:
        return listed(store)


def spill_args(where: Path, *extra: str) -> list[str]:
    return ["--spill-after", "5", "--spill-dir", str(where), *extra]


def cli(url: str, *args: str) -> subprocess.Popen[bytes]:
    audit = url.removeprefix("sqlite:///").removesuffix(".db") + ".jsonl"
    command = [sys.executable, "-m", "dircleaner", "--store", url, "run", *EAGER, "--json"]
    command += ["--audit-log", audit, *args]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: kill -9 takes the workers too
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def group_holds(pgid: int, directory: Path) -> list[str]:
    """The files in ``directory`` the processes of group ``pgid`` hold open."""
    held = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
                if int(stat.read().rpartition(")")[2].split()[2]) != pgid:
                    continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(f"{directory}/"):
                held.append(target)
    return held


def decided(url: str) -> bool:
    """Whether the run recorded its decision (the guards passed, the second phase begins)."""
    try:
        with open_store(url) as store:
            state = load_run_state(store, scope_of(store, None))
    except Exception:  # the run holds the file: look again
        return False
    return state is not None and state.clean is not None


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_run_killed_between_its_phases_resumes_to_what_one_run_deletes(
    tmp_path: Path, workers: str
) -> None:
    db = dataset(tmp_path)
    spill = tmp_path / "spill"
    whole = copy(db, "whole")
    done = cli(whole, *spill_args(spill, "--workers", workers))
    out, err = done.communicate(timeout=180)
    assert done.returncode == 0, (out + err).decode()
    expected = left(whole)
    assert json.loads(out)["clean"]["spill"]["candidates"] > 400

    killed = copy(db, "killed")
    # Slow deletes: the run is still deleting when it is seen to have decided.
    proc = cli(
        killed, *spill_args(spill, "--workers", workers, "--rate", "20", "--lease-ttl", "2s")
    )
    deadline = time.monotonic() + 120
    while not decided(killed):
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # Between the phases every slice holds its candidates (or their plan) in spill files.
    holding = group_holds(proc.pid, spill)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert holding and all(name.endswith("(deleted)") for name in holding), holding
    assert list(spill.iterdir()) == []  # nothing a later run must find or clean up
    assert left(killed) > expected
    while True:  # until the killed run's lease (2 s) has expired
        again = cli(killed, *spill_args(spill, "--workers", workers))
        out, err = again.communicate(timeout=180)
        if again.returncode == 3 and b"lease" in err:
            time.sleep(0.5)
            continue
        assert again.returncode == 0, (out + err).decode()
        break
    assert json.loads(out)["build"]["resumed"] is not None
    assert left(killed) == expected
    assert list(spill.iterdir()) == []


def inject_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(*_args: Any, **_kwargs: Any) -> Any:
        raise StoreUnavailable("injected: the store went away")

    monkeypatch.setattr(slice_module, "execute_plan", fails)


def inject_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    real = slice_module.execute_plan

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        interrupt.request(signal.SIGINT)  # as the signal handler does, mid-deletes
        return real(*args, **kwargs)

    monkeypatch.setattr(slice_module, "execute_plan", interrupted)


def no_fault(_monkeypatch: pytest.MonkeyPatch) -> None:
    """The run goes as it should (or the guards refuse it)."""


OUTCOMES: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], tuple[str, ...], int]] = {
    "success": (no_fault, ("--max-delete-fraction", "1"), 0),
    "refusal": (no_fault, ("--max-delete-fraction", "0.01"), 3),
    "error": (inject_error, ("--max-delete-fraction", "1"), 1),
    "interrupt": (inject_interrupt, ("--max-delete-fraction", "1"), 130),
}


def held_here(directory: Path) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{directory}/"):
            out.append(target)
    return out


@pytest.mark.parametrize("outcome", sorted(OUTCOMES))
def test_no_spill_is_held_once_a_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    """One process (the slice runs here, so what it holds is this test's to see): the spill
    files it wrote are let go at the end, whatever ended the run."""
    fault, guard, code = OUTCOMES[outcome]
    db = dataset(tmp_path)
    spill = tmp_path / "spill"
    created: list[Path] = []
    real_init = spillfile.SpillFile.__init__

    def counted(self: spillfile.SpillFile, directory: Path, reserve: int = 0) -> None:
        created.append(directory)
        real_init(self, directory, reserve)

    monkeypatch.setattr(spillfile.SpillFile, "__init__", counted)
    fault(monkeypatch)
    url = copy(db, outcome)
    audit = str(tmp_path / "audit.jsonl")
    args = ("--min-age", "0", "--rate", "0", "--audit-log", audit, *guard, *spill_args(spill))
    result = invoke(url, "run", *args)
    assert result.exit_code == code, result.output
    assert created and set(created) == {spill}
    if outcome == "success":  # the summary says how much went to disk
        assert re.search(
            r"^spill   [0-9,]+ candidates spilled to disk, their slices over a process's memory"
            r" budget: [0-9.]+ MiB \([0-9.]+ bytes per candidate\), their plan [0-9.]+ MiB$",
            result.output,
            re.MULTILINE,
        ), result.output
    assert held_here(spill) == []
    assert list(spill.iterdir()) == []


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("call", ["pwrite", "posix_fallocate"])
def test_a_spill_that_cannot_be_written_is_one_line_and_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: str, call: str
) -> None:
    """A full disk, as the file layer reports it: while spilling the candidates (``pwrite``)
    or reserving their plan's room (``posix_fallocate``), both before the decision."""

    def full(*_args: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    db = dataset(tmp_path)
    url = copy(db, "full")
    before = left(url)
    monkeypatch.setattr(spillfile.os, call, full)  # forked workers inherit it
    audit = tmp_path / "audit.jsonl"
    result = invoke(
        url,
        "run",
        *EAGER,
        "--workers",
        workers,
        "--audit-log",
        str(audit),
        *spill_args(tmp_path / "spill"),
    )
    assert result.exit_code == 1, result.output
    [line] = said(result).splitlines()
    assert "spill file in" in line and "No space left on device" in line, line
    assert left(url) == before
    assert not audit.exists()
