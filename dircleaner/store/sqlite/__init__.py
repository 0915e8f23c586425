"""The embedded SQLite backend: the store (``store.py``) and its file (``schema.py``)."""

from dircleaner.store.sqlite.schema import path_from_url
from dircleaner.store.sqlite.store import SqliteStore

__all__ = ["SqliteStore", "path_from_url"]
