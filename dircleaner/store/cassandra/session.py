"""Connecting to the cluster (TLS, auth, execution profiles per phase) and its errors."""

from __future__ import annotations

import logging
import math
import ssl
from typing import Any, TypeVar

from cassandra import (
    ConsistencyLevel,
    OperationTimedOut,
    ReadTimeout,
    Unavailable,
    WriteTimeout,
)
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    NoHostAvailable,
    Session,
)
from cassandra.connection import ConnectionException
from cassandra.policies import (
    DCAwareRoundRobinPolicy,
)
from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage
from cassandra.query import (
    tuple_factory,
)

from dircleaner.errors import (
    StoreUnavailable,
    TransientStoreError,
    UsageError,
)
from dircleaner.retry import RetryPolicy
from dircleaner.store.cassandra.config import (
    CassandraConfig,
)
from dircleaner.store.cassandra.ring import RangeAwarePolicy

log = logging.getLogger(__name__)
T = TypeVar("T")


TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    ReadTimeout,
    WriteTimeout,
    Unavailable,
    OperationTimedOut,
    OverloadedErrorMessage,
    IsBootstrappingErrorMessage,
    NoHostAvailable,
    ConnectionException,
)


def map_error(exc: BaseException) -> BaseException:
    """A driver timeout/overload becomes TransientStoreError (worth a retry); others unchanged."""
    if isinstance(exc, TRANSIENT_ERRORS) and not isinstance(exc, TransientStoreError):
        mapped = TransientStoreError(f"{type(exc).__name__}: {_one_line(exc)}")
        mapped.__cause__ = exc
        return mapped
    return exc


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ttl(seconds: float) -> int:
    """A TTL in whole seconds, never below 1 (0 would mean none)."""
    return max(1, math.ceil(seconds))


_PHASES = ("build", "sweep", "verify", "delete", "write", "meta")


def _ssl_context(cfg: CassandraConfig) -> ssl.SSLContext | None:
    if not cfg.tls.enabled:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if cfg.tls.verify:
            if cfg.tls.ca_file is not None:
                ctx.load_verify_locations(cafile=str(cfg.tls.ca_file))
            else:
                ctx.load_default_certs()
        else:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.tls.cert_file is not None and cfg.tls.key_file is not None:
            ctx.load_cert_chain(str(cfg.tls.cert_file), str(cfg.tls.key_file))
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot load TLS files: {_one_line(exc)}") from exc
    return ctx


def _cluster(cfg: CassandraConfig) -> Any:
    policy = RangeAwarePolicy(DCAwareRoundRobinPolicy(local_dc=cfg.local_dc))

    def profile(level: str) -> Any:
        return ExecutionProfile(
            load_balancing_policy=policy,
            consistency_level=getattr(ConsistencyLevel, level),
            request_timeout=cfg.request_timeout_s,
            row_factory=tuple_factory,
        )

    profiles = {phase: profile(getattr(cfg.consistency, phase)) for phase in _PHASES}
    profiles[EXEC_PROFILE_DEFAULT] = profile(cfg.consistency.meta)
    profiles["trace"] = profile("ONE")
    # The lease: Paxos at SERIAL (every DC agrees on one holder), committed at QUORUM.
    profiles["lease"] = ExecutionProfile(
        load_balancing_policy=policy,
        consistency_level=ConsistencyLevel.QUORUM,
        serial_consistency_level=ConsistencyLevel.SERIAL,
        request_timeout=cfg.request_timeout_s,
        row_factory=tuple_factory,
    )
    options: dict[str, Any] = {}
    if cfg.protocol_version is not None:
        options["protocol_version"] = cfg.protocol_version
    auth = (
        PlainTextAuthProvider(username=cfg.auth.username, password=cfg.auth.password)
        if cfg.auth.username is not None
        else None
    )
    return Cluster(
        contact_points=list(cfg.hosts),
        port=cfg.port,
        execution_profiles=profiles,
        auth_provider=auth,
        ssl_context=_ssl_context(cfg),
        connect_timeout=cfg.connect_timeout_s,
        control_connection_timeout=cfg.connect_timeout_s,
        **options,
    )


#: a node that is starting takes seconds: mean waits 0.8, 1.6, 2 s (``connect_retries`` tries)
CONNECT_BASE_S = 0.8
CONNECT_CAP_S = 4.0
_CONNECT_ERRORS = (NoHostAvailable, OperationTimedOut, ConnectionException, OSError)


def _host_errors(exc: BaseException) -> list[BaseException]:
    """What each host answered, when no host could be reached."""
    return list(exc.errors.values()) if isinstance(exc, NoHostAvailable) and exc.errors else []


def _auth_failed(exc: BaseException) -> bool:
    return any(
        "AuthenticationFailed" in type(e).__name__ or "Bad credentials" in str(e)
        for e in _host_errors(exc)
    )


def _connect(cfg: CassandraConfig) -> tuple[Any, Session]:
    """Connect with bounded retries; StoreUnavailable (one line) when no host answers."""

    def attempt() -> tuple[Any, Session]:
        cluster = _cluster(cfg)
        try:
            return cluster, cluster.connect()
        except BaseException:
            cluster.shutdown()
            raise

    policy = RetryPolicy(cfg.connect_retries, CONNECT_BASE_S, CONNECT_CAP_S)
    try:
        return policy.call(
            attempt, lambda exc: isinstance(exc, _CONNECT_ERRORS) and not _auth_failed(exc)
        )
    except _CONNECT_ERRORS as exc:
        errors = _host_errors(exc)
        reason = _one_line(errors[0]) if errors else _one_line(exc)
        if _auth_failed(exc):
            raise StoreUnavailable(
                f"Cassandra at {cfg.contact} refused our credentials ([cassandra.auth] or"
                f" DIRCLEANER_CASSANDRA_USERNAME/PASSWORD): {reason}"
            ) from None
        raise StoreUnavailable(
            f"cannot reach Cassandra at {cfg.contact} after {cfg.connect_retries} attempts:"
            f" {reason}"
        ) from None
