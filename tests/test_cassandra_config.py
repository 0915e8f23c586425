"""The Cassandra store's URL and config file, and the traits they give: no node needed (the
session, the mapping and the schema text without a node are in ``test_cassandra_session.py``,
``test_cassandra_mapping.py`` and ``test_cassandra_schema.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import get_args, get_type_hints

import pytest

from dircleaner.errors import StoreUrlError, UsageError
from dircleaner.store import open_store
from dircleaner.store.cassandra.config import (
    Auth,
    CassandraConfig,
    CassandraUrl,
    PhaseConsistency,
    load_cassandra_config,
    parse_cassandra_url,
)
from dircleaner.store.cassandra.store import cassandra_traits
from tests.helpers import write_toml

REPO = Path(__file__).resolve().parent.parent


# -- no node needed -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("cassandra://h1,h2:9042/ks?dc=dc1", CassandraUrl(("h1", "h2"), 9042, "ks", "dc1")),
        ("cassandra://127.0.0.1/ks", CassandraUrl(("127.0.0.1",), 9042, "ks", None)),
        ("cassandra://h:19042/ks/", CassandraUrl(("h",), 19042, "ks", None)),
        ("cassandra://[::1]:9000/ks", CassandraUrl(("::1",), 9000, "ks", None)),
        ("cassandra://h", CassandraUrl(("h",), 9042, None, None)),
    ],
)
def test_parse_cassandra_url(url: str, expected: CassandraUrl) -> None:
    assert parse_cassandra_url(url) == expected


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("cassandra://", "no host"),
        ("cassandra:///ks", "no host"),
        ("cassandra://h:x/ks", "invalid port"),
        ("cassandra://h:0/ks", "invalid port"),
        ("cassandra://h,/ks", "invalid host"),
        ("cassandra://h/k-s", "invalid keyspace"),
        ("cassandra://h/a/b", "invalid keyspace"),
        ("cassandra://h/ks?foo=1", "unknown parameter 'foo'"),
        ("cassandra://h/ks?dc=", "empty dc"),
        ("cassandra://h/ks#frag", "fragment"),
        ("cassandra://user:pw@h/ks", "credentials do not belong in the URL"),
        ("cassandra:h/ks", "scheme"),
    ],
)
def test_malformed_cassandra_url(url: str, fragment: str) -> None:
    with pytest.raises(StoreUrlError) as info:
        parse_cassandra_url(url)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
    assert "pw@" not in message


def test_malformed_url_through_open_store() -> None:
    with pytest.raises(StoreUrlError, match="invalid port"):
        open_store("cassandra://h:port/ks")


# -- config ----------------------------------------------------------------------------------------

FULL_TOML = """
[cassandra]
keyspace = "ks"
local_dc = "dc9"
bucket_name = "solo"
root_parent = "<root>"
fetch_size = 100
splits_per_range = 2
concurrency = 3
verify_batch = 10
request_timeout_s = 2
connect_timeout_s = 1.5
connect_retries = 5
protocol_version = 5
replication_factor = 3

[cassandra.tables]
objects = "o"
folders = "f"
kv = "kv1"
filters = "fl"  # retired: the key-value table replaced it, and the key is still accepted
state = "st"

[cassandra.columns]
bucket = false
parent = "p"
name = "n"

[cassandra.consistency]
verify = "quorum"
delete = "EACH_QUORUM"

[cassandra.auth]
username = "file-user"
password = "file-pass"

[cassandra.tls]
ca_file = "~/ca.pem"
verify = false
"""


def test_load_full_config(tmp_path: Path) -> None:
    path = write_toml(tmp_path / "c.toml", FULL_TOML)
    cfg = load_cassandra_config(parse_cassandra_url("cassandra://a,b:1234"), path, environ={})
    assert cfg.hosts == ("a", "b") and cfg.port == 1234
    assert (cfg.keyspace, cfg.local_dc, cfg.bucket_name, cfg.root_parent) == (
        "ks",
        "dc9",
        "solo",
        "<root>",
    )
    assert (cfg.tables.objects, cfg.tables.folders, cfg.tables.kv) == ("o", "f", "kv1")
    assert (cfg.columns.bucket, cfg.columns.parent, cfg.columns.name) == (None, "p", "n")
    assert cfg.consistency.verify == "QUORUM"
    assert cfg.consistency.delete == "EACH_QUORUM"
    assert cfg.consistency.build == "LOCAL_ONE"  # the default: the re-check keeps what it misses
    assert (cfg.scan_rate, cfg.scan_slow_page_s) == (0.0, 1.0)
    assert (cfg.fetch_size, cfg.splits_per_range, cfg.concurrency) == (100, 2, 3)
    assert cfg.verify_batch == 10
    assert (cfg.request_timeout_s, cfg.connect_timeout_s, cfg.connect_retries) == (2.0, 1.5, 5)
    assert (cfg.protocol_version, cfg.replication_factor) == (5, 3)
    assert (cfg.auth.username, cfg.auth.password) == ("file-user", "file-pass")
    assert cfg.tls.ca_file == Path("~/ca.pem").expanduser()
    assert cfg.tls.verify is False and cfg.tls.enabled


def test_defaults_without_a_file() -> None:
    cfg = load_cassandra_config(parse_cassandra_url("cassandra://h/ks?dc=dc1"), None, environ={})
    assert cfg == CassandraConfig(hosts=("h",), keyspace="ks", local_dc="dc1")
    assert cfg.root_parent == "/" and cfg.columns.bucket == "bucket"
    assert cfg.consistency.write == "LOCAL_QUORUM"
    assert not cfg.tls.enabled


def test_traits_follow_the_config() -> None:
    default = cassandra_traits(CassandraConfig())
    assert default.scheme == "cassandra" and default.deletes_per_request > 1
    # the default build reads at LOCAL_ONE, the sweep at a quorum
    assert not default.build_sees_every_write and default.sweep_sees_every_write
    assert not default.cheap_exact_count and default.spread_deletes
    cfg = CassandraConfig(
        consistency=PhaseConsistency(build="QUORUM", sweep="ONE"),
        scan_rate=500.0,
        scan_slow_page_s=2.0,
    )
    traits = cassandra_traits(cfg)
    assert traits.build_sees_every_write and not traits.sweep_sees_every_write
    assert (traits.scan_defaults.rows_per_s, traits.scan_defaults.slow_page_s) == (500.0, 2.0)


def test_example_file_loads() -> None:
    cfg = load_cassandra_config(
        parse_cassandra_url("cassandra://h/ks"), REPO / "examples" / "cassandra.toml", environ={}
    )
    assert cfg == CassandraConfig(hosts=("h",), keyspace="ks")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[cassandra]\nfetchsize = 1\n", "cassandra.fetchsize"),
        ("[cassandra.tables]\nobject = 'x'\n", "cassandra.tables.object"),
        ("[cassandra.columns]\nparents = 'x'\n", "cassandra.columns.parents"),
        ("[cassandra.consistency]\nclean = 'ONE'\n", "cassandra.consistency.clean"),
        ("[cassandra.auth]\ntoken = 'x'\n", "cassandra.auth.token"),
        ("[cassandra.tls]\ncafile = 'x'\n", "cassandra.tls.cafile"),
        ("[cassandra.pool]\nx = 1\n", "cassandra.pool"),
        ("[sqlite]\nx = 1\n", "sqlite"),
    ],
)
def test_unknown_config_key_is_named(tmp_path: Path, text: str, named: str) -> None:
    path = write_toml(tmp_path / "c.toml", text)
    with pytest.raises(UsageError, match=named.replace(".", r"\.")):
        load_cassandra_config(parse_cassandra_url("cassandra://h/ks"), path, environ={})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[cassandra]\nfetch_size = 'many'\n", "fetch_size must be int"),
        ("[cassandra]\nfetch_size = true\n", "fetch_size must be int"),
        ("[cassandra]\nfetch_size = 0\n", "fetch_size must be at least 1"),
        ("[cassandra]\nconcurrency = 0\n", "concurrency must be at least 1"),
        ("[cassandra]\nverify_batch = 0\n", "verify_batch must be at least 1"),
        ("[cassandra]\nverify_batch = 1.5\n", "verify_batch must be int"),
        ("[cassandra]\nroot_parent = ''\n", "root_parent cannot be empty"),
        ("[cassandra.tables]\nfolders = 'bad-name'\n", "not a CQL identifier"),
        ("[cassandra.tables]\nfolders = 'objects'\n", "must be distinct"),
        ("[cassandra.columns]\nparent = 'x\"; DROP'\n", "not a CQL identifier"),
        ("[cassandra.columns]\nbucket = true\n", "column name or false"),
        ("[cassandra.consistency]\nbuild = 'FAST'\n", "consistency.build"),
        ("[cassandra.auth]\nusername = 'u'\n", "both a username and a password"),
        ("[cassandra.tls]\ncert_file = 'c.pem'\n", "both cert_file and key_file"),
        ("[cassandra]\nroot_parent = '/x/'\nparent_prefix = '/'\n", "stored form of parent"),
        ("[cassandra\n", "not valid TOML"),
        ("[cassandra]\nkeyspace = 'other'\n", "names keyspace 'ks'"),
        ("[cassandra]\nlocal_dc = 'dc2'\n", "names dc 'dc1'"),
    ],
)
def test_bad_config_is_a_usage_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = write_toml(tmp_path / "c.toml", text)
    with pytest.raises(UsageError, match=fragment):
        load_cassandra_config(parse_cassandra_url("cassandra://h/ks?dc=dc1"), path, environ={})


def _float_keys(cls: type[object] = CassandraConfig, prefix: str = "cassandra") -> list[str]:
    """Every float key of the config file, nested tables included (a new one is walked too)."""
    keys = []
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            keys += _float_keys(hint, f"{prefix}.{f.name}")  # type: ignore[arg-type]
        elif hint is float or float in get_args(hint):
            keys.append(f"{prefix}.{f.name}")
    return keys


FLOAT_KEYS = _float_keys()


def test_the_float_keys_are_walked() -> None:
    assert {"cassandra.scan_rate", "cassandra.request_timeout_s"} <= set(FLOAT_KEYS)


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+inf"])
def test_a_float_key_refuses_nan_and_infinities(tmp_path: Path, key: str, value: str) -> None:
    """TOML spells nan and inf as literals: ``scan_rate = nan`` would pass ``scan_rate < 0``."""
    table, _, name = key.rpartition(".")
    path = write_toml(tmp_path / "c.toml", f"[{table}]\n{name} = {value}\n")
    with pytest.raises(UsageError) as caught:
        load_cassandra_config(parse_cassandra_url("cassandra://h/ks"), path, environ={})
    assert str(caught.value) == f"config key {key} must be a finite number, not {float(value)}"


def test_missing_config_file_and_keyspace(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_cassandra_config(parse_cassandra_url("cassandra://h/ks"), tmp_path / "no.toml", {})
    with pytest.raises(UsageError, match="no keyspace"):
        load_cassandra_config(parse_cassandra_url("cassandra://h"), None, environ={})


def test_environment_credentials_win_over_the_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path / "c.toml", "[cassandra.auth]\nusername = 'fu'\npassword = 'fp'\n")
    url = parse_cassandra_url("cassandra://h/ks")
    env = {"DIRCLEANER_CASSANDRA_USERNAME": "eu", "DIRCLEANER_CASSANDRA_PASSWORD": "ep"}
    cfg = load_cassandra_config(url, path, environ=env)
    assert (cfg.auth.username, cfg.auth.password) == ("eu", "ep")
    assert load_cassandra_config(url, None, environ=env).auth.password == "ep"
    assert load_cassandra_config(url, path, environ={}).auth.password == "fp"


def test_repr_hides_the_password() -> None:
    cfg = CassandraConfig(auth=Auth("u", "hunter2"))
    assert "hunter2" not in repr(cfg)
    assert "hunter2" not in str(cfg)
