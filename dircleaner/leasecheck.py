"""The one check a delete task makes before each batch: does the run that sent it still hold
its lease? Workers on other hosts outlive a killed client; this is how they stop.

PLACEHOLDER until the run lease (``dircleaner.lease``: ``Lease.acquire(store)``, ``lease.owner``,
``lease_still_held(store, owner)``) is merged: ``lease_still_held_placeholder`` then becomes
``lease_still_held`` and ``hold_placeholder_lease`` becomes ``Lease.acquire``. Until then the
client heartbeats a state key under its owner id and a task deems the lease gone once that
heartbeat is older than the time-to-live the client wrote beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
from collections.abc import Callable, Iterator

from dircleaner.errors import DircleanerError
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.timeutil import now_us

#: how long the placeholder lease outlives its last heartbeat (env override, for tests)
PLACEHOLDER_TTL_S = float(os.environ.get("DIRCLEANER_LEASE_TTL_S", "10"))


class LeaseLost(DircleanerError):
    """The run's lease is gone (its client died or another run took over): deletes stopped."""


def _key(owner: str) -> str:
    return f"lease-heartbeat|{owner}"


def lease_still_held_placeholder(store: Store, owner: str) -> bool:
    """PLACEHOLDER for ``dircleaner.lease.lease_still_held``: the owner's heartbeat is fresh."""
    raw = store.get_state(_key(owner))
    if raw is None:
        return False
    try:
        beat = json.loads(raw)
        return now_us() - int(beat["at_us"]) < float(beat["ttl_s"]) * 1e6
    except (ValueError, KeyError, TypeError):
        return False


def lease_guard(store: Store, owner: str | None) -> Callable[[], None]:
    """What a delete task calls before each batch, on its own store connection: raises
    ``LeaseLost`` once the run's lease is gone. A run without a lease owner checks nothing."""

    def check() -> None:
        if owner is not None and not lease_still_held_placeholder(store, owner):
            raise LeaseLost(f"the run's lease ({owner}) is gone: deletes stopped")

    return check


@contextlib.contextmanager
def hold_placeholder_lease(
    store: Store, ttl_s: float = PLACEHOLDER_TTL_S
) -> Iterator[str]:
    """PLACEHOLDER for ``Lease.acquire``: heartbeat a fresh owner id until the block ends.

    The heartbeat runs on a connection of its own (a store connection is not shared across
    threads), at a third of the time-to-live.
    """
    owner = f"run-{secrets.token_hex(8)}"
    beats = open_store(store.url, config_path=store.config_path)
    stop = threading.Event()

    def beat() -> None:
        beats.put_state(_key(owner), json.dumps({"at_us": now_us(), "ttl_s": ttl_s}))

    def keep_beating() -> None:
        while not stop.wait(ttl_s / 3):
            with contextlib.suppress(DircleanerError):
                beat()

    beat()
    thread = threading.Thread(target=keep_beating, name="lease-heartbeat", daemon=True)
    thread.start()
    try:
        yield owner
    finally:
        stop.set()
        thread.join()
        with contextlib.suppress(DircleanerError):
            beats.put_state(_key(owner), json.dumps({"at_us": 0, "ttl_s": 0}))  # released
        beats.close()
