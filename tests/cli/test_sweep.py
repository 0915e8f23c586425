"""``sweep``: the candidates it lists, and where it writes them."""

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
