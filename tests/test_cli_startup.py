"""What a command imports: ``clean --prefix`` (and ``--help``) start without numpy, numba and the
filter modules, which only the filter's commands need (start-up is part of the prefix clean's
cost), on SQLite and on Cassandra (whose driver would import numpy). Run in a fresh
interpreter, since this test session has imported them all."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
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
    "dircleaner.job.clean",
    "dircleaner.job.sweep",
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


KEYS = [f"logs/2025/m{m:02d}/part.json" for m in range(1, 4)]


def load(url: str, tmp: Path, *bucket: str) -> None:
    """Three directories under logs/2025/, two of them emptied."""
    put = invoke(url, "import-keys", str(write_lines(tmp / "put.txt", KEYS)), *bucket)
    assert put.exit_code == 0, put.output
    dead = invoke(url, "delete-keys", str(write_lines(tmp / "dead.txt", KEYS[1:])), *bucket)
    assert dead.exit_code == 0, dead.output


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    assert invoke(url, "init-schema").exit_code == 0
    load(url, tmp_path)
    return url


@pytest.fixture(params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(store URL, bucket) holding the emptied directories, on each backend."""
    if request.param == "sqlite":
        yield request.getfixturevalue("store_url"), "default"
        return
    from dircleaner.store import open_store
    from tests.test_cassandra_end_to_end import _init_keyspace, forget_bucket

    url = _init_keyspace(request.getfixturevalue("cassandra_url"), "startup")
    bucket = f"startup-{secrets.token_hex(4)}"
    load(url, tmp_path, "--bucket", bucket)
    try:
        yield url, bucket
    finally:
        with open_store(url) as store:
            forget_bucket(store, bucket)


def test_a_prefix_clean_starts_without_the_filter_modules(
    backend: tuple[str, str], tmp_path: Path
) -> None:
    url, bucket = backend
    audit = str(tmp_path / "audit.jsonl")
    args = ("clean", "--prefix", "logs/2025/", "--bucket", bucket, "--min-age", "0")
    code, imported = imported_by("--store", url, *args, "--audit-log", audit, "--json")
    assert (code, imported) == (0, [])
    # and it did its work: the two emptied directories are gone, the third stays
    listed = invoke(url, "list-dirs", "--bucket", bucket)
    assert listed.exit_code == 0, listed.output
    assert set(listed.stdout.splitlines()) == {"logs/", "logs/2025/", "logs/2025/m01/"}


def test_help_starts_without_them(store_url: str) -> None:
    assert imported_by("--help") == (0, [])


def test_the_data_commands_start_without_them(store_url: str) -> None:
    assert imported_by("--store", store_url, "list-dirs") == (0, [])


def test_a_build_still_imports_them(store_url: str) -> None:
    # The probe can fail: a command that builds a filter does import them (not the whole job),
    # numba only where the kernels compiled ahead of time (make install) are missing.
    from dircleaner.filter import aot

    code, imported = imported_by("--store", store_url, "build", "--json")
    skipped = ("numba",) if aot.load() is not None else ()
    expected = [m for m in HEAVY if not m.startswith("dircleaner.job.") and m not in skipped]
    assert (code, imported) == (0, expected)
