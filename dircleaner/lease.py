"""One run at a time: a lease in the store, renewed by a heartbeat, expiring by itself.

A run or clean takes the lease before it deletes anything. It is an entry of the store's
key-value table, taken with an insert-if-absent that expires after its TTL and renewed with a
compare-and-set on its owner (Cassandra: lightweight transactions, ``IF NOT EXISTS … USING TTL``
and ``UPDATE … USING TTL … IF value = owner``; SQLite: one transaction, with an expiry time;
``dircleaner.store.bookkeeping``). A second run finds it held and refuses (``LeaseHeld``,
exit 3). A run killed with ``kill -9`` stops renewing, so its lease expires after its TTL and
the next run proceeds with no manual step;
on the same host, the next run sees at once that the holder's process is gone (its pid no longer
exists, or now belongs to a process started later) and takes the lease over with a
compare-and-set on the dead holder's id, so that two runs never both take it.
A process that lost its lease (paused past the TTL, partitioned away) stops deleting before its
next group of deletes: the deleter asks ``lease_still_held`` with its own store connection.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dircleaner.errors import DircleanerError, LeaseHeld, LeaseLost
from dircleaner.store.base import Store
from dircleaner.timeutil import now_us

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_LEASE_TTL_S",
    "Lease",
    "LeaseHeld",
    "LeaseLost",
    "describe_owner",
    "holder_is_gone",
    "lease_check",
    "lease_name",
    "lease_still_held",
]

DEFAULT_LEASE_TTL_S = 60.0
#: the heartbeat renews this many times per TTL (two renewals may fail before the lease lapses)
RENEWALS_PER_TTL = 3
#: a deleter asks the store at most this often whether its run still holds the lease
CHECK_INTERVAL_S = 1.0
#: looks at the holder of a lease that keeps changing hands before giving up (LeaseHeld)
_TAKEOVER_ATTEMPTS = 3

#: Held by the heartbeat through each renewal, and by a fork (``os.register_at_fork``): a
#: process forked while another thread is inside a SQLite write transaction inherits SQLite's
#: in-process lock bookkeeping ("this process holds the write lock") without the lock itself,
#: and every write of the child then waits out the busy timeout and fails with "database is
#: locked". So the local workers are never forked in the middle of a renewal.
_RENEWING = threading.Lock()
os.register_at_fork(
    before=_RENEWING.acquire,
    after_in_parent=_RENEWING.release,
    after_in_child=_RENEWING.release,
)


def lease_name(store: Store) -> str:
    """The lease that guards one metastore (its folders and objects tables)."""
    return f"run|{store.scope_id()}"


def new_owner() -> str:
    """A unique owner id that also says who holds the lease: host, pid, since when, and what
    tells this process from a later one with the same pid (where the system says)."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_us() / 1e6))
    owner: dict[str, object] = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "since": since,
        "id": uuid.uuid4().hex,
    }
    here = _this_system()
    started = _started(os.getpid())
    if here is not None and started is not None:
        owner.update(boot=here[0], pidns=here[1], started=started)
    return json.dumps(owner, sort_keys=True)


def _this_system() -> tuple[str, str] | None:
    """(boot id, pid namespace): where a pid names the same process; None where unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as stream:
            boot = stream.read().strip()
        return boot, os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot); None if there is no such live
    process (a zombie is dead: it only waits for its parent to read its exit status)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stream:
            stat = stream.read()
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces and parentheses: split after it.
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def holder_is_gone(holder: str) -> bool:
    """Whether the lease ``holder`` is a process of this host (same boot, same pid namespace)
    that no longer runs: its pid is free, or belongs to a process started at another time.
    A holder elsewhere, or not described enough to tell, is never judged gone (its lease
    expires by its TTL)."""
    return _runs_here(holder) is False


def _runs_here(holder: str) -> bool | None:
    """Whether the process ``holder`` names still runs, where it is one of this host's (same
    boot, same pid namespace); None where that cannot be told."""
    try:
        data = json.loads(holder)
        recorded = (str(data["host"]), str(data["boot"]), str(data["pidns"]))
        pid, started = int(data["pid"]), int(data["started"])
    except (ValueError, KeyError, TypeError):
        return None
    here = _this_system()
    if here is None or recorded != (socket.gethostname(), *here):
        return None
    return _started(pid) == started


def describe_owner(owner: str) -> str:
    """``host H, pid P, since S`` from an owner id (the raw id if it is not one of ours)."""
    try:
        data = json.loads(owner)
        return f"host {data['host']}, pid {data['pid']}, since {data['since']}"
    except (ValueError, KeyError, TypeError):
        return repr(owner)


def lease_still_held(store: Store, owner: str) -> bool:
    """Whether ``owner`` holds the store's lease now (any process, with its own connection)."""
    return store.lease_holder(lease_name(store)) == owner


def lease_check(store: Store, owner: str | None) -> Callable[[], None]:
    """A hook for the delete path: raises LeaseLost once ``owner`` no longer holds the lease.

    Asks the store at most once per ``CHECK_INTERVAL_S``; a process paused for longer asks
    before its very next group of deletes. No owner: no check (a library caller without a lease).
    """
    if owner is None:
        return lambda: None
    last = -float("inf")

    def check() -> None:
        nonlocal last
        now = time.monotonic()
        if now - last < CHECK_INTERVAL_S:
            return
        if not lease_still_held(store, owner):
            raise LeaseLost(
                f"this run lost the store's lease ({describe_owner(owner)}); stopped deleting"
            )
        last = time.monotonic()

    return check


class Lease:
    """The store's run lease, held by ``owner``. As a context manager, a heartbeat thread
    renews it every TTL / ``RENEWALS_PER_TTL`` and it is released on exit."""

    def __init__(self, store: Store, owner: str, ttl_s: float) -> None:
        self.store = store
        self.owner = owner
        self.ttl_s = ttl_s
        self.name = lease_name(store)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: set by the heartbeat when a renewal finds the lease gone
        self.lost = False

    @classmethod
    def acquire(cls, store: Store, *, ttl_s: float = DEFAULT_LEASE_TTL_S) -> Lease:
        """Take the store's lease, or raise LeaseHeld naming the holder. A holder on this host
        whose process is gone (``kill -9``) loses it at once, said in a warning."""
        if ttl_s <= 0:
            raise ValueError("the lease TTL must be > 0")
        owner = new_owner()
        name = lease_name(store)
        holder = ""
        for _attempt in range(_TAKEOVER_ATTEMPTS):
            found = store.try_acquire_lease(name, owner, ttl_s)
            if found is None:
                return cls(store, owner, ttl_s)
            holder = found
            if not holder_is_gone(holder):
                break
            # Only if the dead holder still has it: a run that took it meanwhile keeps it.
            if store.replace_lease(name, holder, owner, ttl_s):
                log.warning(
                    "took over the store's lease from a run that is gone (%s): no such"
                    " process runs on this host any more",
                    describe_owner(holder),
                )
                return cls(store, owner, ttl_s)
        until = (
            "that process still runs on this host"
            if _runs_here(holder)
            else f"it expires {ttl_s:g}s after that run stops renewing it"
        )
        raise LeaseHeld(f"another run holds this store's lease ({describe_owner(holder)}); {until}")

    def check(self) -> None:
        """Raise LeaseLost unless the store still shows us as the holder."""
        if self.lost or not lease_still_held(self.store, self.owner):
            self.lost = True
            raise LeaseLost(f"this run lost the store's lease ({describe_owner(self.owner)})")

    def renew(self) -> bool:
        """Extend the lease by its TTL; False (and ``lost``) when it was no longer ours."""
        ok = self.store.renew_lease(self.name, self.owner, self.ttl_s)
        if not ok:
            self.lost = True
        return ok

    def release(self) -> None:
        """Stop the heartbeat and give the lease up (left alone if another run holds it)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        try:
            self.store.release_lease(self.name, self.owner)
        except DircleanerError as exc:
            # Best effort: a store that cannot take the release (its replicas down, the very
            # failure that may have stopped the run) lets the lease expire after its TTL instead,
            # and the run's own error is the one to report.
            log.warning("could not release the store's lease (it expires by itself): %s", exc)

    def __enter__(self) -> Lease:
        self._thread = threading.Thread(
            target=self._heartbeat, name="dircleaner-lease", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def _heartbeat(self) -> None:
        interval = self.ttl_s / RENEWALS_PER_TTL
        while not self._stop.wait(interval):
            try:
                with _RENEWING:
                    renewed = self.renew()
                if not renewed:
                    return  # lost: the deleters find out through lease_still_held
            except Exception:  # the beat must outlive one failed renewal
                continue  # retried at the next beat, still within the TTL


@contextmanager
def deleting_under_lease(
    store: Store, *, dry_run: bool, ttl_s: float, held: str | None = None
) -> Iterator[str | None]:
    """The lease owner a run deletes under: ``held``, where its caller keeps that lease alive;
    none for a dry run (it deletes nothing); else the store's lease, taken here (LeaseHeld
    when another run has it) and let go as the block ends."""
    if dry_run or held is not None:
        yield held
        return
    with Lease.acquire(store, ttl_s=ttl_s) as lease:
        yield lease.owner
