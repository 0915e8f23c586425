"""Metastore backends, looked up by URL scheme."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlsplit

from dircleaner.errors import StoreUrlError
from dircleaner.model import FolderRow, PartitionKey, Shard
from dircleaner.store.base import Store

__all__ = [
    "BACKENDS",
    "FolderRow",
    "PartitionKey",
    "Shard",
    "Store",
    "open_store",
    "shown_url",
    "store_url",
]

DEFAULT_STORE_URL = "sqlite:///dircleaner.db"

#: scheme → "module:Class"; imported lazily so a missing optional driver only hurts its users.
BACKENDS = MappingProxyType(
    {
        "sqlite": "dircleaner.store.sqlite:SqliteStore",
        "cassandra": "dircleaner.store.cassandra.store:CassandraStore",
    }
)

_INSTALL_HINTS = MappingProxyType({"cassandra": "pip install cassandra-driver"})


def store_url(value: str) -> str:
    """The URL of what ``--store`` was given: a URL as it is, or a plain path (no scheme) as
    the SQLite file it names, as every SQLite tool takes one."""
    if "://" in value:
        return value
    if any(value.startswith(f"{scheme}:") for scheme in BACKENDS):
        raise StoreUrlError(f"malformed store URL {value!r} (expected e.g. {DEFAULT_STORE_URL})")
    if not value.strip():
        raise StoreUrlError(f"no store named (expected a file or a URL, e.g. {DEFAULT_STORE_URL})")
    return f"sqlite:///{value}"


def shown_url(url: str) -> str:
    """``url`` as an operator should see it (an SQLite file by its absolute path, never a
    credential)."""
    return backend_class(url).shown(store_url(url))


def backend_class(url: str) -> type[Store]:
    """The Store class registered for the scheme of ``url`` (a plain path: SQLite)."""
    url = store_url(url)
    scheme = urlsplit(url).scheme
    if not scheme or "://" not in url:
        raise StoreUrlError(f"malformed store URL {url!r} (expected e.g. {DEFAULT_STORE_URL})")
    target = BACKENDS.get(scheme)
    if target is None:
        known = ", ".join(f"{name}://" for name in BACKENDS)
        raise StoreUrlError(f"unknown store scheme {scheme!r} in {url!r} (known: {known})")
    module_name, class_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = _INSTALL_HINTS.get(scheme, "reinstall dircleaner")
        raise StoreUrlError(
            f"the {scheme} backend needs a missing package ({exc}); {hint}"
        ) from exc
    cls: type[Store] = getattr(module, class_name)
    return cls


def open_store(
    url: str,
    *,
    config_path: Path | None = None,
    create: bool = False,
    force: bool = False,
    read_only: bool = False,
) -> Store:
    """Open the store at ``url`` (a plain path: an SQLite file); only the commands that load
    data may ``create`` it, ``force`` adds our tables to an SQLite file that has its own, and a
    command that only reads opens it ``read_only`` (it then writes nothing)."""
    url = store_url(url)
    store = backend_class(url).open(
        url, config_path=config_path, create=create, force=force, read_only=read_only
    )
    store.url, store.config_path = url, config_path
    return store
