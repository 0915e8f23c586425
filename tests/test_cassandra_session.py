"""The Cassandra session without a node: connecting to none (the retries, every cluster shut
down, one line that holds no credentials) and the driver's errors mapped to the store's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cassandra import InvalidRequest, OperationTimedOut, WriteTimeout
from cassandra.cluster import NoHostAvailable
from cassandra.protocol import OverloadedErrorMessage

import dircleaner.store.cassandra.session as cassandra_session
from dircleaner.errors import StoreUnavailable, TransientStoreError
from dircleaner.store.cassandra.config import CassandraConfig
from dircleaner.store.cassandra.session import map_error
from dircleaner.store.cassandra.store import CassandraStore
from tests.helpers import write_toml


def test_unreachable_node_is_store_unavailable_quickly(tmp_path: Path) -> None:
    text = "[cassandra]\nconnect_retries = 2\nconnect_timeout_s = 1\n"
    cfg = write_toml(tmp_path / "c.toml", text)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        CassandraStore.open("cassandra://127.0.0.1:1/ks", config_path=cfg)
    message = str(info.value)
    assert message.startswith("cannot reach Cassandra at 127.0.0.1:1 after 2 attempts: ")
    assert "\n" not in message
    assert time.monotonic() - started < 10


class RefusingCluster:
    """A cluster whose every connect fails with ``error``; counts connects and shutdowns."""

    connects = shutdowns = 0

    def __init__(self, error: Exception) -> None:
        self.error = error

    def connect(self) -> None:
        RefusingCluster.connects += 1
        raise self.error

    def shutdown(self) -> None:
        RefusingCluster.shutdowns += 1


@pytest.mark.parametrize(
    ("error", "attempts", "message"),
    [
        (OperationTimedOut(), 3, "after 3 attempts: "),  # its host errors are None
        (NoHostAvailable("none", {"h": OSError("refused")}), 3, "after 3 attempts: refused"),
        (
            NoHostAvailable("none", {"h": Exception("Bad credentials")}),
            1,
            "refused our credentials",
        ),
    ],
)
def test_connect_retries_what_may_pass_and_shuts_every_cluster_down(
    monkeypatch: pytest.MonkeyPatch, error: Exception, attempts: int, message: str
) -> None:
    monkeypatch.setattr(RefusingCluster, "connects", 0)
    monkeypatch.setattr(RefusingCluster, "shutdowns", 0)
    monkeypatch.setattr(cassandra_session, "_cluster", lambda cfg: RefusingCluster(error))
    monkeypatch.setattr(cassandra_session, "CONNECT_BASE_S", 0.0)
    cfg = CassandraConfig(keyspace="ks", connect_retries=3)
    with pytest.raises(StoreUnavailable, match=message):
        cassandra_session._connect(cfg)
    assert RefusingCluster.connects == RefusingCluster.shutdowns == attempts


def test_credentials_never_appear_in_errors(tmp_path: Path) -> None:
    cfg = write_toml(
        tmp_path / "c.toml",
        '[cassandra]\nconnect_retries = 1\n[cassandra.auth]\nusername = "u"\npassword = "s3cr3t"\n',
    )
    with pytest.raises(StoreUnavailable) as info:
        CassandraStore.open("cassandra://127.0.0.1:1/ks", config_path=cfg)
    assert "s3cr3t" not in str(info.value)


@pytest.mark.parametrize(
    "exc",
    [
        WriteTimeout("timed out", write_type=0),
        OperationTimedOut("client timeout"),
        NoHostAvailable("none", {}),
        OverloadedErrorMessage(0x1001, "overloaded", None),
    ],
)
def test_transient_driver_errors_are_mapped(exc: Exception) -> None:
    mapped = map_error(exc)
    assert isinstance(mapped, TransientStoreError)
    assert mapped.__cause__ is exc
    assert type(exc).__name__ in str(mapped)


def test_other_errors_are_returned_unchanged() -> None:
    exc = InvalidRequest("bad")
    assert map_error(exc) is exc
