"""Executing a deletion plan: groups lease-checked, charged and audited, then sent; backoff.

The store turns actions into requests (``Store.delete_requests``); this module sends them through
a window of at most ``concurrency`` in flight (``deletewindow``), starting the next as one
completes, as the driver's ``execute_concurrent`` does, at the adaptive rate (``deleterate``). It
is the only place that retries deletes: the store reports their transient failures, and a
group's failed actions go again as one round, after the wait and within the attempts of the one
retry policy (``dircleaner.retry``); each round also steers the adaptive rate (halved on
overload, raised while healthy). Deletes are issued at timestamp T (the build's start minus
``--min-age``): a tombstone shadows only writes at or before T, so a directory that received an
object after T keeps its entry whatever this module does."""

from __future__ import annotations

import queue
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import NoReturn, Protocol

from dircleaner.audit import AuditLog
from dircleaner.deadline import Deadline
from dircleaner.errors import (
    DircleanerError,
    RewriteUnsupported,
    StoreUnavailable,
    TransientStoreError,
)
from dircleaner.model import ActionKind, DeleteAction, KindTally
from dircleaner.pipeline.deleterate import AdaptiveRate, ThrottleConfig
from dircleaner.pipeline.deletewindow import _Group, _Ready, _Window
from dircleaner.progress import Progress, no_progress
from dircleaner.store.base import Store
from dircleaner.workers import interrupt

# The deleter's names, and the throttle's settings where the tests and the benches import them.
__all__ = [
    "DeleteFailed",
    "DeleteStats",
    "PlannedActions",
    "PlannedDeletes",
    "ThrottleConfig",
    "execute_plan",
]

#: the actions that end with a partition deletion (a rewrite's, after its copy)
_WHOLE_PARTITION = frozenset({ActionKind.PARTITION, ActionKind.REWRITE})
#: the caller's thread, waiting for a group to be sent, looks again at least this often
WAKE_S = 0.5


class DeleteFailed(DircleanerError):
    """Deletes failed with a non-retryable error; the run stopped."""


class PlannedDeletes(Protocol):
    """What the deleter needs of a plan: its actions in order (read once), and the directory
    entries they cover (a ``DeletionPlan``, or a plan read back from a spill file)."""

    @property
    def actions(self) -> Iterable[DeleteAction]: ...

    @property
    def directories(self) -> int: ...


@dataclass(frozen=True)
class PlannedActions:
    """Actions to delete, streamed, and the directory entries they cover."""

    actions: Iterable[DeleteAction]
    directories: int


@dataclass
class DeleteStats:
    """What the deleter did."""

    #: the actions whose delete was acknowledged, by kind (a rewrite: a live partition's rows
    #: copied at T+1, then the partition deleted at T)
    deletes: KindTally = field(default_factory=KindTally)
    rows_rewritten: int = 0
    #: directory entries the acknowledged delete requests covered (requested, not necessarily
    #: removed: an entry written after the delete timestamp survives its delete)
    directories: int = 0
    retries: int = 0
    #: the rate the adaptive throttle ended at: the total it made with the slices sharing
    #: ``--rate`` (0: unlimited)
    final_rate: float = 0.0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    #: folder rows the deletes removed, where the store can tell (None: blind deletes); the
    #: rest of ``directories`` were written after the delete timestamp and kept
    rows_removed: int | None = None
    #: the deletes stopped at the night's deadline, the rest of the plan not sent
    stopped_at_deadline: bool = False

    @property
    def kept_written_after_t(self) -> int | None:
        """Entries deletes were requested for that the store kept, being written after the
        delete timestamp (None where the store cannot tell)."""
        return None if self.rows_removed is None else self.directories - self.rows_removed


def execute_plan(
    store: Store,
    plan: PlannedDeletes,
    timestamp_us: int,
    throttle: ThrottleConfig,
    audit: AuditLog | None = None,
    progress: Progress = no_progress,
    sleep: Callable[[float], None] = interrupt.wait,
    rng: random.Random | None = None,
    keep_going: Callable[[], None] = lambda: None,
    charge: Callable[[Sequence[DeleteAction]], None] | None = None,
    deadline: Deadline | None = None,
) -> DeleteStats:
    """Issue the plan's deletes in order through a sliding window of at most ``concurrency``
    requests in flight, throttled, retrying transient failures with backoff.

    The plan goes in groups of ``concurrency × deletes_per_request`` actions (a window's worth
    of requests). Before any request of a group is sent, ``keep_going`` runs (the run lease's
    check: it stops the deletes by raising, so a run that lost its lease deletes nothing more),
    ``charge`` gets the group (the tombstone ledger) and the audit log records it. The next
    group is charged and audited as soon as every request of the one before has been sent,
    while those are still in flight, so the window never waits for a group's slowest request:
    a run killed at any point has charged at most one group it did not send (over-counted,
    never under-counted), and each charge expires with, not before, the tombstones it pays for.

    Once ``deadline`` is reached no group is sent any more (the one waiting for its rate is
    neither lease-checked, charged, audited nor sent): what was sent ends, and the stats say
    the deletes stopped at the deadline.
    """
    with throttle.shared_by.joined():  # --rate is shared by the slices deleting now
        return _execute(
            store,
            plan,
            timestamp_us,
            throttle,
            audit,
            progress,
            sleep,
            rng,
            keep_going,
            charge,
            deadline,
        )


def _execute(
    store: Store,
    plan: PlannedDeletes,
    timestamp_us: int,
    throttle: ThrottleConfig,
    audit: AuditLog | None,
    progress: Progress,
    sleep: Callable[[float], None],
    rng: random.Random | None,
    keep_going: Callable[[], None],
    charge: Callable[[Sequence[DeleteAction]], None] | None,
    deadline: Deadline | None,
) -> DeleteStats:
    started = time.monotonic()
    stats = DeleteStats()
    removed_before = store.rows_removed
    rounds = _Rounds(
        store,
        timestamp_us,
        throttle,
        stats,
        _CleanProgress(progress, plan.directories),
        sleep,
        rng or random.Random(),
    )
    size = max(1, throttle.concurrency * max(1, store.traits.deletes_per_request))
    last: _Group | None = None
    try:
        for chunk in _chunks(plan.actions, size):
            group = _Group(chunk)
            rounds.prepare(group)
            # The group before all sent (the caller's thread sleeps meanwhile: the callbacks
            # send), what has come back so far counted (and the retries it asks for sent): a
            # hard failure stops the run before the next group is charged, audited or sent, and
            # a killed run has charged at most one group it did not send.
            rounds.wait_sent(last)
            rounds.settle()
            # The group's share of --rate is waited for before its lease check, so the check is
            # the last thing before its requests go: a run that lost its lease (its client
            # gone) sends nothing it checked before that.
            rounds.rate.acquire(len(chunk))
            if deadline is not None and deadline.reached():
                stats.stopped_at_deadline = True
                break
            keep_going()
            if charge is not None:
                charge(chunk)
            if audit is not None:
                # Written ahead: nothing is ever deleted without a record, and a run killed
                # mid-group leaves at worst a few records of deletes that never ran (restoring
                # them is a no-op).
                audit.write_ahead(chunk)
            rounds.send(group)
            last = group
        rounds.finish()
    except BaseException:
        # A signal, the lease lost, the ledger or the audit log failing: what was made ready
        # (charged and audited) goes and ends first, nothing else is sent.
        rounds.abandon()
        raise
    if removed_before is not None and store.rows_removed is not None:
        stats.rows_removed = store.rows_removed - removed_before
    stats.final_rate = rounds.rate.total_rate
    throttle.shared_by.ended_at(rounds.rate.fraction)
    stats.seconds = time.monotonic() - started
    return stats


class _CleanProgress:
    """The ``clean`` phase's progress: the directories of the groups done so far."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0

    def group_done(self, group: _Group) -> None:
        # Directories, as the summary counts them (a partition or range delete takes several).
        self.done += sum(len(action.rows) for action in group.actions)
        self.progress("clean", self.done, self.total)


class _Rounds:
    """The caller's side of the window: each group's rounds made ready, their outcomes counted.

    The caller's thread makes requests ready (``send``: in order, each after its share of the
    rate) and counts the outcomes the callbacks queue (``_take``) in bulk, between groups: it
    sleeps while the callbacks send, woken when a group's last request goes (``wait_sent``),
    not once per request. A group's round ends when its last request's outcome is counted; a
    round with transient failures sends those actions again, as one round, after the retry
    policy's wait (the rate halved once per such round, raised once per round without), until
    the policy's attempts are spent. A request that fails for good halts the window. With a
    synchronous store every outcome is there before ``send`` returns, and a group's rounds run
    one after the other, as batches would.
    """

    def __init__(
        self,
        store: Store,
        timestamp_us: int,
        throttle: ThrottleConfig,
        stats: DeleteStats,
        progress: _CleanProgress,
        sleep: Callable[[float], None],
        rng: random.Random,
    ) -> None:
        self.store, self.timestamp_us, self.stats = store, timestamp_us, stats
        self.window = _Window(throttle.concurrency)
        self.rate = AdaptiveRate(throttle, sleep=sleep)
        self.retry = throttle.retry_policy
        self.progress, self.sleep, self.rng = progress, sleep, rng
        #: the groups sent and not done: a round in flight, or a retry due (a group is moved
        #: to the end as its retry falls due, so retries go in the order their rounds ended)
        self.groups: list[_Group] = []

    @property
    def pending(self) -> int:
        """Requests made ready whose outcome is not counted yet."""
        return sum(group.outstanding for group in self.groups)

    def prepare(self, group: _Group) -> None:
        """Build the group's requests ahead (no side effect: nothing is sent), unless a
        rewrite's copy must be acknowledged first."""
        if not any(action.kind is ActionKind.REWRITE for action in group.actions):
            group.requests = self.store.delete_requests(group.actions, self.timestamp_us)

    def send(self, group: _Group) -> None:
        """Make the group's first round ready and start what the window has room for; its
        share of the rate was waited for before its lease check."""
        self.groups.append(group)
        self._send_round(group, range(len(group.actions)), rate_waited=True)

    def wait_sent(self, group: _Group | None) -> None:
        """Until every request of ``group``, and so of each group before it, has been sent
        (or the run stops). The caller's thread sleeps meanwhile: the callbacks send."""
        while group is not None:
            # What came back is counted at least every WAKE_S: the progress hook, where a
            # signal stops the run, runs as groups end, not only once this one is all sent.
            self._drain()
            if self.window.wait_sent(group, WAKE_S):
                return

    def settle(self) -> None:
        """Count every outcome that came back and send the retries due; raise what stops."""
        while True:
            self._drain()
            if self.window.stop is not None:
                self._wind_down(send_ready=False)
                self._raise_stop()
            group = next((group for group in self.groups if group.wait_s is not None), None)
            if group is None or group.wait_s is None:
                return
            self.sleep(group.wait_s)
            group.wait_s = None
            self._send_round(group, sorted(group.failed))

    def finish(self) -> None:
        """Wait for every request, the retries included."""
        while True:
            self.settle()
            if not self.pending:
                return
            self._take(block=True)

    def abandon(self) -> None:
        """The run stops (a signal, the lease, the ledger or the audit log): the requests made
        ready go (their groups were lease-checked, charged and audited), no retry; wait for
        them all, whatever their outcome. Interrupted again meanwhile, nothing more is sent
        (what is in flight may still land: it was charged and audited)."""
        self.progress.progress = no_progress  # it raises again once a signal has been asked for
        try:
            if self.window.stop is None:
                self.window.launch()
            self._wind_down(send_ready=True)
        except BaseException as exc:
            self.window.halt(exc)
            self.window.drop_ready()
            raise

    # -- sending ----------------------------------------------------------------------------------
    def _send_round(
        self, group: _Group, indexes: Iterable[int], *, rate_waited: bool = False
    ) -> None:
        """Send one round of ``group``: its first (``rate_waited``: its share of the rate
        waited for already) or a retry round, each retried request after its share."""
        group.rounds += 1
        group.failed, group.error, group.sending = [], None, True
        sendable = self._copy_rewrites(group, indexes)
        if sendable and self.window.stop is None:
            every_action = len(sendable) == len(group.actions)  # request members: group indexes
            requests = group.requests if every_action and group.requests is not None else None
            if requests is None:
                actions = [group.actions[i] for i in sendable]
                requests = self.store.delete_requests(actions, self.timestamp_us)
            group.requests = None
            launch_each = bool(self.rate.max_rate) and not rate_waited
            for request in requests:
                members = (
                    request.members if every_action else tuple(sendable[m] for m in request.members)
                )
                if not rate_waited:
                    self.rate.acquire(len(members))
                if self.window.stop is not None:
                    break
                partition = group.actions[members[0]].kind in _WHOLE_PARTITION
                group.outstanding += 1
                self.window.make_ready(_Ready(group, members, request, partition))
                if launch_each:
                    self.window.launch()
            self.window.launch()
        group.sending = False
        self._round_may_end(group)

    def _copy_rewrites(self, group: _Group, indexes: Iterable[int]) -> list[int]:
        """The round's rewrites copy their rows at T+1 first; only a partition whose copy was
        acknowledged is then deleted at T. The round's actions that may be deleted, by index."""
        sendable: list[int] = []
        for index in indexes:
            action = group.actions[index]
            if action.kind is ActionKind.REWRITE:
                names = {row.name for row in action.rows}
                try:
                    group.copied[index] = self.store.rewrite_folder_partition(
                        action.partition, names, self.timestamp_us + 1
                    )
                except DircleanerError as exc:
                    self._failed(group, index, exc)
                    continue
            sendable.append(index)
        return sendable

    # -- counting ---------------------------------------------------------------------------------
    def _drain(self) -> None:
        while self._take(block=False):
            pass

    def _take(self, block: bool) -> bool:
        """Count one request's outcome (waiting for one if ``block``); False if none came."""
        try:
            (group, members, _, _), outcome = self.window.outcomes.get(block=block)
        except queue.Empty:
            return False
        group.outstanding -= 1
        for index, error in zip(members, outcome, strict=True):
            if error is None:
                _count(self.stats, group.actions[index])
                if group.copied:
                    self.stats.rows_rewritten += group.copied.get(index, 0)
            else:
                self._failed(group, index, error)
        self._round_may_end(group)
        return True

    def _failed(self, group: _Group, index: int, error: BaseException) -> None:
        if isinstance(error, TransientStoreError):
            group.failed.append(index)
            group.error = group.error or error
            return
        # The stop's error, counted once (its callback halted the window already).
        self.window.halt(error)
        if error is self.window.stop and not self.stats.failures:
            self.stats.failures.append(str(error))

    def _round_may_end(self, group: _Group) -> None:
        if group.sending or group.outstanding or self.window.stop is not None:
            return
        self.groups.remove(group)
        if not group.failed:
            self.rate.on_success()
            self.progress.group_done(group)
            return
        self.rate.on_overload()
        wait = self.retry.next_wait(group.rounds, self.rng)
        if wait is None:
            self.window.halt(
                StoreUnavailable(
                    f"{len(group.failed)} deletes still failing after {self.retry.attempts - 1}"
                    f" retries: {group.error}"
                )
            )
            return
        self.stats.retries += len(group.failed)
        group.wait_s = wait
        self.groups.append(group)

    # -- stopping ---------------------------------------------------------------------------------
    def _wind_down(self, send_ready: bool) -> None:
        """Wait for what is in flight (its deletes count); what is not sent yet is dropped, or
        with ``send_ready`` sent first, unless an error stops the run."""
        while True:
            if self.window.stop is not None or not send_ready:
                self.window.drop_ready()
            if not self.pending:
                return
            self._take(block=True)

    def _raise_stop(self) -> NoReturn:
        error = self.window.stop
        assert error is not None
        if isinstance(error, RewriteUnsupported | StoreUnavailable) or not isinstance(
            error, Exception
        ):
            raise error
        raise DeleteFailed(f"delete failed: {error}")


def _count(stats: DeleteStats, action: DeleteAction) -> None:
    stats.deletes = stats.deletes.plus(action.kind)
    stats.directories += len(action.rows)


def _chunks(items: Iterable[DeleteAction], size: int) -> Iterator[Sequence[DeleteAction]]:
    actions = iter(items)
    while chunk := list(islice(actions, size)):
        yield chunk
