"""``sweep``: the candidates it lists, and where it writes them (each candidate's bucket unless
--bucket says which)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import invoke


@pytest.fixture()
def url(tmp_path: Path) -> str:
    """A store of 10 directories, 3 of them emptied (over the default --max-delete-fraction)."""
    store = f"sqlite:///{tmp_path}/src/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(10))
    assert invoke(store, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(store, "delete-keys", "-", input="d/1/x\nd/2/x\nd/3/x\n").exit_code == 0
    return store


def test_sweep_refuses_two_outputs_on_stdout(url: str) -> None:
    assert invoke(url, "build").exit_code == 0
    result = invoke(url, "sweep", "--out", "-", "--json")
    assert (result.exit_code, result.stderr) == (
        2,
        "Error: --json and --out - both write to stdout: give --out a file\n",
    )
    assert json.loads(result.stdout)["ok"] is False


@pytest.fixture()
def two_buckets(tmp_path: Path) -> str:
    """Two buckets, each with an empty directory of the same path."""
    store = f"sqlite:///{tmp_path}/meta.db"
    for bucket in ("default", "photos"):
        put = invoke(store, "import-keys", "--bucket", bucket, "-", input="a/b/x\na/c/y\n")
        assert put.exit_code == 0
        gone = invoke(store, "delete-keys", "--bucket", bucket, "-", input="a/c/y\n")
        assert gone.exit_code == 0
    return store


def test_sweep_out_names_the_bucket_unless_bucket_was_given(
    two_buckets: str, tmp_path: Path
) -> None:
    assert invoke(two_buckets, "build").exit_code == 0
    out = tmp_path / "candidates.txt"
    assert invoke(two_buckets, "sweep", "--out", str(out)).exit_code == 0
    assert sorted(out.read_text().splitlines()) == ["default\ta/c/", "photos\ta/c/"]
    assert invoke(two_buckets, "build", "--bucket", "photos").exit_code == 0
    result = invoke(two_buckets, "sweep", "--bucket", "photos", "--out", "-")
    assert (result.exit_code, result.output) == (0, "a/c/\n")
