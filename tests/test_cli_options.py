"""cli/options.py: the bound on --workers (at most four per core)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import invoke


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
