"""Executing a deletion plan: rate limit, bounded concurrency, backoff, and the audit log.

The only place that retries deletes: the store returns their transient failures, and this
module re-sends them in rounds of its own loop, because each round also steers the adaptive
rate (halved on overload, raised while healthy). The waits between rounds come from the one
retry policy (``dircleaner.retry``) the store's other requests use. Deletes are issued at
timestamp T (the build's start minus ``--min-age``): a tombstone shadows only writes at or before
T, so a directory that received an object after T keeps its entry whatever this module does.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from dircleaner.audit import AuditLog
from dircleaner.errors import (
    DircleanerError,
    RewriteUnsupported,
    StoreUnavailable,
    TransientStoreError,
    UsageError,
)
from dircleaner.model import ActionKind, DeleteAction
from dircleaner.pipeline.plan import DeletionPlan
from dircleaner.progress import Progress, no_progress
from dircleaner.retry import RetryPolicy
from dircleaner.store.base import Store


class DeleteFailed(DircleanerError):
    """Deletes failed with a non-retryable error; the run stopped."""


@dataclass(frozen=True)
class ThrottleConfig:
    """How fast and how wide deletes go."""

    #: deletes per second at most (0 = unlimited)
    rate: float = 1000.0
    #: deletes in flight at once (also the batch handed to the store)
    concurrency: int = 32
    #: the adaptive rate starts at this fraction of ``rate`` and ramps up while healthy
    start_fraction: float = 0.25
    max_retries: int = 6
    base_backoff_s: float = 0.05
    max_backoff_s: float = 5.0

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise UsageError("--rate must be >= 0")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be >= 1")

    @property
    def retry_policy(self) -> RetryPolicy:
        """The first try and ``max_retries`` more, waits between ``base_backoff_s`` and the cap."""
        return RetryPolicy(self.max_retries + 1, self.base_backoff_s, self.max_backoff_s)


class AdaptiveRate:
    """AIMD rate control: add while healthy, halve on overload; a token bucket enforces it."""

    def __init__(
        self,
        config: ThrottleConfig,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.max_rate = config.rate
        self.rate = config.rate * config.start_fraction if config.rate else 0.0
        self.floor = config.rate / 100 if config.rate else 0.0
        self._clock = clock
        self._sleep = sleep
        self._tokens = 0.0
        self._last = clock()

    def acquire(self, n: int) -> None:
        """Block until ``n`` deletes may start."""
        if not self.max_rate:
            return
        while True:
            now = self._clock()
            burst = max(self.rate, 1.0)
            self._tokens = min(burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            # A hair of tolerance: float rounding must not leave a wait below clock resolution.
            if self._tokens >= n - 1e-9 or (n > burst and self._tokens >= burst - 1e-9):
                self._tokens -= n
                return
            self._sleep((min(n, burst) - self._tokens) / self.rate)

    def on_success(self) -> None:
        if self.max_rate:
            self.rate = min(self.max_rate, self.rate + self.max_rate / 20)

    def on_overload(self) -> None:
        if self.max_rate:
            self.rate = max(self.floor, self.rate / 2)


@dataclass
class DeleteStats:
    """What the deleter did."""

    partition_deletes: int = 0
    row_deletes: int = 0
    range_deletes: int = 0
    #: live partitions rewritten (rows copied at T+1, then the partition deleted at T)
    rewrites: int = 0
    rows_rewritten: int = 0
    #: directory entries the acknowledged delete requests covered (requested, not necessarily
    #: removed: an entry written after the delete timestamp survives its delete)
    directories: int = 0
    retries: int = 0
    final_rate: float = 0.0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    #: folder rows the deletes removed, where the store can tell (None: blind deletes); the
    #: rest of ``directories`` were written after the delete timestamp and kept
    rows_removed: int | None = None

    @property
    def kept_written_after_t(self) -> int | None:
        """Entries deletes were requested for that the store kept, being written after the
        delete timestamp (None where the store cannot tell)."""
        return None if self.rows_removed is None else self.directories - self.rows_removed


def execute_plan(
    store: Store,
    plan: DeletionPlan,
    timestamp_us: int,
    throttle: ThrottleConfig,
    audit: AuditLog | None = None,
    progress: Progress = no_progress,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    keep_going: Callable[[], None] = lambda: None,
    charge: Callable[[Sequence[DeleteAction]], None] | None = None,
) -> DeleteStats:
    """Issue the plan's deletes in order, throttled, retrying transient failures with backoff.

    ``keep_going`` runs before each batch and stops the deletes by raising (the run lease's
    check: a run that lost its lease deletes nothing more). ``charge`` gets each batch before
    any of its actions is issued (the tombstone ledger). Batch by batch, so a run killed
    mid-batch has charged at most one batch it did not delete (the next run of the grace period
    then has that much less budget: over-counted, never under-counted), and each charge expires
    with, not before, the tombstones it pays for.
    """
    started = time.monotonic()
    stats = DeleteStats()
    rate = AdaptiveRate(throttle, sleep=sleep)
    retry = throttle.retry_policy
    jitter = rng or random.Random()
    done = 0
    total_dirs = sum(len(action.rows) for action in plan.actions)
    removed_before = store.rows_removed
    # ``concurrency`` requests' worth at once: a store that groups partition deletes into one
    # request (Cassandra) needs that many actions to keep ``concurrency`` requests busy.
    per_request = max(1, store.traits.deletes_per_request)
    for chunk in _chunks(plan.actions, throttle.concurrency * per_request):
        rate.acquire(len(chunk))
        keep_going()
        if charge is not None:
            charge(chunk)
        if audit is not None:
            # Written ahead: nothing is ever deleted without a record, and a run killed mid-batch
            # leaves at worst a few records of deletes that never ran (restoring them is a no-op).
            audit.write_ahead(chunk)
        pending = list(chunk)
        attempt = 0
        while pending:
            copied: dict[int, int] = {}
            errors = _issue(store, pending, timestamp_us, copied)
            failed = [a for a, e in zip(pending, errors, strict=True) if e is not None]
            for i, (action, error) in enumerate(zip(pending, errors, strict=True)):
                if error is None:
                    _count(stats, action)
                    stats.rows_rewritten += copied.get(i, 0)
            hard = [e for e in errors if e is not None and not isinstance(e, TransientStoreError)]
            if hard:
                stats.failures.append(str(hard[0]))
                if isinstance(hard[0], RewriteUnsupported):
                    raise hard[0]
                raise DeleteFailed(f"delete failed: {hard[0]}")
            if not failed:
                rate.on_success()
                break
            rate.on_overload()
            attempt += 1
            if attempt >= retry.attempts:
                raise StoreUnavailable(
                    f"{len(failed)} deletes still failing after {throttle.max_retries} retries: "
                    f"{next(e for e in errors if e is not None)}"
                )
            stats.retries += len(failed)
            sleep(retry.delay(attempt, jitter))
            pending = failed
        # Directories, as the summary counts them (a partition or range delete takes several).
        done += sum(len(action.rows) for action in chunk)
        progress("clean", done, total_dirs)
    if removed_before is not None and store.rows_removed is not None:
        stats.rows_removed = store.rows_removed - removed_before
    stats.final_rate = rate.rate
    stats.seconds = time.monotonic() - started
    return stats


def _issue(
    store: Store, actions: Sequence[DeleteAction], timestamp_us: int, copied: dict[int, int]
) -> list[BaseException | None]:
    """Send a mixed batch as few store calls, results back in the batch's order.

    A rewrite copies its partition's other rows at T+1 first; only the partitions whose copy
    was acknowledged are then deleted at T, with the batch's partition deletes (``copied``
    gets each rewrite's row count by index).
    """
    results: list[BaseException | None] = [None] * len(actions)
    for i, action in enumerate(actions):
        if action.kind is ActionKind.REWRITE:
            names = {row.name for row in action.rows}
            try:
                copied[i] = store.rewrite_folder_partition(
                    action.partition, names, timestamp_us + 1
                )
            except DircleanerError as exc:
                results[i] = exc
    parts = [
        i
        for i, a in enumerate(actions)
        if a.kind is ActionKind.PARTITION or (a.kind is ActionKind.REWRITE and i in copied)
    ]
    rows = [i for i, a in enumerate(actions) if a.kind is ActionKind.ROW]
    ranges = [i for i, a in enumerate(actions) if a.kind is ActionKind.RANGE]
    if parts:
        out = store.delete_folder_partitions([actions[i].partition for i in parts], timestamp_us)
        for i, error in zip(parts, out, strict=True):
            results[i] = error
    if rows:
        out = store.delete_folder_rows([actions[i].rows[0] for i in rows], timestamp_us)
        for i, error in zip(rows, out, strict=True):
            results[i] = error
    if ranges:
        out = store.delete_folder_ranges([actions[i].folder_range() for i in ranges], timestamp_us)
        for i, error in zip(ranges, out, strict=True):
            results[i] = error
    return results


def _count(stats: DeleteStats, action: DeleteAction) -> None:
    if action.kind is ActionKind.PARTITION:
        stats.partition_deletes += 1
    elif action.kind is ActionKind.REWRITE:
        stats.rewrites += 1
    elif action.kind is ActionKind.RANGE:
        stats.range_deletes += 1
    else:
        stats.row_deletes += 1
    stats.directories += len(action.rows)


def _chunks(items: Sequence[DeleteAction], size: int) -> Iterator[Sequence[DeleteAction]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
