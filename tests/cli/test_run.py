"""``run``, the nightly job: build, sweep and clean in one; a dry run of it writes nothing; its
refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import EAGER, invoke, said


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
