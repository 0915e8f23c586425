"""Running one task per shard in worker processes, so every core scans its slice of the ring.

Workers are forked: the task (and anything it closes over, such as a loaded filter) is inherited
copy-on-write rather than pickled, and each worker opens its own store connection. Only results
travel back.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from dircleaner.progress import Progress, no_progress
from dircleaner.store import Store, open_store
from dircleaner.store.base import Shard

R = TypeVar("R")
ShardTask = Callable[[Store, Shard, Progress], R]

# Set in the parent just before forking; read by the workers.
_TASK: Callable[[Store, Shard, Progress], Any] | None = None
_STORE_URL = ""
_CONFIG_PATH: Any = None
_COUNTER: Any = None


def _worker(shard: Shard) -> Any:
    if _TASK is None:  # pragma: no cover - only reachable if forked without set-up
        raise RuntimeError("worker started without a task")
    seen = 0

    def report(phase: str, done: int, total: int | None) -> None:
        nonlocal seen
        with _COUNTER.get_lock():
            _COUNTER.value += done - seen
        seen = done

    store = open_store(_STORE_URL, config_path=_CONFIG_PATH)
    try:
        return _TASK(store, shard, report)
    finally:
        store.close()


def map_shards(
    store: Store,
    shards: Sequence[Shard],
    task: ShardTask[R],
    phase: str,
    progress: Progress = no_progress,
) -> list[R]:
    """``task(store, shard, progress)`` for every shard, in shard order; forked when several."""
    if len(shards) == 1:
        return [task(store, shards[0], progress)]
    global _TASK, _STORE_URL, _CONFIG_PATH, _COUNTER
    context = multiprocessing.get_context("fork")
    _TASK, _STORE_URL, _CONFIG_PATH = task, store.url, store.config_path
    _COUNTER = context.Value("q", 0)
    try:
        with context.Pool(len(shards)) as pool:
            pending = pool.map_async(_worker, shards)
            while not pending.ready():
                progress(phase, int(_COUNTER.value), None)
                pending.wait(0.5)  # returns as soon as the workers are done
            results: list[R] = pending.get()
    finally:
        _TASK = _COUNTER = None
    return results
