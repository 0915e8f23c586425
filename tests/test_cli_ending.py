"""Every way a command ends tells monitoring: the metrics file it names says
``last_run_success 0`` (and ``--json`` prints the error) however early it failed, the file is
checked writable before anything is deleted, and each kind of run has series of its own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dircleaner.cli import cli
from dircleaner.cli.ending import ending_of
from tests.helpers import invoke, run_labels, samples_of, write_lines

KEYS = [f"m/{i}/obj" for i in range(40)]
#: a quarter of the directories empty: over the default --max-delete-fraction (0.1)
DEAD = KEYS[:10]
OLD = "dircleaner_last_run_success 1\n"


def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/meta.db"
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k.txt", KEYS))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "d.txt", DEAD))).exit_code == 0
    return url


def folder_rows(tmp_path: Path) -> int:
    with sqlite3.connect(tmp_path / "meta.db") as conn:
        count: int = conn.execute("SELECT count(*) FROM folders").fetchone()[0]
        return count


# -- the ways to end ------------------------------------------------------------------------------

#: (global options, the command's options, exit code, refused): every way `run` can end but a
#: signal (below) and success (last)
ENDINGS = {
    "an unknown option": ((), ("--bogus",), 2, False),
    "an option that does not apply": ((), ("--since", "2026-11-26T07:28:00Z"), 2, False),
    "a bad option value": ((), ("--rate", "fast"), 2, False),
    "-v with -q": (("-v", "-q"), (), 2, False),
    "a missing --config before the command": (("--config", "/nonexistent.toml"), (), 2, False),
    "a missing --config after the command": ((), ("--config", "/nonexistent.toml"), 2, False),
    "a bad --log-level": (("--log-level", "loud"), (), 2, False),
    "a refusal": ((), (), 3, True),
    "an error": ((), ("--max-delete-fraction", "1", "--audit-log", "{tmp}/file/a.jsonl"), 1, False),
}


@pytest.mark.parametrize("way", ENDINGS)
def test_every_ending_writes_a_failed_run_and_prints_the_error_as_json(
    tmp_path: Path, way: str
) -> None:
    before, after, code, refused = ENDINGS[way]
    url = store(tmp_path)
    (tmp_path / "file").write_text("")  # no directory can be made under it
    metrics = tmp_path / "textfile" / "dircleaner.prom"
    metrics.parent.mkdir()
    metrics.write_text(OLD)  # last night's success must not stay
    args = [*before, "run", "--metrics-file", str(metrics), "--json", "--min-age", "0"]
    args += [arg.format(tmp=tmp_path) for arg in after]
    result = invoke(url, *args)
    assert result.exit_code == code, result.output
    error = json.loads(result.stdout)
    assert (error["ok"], error["exit_code"]) == (False, code)
    assert error["error"] in result.stderr
    values = samples_of(metrics.read_text())
    assert values["dircleaner_last_run_success"] == 0
    assert values["dircleaner_last_run_refused"] == (1 if refused else 0)
    assert time.time() - values["dircleaner_last_run_timestamp_seconds"] < 60
    assert run_labels(metrics.read_text()) == {
        f'command="run",store="sqlite:///{tmp_path.resolve()}/meta.db"'
    }
    assert folder_rows(tmp_path) == 41  # nothing deleted


def test_a_signal_writes_a_failed_run_and_the_error_as_json(tmp_path: Path) -> None:
    url = store(tmp_path)
    audit, metrics = tmp_path / "audit.jsonl", tmp_path / "dircleaner.prom"
    metrics.write_text(OLD)
    command = [sys.executable, "-m", "dircleaner", "--store", url, "run", "--json"]
    command += ["--min-age", "0", "--max-delete-fraction", "1", "--rate", "2"]
    command += ["--concurrency", "1", "--audit-log", str(audit), "--metrics-file", str(metrics)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not audit.exists() or audit.stat().st_size == 0:  # deletes have begun
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert json.loads(out)["error_type"] == "Interrupted"
    assert samples_of(metrics.read_text())["dircleaner_last_run_success"] == 0


def test_success_writes_a_successful_run(tmp_path: Path) -> None:
    url = store(tmp_path)
    metrics = tmp_path / "dircleaner.prom"
    metrics.write_text("dircleaner_last_run_success 0\n")
    args = ["--min-age", "0", "--max-delete-fraction", "1", "--rate", "0", "--json"]
    audit = str(tmp_path / "a.jsonl")
    result = invoke(url, "run", *args, "--metrics-file", str(metrics), "--audit-log", audit)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True
    values = samples_of(metrics.read_text())
    assert (values["dircleaner_last_run_success"], values["dircleaner_last_run_refused"]) == (1, 0)
    assert run_labels(metrics.read_text()) == {
        f'command="run",store="sqlite:///{tmp_path.resolve()}/meta.db"'
    }


@pytest.mark.parametrize(
    ("args", "metrics_file", "as_json", "command"),
    [
        (["run", "--metrics-file", "m.prom"], "m.prom", False, "run"),
        (["--store", "x.db", "run", "--metrics-file=m.prom", "--json"], "m.prom", True, "run"),
        (["-v", "clean", "--prefix", "a/", "--metrics-file", "p"], "p", False, "clean --prefix"),
        (["clean", "--bogus", "--metrics-file", "c.prom", "x"], "c.prom", False, "clean"),
        (["sweep", "--out", "--metrics-file", "--json"], None, True, None),
        (["gen", "--json", "--metrics-file", "m.prom"], None, True, None),
        (["filters", "list", "--json"], None, True, None),
        (["--store", "--metrics-file", "m.prom"], None, False, None),
        (["run", "--metrics-file"], None, False, None),
    ],
)
def test_the_command_line_is_read_as_click_reads_it(
    args: list[str], metrics_file: str | None, as_json: bool, command: str | None
) -> None:
    """A value that looks like an option is the option's value; an option the command does not
    have names no metrics file; a command line that ends early names nothing (and without a
    metrics file, no labels are worked out)."""
    ending = ending_of(cli, args)
    assert (ending.metrics_file, ending.as_json) == (metrics_file, as_json)
    assert ending.labels.get("command") == command


def test_the_store_label_is_the_store_as_operators_see_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store of the command line (after the command wins), else DIRCLEANER_STORE; with
    no credential."""
    monkeypatch.setenv("DIRCLEANER_STORE", "cassandra://u:secret@10.0.0.1:9042/ks")
    named = ["--metrics-file", "m.prom"]
    assert ending_of(cli, ["run", *named]).labels["store"] == "cassandra://10.0.0.1:9042/ks"
    args = ["--store", "/a.db", "run", "--store", "/b.db", *named]
    assert ending_of(cli, args).labels["store"] == "sqlite:////b.db"
    assert ending_of(cli, ["--store", "sqlite:x", "run", *named]).labels["store"] == "sqlite:x"


# -- a metrics file that cannot be written ---------------------------------------------------------

#: the service user of the tests that run dircleaner as another user than root
SERVICE_UID = 990


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user may traverse (pytest's are root's alone), for a test that runs
    dircleaner as ``SERVICE_UID``: only root can, so elsewhere the test skips."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("runs dircleaner as another user: needs root and setpriv (util-linux)")
    where = Path(tempfile.mkdtemp(prefix="dircleaner-"))
    where.chmod(0o755)
    try:
        yield where
    finally:
        shutil.rmtree(where)


def as_service_user(store_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``dircleaner --store STORE_PATH ARGS`` as ``SERVICE_UID`` (its own group, no other)."""
    setpriv = [str(shutil.which("setpriv")), f"--reuid={SERVICE_UID}", f"--regid={SERVICE_UID}"]
    command = [*setpriv, "--clear-groups", sys.executable, "-m", "dircleaner"]
    home = str(store_path.parent)
    env = {**os.environ, "HOME": home, "XDG_STATE_HOME": f"{home}/.local/state"}
    return subprocess.run(
        [*command, "--store", str(store_path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )


def service_user_home(shared: Path) -> Path:
    home = shared / "home" / "meta"
    home.mkdir(parents=True)
    os.chown(home, SERVICE_UID, SERVICE_UID)
    return home


def test_a_file_of_another_user_in_a_sticky_directory_is_refused_before_anything_is_read(
    shared_dir: Path,
) -> None:
    """Root ran it once by hand: the service user can create files in the sticky directory
    but cannot rename over root's, so the run's last write would fail after its deletes."""
    home = service_user_home(shared_dir)
    made = as_service_user(home / "meta.db", "gen", "--dirs", "200", "--seed", "1")
    assert made.returncode == 0, made.stderr
    textfile = shared_dir / "textfile"
    textfile.mkdir()
    textfile.chmod(0o1777)
    metrics = textfile / "dircleaner.prom"
    metrics.write_text(OLD)  # root's
    refused = as_service_user(home / "meta.db", "build", "--metrics-file", str(metrics))
    assert (refused.returncode, refused.stdout) == (2, ""), refused.stderr
    assert refused.stderr == (
        f"Error: --metrics-file {metrics}: cannot replace it: it belongs to uid 0 in a sticky"
        f" directory; remove it (or chown it to uid {SERVICE_UID}) and rerun\n"
    )
    assert metrics.read_text() == OLD
    metrics.unlink()
    built = as_service_user(home / "meta.db", "build", "--metrics-file", str(metrics))
    assert built.returncode == 0, built.stderr
    assert metrics.stat().st_uid == SERVICE_UID


def without_dac_override() -> list[str]:
    """The prefix that runs a command as a user the file permissions bind: root without the
    capabilities that let it write anywhere (nothing for any other user)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot drop capabilities here: {probe.stderr.strip()}")
    return prefix


def test_a_metrics_directory_it_cannot_write_is_refused_before_anything_is_read(
    tmp_path: Path,
) -> None:
    """As Debian ships node_exporter's textfile directory (root:root 0755) to the service
    user: refused at once, one line, exit 2; the store untouched, nothing deleted."""
    url = store(tmp_path)
    textfile = tmp_path / "node-exporter"
    textfile.mkdir()
    textfile.chmod(0o555)
    metrics = textfile / "dircleaner.prom"
    db = (tmp_path / "meta.db").read_bytes()
    command = [*without_dac_override(), sys.executable, "-m", "dircleaner", "--store", url]
    command += ["run", "--min-age", "0", "--max-delete-fraction", "1", "--rate", "0"]
    command += ["--audit-log", str(tmp_path / "a.jsonl"), "--metrics-file", str(metrics)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (
        f"Error: --metrics-file {metrics}: cannot write in {textfile} (Permission denied); let"
        " the user running dircleaner write to that directory (docs/operations.md, 'Metrics"
        " and alerts'), or give another path\n"
    )
    assert (tmp_path / "meta.db").read_bytes() == db
    assert not (tmp_path / "a.jsonl").exists()
    assert list(textfile.iterdir()) == []


def test_a_metrics_file_under_a_file_is_refused_with_json_too(tmp_path: Path) -> None:
    url = store(tmp_path)
    (tmp_path / "file").write_text("")
    metrics = tmp_path / "file" / "m.prom"
    result = invoke(url, "run", "--metrics-file", str(metrics), "--json", "--rate", "0")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: --metrics-file {metrics}: cannot write in ")
    assert json.loads(result.stdout)["exit_code"] == 2
    assert folder_rows(tmp_path) == 41


def test_the_writability_check_leaves_nothing_behind(tmp_path: Path) -> None:
    url = store(tmp_path)
    textfile = tmp_path / "new" / "textfile"  # made, as the write would make it
    result = invoke(url, "build", "--metrics-file", str(textfile / "dircleaner.prom"))
    assert result.exit_code == 0, result.output
    assert [p.name for p in textfile.iterdir()] == ["dircleaner.prom"]
    assert stat.S_IMODE((textfile / "dircleaner.prom").stat().st_mode) & 0o044 == 0o044
