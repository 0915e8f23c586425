"""Bounds and one rule: --workers, --bucket, and what delete-keys counts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import EAGER, invoke, said


@pytest.fixture()
def url(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path}/meta.db"
    assert invoke(store, "import-keys", "-", input="a/b/x\na/c/y\n").exit_code == 0
    assert invoke(store, "import-keys", "-", "--bucket", "photos", input="p/q\n").exit_code == 0
    return store


@pytest.mark.parametrize("command", ["run", "build", "sweep", "clean"])
def test_workers_above_four_per_core_are_refused(url: str, command: str) -> None:
    cores = len(os.sched_getaffinity(0))
    result = invoke(url, command, "--workers", str(4 * cores + 1))
    assert result.exit_code == 2
    assert result.output == (
        f"Error: --workers {4 * cores + 1} is more than 4 per core ({4 * cores} on {cores}"
        f" cores): extra processes only contend; try --workers {cores}\n"
    )


def test_list_dirs_covers_every_bucket_like_run(url: str) -> None:
    result = invoke(url, "list-dirs", "--sort")
    assert (result.exit_code, result.output) == (
        0,
        "default\ta/\ndefault\ta/b/\ndefault\ta/c/\nphotos\tp/\n",
    )
    result = invoke(url, "list-dirs", "--bucket", "photos")
    assert (result.exit_code, result.output) == (0, "p/\n")


def test_an_unknown_bucket_is_refused_by_run(url: str) -> None:
    result = invoke(url, "run", *EAGER, "--bucket", "nosuch")
    assert result.exit_code == 3
    assert said(result) == (
        "Error: bucket 'nosuch' does not exist in this store (buckets: 'default', 'photos');"
        " is --bucket right?\n"
    )
    assert said(invoke(url, "run", *EAGER, "--bucket", "photos", "--json")) == ""


def test_delete_keys_counts_only_keys_that_existed(url: str) -> None:
    result = invoke(url, "delete-keys", "-", input="a/c/y\na/c/nope\nzzz\n")
    assert (result.exit_code, result.stdout) == (
        0,
        "deleted 1 key in bucket 'default' (2 did not exist); rejected 0 lines\n",
    )
