"""``run``, the nightly job: build, sweep and clean in one; a dry run of it writes nothing; its
refusals."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.cli.test_clean_prefix import Backend, backend  # noqa: F401 (a fixture)
from tests.helpers import EAGER, invoke, one_line_error, said, small_store
from tests.test_cli_read_only import read_only


@pytest.fixture()
def two_buckets(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path}/meta.db"
    assert invoke(store, "import-keys", "-", input="a/b/x\na/c/y\n").exit_code == 0
    assert invoke(store, "import-keys", "-", "--bucket", "photos", input="p/q\n").exit_code == 0
    return store


def test_an_unknown_bucket_is_refused_by_run(two_buckets: str) -> None:
    result = invoke(two_buckets, "run", *EAGER, "--bucket", "nosuch")
    assert result.exit_code == 3
    assert said(result) == (
        "Error: bucket 'nosuch' does not exist in this store (buckets: 'default', 'photos');"
        " is --bucket right?\n"
    )
    assert said(invoke(two_buckets, "run", *EAGER, "--bucket", "photos", "--json")) == ""


@pytest.fixture()
def url(tmp_path: Path) -> str:
    """A store of 10 directories, 3 of them emptied (over the default --max-delete-fraction)."""
    store = f"sqlite:///{tmp_path}/src/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(10))
    assert invoke(store, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(store, "delete-keys", "-", input="d/1/x\nd/2/x\nd/3/x\n").exit_code == 0
    return store


def fingerprint(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


def test_run_dry_run_on_a_read_only_store_stores_no_filter(url: str, tmp_path: Path) -> None:
    """A read-only mount (root writes a 0444 file anyway, so a mount is the honest test)."""
    source = tmp_path / "src"
    before = fingerprint(source)
    seen_read_only = read_only(source, tmp_path / "ro")
    with seen_read_only as where:
        ro = f"sqlite:///{where}/meta.db"
        passed = invoke(ro, "run", "-n", *EAGER, "--json")
        assert passed.exit_code == 0, passed.output
        summary = json.loads(passed.stdout)
        assert summary["clean"]["plan"]["directories"] == 3
        # The guard's verdict, as a real run would meet it: 3 of 11 is over 10%.
        refused = invoke(ro, "run", "-n", "--min-age", "0", "--workers", "2")
        assert refused.exit_code == 3, refused.output
        assert "Error: a real run would be refused: 3 of 11 directories" in refused.stderr
    assert fingerprint(source) == before
    assert invoke(url, "filters", "list").stdout == "no filters stored\n"


def test_run_dry_run_neither_stores_a_filter_nor_collects_old_ones(url: str) -> None:
    for _ in range(4):
        assert invoke(url, "build").exit_code == 0
    before = generations(url)
    assert len(before) == 4
    result = invoke(url, "run", "-n", *EAGER)
    assert result.exit_code == 0, result.output
    assert generations(url) == before


def generations(url: str) -> list[str]:
    listed = invoke(url, "filters", "list", "--json")
    assert listed.exit_code == 0, listed.output
    return [row["generation"] for row in json.loads(listed.stdout)]


def test_run_dry_run_stores_no_filter_on_either_backend(backend: Backend) -> None:  # noqa: F811
    args = ("--bucket", backend.bucket)
    keys = "".join(f"dry/{i}/x\n" for i in range(10))
    assert invoke(backend.url, "import-keys", "-", *args, input=keys).exit_code == 0
    dead = "dry/1/x\ndry/2/x\ndry/3/x\n"
    assert invoke(backend.url, "delete-keys", "-", *args, input=dead).exit_code == 0
    before = generations(backend.url)
    result = invoke(backend.url, "run", "-n", *args, *EAGER, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["clean"]["plan"]["directories"] == 3
    assert generations(backend.url) == before


def test_run_dry_run_on_a_cluster_is_refused_before_connecting(url: str) -> None:
    result = invoke(url, "run", "-n", "--scheduler", "tcp://127.0.0.1:9")
    assert (result.exit_code, result.output) == (
        2,
        "Error: run --dry-run keeps its filter in memory, where a cluster's workers cannot"
        " load it: run it without --scheduler (and DIRCLEANER_SCHEDULER)\n",
    )


def test_a_dry_run_that_would_pass_says_nothing_more(url: str) -> None:
    result = invoke(url, "run", "--dry-run", "--min-age", "0", "--max-delete-fraction", "0.5")
    assert (result.exit_code, result.stderr) == (0, "")


@pytest.fixture()
def store(tmp_path: Path) -> str:
    return small_store(tmp_path)


def dirs(url: str) -> list[str]:
    return sorted(invoke(url, "list-dirs", "--bucket", "default").output.splitlines())


def test_too_many_candidates_is_refused_with_exit_3_and_nothing_deleted(store: str) -> None:
    before = dirs(store)
    result = invoke(store, "run", "--min-age", "0", "--max-delete-fraction", "0.05")
    assert result.exit_code == 3
    assert "over --max-delete-fraction 0.05" in one_line_error(result.stderr)
    assert dirs(store) == before


def test_force_overrides_the_fraction_guard(store: str, tmp_path: Path) -> None:
    result = invoke(
        store,
        "run",
        "--min-age",
        "0",
        "--max-delete-fraction",
        "0.05",
        "--force",
        "--audit-log",
        str(tmp_path / "a.jsonl"),
    )
    assert result.exit_code == 0, result.output
    assert len(dirs(store)) == 7 + 60 + 1 - 9
