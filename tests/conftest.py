"""Shared fixtures."""

from __future__ import annotations

import os
import socket

import pytest

from dircleaner.store.cassandra.config import parse_cassandra_url

# -- what is collected: nothing is skipped, what does not apply is left out ----------------------

# The fault tests stop and start nodes of a 3-node cluster: only `make test-faults` runs them.
collect_ignore = [] if os.environ.get("DIRCLEANER_FAULTS") == "1" else ["faults"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out store contract cases that need two buckets for a single-bucket mapping."""
    keep: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        cls = getattr(item, "cls", None)
        single = cls is not None and getattr(cls, "OTHER_BUCKET", "") is None
        (left_out if single and item.get_closest_marker("two_buckets") else keep).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = keep


# -- Cassandra ------------------------------------------------------------------------------------

DEFAULT_CASSANDRA_URL = "cassandra://127.0.0.1:9042/dircleaner_test"


@pytest.fixture(scope="session")
def cassandra_url() -> str:
    """URL of a live Cassandra node (``DIRCLEANER_CASSANDRA_URL``), its keyspace for tests.

    Skips when no node answers, or fails when ``DIRCLEANER_REQUIRE_CASSANDRA=1`` (CI).
    Start one with ``scripts/cassandra start``.
    """
    url = os.environ.get("DIRCLEANER_CASSANDRA_URL", DEFAULT_CASSANDRA_URL)
    parts = parse_cassandra_url(url)
    errors: list[str] = []
    for host in parts.hosts:
        try:
            with socket.create_connection((host, parts.port), timeout=2.0):
                return url
        except OSError as exc:
            errors.append(f"{host}:{parts.port}: {exc}")
    why = f"no Cassandra node answers ({'; '.join(errors)}); run scripts/cassandra start"
    if os.environ.get("DIRCLEANER_REQUIRE_CASSANDRA") == "1":
        pytest.fail(why)
    pytest.skip(why)


# -- no test writes into the work tree ------------------------------------------------------------


@pytest.fixture(autouse=True)
def _state_home_in_tmp(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default audit log (under ``$XDG_STATE_HOME``) lands in a temporary directory."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


# -- more shared fixtures below -------------------------------------------------------------------
