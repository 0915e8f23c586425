"""The ``build`` command: the filter it stores and reports, and the shard options it requires."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import invoke, said


@pytest.fixture
def url(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path / 'meta.db'}"
    assert invoke(store, "import-keys", "-", input="a/b/x\nc/y\n").exit_code == 0
    return store


def test_a_build_stores_the_filter_it_reports(url: str) -> None:
    result = invoke(url, "build", "--json", "--fpr", "0.01")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    # Partitions a/b/ and c/; the ancestors a/, a/b/, c/ inserted.
    assert (summary["partitions_scanned"], summary["keys_inserted"]) == (2, 3)
    assert (summary["fpr_target"], summary["built_shards"], summary["shard"]) == (0.01, [0], "0/1")
    listed = json.loads(invoke(url, "filters", "list", "--json").stdout)
    assert [(f["generation"], f["complete"]) for f in listed] == [(summary["generation"], True)]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--shard", "0/2"], "a sharded build (--shard i/n) needs --expected-dirs"),
        (["--shard", "0/2", "--expected-dirs", "10"], "a sharded build needs --generation"),
        (["--fpr", "0.7"], "--fpr must be between 0 and 0.5"),
    ],
)
def test_bad_build_options_are_refused_in_one_line(url: str, args: list[str], says: str) -> None:
    result = invoke(url, "build", *args)
    assert result.exit_code == 2
    assert said(result).startswith(f"Error: {says}") and said(result).count("\n") == 1
    assert json.loads(invoke(url, "filters", "list", "--json").stdout) == []  # nothing stored
