"""Running one task per shard in worker processes, so every core scans its slice of the ring.

One mechanism serves both shapes of work: ``map_shards`` (one phase: build, sweep) and
``run_two_phases`` (a decision by the parent between two phases: the clean). Workers are
forked: the task (and anything it closes over, such as a loaded filter) is inherited
copy-on-write rather than pickled, and each worker opens its own store connection. Only results
travel back. Workers die with the parent (a killed run leaves no orphan scanning or deleting).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

from dircleaner.errors import DircleanerError
from dircleaner.model import Shard
from dircleaner.progress import Progress, no_progress
from dircleaner.store import Store, open_store
from dircleaner.workers import interrupt

R = TypeVar("R")
log = logging.getLogger(__name__)
T = TypeVar("T")
L = TypeVar("L")
M = TypeVar("M")
ShardTask = Callable[[Store, Shard, Progress], R]
#: first phase: (what the parent needs to decide, what the worker keeps for the second phase)
FirstPhase = Callable[[Store, Shard, Progress], tuple[T, L]]
#: second phase: the worker's kept state and the parent's decision in, a result out
SecondPhase = Callable[[Store, Shard, L, M, Progress], R]
#: how long a finished (or failed, after its decision) run waits for workers to exit
_SECOND_PHASE_GRACE_S = 300.0
#: prctl(2) option: the signal a process gets when its parent dies (Linux)
_PR_SET_PDEATHSIG = 1


class WorkerDied(DircleanerError):
    """A worker process exited without sending its result."""


def _die_with_parent(parent_pid: int | None = None) -> None:
    """Have the kernel kill this (forked) process when its parent dies, where supported."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # the parent died before the request took effect


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

    def only_phase(part_store: Store, shard: Shard, report: Progress) -> tuple[R, None]:
        return task(part_store, shard, report), None

    workers = _Workers(store, shards, only_phase, None, (phase, ""))
    finished = False
    try:
        results: list[R] = _gather(
            workers.conns, shards, workers.counters[0], phase, progress, workers=workers
        )
        finished = True
    finally:
        workers.reap(_SECOND_PHASE_GRACE_S if finished else 0)
    return results


def run_two_phases(
    store: Store,
    shards: Sequence[Shard],
    first: FirstPhase[T, L],
    decide: Callable[[list[T]], M],
    second: SecondPhase[L, M, R],
    phases: tuple[str, str],
    progress: Progress = no_progress,
    on_second_done: Callable[[int], None] | None = None,
) -> tuple[list[T], list[R]]:
    """Two phases per shard with one decision between them, taken by the parent on every
    shard's first result. The workers keep their state across the barrier (one process per
    shard); if ``decide`` raises, no second phase runs anywhere and the error propagates.

    ``on_second_done(i)`` is called in the parent as each shard's second phase succeeds. If one
    fails, the others still finish theirs (and are reported) before the error propagates.
    """
    done = on_second_done or (lambda _index: None)
    if not shards:
        decide([])
        return [], []
    if len(shards) == 1:
        tally, kept = first(store, shards[0], progress)
        message = decide([tally])
        result = second(store, shards[0], kept, message, progress)
        done(0)
        return [tally], [result]
    workers = _Workers(store, shards, first, second, phases)
    second_started = False
    try:
        tallies: list[T] = _gather(
            workers.conns, shards, workers.counters[0], phases[0], progress, workers=workers
        )
        message = decide(tallies)
        _send_all(workers.conns, ("go", message))
        second_started = True
        results: list[R] = _gather(
            workers.conns, shards, workers.counters[1], phases[1], progress, done, workers
        )
    finally:
        # Before the second phase a worker has only read: stop them all at once. After, let
        # the others finish what they started (each logs its own work), within reason.
        workers.reap(_SECOND_PHASE_GRACE_S if second_started else 0)
    return tallies, results


class _Workers:
    """One forked process per shard, each with a pipe to the parent and shared progress counters
    (one per phase)."""

    def __init__(
        self,
        store: Store,
        shards: Sequence[Shard],
        first: FirstPhase[Any, Any],
        second: SecondPhase[Any, Any, Any] | None,
        phases: tuple[str, str],
    ) -> None:
        from dircleaner.filter.bloom import finish_loading_kernels  # numpy: only with a pool

        finish_loading_kernels()  # fork only once the filter kernels are loaded, or not loading
        context = multiprocessing.get_context("fork")
        self.counters = (context.Value("q", 0), context.Value("q", 0))
        self.conns: list[Connection] = []
        self._procs: list[Any] = []
        for shard in shards:
            parent_end, child_end = context.Pipe()
            proc = context.Process(
                target=_worker,
                args=(
                    child_end,
                    store,
                    shard,
                    first,
                    second,
                    self.counters,
                    phases,
                    os.getpid(),
                ),
                daemon=True,
            )
            proc.start()
            child_end.close()
            self.conns.append(parent_end)
            self._procs.append(proc)

    def forward(self, signum: int) -> None:
        """Pass a stop request on: each worker stops after its own batch in flight."""
        for proc in self._procs:
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)

    def reap(self, wait_s: float) -> None:
        """Wait up to ``wait_s`` for each worker to exit, then kill what is left."""
        for proc in self._procs:
            proc.join(timeout=wait_s)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self.conns:
            conn.close()


def _worker(
    conn: Connection,
    parent_store: Store,
    shard: Shard,
    first: FirstPhase[Any, Any],
    second: SecondPhase[Any, Any, Any] | None,
    counters: tuple[Any, Any],
    phases: tuple[str, str],
    parent_pid: int,
) -> None:
    """A worker: the first phase, then the second if the parent says go (and there is one)."""
    _die_with_parent(parent_pid)
    try:
        store = open_store(parent_store.url, config_path=parent_store.config_path)
    except BaseException as exc:
        conn.send(("error", _portable(exc)))
        return
    try:
        tally, kept = first(store, shard, _reporter(counters[0], phases[0]))
        conn.send(("ok", tally))
        if second is None:
            return
        kind, message = conn.recv()
        if kind == "go":
            report = _reporter(counters[1], phases[1])
            conn.send(("ok", second(store, shard, kept, message, report)))
    except EOFError:
        pass  # the parent is gone
    except BaseException as exc:
        log.debug("the worker of slice %s failed", shard, exc_info=True)
        conn.send(("error", _portable(exc)))
    finally:
        store.close()


def _reporter(counter: Any, counted: str) -> Progress:
    """A progress hook that adds a worker's advances in phase ``counted`` to a counter shared
    with the parent (a step inside it, such as the sweep's re-check, counts other things)."""
    seen = 0

    def report(phase: str, done: int, total: int | None) -> None:
        nonlocal seen
        if phase == counted:
            with counter.get_lock():
                counter.value += done - seen
            seen = done
        interrupt.check()  # a worker stops after its batch in flight, like the parent

    return report


def _gather(
    conns: list[Connection],
    shards: Sequence[Shard],
    counter: Any,
    phase: str,
    progress: Progress,
    on_done: Callable[[int], None] | None = None,
    workers: _Workers | None = None,
) -> list[Any]:
    """One message from every worker, in shard order; a worker's error is raised here.

    Without ``on_done`` the first error is raised at once; with it, every other worker is
    still heard (and its success reported) first.
    """
    results: list[Any] = [None] * len(conns)
    pending = dict(enumerate(conns))
    error: BaseException | None = None
    forwarded = False
    while pending:
        signum = interrupt.requested()
        if signum is not None and not forwarded and workers is not None:
            workers.forward(signum)  # they stop after their batch; the parent waits for them
            forwarded = True
        progress(phase, int(counter.value), None)
        for ready in wait(list(pending.values()), timeout=0.5):
            index = next(i for i, c in pending.items() if c is ready)
            conn = pending.pop(index)
            try:
                kind, value = conn.recv()
            except EOFError:
                kind = "error"
                value = WorkerDied(
                    f"the {phase} worker of slice {shards[index].index}/{shards[index].count}"
                    " died (killed, or out of memory?); what it deleted is in the audit log:"
                    " rerun, the next run resumes"
                )
            if kind == "error":
                failure = value if isinstance(value, BaseException) else RuntimeError(str(value))
                if on_done is None:
                    raise failure
                error = error or failure
                continue
            results[index] = value
            if on_done is not None:
                on_done(index)
    if error is not None:
        raise error
    progress(phase, int(counter.value), None)
    return results


def _send_all(conns: Sequence[Connection], message: tuple[str, Any]) -> None:
    for conn in conns:
        with contextlib.suppress(OSError):
            conn.send(message)


def _portable(exc: BaseException) -> BaseException:
    """The exception itself if it survives pickling, else a RuntimeError saying what it was."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc
