"""What a command imports: ``clean --prefix`` (and ``--help``) start without numpy, numba and the
filter modules, which only the filter's commands need (issue 14: start-up is part of the prefix
clean's cost). Run in a fresh interpreter, since this test session has imported them all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import invoke, write_lines

#: modules a command that neither builds nor reads a filter must not import
HEAVY = (
    "numpy",
    "numba",
    "dircleaner.filter.bloom",
    "dircleaner.filter.engines",
    "dircleaner.filter.stored",
    "dircleaner.pipeline.build",
    "dircleaner.job.run",
)

_PROBE = """
import json, sys
from dircleaner.cli import cli
try:
    cli(sys.argv[1:], prog_name="dircleaner")
except SystemExit as exit:
    code = exit.code
heavy = json.loads(sys.stdin.read())
print(json.dumps({"code": code, "imported": [m for m in heavy if m in sys.modules]}))
"""


def imported_by(*args: str) -> tuple[int, list[str]]:
    """Run the CLI with ``args`` in a fresh interpreter: its exit code and the HEAVY modules it
    imported."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        input=json.dumps(HEAVY),
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout.splitlines()[-1])
    return out["code"], out["imported"]


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    keys = [f"logs/2025/m{m:02d}/part.json" for m in range(1, 4)]
    assert invoke(url, "init-schema").exit_code == 0
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "put.txt", keys))).exit_code == 0
    dead = write_lines(tmp_path / "dead.txt", keys[1:])
    assert invoke(url, "delete-keys", str(dead)).exit_code == 0
    return url


def test_a_prefix_clean_starts_without_the_filter_modules(store_url: str, tmp_path: Path) -> None:
    audit = str(tmp_path / "audit.jsonl")
    args = ("clean", "--prefix", "logs/2025/", "--min-age", "0", "--audit-log", audit)
    code, imported = imported_by("--store", store_url, *args, "--dry-run", "--json")
    assert (code, imported) == (0, [])


def test_help_starts_without_them(store_url: str) -> None:
    assert imported_by("--help") == (0, [])


def test_the_data_commands_start_without_them(store_url: str) -> None:
    assert imported_by("--store", store_url, "list-dirs") == (0, [])


def test_a_build_still_imports_them(store_url: str) -> None:
    # The probe can fail: a command that builds a filter does import them (not the whole job).
    code, imported = imported_by("--store", store_url, "build", "--json")
    assert (code, imported) == (0, [m for m in HEAVY if m != "dircleaner.job.run"])
