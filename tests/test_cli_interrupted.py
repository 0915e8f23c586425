"""SIGTERM and Ctrl-C: stop after the batch in flight, one line, exit 128 + the signal, resume."""

from __future__ import annotations

import os
import pty
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import audit_entries, invoke, samples_of, write_lines

KEYS = [f"p{i % 50}/{i}/x" for i in range(1500)]
DEAD = KEYS[:1000]


def _start(tmp_path: Path, workers: str) -> tuple[subprocess.Popen[str], Path, Path, str]:
    url = f"sqlite:///{tmp_path}/meta.db"
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k", KEYS))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "d", DEAD))).exit_code == 0
    audit, metrics = tmp_path / "audit.jsonl", tmp_path / "m.prom"
    metrics.write_text("dircleaner_last_run_success 1\n")
    # --fpr 1e-7: the resumed run reuses this filter, and at the default rate one of the 1,000
    # dead directories is now and then a false positive that the test would take for a lost one.
    args = ["--min-age", "0", "--max-delete-fraction", "1", "--rate", "40", "--concurrency", "8"]
    args += ["--fpr", "1e-7"]
    command = [sys.executable, "-m", "dircleaner", "--store", url, "run", *args]
    command += ["--workers", workers, "--audit-log", str(audit), "--metrics-file", str(metrics)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not audit.exists() or audit.stat().st_size == 0:  # wait until deletes have begun
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    return proc, audit, metrics, url


def _folder_names(tmp_path: Path) -> set[tuple[str, str]]:
    with sqlite3.connect(tmp_path / "meta.db") as conn:
        return set(conn.execute("SELECT parent, name FROM folders"))


@pytest.mark.parametrize(
    ("signum", "code", "workers"),
    [(signal.SIGTERM, 143, "1"), (signal.SIGINT, 130, "1"), (signal.SIGTERM, 143, "2")],
)
def test_a_signal_stops_after_the_batch_in_flight_and_the_next_run_resumes(
    tmp_path: Path, signum: int, code: int, workers: str
) -> None:
    proc, audit, metrics, url = _start(tmp_path, workers)
    proc.send_signal(signum)
    _out, err = proc.communicate(timeout=120)
    name = signal.Signals(signum).name
    assert proc.returncode == code
    assert re.fullmatch(
        f"Error: interrupted by {name}: stopped after [0-9,]+( of [0-9,]+)? deletes; what was"
        " deleted is in the audit log and the next run resumes",
        err.splitlines()[-1],
    ), err
    assert "Traceback" not in err
    assert samples_of(metrics.read_text())["dircleaner_last_run_success"] == 0
    # Every audited delete ran (no batch was cut in half) and some were left for later.
    audited = audit_entries(audit)
    left = _folder_names(tmp_path)
    assert not {(e["parent"], e["name"]) for e in audited} & left
    dead_dirs = {(f"p{i % 50}/", str(i)) for i in range(1000)}
    assert dead_dirs & left
    # No worker is left behind deleting.
    time.sleep(0.5)
    assert _folder_names(tmp_path) == left
    again = invoke(
        url,
        "run",
        "--min-age",
        "0",
        "--max-delete-fraction",
        "1",
        "--rate",
        "0",
        "--audit-log",
        str(audit),
    )
    assert again.exit_code == 0, again.output
    assert not dead_dirs & _folder_names(tmp_path), again.output


# Every other child of big/ keeps an object, so each empty one is a row delete of its own.
PREFIX_KEYS = [f"big/{i:04d}/x" for i in range(600)]
PREFIX_DEAD = PREFIX_KEYS[1::2]


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_a_prefix_clean_the_same_way(tmp_path: Path, signum: int, code: int) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k", PREFIX_KEYS))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "d", PREFIX_DEAD))).exit_code == 0
    audit, metrics = tmp_path / "audit.jsonl", tmp_path / "m.prom"
    metrics.write_text("dircleaner_last_run_success 1\n")
    args = ["clean", "--prefix", "big/", "--min-age", "0", "--audit-log", str(audit)]
    command = [sys.executable, "-m", "dircleaner", "--store", url, *args]
    command += ["--rate", "40", "--concurrency", "8", "--metrics-file", str(metrics)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not audit.exists() or audit.stat().st_size == 0:  # wait until deletes have begun
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signum)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == code
    assert re.fullmatch(
        f"Error: interrupted by {signal.Signals(signum).name}: stopped after [0-9,]+ of"
        " [0-9,]+ deletes; what was deleted is in the audit log and the next run resumes",
        err.splitlines()[-1],
    ), err
    assert samples_of(metrics.read_text())["dircleaner_last_run_success"] == 0
    audited = audit_entries(audit)
    left = _folder_names(tmp_path)
    assert not {(e["parent"], e["name"]) for e in audited} & left
    dead_dirs = {("big/", key.split("/")[1]) for key in PREFIX_DEAD}
    assert dead_dirs & left
    again = invoke(url, *args, "--rate", "0")
    assert again.exit_code == 0, again.output
    assert not dead_dirs & _folder_names(tmp_path), again.output


# -- Ctrl-C at a terminal: the whole process group, workers included ----------------------------

#: progress logged every 0.1 s, so that a test can stop a command in the phase it wants
WATCHED = {**os.environ, "DIRCLEANER_PROGRESS_SECONDS": "0.1"}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """A ~100k-directory store and its ground truth (every empty directory)."""
    where = tmp_path_factory.mktemp("generated")
    url = f"sqlite:///{where}/meta.db"
    made = invoke(url, "gen", "--dirs", "100000", "--truth", str(where / "truth.txt"))
    assert made.exit_code == 0, made.output
    return where / "meta.db", set((where / "truth.txt").read_text().splitlines())


def _directories(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT parent, name FROM folders").fetchall()
    conn.close()
    return {f"{parent}{name}/" for parent, name in rows}


def _dircleaner(*args: str, stderr: int = subprocess.PIPE) -> subprocess.Popen[str]:
    """The CLI in a session of its own, as a shell runs a command at a terminal: a Ctrl-C
    there is a SIGINT to each process of the group. Its progress is logged (stderr a pipe)."""
    command = [sys.executable, "-m", "dircleaner", "--log-level", "info", *args]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=WATCHED,
        start_new_session=True,
    )


def _signal_group_at(proc: subprocess.Popen[str], progress: str, signum: int) -> str:
    """Signal ``proc``'s process group once a progress line starting ``progress`` is logged;
    everything it wrote on stderr."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if re.search(f"INFO dircleaner: {progress}", line):
            os.killpg(proc.pid, signum)
            break
    else:
        pytest.fail("".join(seen))
    _out, rest = proc.communicate(timeout=120)
    return "".join(seen) + rest


#: what a run stopped by SIGINT says, by the phase it had reached
STOPPED_RUN = re.compile(
    "Error: interrupted by SIGINT: stopped after (?P<done>[0-9,]+)(?: of [0-9,]+)?"
    " (?P<counted>object partitions scanned|directories swept|candidates re-checked|deletes);"
    " (?:nothing was deleted yet;|what was deleted is in the audit log and) the next run resumes"
)
PHASES = ["object partitions scanned", "directories swept", "candidates re-checked", "deletes"]


@pytest.mark.parametrize(
    ("progress", "counted"),
    [
        ("build: (started|[0-9])", "object partitions scanned"),
        ("sweep: (started|[0-9])", "directories swept"),
        ("clean: [0-9]", "deletes"),
    ],
)
def test_ctrl_c_at_a_terminal_stops_a_parallel_run_with_one_line(
    generated: tuple[Path, set[str]], tmp_path: Path, progress: str, counted: str
) -> None:
    source, truth = generated
    db = tmp_path / "meta.db"
    shutil.copy(source, db)
    before = _directories(db)
    audit = tmp_path / "audit.jsonl"
    args = ["--min-age", "0", "--max-delete-fraction", "1", "--rate", "3000"]
    proc = _dircleaner(
        "--store", str(db), "run", *args, "--workers", "2", "--audit-log", str(audit)
    )
    err = _signal_group_at(proc, progress, signal.SIGINT)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    said = STOPPED_RUN.fullmatch(err.splitlines()[-1])
    assert said, err
    # Where the signal was sent, or (the phase ending just then) a later phase.
    assert PHASES.index(said["counted"]) >= PHASES.index(counted), err
    deleted = before - _directories(db)
    assert deleted <= truth  # precision 1: only empty directories went
    logged = {f"{e['parent']}{e['name']}/" for e in audit_entries(audit)}
    assert logged == deleted
    if said["counted"] == "deletes":
        # Delete requests, the unit --rate limits: a range or a partition delete takes
        # several directories, so there are at most as many as directories went.
        assert int(said["done"].replace(",", "")) <= len(deleted)
        assert "what was deleted is in the audit log" in err.splitlines()[-1]
    else:
        assert not deleted
        assert "nothing was deleted yet" in err.splitlines()[-1]


def test_the_progress_line_is_ended_before_the_error(
    generated: tuple[Path, set[str]], tmp_path: Path
) -> None:
    source, _truth = generated
    shutil.copy(source, tmp_path / "meta.db")
    leader, follower = pty.openpty()  # stderr a terminal: the progress line is drawn
    args = ["--min-age", "0", "--max-delete-fraction", "1", "--rate", "2000"]
    command = [sys.executable, "-m", "dircleaner", "--store", str(tmp_path / "meta.db"), "run"]
    command += [*args, "--audit-log", str(tmp_path / "a.jsonl")]
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=follower, start_new_session=True
    )
    os.close(follower)
    shown = b""
    while b"clean: " not in shown:
        shown += os.read(leader, 4096)
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=120)
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal's other end closed: all read
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    text = shown.decode().replace("\r\n", "\n")
    assert proc.returncode == 130
    progress, _, error = text.rpartition("Error: interrupted by SIGINT")
    assert progress.endswith("\n"), repr(text[-400:])
    assert "clean: " in progress.rsplit("\n", 2)[-2]  # the last progress drawn stays
    assert error.startswith(": stopped after ")


def test_ctrl_c_during_gen_says_what_gen_did(tmp_path: Path) -> None:
    """Above 300,000 directories gen generates in worker processes of its own."""
    db = tmp_path / "meta.db"
    proc = _dircleaner("--store", str(db), "gen", "--dirs", "400000")
    err = _signal_group_at(proc, "generate: [0-9]", signal.SIGINT)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert re.fullmatch(
        "Error: interrupted by SIGINT: stopped after [0-9,]+ of 400,000 directories generated;"
        " nothing was loaded into the store yet: run gen again",
        err.splitlines()[-1],
    ), err
    assert "audit" not in err
    again = invoke(f"sqlite:///{db}", "gen", "--dirs", "20")
    assert again.exit_code == 0, again.output


def test_sigterm_during_gen_exits_143(tmp_path: Path) -> None:
    proc = _dircleaner("--store", str(tmp_path / "meta.db"), "gen", "--dirs", "400000")
    err = _signal_group_at(proc, "generate: [0-9]", signal.SIGTERM)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith("Error: interrupted by SIGTERM: stopped after ")


def test_ctrl_c_during_import_keys_says_how_many_were_imported(tmp_path: Path) -> None:
    keys = write_lines(tmp_path / "keys.txt", (f"d{i % 997}/k{i}" for i in range(400_000)))
    db = tmp_path / "meta.db"
    proc = _dircleaner("--store", str(db), "import-keys", str(keys))
    err = _signal_group_at(proc, "put: [0-9]", signal.SIGINT)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert re.fullmatch(
        "Error: interrupted by SIGINT: stopped after [0-9,]+ keys imported; import the file"
        r" again to finish \(a key imported twice is stored once\)",
        last,
    ), err
    imported = int(re.findall("after ([0-9,]+) keys", last)[0].replace(",", ""))
    with sqlite3.connect(db) as conn:
        (stored,) = conn.execute("SELECT count(*) FROM objects").fetchone()
    conn.close()
    assert stored == imported < 400_000
