"""The deletes in flight: at most ``concurrency`` requests sent at once, the next as one ends.

The deleter (``dircleaner.pipeline.delete``) makes each group's requests ready in order; the
window sends them from the requests' own callbacks, as the driver's ``execute_concurrent`` does,
holds a row or range request back while a partition deletion made ready before it is in flight
(the barrier), and queues each outcome for the deleter's thread to count. Nothing here retries,
charges or audits: that is the deleter's.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

from dircleaner.errors import TransientStoreError
from dircleaner.model import DeleteAction
from dircleaner.store.records import DeleteOutcome, DeleteRequest


@dataclass(eq=False)
class _Group:
    """A group of the plan's actions: charged, audited and lease-checked as one."""

    actions: Sequence[DeleteAction]
    #: rounds sent (the first try and the retries so far)
    rounds: int = 0
    #: the retry policy's wait before the group's next round, once a round ended with
    #: transient failures (None: no retry due)
    wait_s: float | None = None
    #: requests of the current round made ready whose outcome is not counted yet
    outstanding: int = 0
    #: the current round is still being sent (it cannot have ended yet)
    sending: bool = False
    #: the actions (by index) of the current round that failed transiently, and one such error
    failed: list[int] = field(default_factory=list)
    error: BaseException | None = None
    #: rows each rewrite (by index) copied
    copied: dict[int, int] = field(default_factory=dict)
    #: the first round's requests, built ahead (``_Rounds.prepare``)
    requests: list[DeleteRequest] | None = None
    #: its requests made ready and not sent yet (under the window's condition)
    unsent: int = 0


class _Ready(NamedTuple):
    """A request made ready: its group, the group's actions it deletes (by index), and whether
    it deletes a whole partition (the barrier's concern)."""

    group: _Group
    members: tuple[int, ...]
    request: DeleteRequest
    partition: bool


class _Outcome(NamedTuple):
    """A sent request's outcome, queued by its callback for the caller's thread to count."""

    ready: _Ready
    outcome: DeleteOutcome


class _Window:
    """At most ``limit`` delete requests in flight; the next starts as one completes.

    As in the driver's ``execute_concurrent``, a request's callback itself sends the next
    ready request (on the driver's thread), so the window never waits for the caller's thread;
    the callback queues the outcome for the caller's thread to count (``_Rounds``). Requests go
    in the order they were made ready, and a row or range request waits until no partition
    deletion made ready before it is in flight (the barrier, ``launch``).

    One way to stop: ``halt`` sets ``stop`` (the first error wins) and wakes the waiting
    caller; once it is set, nothing more is sent. Everything here but ``local`` and the
    outcomes queue is read and written under ``condition``.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.condition = threading.Condition()
        #: requests ready to go, in order
        self.ready: deque[_Ready] = deque()
        self.in_flight = 0
        #: partition deletions in flight: a row or range request waits for them (the barrier)
        self.partitions_in_flight = 0
        #: a thread sending ready requests sends those its own callbacks free (no recursion)
        self.local = threading.local()
        self.outcomes: queue.SimpleQueue[_Outcome] = queue.SimpleQueue()
        #: the error that stops the run (nothing more is sent once it is set)
        self.stop: BaseException | None = None

    def make_ready(self, ready: _Ready) -> None:
        with self.condition:
            self.ready.append(ready)
            ready.group.unsent += 1

    def halt(self, error: BaseException) -> None:
        """Stop sending, ``error`` the reason unless one came first; wake the caller."""
        with self.condition:
            self._halt(error)

    def _halt(self, error: BaseException) -> None:  # under the condition
        if self.stop is None:
            self.stop = error
        self.condition.notify_all()

    def wait_sent(self, group: _Group, timeout: float) -> bool:
        """Whether every request of ``group`` has been sent (or the run stops), after waiting
        up to ``timeout`` for it."""
        with self.condition:
            if group.unsent and self.stop is None:
                self.condition.wait(timeout)
            return not group.unsent or self.stop is not None

    def drop_ready(self) -> None:
        """Nothing made ready is sent any more: each dropped request's outcome is no longer
        awaited."""
        with self.condition:
            for ready in self.ready:
                ready.group.unsent -= 1
                ready.group.outstanding -= 1
            self.ready.clear()
            self.condition.notify_all()

    def launch(self) -> None:
        """Send ready requests, in order, while the window has room (any thread).

        The barrier: a row or range request is not sent while a partition deletion made ready
        before it is in flight (it waits at the head of the queue). A directory's partition
        is deleted only after its children's partitions (the plan's order); the row naming
        it in its parent's partition goes after them too, so a run killed at any point never
        leaves a child partition that the walk from its parent's rows can no longer reach.
        """
        local = self.local
        if getattr(local, "launching", False):
            return  # a synchronous send's callback: the loop below goes on
        local.launching = True
        try:
            while True:
                with self.condition:
                    if self.stop is not None or not self.ready or self.in_flight >= self.limit:
                        return
                    ready = self.ready[0]
                    if not ready.partition and self.partitions_in_flight:
                        return  # the last partition deletion's callback launches it
                    self.ready.popleft()
                    self.in_flight += 1
                    self.partitions_in_flight += ready.partition
                    ready.group.unsent -= 1
                    if not ready.group.unsent:
                        self.condition.notify_all()
                done = partial(self._done, ready)
                try:
                    ready.request.send(done)
                except BaseException as exc:  # not sent (an interrupt, a client error)
                    done([exc] * len(ready.members))
        finally:
            local.launching = False

    def _done(self, ready: _Ready, outcome: DeleteOutcome) -> None:
        """A request's callback (any thread): the next request goes, the outcome is queued."""
        hard = next(
            (e for e in outcome if e is not None and not isinstance(e, TransientStoreError)),
            None,
        )
        if hard is not None:  # queued before the halt shows, so the caller that sees it counts it
            self.outcomes.put(_Outcome(ready, outcome))
        with self.condition:
            self.in_flight -= 1
            self.partitions_in_flight -= ready.partition
            if hard is not None:
                self._halt(hard)
        self.launch()
        if hard is None:
            self.outcomes.put(_Outcome(ready, outcome))
