"""How the job runs its per-slice tasks: the one interface the build, the sweep and the clean call.

Two mechanisms implement it:

- ``LocalWorkers`` (the zero set-up default): forked processes on this machine
  (``dircleaner.workers.local``), each taking the next slice as it finishes one; the workers
  die with the parent.
- ``DaskWorkers`` (``--scheduler``, in ``dircleaner.workers.daskcluster``): tasks on a Dask
  distributed cluster, the ring cut into many more slices than worker threads.

A task is ``task(store, shard, progress)``; the mechanism hands it a store connection of its own
(opened in the process that runs it from the parent store's URL and config path: a driver
session never crosses processes). The job's logic — guards, checkpoints, the decision between
the clean's two phases — stays in the job, the same for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from dircleaner.errors import DircleanerError, UsageError
from dircleaner.model import Shard
from dircleaner.progress import Progress, no_progress
from dircleaner.rateshare import ProcessSharers, Sharers
from dircleaner.store.base import Store
from dircleaner.workers import local as parallel
from dircleaner.workers.work import FirstPhase, SecondPhase, ShardTask, TwoPhaseWork

__all__ = [
    "BUILD",
    "CLEAN",
    "FirstPhase",
    "LocalWorkers",
    "SecondPhase",
    "ShardTask",
    "SliceFailed",
    "TwoPhaseWork",
    "Workers",
    "default_slice_count",
]

R = TypeVar("R")
T = TypeVar("T")
L = TypeVar("L")
M = TypeVar("M")


#: what the job cuts into slices for: the build stores one full-size partial filter per slice,
#: so a mechanism may cut it coarser than the sweep and the clean
BUILD = "build"
CLEAN = "clean"
#: sweep and clean slices per worker when not told otherwise: enough that the slices' unequal
#: sizes (a wide partition is never split) even out, and that a lost or slow worker's share is
#: picked up by the others; few enough that per-slice costs stay small
CLEAN_SLICES_PER_WORKER = 4


def default_slice_count(parallelism: int, purpose: str) -> int:
    """The slices a mechanism with ``parallelism`` workers cuts the ring into for ``purpose``
    when not told otherwise: one build slice per worker, ``CLEAN_SLICES_PER_WORKER`` sweep
    and clean slices per worker."""
    return parallelism * (1 if purpose == BUILD else CLEAN_SLICES_PER_WORKER)


class SliceFailed(DircleanerError):
    """A slice's task failed for good (its retries spent); the next run resumes the others."""


class Workers(Protocol):
    """Runs one task per slice of the ring, somewhere, and brings the results back here."""

    #: where the tasks run, for the operator ("3 local processes", a scheduler's address)
    description: str
    #: a page that shows the tasks as they run, when the mechanism has one
    dashboard: str | None
    #: whether tasks may go on running after this process dies (then they check the run's
    #: lease before each delete batch)
    outlives_client: bool
    #: how many slices run at once (processes, or the cluster's threads)
    parallelism: int
    #: a setting of the mechanism that costs the job speed, and what to do about it
    advice: str | None

    def slices(self, shard: Shard, purpose: str) -> list[Shard]:
        """``shard`` cut into the slices this mechanism runs a task for (``BUILD`` or ``CLEAN``)."""
        ...

    def map_shards(
        self,
        store: Store,
        shards: Sequence[Shard],
        task: ShardTask[R],
        phase: str,
        progress: Progress = no_progress,
    ) -> list[R]:
        """``task(store, shard, progress)`` for every shard; results in shard order."""
        ...

    def run_two_phases(
        self,
        store: Store,
        shards: Sequence[Shard],
        work: TwoPhaseWork[T, L, M, R],
        progress: Progress = no_progress,
    ) -> tuple[list[T], list[R]]:
        """``work``'s two phases per shard around its one decision, taken here on every first
        result; (first results, second results), in shard order.

        What a first phase keeps stays where it ran; if ``work.decide`` raises, no second phase
        runs. ``work.on_second_done(i, result)`` is called as shard i's second phase succeeds;
        if one fails, the others finish theirs before the error propagates.
        """
        ...

    def sharers(self) -> Sharers:
        """New sharers of one rate (a pass's scan cap, the deletes' rate), for the slices
        that run on these workers: each slice joins them while it reads or deletes."""
        ...

    def close(self) -> None:
        """Let go of whatever the mechanism holds (a cluster connection)."""
        ...


class LocalWorkers:
    """``count`` forked processes on this machine (the default): one build slice each, and
    ``CLEAN_SLICES_PER_WORKER`` sweep and clean slices each, handed out as they free up."""

    dashboard: str | None = None
    advice: str | None = None
    #: the kernel kills the forked workers with this process
    outlives_client = False

    def __init__(self, count: int = 1) -> None:
        if count < 1:
            raise UsageError("--workers must be at least 1")
        self.parallelism = count
        self.description = f"{count} local process{'es' if count > 1 else ''}"

    def slices(self, shard: Shard, purpose: str) -> list[Shard]:
        if self.parallelism == 1:
            return [shard]
        return shard.split(default_slice_count(self.parallelism, purpose))

    def map_shards(
        self,
        store: Store,
        shards: Sequence[Shard],
        task: ShardTask[R],
        phase: str,
        progress: Progress = no_progress,
    ) -> list[R]:
        return parallel.map_shards(store, shards, task, phase, progress, self.parallelism)

    def run_two_phases(
        self,
        store: Store,
        shards: Sequence[Shard],
        work: TwoPhaseWork[T, L, M, R],
        progress: Progress = no_progress,
    ) -> tuple[list[T], list[R]]:
        return parallel.run_two_phases(store, shards, work, progress, self.parallelism)

    def sharers(self) -> Sharers:
        """A counter in shared memory the processes forked after this call inherit."""
        return ProcessSharers()

    def close(self) -> None:
        """Nothing to let go: each run's processes are reaped when it ends."""
