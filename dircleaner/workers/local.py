"""Running one task per shard in worker processes, so every core scans slices of the ring.

One mechanism serves both shapes of work: ``map_shards`` (one phase: build, sweep) and
``run_two_phases`` (a decision by the parent between two phases: the clean). Workers are
forked: the task (and anything it closes over, such as a loaded filter) is inherited
copy-on-write rather than pickled, and each worker opens its own store connection. The parent
hands the shards out one at a time, so a worker that finishes early takes the next one. Only
results travel back. Workers die with the parent (a killed run leaves no orphan scanning or
deleting). A stop signal only asks a worker to stop after its batch in flight: it
reports that to the parent, which alone tells the operator.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import pickle
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

from dircleaner.errors import DircleanerError
from dircleaner.model import Shard
from dircleaner.progress import Progress, no_progress
from dircleaner.store import Store, open_store
from dircleaner.workers import interrupt
from dircleaner.workers.work import FirstPhase, SecondPhase, ShardTask, TwoPhaseWork

R = TypeVar("R")
log = logging.getLogger(__name__)
T = TypeVar("T")
L = TypeVar("L")
M = TypeVar("M")
#: how long a finished (or failed, after its decision) run waits for workers to exit
_SECOND_PHASE_GRACE_S = 300.0
#: how long a stopped run waits for its workers to stop after their batch (or wait) in flight
#: before it stops without them and kills them (a worker stops within ``interrupt.POLL_S`` of
#: the request unless its batch is a long one)
STOP_GRACE_S = 1.0
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
    processes: int | None = None,
) -> list[R]:
    """``task(store, shard, progress)`` for every shard, in shard order; forked when several.

    ``processes`` (default: one per shard) run the shards, each taking the next one as it
    finishes its own.
    """
    if len(shards) == 1:
        return [task(store, shards[0], progress)]

    def only_phase(part_store: Store, shard: Shard, report: Progress) -> tuple[R, None]:
        return task(part_store, shard, report), None

    pool = _Pool(store, shards, only_phase, None, (phase, ""), processes)
    finished = False
    try:
        results: list[R] = pool.first_phase(progress)
        pool.stop()
        finished = True
    finally:
        pool.reap(pool.grace_s(_SECOND_PHASE_GRACE_S) if finished else 0)
        pool.report_final(progress, 0)
    return results


def run_two_phases(
    store: Store,
    shards: Sequence[Shard],
    work: TwoPhaseWork[T, L, M, R],
    progress: Progress = no_progress,
    processes: int | None = None,
) -> tuple[list[T], list[R]]:
    """``work``'s two phases per shard with its one decision between them, taken by the parent
    on every shard's first result. A shard's second phase runs in the process that ran its first
    (which kept its state across the barrier); if ``work.decide`` raises, no second phase runs
    anywhere and the error propagates.

    ``work.on_second_done(i, result)`` is called in the parent as each shard's second phase
    succeeds. If one fails, its process stops there and the other processes still finish theirs
    (and are reported) before the error propagates.
    """
    if not shards:
        work.decide([])
        return [], []
    if len(shards) == 1:
        tally, kept = work.first(store, shards[0], progress)
        try:
            message = work.decide([tally])
        except BaseException:
            del kept  # what the first phase kept (a spill file) goes now, not with the traceback
            raise
        result = work.second(store, shards[0], kept, message, progress)
        work.on_second_done(0, result)
        return [tally], [result]
    pool = _Pool(store, shards, work.first, work.second, work.phases, processes)
    second_started = False
    try:
        tallies: list[T] = pool.first_phase(progress)
        message = work.decide(tallies)
        second_started = True
        results: list[R] = pool.second_phase(message, progress, work.on_second_done)
    finally:
        # Before the second phase a worker has only read: stop them all at once. After, let
        # the others finish what they started (each logs its own work), within reason.
        pool.reap(pool.grace_s(_SECOND_PHASE_GRACE_S) if second_started else 0)
        pool.report_final(progress, 1 if second_started else 0)
    return tallies, results


class _Pool:
    """Forked worker processes, each with a pipe to the parent, and shared progress counters
    (one per phase).

    The parent hands the shards out one at a time: each process gets one to start with and the
    next as it sends a result, so the slices' unequal sizes even out across the processes. A
    shard's first-phase state stays in the process that ran it, which runs its second phase.
    """

    def __init__(
        self,
        store: Store,
        shards: Sequence[Shard],
        first: FirstPhase[Any, Any],
        second: SecondPhase[Any, Any, Any] | None,
        phases: tuple[str, str],
        processes: int | None,
    ) -> None:
        from dircleaner.filter.bloom import finish_loading_kernels  # numpy: only with a pool

        finish_loading_kernels()  # fork only once the filter kernels are loaded, or not loading
        context = multiprocessing.get_context("fork")
        self.shards = shards
        self.phases = phases
        self.counters = (context.Value("q", 0), context.Value("q", 0))
        #: per phase, the totals the shards reported so far, and how many shards reported one
        self.totals = (context.Value("q", 0), context.Value("q", 0))
        self.reporting = (context.Value("q", 0), context.Value("q", 0))
        self.conns: list[Connection] = []
        self._procs: list[Any] = []
        #: shard index → the process that ran (or runs) its first phase
        self.owner: dict[int, int] = {}
        self._next = 0
        for _ in range(min(processes or len(shards), len(shards))):
            parent_end, child_end = context.Pipe()
            proc = context.Process(
                target=_worker,
                args=(
                    child_end,
                    store,
                    shards,
                    first,
                    second,
                    (self.counters, self.totals, self.reporting),
                    phases,
                    os.getpid(),
                ),
                daemon=True,
            )
            with interrupt.signals_held():  # until the worker has its own handlers
                proc.start()
            child_end.close()
            self.conns.append(parent_end)
            self._procs.append(proc)
        #: when a stop request was passed on to the workers (None: not yet)
        self._forwarded_at: float | None = None

    def first_phase(self, progress: Progress) -> list[Any]:
        """Every shard's first result, in shard order; the first error is raised at once."""
        results: dict[int, Any] = {}
        in_hand: dict[int, int] = {}  # process → the shard it runs
        for worker in range(len(self.conns)):
            self._hand_out(worker, in_hand)
        while len(results) < len(self.shards):
            if not in_hand:  # a stop was requested before every shard was handed out
                interrupt.check()
            self._forward_stop()
            self._stop_overdue()
            self._report(0, progress)
            for worker, message in self._heard(in_hand):
                if message is None:
                    raise self._died(self.phases[0], [in_hand[worker]])
                kind, index, value = message
                if kind == "error":
                    raise _failure(value)
                results[index] = value
                del in_hand[worker]
                self._hand_out(worker, in_hand)
        self._report(0, progress)
        return [results[i] for i in range(len(self.shards))]

    def second_phase(
        self, message: Any, progress: Progress, on_done: Callable[[int, Any], None]
    ) -> list[Any]:
        """Every shard's second result, in shard order, once every process was heard."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(("go", message))
        pending: dict[int, list[int]] = {}  # process → its shards not finished yet
        for index, worker in sorted(self.owner.items()):
            pending.setdefault(worker, []).append(index)
        results: list[Any] = [None] * len(self.shards)
        error: BaseException | None = None
        while pending:
            self._forward_stop()
            self._stop_overdue()
            self._report(1, progress)
            for worker, heard in self._heard(pending):
                if heard is None:
                    error = error or self._died(self.phases[1], pending.pop(worker))
                    continue
                kind, index, value = heard
                if kind == "error":
                    error = error or _failure(value)
                    del pending[worker]  # it stops at its first failure
                    continue
                results[index] = value
                pending[worker].remove(index)
                if not pending[worker]:
                    del pending[worker]
                on_done(index, value)
        if error is not None:
            raise error
        self._report(1, progress)
        return results

    def _report(self, phase: int, progress: Progress) -> None:
        """The phase's progress summed over the shards: items done, and a total where the
        shards tell theirs (until each of them did, scaled up from those that did)."""
        total: int | None = None
        told, shards = int(self.reporting[phase].value), len(self.shards)
        if told:
            total = int(self.totals[phase].value) * shards // min(told, shards)
        progress(self.phases[phase], int(self.counters[phase].value), total)

    def stop(self) -> None:
        """Tell every process there is nothing more: it exits."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(("stop", None))

    def grace_s(self, finishing_s: float) -> float:
        """How long to wait for the workers to exit: ``finishing_s`` to finish their work,
        ``STOP_GRACE_S`` once a stop was requested."""
        return finishing_s if interrupt.requested() is None else STOP_GRACE_S

    def reap(self, wait_s: float) -> None:
        """Wait up to ``wait_s`` for the workers to exit, then kill what is left."""
        deadline = time.monotonic() + wait_s
        for proc in self._procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self.conns:
            conn.close()

    def report_final(self, progress: Progress, phase: int) -> None:
        """Once the workers exited: how far they got in ``phase`` (what a stopped run says,
        counting the batches they finished after the parent stopped listening)."""
        with contextlib.suppress(interrupt.Interrupted):
            self._report(phase, progress)

    def _hand_out(self, worker: int, in_hand: dict[int, int]) -> None:
        """Give ``worker`` the next shard, unless none is left or a stop was requested."""
        if self._next >= len(self.shards) or interrupt.requested() is not None:
            return
        index = self._next
        self._next += 1
        self.conns[worker].send(("shard", index))
        self.owner[index] = worker
        in_hand[worker] = index

    def _heard(self, waiting: dict[int, Any]) -> list[tuple[int, tuple[str, Any, Any] | None]]:
        """The messages of the processes in ``waiting`` that sent one within
        ``interrupt.POLL_S`` (None for a process that died): the caller looks at a stop
        request as often as a wait does."""
        by_conn = {id(self.conns[w]): w for w in waiting}
        heard: list[tuple[int, tuple[str, Any, Any] | None]] = []
        for ready in wait([self.conns[w] for w in waiting], timeout=interrupt.POLL_S):
            worker = by_conn[id(ready)]
            try:
                heard.append((worker, self.conns[worker].recv()))
            except EOFError:
                heard.append((worker, None))
        return heard

    def _forward_stop(self) -> None:
        """Pass a stop request on once: each worker stops after its own batch in flight."""
        signum = interrupt.requested()
        if signum is None or self._forwarded_at is not None:
            return
        self._forwarded_at = time.monotonic()
        for proc in self._procs:
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)

    def _stop_overdue(self) -> None:
        """A stop passed on ``STOP_GRACE_S`` ago that a worker has not answered yet (a long
        batch, a page that does not come back): stop without it (``reap`` kills it; a kill
        is as safe as a ``kill -9`` of the run, which the next run resumes)."""
        if self._forwarded_at is not None and time.monotonic() - self._forwarded_at > STOP_GRACE_S:
            interrupt.check()

    def _died(self, phase: str, indices: Sequence[int]) -> WorkerDied:
        named = ", ".join(str(self.shards[i]) for i in indices)
        return WorkerDied(
            f"the {phase} worker of slice{'s' if len(indices) > 1 else ''} {named} died"
            " (killed, or out of memory?); what it deleted is in the audit log: rerun, the"
            " next run resumes"
        )


def _worker(
    conn: Connection,
    parent_store: Store,
    shards: Sequence[Shard],
    first: FirstPhase[Any, Any],
    second: SecondPhase[Any, Any, Any] | None,
    counters: tuple[tuple[Any, Any], tuple[Any, Any], tuple[Any, Any]],
    phases: tuple[str, str],
    parent_pid: int,
) -> None:
    """A worker: first phases of the shards the parent hands it, then, if the parent says go
    (and there is one), the second phase of each of them."""
    interrupt.quiet_in_worker()
    _die_with_parent(parent_pid)
    done, totals, reporting = counters
    try:
        # Opened as the parent's was: a command that only reads writes nothing here either.
        store = open_store(
            parent_store.url,
            config_path=parent_store.config_path,
            read_only=parent_store.traits.read_only,
        )
    except BaseException as exc:
        _send_quietly(conn, ("error", None, _portable(exc)))
        return
    kept: dict[int, Any] = {}
    index: int | None = None
    try:
        while True:
            kind, value = conn.recv()
            if kind == "shard":
                index = value
                report = _reporter(done[0], (totals[0], reporting[0]), phases[0])
                tally, state = first(store, shards[index], report)
                if second is not None:
                    kept[index] = state
                conn.send(("ok", index, tally))
            elif kind == "go" and second is not None:
                for index in sorted(kept):
                    interrupt.check()
                    report = _reporter(done[1], (totals[1], reporting[1]), phases[1])
                    result = second(store, shards[index], kept.pop(index), value, report)
                    conn.send(("ok", index, result))
                return
            else:
                return
    except EOFError:
        pass  # the parent is gone
    except BaseException as exc:
        if not isinstance(exc, interrupt.Interrupted):  # a stop is no failure: the parent says it
            log.debug(
                "the worker of slice %s failed",
                None if index is None else shards[index],
                exc_info=True,
            )
        _send_quietly(conn, ("error", index, _portable(exc)))
    finally:
        store.close()


def _send_quietly(conn: Connection, message: tuple[str, Any, Any]) -> None:
    """A worker's last word: a parent already gone (killed, interrupted) does not hear it, and
    the worker exits without a traceback of its own."""
    with contextlib.suppress(OSError):
        conn.send(message)


def _reporter(counter: Any, total_counters: tuple[Any, Any], counted: str) -> Progress:
    """A progress hook that adds a worker's advances in phase ``counted`` (and its shard's
    total, once known) to counters shared with the parent (a step inside it, such as the
    sweep's re-check, counts other things)."""
    seen = 0
    seen_total: int | None = None
    total_counter, reporting = total_counters

    def report(phase: str, done: int, total: int | None) -> None:
        nonlocal seen, seen_total
        if phase == counted:
            with counter.get_lock():
                counter.value += done - seen
            seen = done
            if total is not None and total != seen_total:
                if seen_total is None:
                    with reporting.get_lock():
                        reporting.value += 1
                with total_counter.get_lock():
                    total_counter.value += total - (seen_total or 0)
                seen_total = total
        interrupt.check()  # a worker stops after its batch in flight, like the parent

    return report


def _failure(value: Any) -> BaseException:
    return value if isinstance(value, BaseException) else RuntimeError(str(value))


def _portable(exc: BaseException) -> BaseException:
    """The exception itself if it survives pickling, else a RuntimeError saying what it was."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc
