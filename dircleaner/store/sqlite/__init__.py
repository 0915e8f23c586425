"""The embedded SQLite backend: the store (``store.py``) and its file (``schema.py``)."""

from dircleaner.store.sqlite.schema import path_from_url, read_only_here
from dircleaner.store.sqlite.store import SqliteStore

__all__ = ["SqliteStore", "path_from_url", "read_only_here"]
