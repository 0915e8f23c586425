"""Which consistency the scans may read at: the job refuses the combinations that are unsafe.

The build may read below a quorum because the verify re-check (at a quorum) keeps every
directory whose objects it missed; the sweep may not as well (a folder row it misses is never
re-checked). The 3-node proof is ``tests/faults/test_scan_consistency.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dircleaner.errors import UsageError
from dircleaner.pipeline.guards import check_scan_consistency
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.records import StoreTraits
from tests.helpers import invoke, write_toml


class _Scans:
    def __init__(self, build: bool, sweep: bool) -> None:
        self.traits = StoreTraits(build_sees_every_write=build, sweep_sees_every_write=sweep)


@pytest.mark.parametrize(
    ("build", "sweep", "verify", "refused"),
    [
        (True, True, False, None),
        (True, False, False, None),  # a weak sweep only loses ranges and rewrites
        (False, True, True, None),  # the default: a LOCAL_ONE build, re-checked at a quorum
        (False, True, False, "--no-verify needs the build to read at a quorum"),
        (False, False, True, "build and sweep both read below a quorum"),
    ],
)
def test_scan_consistency_guard(
    build: bool, sweep: bool, verify: bool, refused: str | None
) -> None:
    store: Store = _Scans(build, sweep)  # type: ignore[assignment]
    if refused is None:
        check_scan_consistency(store, verify)
    else:
        with pytest.raises(UsageError, match=refused):
            check_scan_consistency(store, verify)


def test_the_embedded_store_sees_every_write(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        check_scan_consistency(store, verify=False)


@pytest.mark.cassandra
def test_cassandra_defaults_build_at_local_one_and_refuse_no_verify(
    cassandra_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_cassandra_end_to_end import _init_keyspace

    url = _init_keyspace(cassandra_url, "scancons")
    with open_store(url) as store:
        assert not store.traits.build_sees_every_write and store.traits.sweep_sees_every_write
    for command in ("clean", "run"):
        result = invoke(url, command, "--no-verify", "--bucket", "nothing-here")
        assert result.exit_code == 2, result.output
        assert "--no-verify needs the build to read at a quorum" in result.output
    both = write_toml(
        tmp_path / "weak.toml", '[cassandra.consistency]\nbuild = "ONE"\nsweep = "LOCAL_ONE"\n'
    )
    monkeypatch.setenv("DIRCLEANER_CONFIG", str(both))
    result = invoke(url, "run", "--bucket", "nothing-here")
    assert result.exit_code == 2, result.output
    assert "both read below a quorum" in result.output
    quorum = write_toml(tmp_path / "quorum.toml", '[cassandra.consistency]\nbuild = "QUORUM"\n')
    monkeypatch.setenv("DIRCLEANER_CONFIG", str(quorum))
    result = invoke(url, "clean", "--no-verify", "--bucket", "nothing-here")
    assert "needs the build to read at a quorum" not in result.output  # past the guard
