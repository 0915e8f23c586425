"""DIRCLEANER_SCHEDULER, set host-wide for the nightly job, does not break a dry run of it:
docs/operations.md's "try it by hand" sources the environment file (which names the cluster
on a Dask set-up) and runs ``run --dry-run``, whose filter stays in memory where no worker
could load it. Run here, it says so; an explicit --scheduler is still refused."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from dircleaner.cli import cli
from tests.helpers import invoke

ROOT = Path(__file__).resolve().parents[2]
NOTE = (
    "note: run --dry-run runs in this process, not on DIRCLEANER_SCHEDULER's cluster (its"
    " filter stays in memory, where the cluster's workers could not load it)\n"
)


def a_store(tmp_path: Path) -> str:
    """40 directories with an object each, one emptied (well under --max-delete-fraction)."""
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(40))
    assert invoke(url, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(url, "delete-keys", "-", input="d/7/x\n").exit_code == 0
    return url


def test_a_dry_run_with_the_scheduler_from_the_environment_runs_here(tmp_path: Path) -> None:
    url = a_store(tmp_path)
    runner = CliRunner(env={"DIRCLEANER_SCHEDULER": "tcp://127.0.0.1:9"})
    result = runner.invoke(cli, ["--store", url, "run", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == NOTE
    assert '"dry_run": true' in result.stdout
    quiet = runner.invoke(cli, ["--store", url, "run", "--dry-run", "-q"])
    assert (quiet.exit_code, quiet.stderr) == (0, "")


def test_an_explicit_scheduler_or_slices_with_a_dry_run_is_still_refused(tmp_path: Path) -> None:
    url = a_store(tmp_path)
    refused = (
        "Error: run --dry-run keeps its filter in memory, where a cluster's workers cannot load"
        " it: run it without --scheduler (and DIRCLEANER_SCHEDULER)\n"
    )
    given = invoke(url, "run", "-n", "--scheduler", "tcp://127.0.0.1:9")
    assert (given.exit_code, given.output) == (2, refused)
    runner = CliRunner(env={"DIRCLEANER_SCHEDULER": "tcp://127.0.0.1:9"})
    sliced = runner.invoke(cli, ["--store", url, "run", "-n", "--slices", "8"])
    assert (sliced.exit_code, sliced.output) == (2, refused)


def try_it_by_hand() -> str:
    """The shell lines of docs/operations.md's "try it by hand first"."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    after = text.split("Try it by hand first", 1)[1]
    block = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert block is not None
    return block.group(1)


def test_the_documented_try_it_by_hand_works_with_a_scheduler_in_the_env_file(
    tmp_path: Path,
) -> None:
    """The env file as deploy/dircleaner.env.example has it, on a Dask set-up (its
    DIRCLEANER_SCHEDULER line uncommented), pointed at an SQLite store."""
    url = a_store(tmp_path)
    config = shutil.copy(ROOT / "examples" / "cassandra.toml", tmp_path / "cassandra.toml")
    example = (ROOT / "deploy" / "dircleaner.env.example").read_text(encoding="utf-8")
    env_file = example.replace("# DIRCLEANER_SCHEDULER=", "DIRCLEANER_SCHEDULER=")
    env_file = re.sub(r"(?m)^DIRCLEANER_STORE=.*$", f"DIRCLEANER_STORE={url}", env_file)
    env_file = re.sub(r"(?m)^DIRCLEANER_CONFIG=.*$", f"DIRCLEANER_CONFIG={config}", env_file)
    assert "\nDIRCLEANER_SCHEDULER=tcp://" in env_file
    (tmp_path / "dircleaner.env").write_text(env_file, encoding="utf-8")
    script = try_it_by_hand()
    assert "run --dry-run" in script
    script = script.replace("/etc/dircleaner/dircleaner.env", str(tmp_path / "dircleaner.env"))
    script = script.replace(
        "/opt/dircleaner/bin/dircleaner", str(Path(sys.executable).parent / "dircleaner")
    )
    done = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert NOTE in done.stderr
    assert "dry run: nothing deleted" in done.stdout
