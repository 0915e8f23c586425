"""A filter serves the scope it was built for (every bucket, or one): a sweep of another scope
says which scopes the stored filters cover and what to do, and `filters list` shows each
filter's scope."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import invoke, write_lines

KEYS = [f"d{i % 7}/{i}/x" for i in range(200)]


def _store(tmp_path: Path, *builds: list[str]) -> tuple[str, list[str]]:
    """A store with keys in bucket 'default', and the generations of these builds."""
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k", KEYS))).exit_code == 0
    generations = []
    for args in builds:
        built = invoke(url, "build", "--json", *args)
        assert built.exit_code == 0, built.output
        generations.append(json.loads(built.stdout)["generation"])
    return url, generations


@pytest.mark.parametrize("command", ["sweep", "clean"])
def test_a_bucket_sweep_with_only_an_every_bucket_filter_says_so(
    tmp_path: Path, command: str
) -> None:
    url, [every] = _store(tmp_path, [])
    result = invoke(url, command, "--bucket", "default", *_audit(command, tmp_path))
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1] == (
        "Error: no filter has been built for --bucket 'default' yet: the stored filters cover"
        f" every bucket ({every}), and a filter serves only the buckets it was built for;"
        " build one with 'dircleaner build --bucket default', or leave out --bucket to sweep"
        " every bucket with that filter"
    )
    # Both ways out work.
    assert invoke(url, command, *_audit(command, tmp_path)).exit_code == 0
    assert invoke(url, "build", "--bucket", "default").exit_code == 0
    assert invoke(url, command, "--bucket", "default", *_audit(command, tmp_path)).exit_code == 0


def _audit(command: str, tmp_path: Path) -> list[str]:
    return (
        ["--audit-log", str(tmp_path / "a.jsonl"), "--min-age", "0"] if command == "clean" else []
    )


def test_an_every_bucket_sweep_with_only_bucket_filters_says_so(tmp_path: Path) -> None:
    url, [one] = _store(tmp_path, ["--bucket", "default"])
    result = invoke(url, "sweep")
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1] == (
        "Error: no filter has been built for every bucket yet: the stored filters cover"
        f" bucket 'default' ({one}), and a filter serves only the buckets it was built for;"
        " build one with 'dircleaner build', or sweep one of those buckets with --bucket"
    )


def test_with_no_filter_at_all_the_message_is_unchanged(tmp_path: Path) -> None:
    url, _ = _store(tmp_path)
    result = invoke(url, "sweep", "--bucket", "default")
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1] == (
        "Error: no filter has been built for this store yet (run 'dircleaner build')"
    )


def test_filters_list_shows_each_filter_s_scope(tmp_path: Path) -> None:
    url, [every, one] = _store(tmp_path, [], ["--bucket", "default"])
    listed = invoke(url, "filters", "list")
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert re.match(rf"{every}  complete    for every bucket  shards 1/1  age ", lines[0])
    assert re.match(rf"{one}  complete    for bucket 'default'  shards 1/1  age ", lines[1])
