"""A --bucket that matches nothing: commands that delete refuse (exit 3, one line naming the
buckets there are, nothing deleted); commands that read warn and go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import EAGER, invoke, said, samples_of

MISSING = (
    "bucket 'Photos' does not exist in this store (buckets: 'default', 'photos');"
    " is --bucket right?\n"
)


@pytest.fixture()
def url(tmp_path: Path) -> str:
    """Two buckets, each with an empty directory of the same path."""
    store = f"sqlite:///{tmp_path}/meta.db"
    for bucket in ("default", "photos"):
        put = invoke(store, "import-keys", "--bucket", bucket, "-", input="a/b/x\na/c/y\n")
        assert put.exit_code == 0
        gone = invoke(store, "delete-keys", "--bucket", bucket, "-", input="a/c/y\n")
        assert gone.exit_code == 0
    return store


def listed(url: str) -> str:
    return invoke(url, "list-dirs", "--sort").output


DELETING = {
    "run": ["run", *EAGER],
    "clean": ["clean", *EAGER],
    "clean --prefix": ["clean", "--prefix", "a/", "--min-age", "0"],
    "run --dry-run": ["run", *EAGER, "--dry-run"],
}


@pytest.mark.parametrize("command", sorted(DELETING))
def test_a_typo_bucket_fails_a_command_that_deletes(url: str, tmp_path: Path, command: str) -> None:
    assert invoke(url, "build").exit_code == 0  # clean has a filter to delete with
    before = listed(url)
    args = [*DELETING[command], "--audit-log", str(tmp_path / "a.jsonl")]
    metrics = tmp_path / "m.prom"
    result = invoke(url, *args, "--bucket", "Photos", "--metrics-file", str(metrics))
    assert (result.exit_code, result.stdout, said(result)) == (3, "", "Error: " + MISSING)
    assert listed(url) == before
    assert not (tmp_path / "a.jsonl").exists()
    assert samples_of(metrics.read_text())["dircleaner_last_run_success"] == 0
    result = invoke(url, *args, "--bucket", "Photos", "--json")
    assert result.exit_code == 3
    assert json.loads(result.stdout)["error_type"] == "BucketNotFound"


def test_delete_keys_in_a_typo_bucket_is_refused(url: str) -> None:
    result = invoke(url, "delete-keys", "--bucket", "Photos", "-", input="a/b/x\n")
    assert (result.exit_code, said(result)) == (3, "Error: " + MISSING)


@pytest.mark.parametrize("command", ["build", "sweep", "list-dirs"])
def test_a_typo_bucket_is_a_warning_to_a_command_that_reads(url: str, command: str) -> None:
    if command == "sweep":  # a filter of that scope to sweep with
        assert invoke(url, "build", "--bucket", "Photos").exit_code == 0
    result = invoke(url, command, "--bucket", "Photos")
    assert result.exit_code == 0, result.output
    assert said(result) == "warning: " + MISSING
