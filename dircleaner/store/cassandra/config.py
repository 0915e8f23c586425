"""Typed configuration: the Cassandra mapping and connection settings, from URL + TOML + env.

A real metastore's schema differs from our reference one: keyspace, table and column names, the
bucket column (optional) and the stored form of the root parent all come from a TOML file::

    [cassandra]                   # connection and job tuning
    [cassandra.tables]            # objects / folders / kv / ledger / journal
    [cassandra.columns]           # bucket (or false) / parent / name
    [cassandra.consistency]       # build / sweep / verify / delete / write / meta
    [cassandra.auth]              # username / password
    [cassandra.tls]               # ca_file / cert_file / key_file / verify

``examples/cassandra.toml`` documents every key. Unknown keys are refused (a typo in a deletion
tool's mapping must not silently fall back to a default). Precedence:

- keyspace and local DC: the URL's (``/keyspace``, ``?dc=``) or the file's; both given and
  different is an error rather than a guess.
- credentials: ``DIRCLEANER_CASSANDRA_USERNAME`` / ``DIRCLEANER_CASSANDRA_PASSWORD`` win over the
  file, so a secret manager can inject them without editing the file. They are never accepted on
  the command line and never shown by ``repr``.
"""

from __future__ import annotations

import logging
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints
from urllib.parse import parse_qsl, urlsplit

from dircleaner.errors import StoreUrlError, UsageError
from dircleaner.paths import DEFAULT_BUCKET
from dircleaner.scanrate import DEFAULT_SLOW_PAGE_S

log = logging.getLogger(__name__)

DEFAULT_PORT = 9042
ENV_USERNAME = "DIRCLEANER_CASSANDRA_USERNAME"
ENV_PASSWORD = "DIRCLEANER_CASSANDRA_PASSWORD"

CONSISTENCY_LEVELS = frozenset(
    {
        "ANY",
        "ONE",
        "TWO",
        "THREE",
        "QUORUM",
        "ALL",
        "LOCAL_QUORUM",
        "EACH_QUORUM",
        "LOCAL_ONE",
        "SERIAL",
        "LOCAL_SERIAL",
    }
)

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOST = re.compile(r"[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\]")


def validate_identifier(value: str, what: str) -> str:
    """Return ``value`` if it is a plain CQL identifier, else raise UsageError naming ``what``."""
    if not _IDENTIFIER.fullmatch(value) or len(value) > 48:
        raise UsageError(f"{what} {value!r} is not a CQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return value


# -- the URL ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CassandraUrl:
    """The parts of ``cassandra://h1,h2:9042/keyspace?dc=dc1``."""

    hosts: tuple[str, ...]
    port: int
    keyspace: str | None
    dc: str | None


def parse_cassandra_url(url: str) -> CassandraUrl:
    """Parse a Cassandra store URL; one port for all hosts (default 9042), keyspace optional."""

    # Never echo userinfo: a password typed into a URL must not reach a log.
    shown = re.sub(r"(?<=://)[^/@]*@", "***@", url)

    def bad(why: str) -> StoreUrlError:
        return StoreUrlError(
            f"malformed Cassandra URL {shown!r}: {why}"
            " (expected cassandra://h1,h2:9042/keyspace?dc=dc1)"
        )

    parts = urlsplit(url)
    if parts.scheme != "cassandra" or "://" not in url:
        raise bad("scheme must be cassandra://")
    if parts.fragment:
        raise bad("unexpected #fragment")
    netloc = parts.netloc
    if "@" in netloc:
        raise bad("credentials do not belong in the URL; use the config file or environment")
    if not netloc:
        raise bad("no host")
    port = DEFAULT_PORT
    hosts_part = netloc
    # A port, if any, follows the last host: h1,h2:9042 (an IPv6 host must be bracketed).
    tail = netloc.rsplit(",", 1)[-1]
    if ":" in tail and not tail.endswith("]"):
        hosts_part, _, port_text = netloc.rpartition(":")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise bad(f"invalid port {port_text!r}")
        port = int(port_text)
    hosts = tuple(hosts_part.split(","))
    for host in hosts:
        if not _HOST.fullmatch(host):
            raise bad(f"invalid host {host!r}")
    path = parts.path.strip("/")
    keyspace: str | None = None
    if path:
        if not _IDENTIFIER.fullmatch(path):
            raise bad(f"invalid keyspace {path!r}")
        keyspace = path
    dc: str | None = None
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise bad("unparsable query string") from exc
    for key, value in query:
        if key != "dc":
            raise bad(f"unknown parameter {key!r} (only dc= is accepted)")
        if not value:
            raise bad("empty dc=")
        dc = value
    return CassandraUrl(tuple(h.strip("[]") for h in hosts), port, keyspace, dc)


# -- the config ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PhaseConsistency:
    """``[cassandra.consistency]``: the level per phase (names as in ``ConsistencyLevel``).

    The build's scan reads at LOCAL_ONE: an object partition it misses (a replica behind) only
    makes its directories candidates, and the verify re-check, at a quorum, finds the object
    and keeps them. The sweep stays at a quorum: a folder row it misses would be deleted
    unseen by a range delete, a rewrite, or the partition delete of a subtree whose objects the
    build missed too. The job refuses to delete with both scans below a quorum, or with a build
    below a quorum and no re-check.
    """

    build: str = "LOCAL_ONE"
    sweep: str = "LOCAL_QUORUM"
    verify: str = "LOCAL_QUORUM"
    delete: str = "LOCAL_QUORUM"
    #: the S3 front-end's writes made by the generator and tests
    write: str = "LOCAL_QUORUM"
    #: our own key-value table and ledger
    meta: str = "LOCAL_QUORUM"

    def __post_init__(self) -> None:
        for f in fields(self):
            level = getattr(self, f.name).upper()
            if level not in CONSISTENCY_LEVELS:
                known = ", ".join(sorted(CONSISTENCY_LEVELS))
                raise UsageError(f"consistency.{f.name} = {level!r} is not one of {known}")
            object.__setattr__(self, f.name, level)


@dataclass(frozen=True, slots=True)
class Tables:
    """``[cassandra.tables]``: the metastore's two index tables and our three."""

    objects: str = "objects"
    folders: str = "folders"
    #: our key-value table: filter cells, the run lease, run state
    kv: str = "dircleaner_kv"
    #: our tombstone ledger (the budget over the grace period)
    ledger: str = "dircleaner_ledger"
    #: our journal of dirty directories (time-window compaction, every row with a TTL)
    journal: str = "dircleaner_journal"

    def __post_init__(self) -> None:
        names = [getattr(self, f.name) for f in fields(self)]
        for f, name in zip(fields(self), names, strict=True):
            validate_identifier(name, f"{f.name} table")
        if len(set(names)) < len(names):
            raise UsageError("the objects, folders, kv, ledger and journal tables must be distinct")


@dataclass(frozen=True, slots=True)
class Columns:
    """``[cassandra.columns]``: the index tables' key columns (``bucket = false``: none)."""

    #: None: the metastore has no bucket column and holds the single bucket ``bucket_name``
    bucket: str | None = "bucket"
    parent: str = "parent"
    name: str = "name"

    def __post_init__(self) -> None:
        if self.bucket is not None:
            validate_identifier(self.bucket, "bucket column")
        validate_identifier(self.parent, "parent column")
        validate_identifier(self.name, "name column")


@dataclass(frozen=True, slots=True)
class Auth:
    """``[cassandra.auth]`` (the environment wins): never on the command line, never shown."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.username is None) != (self.password is None):
            raise UsageError("Cassandra auth needs both a username and a password")


@dataclass(frozen=True, slots=True)
class Tls:
    """``[cassandra.tls]``: TLS is on when any file is given or ``verify = false``."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    verify: bool = True

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise UsageError("TLS client auth needs both cert_file and key_file")

    @property
    def enabled(self) -> bool:
        """Whether connections use TLS."""
        return self.ca_file is not None or self.cert_file is not None or not self.verify


@dataclass(frozen=True, slots=True)
class CassandraConfig:
    """Everything needed to connect to a Cassandra metastore and map its schema.

    Shaped like the TOML file: ``[cassandra]`` holds the scalars, its sub-tables the nested
    dataclasses (``cfg.tables.folders`` is ``cassandra.tables.folders``).
    """

    hosts: tuple[str, ...] = ("127.0.0.1",)
    port: int = DEFAULT_PORT
    keyspace: str = "dircleaner"
    local_dc: str | None = None

    #: the bucket a metastore without a bucket column holds
    bucket_name: str = DEFAULT_BUCKET
    #: how the root parent (``""`` in the model) is stored: partition keys cannot be empty.
    #: Other parents starting with this value are stored with it once more in front
    #: (``/`` → ``//``) unless ``parent_prefix`` is set, so the mapping stays one-to-one.
    root_parent: str = "/"
    #: prepended to every non-root stored parent (``"/"`` for stores that keep ``/a/b/``)
    parent_prefix: str = ""

    fetch_size: int = 5000
    splits_per_range: int = 8
    #: requests in flight at once per process (scans, re-check reads, the ledger's writes; the
    #: deleter's requests go in a window of the run's ``--concurrency``)
    concurrency: int = 16
    #: partitions per ``IN`` read of the verify re-check (CassandraStore.nonempty_object_partitions)
    verify_batch: int = 100
    request_timeout_s: float = 30.0
    connect_timeout_s: float = 5.0
    connect_retries: int = 3
    #: None: negotiate the highest version both sides speak (v5 for Cassandra 5.0)
    protocol_version: int | None = None
    #: replication factor of a keyspace created by init-schema (SimpleStrategy)
    replication_factor: int = 1
    #: rows per second both passes' scans may read, all workers together, when ``--scan-rate``
    #: is not given (0 = no cap)
    scan_rate: float = 0.0
    #: a scan page slower than this makes the scans back off
    scan_slow_page_s: float = DEFAULT_SLOW_PAGE_S

    tables: Tables = field(default_factory=Tables)
    columns: Columns = field(default_factory=Columns)
    consistency: PhaseConsistency = field(default_factory=PhaseConsistency)
    auth: Auth = field(default_factory=Auth)
    tls: Tls = field(default_factory=Tls)

    def __post_init__(self) -> None:
        validate_identifier(self.keyspace, "keyspace")
        if not self.hosts:
            raise UsageError("no Cassandra host given")
        if not self.root_parent:
            raise UsageError("root_parent cannot be empty: Cassandra partition keys cannot be")
        root, prefix = self.root_parent, self.parent_prefix
        if prefix and root != prefix and root.startswith(prefix) and root.endswith("/"):
            raise UsageError(
                f"root_parent {root!r} is also the stored form of parent"
                f" {root[len(prefix) :]!r} under parent_prefix {prefix!r}"
            )
        for attr, low in (
            ("fetch_size", 1),
            ("splits_per_range", 1),
            ("concurrency", 1),
            ("verify_batch", 1),
            ("connect_retries", 1),
            ("replication_factor", 1),
        ):
            if getattr(self, attr) < low:
                raise UsageError(f"{attr} must be at least {low}")
        if self.request_timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise UsageError("timeouts must be positive")
        if self.scan_rate < 0:
            raise UsageError("scan_rate must be >= 0 (0: no cap)")
        if self.scan_slow_page_s <= 0:
            raise UsageError("scan_slow_page_s must be more than 0")

    @property
    def contact(self) -> str:
        """``h1,h2:port`` for messages."""
        return f"{','.join(self.hosts)}:{self.port}"


# -- loading ---------------------------------------------------------------------------------------

#: keys of ``[cassandra]`` that the URL (or the environment) supplies instead of the file's tree
_NOT_IN_FILE = frozenset({"hosts", "port"})
#: keys an older release read and this one ignores (the key-value table replaced those tables)
_RETIRED = frozenset({"cassandra.tables.filters", "cassandra.tables.state"})


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError as exc:
        raise UsageError(f"config file {path} does not exist") from exc
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from exc


def _typed(hint: Any, key: str, value: object) -> object:
    """Check a TOML value against a field's type; paths become Path, ``bucket = false`` None."""
    if key == "cassandra.columns.bucket":
        if value is False or value == "":
            return None
        if isinstance(value, str):
            return value
        raise UsageError(f"config key {key} must be a column name or false, not {value!r}")
    union = get_origin(hint) in (UnionType, Union)
    options = [o for o in (get_args(hint) if union else (hint,)) if o is not type(None)]
    for option in options:
        if option is float and isinstance(value, int | float) and not isinstance(value, bool):
            # TOML has nan and inf literals: each would pass every check a setting gets.
            if not math.isfinite(value):
                raise UsageError(f"config key {key} must be a finite number, not {value}")
            return float(value)
        if option is Path and isinstance(value, str):
            return Path(value).expanduser()
        # bool is an int subclass: refuse ``fetch_size = true``.
        if isinstance(value, option) and (option is bool or not isinstance(value, bool)):
            return value
    names = " or ".join(o.__name__ for o in options)
    raise UsageError(f"config key {key} must be {names}, not {type(value).__name__}")


def _section(
    cls: type[Any], data: Mapping[str, Any], prefix: str, source: Path
) -> dict[str, object]:
    """Keyword values for dataclass ``cls`` from TOML table ``data``; unknown keys refused."""
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls)} - (_NOT_IN_FILE if cls is CassandraConfig else set())
    out: dict[str, object] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}"
        if name in _RETIRED:
            log.info("config key %r in %s is no longer used (see tables.kv)", name, source)
            continue
        if key not in known:
            raise UsageError(f"unknown config key {name!r} in {source}")
        hint = hints[key]
        if isinstance(hint, type) and is_dataclass(hint):
            if not isinstance(value, dict):
                raise UsageError(f"config key {name} in {source} must be a table")
            out[key] = hint(**_section(hint, value, name, source))
        else:
            out[key] = _typed(hint, name, value)
    return out


def _settings_from_toml(data: Mapping[str, Any], source: Path) -> dict[str, object]:
    """The ``[cassandra]`` tree as CassandraConfig keyword values."""
    unknown_top = sorted(set(data) - {"cassandra"})
    if unknown_top:
        raise UsageError(f"unknown config key {unknown_top[0]!r} in {source}")
    section = data.get("cassandra", {})
    if not isinstance(section, dict):
        raise UsageError(f"config key 'cassandra' in {source} must be a table")
    return _section(CassandraConfig, section, "cassandra", source)


def load_cassandra_config(
    url_parts: CassandraUrl,
    config_path: Path | None,
    environ: Mapping[str, str] | None = None,
) -> CassandraConfig:
    """Merge the URL, the TOML file (if any) and the environment into one CassandraConfig."""
    source = config_path if config_path is not None else Path("<no config file>")
    settings = _file_settings(config_path, os.environ if environ is None else environ)

    file_keyspace = settings.pop("keyspace", None)
    if url_parts.keyspace and file_keyspace and url_parts.keyspace != file_keyspace:
        raise UsageError(
            f"the URL names keyspace {url_parts.keyspace!r} but {source} names {file_keyspace!r}"
        )
    keyspace = url_parts.keyspace or file_keyspace
    if not keyspace:
        raise UsageError("no keyspace: name it in the URL (cassandra://host/keyspace) or config")

    file_dc = settings.pop("local_dc", None)
    if url_parts.dc and file_dc and url_parts.dc != file_dc:
        raise UsageError(f"the URL names dc {url_parts.dc!r} but {source} names {file_dc!r}")

    return CassandraConfig(
        hosts=url_parts.hosts,
        port=url_parts.port,
        keyspace=str(keyspace),
        local_dc=url_parts.dc or (str(file_dc) if file_dc else None),
        **settings,  # type: ignore[arg-type]
    )


def check_config_file(config_path: Path, environ: Mapping[str, str] | None = None) -> None:
    """UsageError unless the file is one a Cassandra store would load: every key known, every
    value of its type and range. A store that reads nothing from it (SQLite) checks it all the
    same: a typo'd key must not pass unnoticed until the day the file is used."""
    settings = _file_settings(config_path, os.environ if environ is None else environ)
    CassandraConfig(**settings)  # type: ignore[arg-type]


def _file_settings(config_path: Path | None, env: Mapping[str, str]) -> dict[str, object]:
    """The file's ``[cassandra]`` tree (none: no file) as CassandraConfig keyword values, the
    credentials of the environment winning over the file's."""
    source = config_path if config_path is not None else Path("<no config file>")
    data = _read_toml(config_path) if config_path else {}
    env_auth = {
        attr: env[var]
        for attr, var in (("username", ENV_USERNAME), ("password", ENV_PASSWORD))
        if env.get(var)
    }
    section = data.setdefault("cassandra", {})
    if env_auth and isinstance(section, dict) and isinstance(section.setdefault("auth", {}), dict):
        section["auth"].update(env_auth)
    return _settings_from_toml(data, source)
