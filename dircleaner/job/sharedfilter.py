"""A loaded filter that travels to other processes by reference, never by value.

A forked worker inherits the parent's copy for free. A process that receives the reference over
the network (a Dask worker) loads the generation from its own store connection on first use and
keeps it for the next tasks of the same generation (one filter per process at most), so a filter
of a billion directories (over a gigabyte) is read once per worker process, not shipped per task.
"""

from __future__ import annotations

import threading
from typing import Any

from dircleaner.filter.engines import Filter
from dircleaner.filter.stored import find_generation, load_generation
from dircleaner.pipeline.build import scope_of
from dircleaner.store.base import Store

_lock = threading.Lock()
#: (store url, generation, bucket) → the merged filter, in this process
_loaded: dict[tuple[str, str, str | None], Filter] = {}


class SharedFilter:
    """Generation ``generation`` of the filter for ``bucket`` (every bucket when None)."""

    def __init__(self, generation: str, bucket: str | None, filt: Filter | None = None) -> None:
        self.generation = generation
        self.bucket = bucket
        self._filt = filt

    def get(self, store: Store) -> Filter:
        """The filter: this process's copy, loaded from ``store`` the first time."""
        if self._filt is None:
            self._filt = _load_once(store, self.generation, self.bucket)
        return self._filt

    def __reduce__(self) -> tuple[Any, ...]:
        # Only the reference crosses a process boundary: the receiver loads the filter itself.
        return (SharedFilter, (self.generation, self.bucket))


def _load_once(store: Store, generation: str, bucket: str | None) -> Filter:
    key = (store.url, generation, bucket)
    with _lock:  # a worker's threads share one copy
        filt = _loaded.get(key)
        if filt is None:
            info = find_generation(store, generation)
            _header, filt = load_generation(store, info, scope_of(store, bucket))
            _loaded.clear()  # one generation per process: the last night's goes
            _loaded[key] = filt
        return filt
