"""Unattended runs (no terminal) log progress per phase; the clean counts directories."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dircleaner.cli.progress_display import TerminalProgress
from tests.helpers import EAGER, invoke


def phase_lines(stderr: str) -> list[str]:
    """The progress log lines, with timings and rates taken out."""
    out = []
    for line in stderr.splitlines():
        message = line.split(" dircleaner: ", 1)[-1]
        if re.match(r"^[a-z-]+: (started|done: )", message):
            out.append(re.sub(r" in [0-9.]+s \([0-9,]+/s\)$", "", message))
    return out


def test_every_phase_logs_its_start_and_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIRCLEANER_PROGRESS_SECONDS", "3600")
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(10))
    put = invoke(url, "--log-level", "info", "import-keys", "-", input=keys)
    assert phase_lines(put.stderr) == ["put: started", "put: done: 10 keys"]
    assert invoke(url, "delete-keys", "-", input="d/1/x\nd/2/x\nd/3/x\n").exit_code == 0
    audit = str(tmp_path / "a.jsonl")
    result = invoke(url, "--log-level", "info", "run", *EAGER, "--audit-log", audit)
    assert result.exit_code == 0, result.output
    assert phase_lines(result.stderr) == [
        "build: started",
        "build: done: 7 object partitions",
        "sweep: started",
        "sweep: done: 11 directories",
        "verify: started",
        "verify: done: 3 directories",
        "clean: started",
        "clean: done: 1 deletes",  # three directories, in one range delete
    ]


def test_a_long_phase_logs_every_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIRCLEANER_PROGRESS_SECONDS", "0")
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = "".join(f"k/{i}\n" for i in range(12000))
    result = invoke(url, "--log-level", "info", "import-keys", "-", input=keys)
    messages = [line.split(" dircleaner: ", 1)[-1] for line in result.stderr.splitlines()]
    progress = [re.sub(r" \([0-9,]+/s\)$", "", m) for m in messages if m.startswith("put: ")]
    assert progress[:3] == ["put: started", "put: 5,000 keys", "put: 10,000 keys"]


def test_with_workers_the_sweep_counts_directories_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The re-check inside a worker's sweep must not replace the sweep's count by its own."""
    monkeypatch.setenv("DIRCLEANER_PROGRESS_SECONDS", "3600")
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(10))
    assert invoke(url, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(url, "delete-keys", "-", input="d/1/x\nd/2/x\nd/3/x\n").exit_code == 0
    audit = str(tmp_path / "a.jsonl")
    args = ["run", *EAGER, "--audit-log", audit, "--workers", "2"]
    result = invoke(url, "--log-level", "info", *args)
    assert result.exit_code == 0, result.output
    assert phase_lines(result.stderr) == [
        "build: started",
        "build: done: 7 object partitions",
        "sweep: started",
        "sweep: done: 11 directories",
        "clean: started",
        "clean: done: 1 deletes",
    ]


def test_with_workers_every_phase_shows_its_total(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build expects the last build's count, the sweep the last sweep's (or an exact
    count), and the clean counts deletes (the unit --rate limits) out of the slices' plans."""
    shown: list[tuple[str, int, int | None]] = []
    draw = TerminalProgress.__call__

    def recorded(self: TerminalProgress, phase: str, done: int, total: int | None) -> None:
        shown.append((phase, done, total))
        draw(self, phase, done, total)

    monkeypatch.setattr(TerminalProgress, "__call__", recorded)
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(40))
    assert invoke(url, "import-keys", "-", input=keys).exit_code == 0
    audit = str(tmp_path / "a.jsonl")
    args = ["run", *EAGER, "--audit-log", audit, "--workers", "2"]
    assert invoke(url, *args).exit_code == 0
    gone = "".join(f"d/{i}/x\n" for i in range(0, 40, 2))
    assert invoke(url, "delete-keys", "-", input=gone).exit_code == 0
    shown.clear()
    result = invoke(url, *args)
    assert result.exit_code == 0, result.output
    last = {phase: (done, total) for phase, done, total in shown}
    assert last == {
        "build": (20, 40),  # 20 partitions left of the 40 the last build scanned
        "sweep": (41, 41),
        "clean": (20, 20),  # 20 row deletes (no three empty neighbours: no range)
    }


def test_the_deletes_eta_is_timed_from_their_start_not_from_the_plan_before(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A 16M-delete night plans for minutes between the re-check and the deletes: the deletes'
    rate and ETA count from their first report (nothing done yet), in a form people read."""
    import io
    import logging

    from dircleaner.cli import progress_display

    now = [0.0]
    monkeypatch.setattr(progress_display.time, "monotonic", lambda: now[0])
    monkeypatch.setenv("DIRCLEANER_PROGRESS_SECONDS", "0")
    progress = TerminalProgress(io.StringIO())  # not a terminal: log lines
    caplog.set_level(logging.INFO, logger="dircleaner")
    for at, phase, done, total in [
        (0.0, "verify", 0, 4000),
        (2.0, "verify", 2000, 4000),
        (4.0, "verify", 4000, 4000),
        (64.0, "clean", 0, 1000),  # a minute of planning before the first delete
        (74.0, "clean", 100, 1000),
        (75.0, "clean", 101, 1_000_000),
    ]:
        now[0] = at
        progress(phase, done, total)
    progress.close()
    said = [r.getMessage() for r in caplog.records]
    assert "verify: 2,000/4,000 directories (1,000/s, ETA 2.0s)" in said
    assert "verify: done: 4,000 directories in 4.0s (1,000/s)" in said
    assert "clean: 100/1,000 deletes (10/s, ETA 1m30s)" in said
    assert "clean: 101/1,000,000 deletes (9/s, ETA 30h14m)" in said
    assert "clean: done: 101 deletes in 11.0s (9/s)" in said
