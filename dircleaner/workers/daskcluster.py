"""The job's slices as tasks on a Dask distributed cluster (``--scheduler ADDRESS``).

``dask scheduler`` runs on one host, ``dask worker ADDRESS`` on as many as wanted; this module is
the client side. The ring is cut into many more slices than worker threads, so a slow or lost
worker does not hold the run: Dask runs a lost worker's tasks again elsewhere. Each task opens
its own store connection from the store's URL and config path (a driver session never crosses
a process). A clean's first phase keeps its slice's candidates on the worker that found them (a
future); only counts and non-empty finds come back here, where the guards are applied; the
second phase runs where those candidates are. A lost first-phase result is computed again by
Dask when its second phase needs it (deletes are idempotent at T, and a re-run plans the same
deletes within the same budgets).

Progress comes from the tasks as Dask events; the dashboard shows the tasks themselves.

A client that stops (a signal, an error) cancels its tasks and tells every worker to stop the
ones already running (``interrupt.stop_run``): they stop after their batch or wait in flight,
as a local worker does, and free their threads for the next run.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import operator
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any, TypeVar

from dircleaner.errors import DircleanerError, UsageError
from dircleaner.filter.bloom import load_kernels, start_loading_kernels
from dircleaner.model import Shard
from dircleaner.progress import Progress, no_progress
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.workers import interrupt
from dircleaner.workers.base import SliceFailed, default_slice_count
from dircleaner.workers.dasksharing import DaskSharers, close_semaphores
from dircleaner.workers.work import ShardTask, TwoPhaseWork

R = TypeVar("R")
T = TypeVar("T")
L = TypeVar("L")
M = TypeVar("M")

#: how long to try to reach the scheduler (a scheduler restarting is back within seconds; an
#: address nobody listens on fails the run after this long)
CONNECT_TIMEOUT_S = 8.0
#: how long to try a scheduler address that refuses connections before the run fails (a
#: scheduler restarting listens again within it)
REFUSED_FOR_S = 4.0
#: how long to wait for the scheduler's first worker
WORKER_WAIT_S = 30.0
#: the schemes whose addresses are HOST:PORT
_HOST_PORT_SCHEMES = frozenset({"tcp", "tls", "ws", "wss"})
#: a task reports its progress at most this often
REPORT_EVERY_S = 0.5
#: the client shows the tasks' progress at most this often while it waits on them
_PROGRESS_EVERY_S = 0.2
#: how long a stopping client waits for the workers to hear that their tasks must stop
_STOP_TASKS_TIMEOUT_S = 1.0


class SchedulerUnavailable(DircleanerError):
    """The Dask scheduler could not be reached, or has no worker."""


def checked_address(address: str) -> tuple[str, tuple[str, int] | None]:
    """``address`` and its (host, port) where it has them, if it is a Dask scheduler address
    (``tcp://HOST:PORT``, or ``HOST:PORT``); UsageError saying what is wrong otherwise."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    shape = "a scheduler address is tcp://HOST:PORT (port 8786 by default)"
    try:
        scheme, location = parse_address(address)
        get_backend(scheme)
        if scheme not in _HOST_PORT_SCHEMES:
            return address, None
        host, port = parse_host_port(location)
        if not host or not 0 < int(port) < 65536:
            raise ValueError(f"no host, or a port outside 1-65535, in {location!r}")
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--scheduler {address!r}: {exc}; {shape}") from None
    return address, (host, int(port))


def _probe(address: str, host_port: tuple[str, int] | None) -> None:
    """SchedulerUnavailable, within ``REFUSED_FOR_S``, if nothing listens at the scheduler's
    host and port (the client itself would try for ``CONNECT_TIMEOUT_S``)."""
    if host_port is None:
        return
    deadline = time.monotonic() + REFUSED_FOR_S
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection(host_port, timeout=max(left, 0.1)):
                return
        except ConnectionRefusedError as exc:
            why: OSError = exc
        except OSError as exc:  # no route, a name that does not resolve, no answer
            why = exc
            left = 0.0
        if left <= 0 or deadline - time.monotonic() <= 0:
            raise SchedulerUnavailable(
                f"cannot reach the Dask scheduler at {address}: {why.strerror or why};"
                " is 'dask scheduler' running there?"
            )
        interrupt.wait(min(0.5, max(deadline - time.monotonic(), 0.0)))


def _connect(address: str) -> Any:
    """A client of the scheduler at ``address``, or SchedulerUnavailable within
    ``CONNECT_TIMEOUT_S``.

    A client whose construction failed is marked closed before it is let go: its finaliser
    would otherwise try to close it through an event loop that no longer answers, and print a
    TimeoutError traceback after a minute."""
    from distributed import Client  # only a run with --scheduler pays for the import

    client = Client.__new__(Client)
    try:
        Client.__init__(client, address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        client.status = "closed"
        raise SchedulerUnavailable(
            f"cannot reach the Dask scheduler at {address}: no answer within"
            f" {CONNECT_TIMEOUT_S:g} s ({type(exc).__name__}); is 'dask scheduler' running"
            " there?"
        ) from None
    except Exception as exc:  # something answered, but not as a Dask scheduler does
        client.status = "closed"
        raise SchedulerUnavailable(
            f"{address} does not answer as a Dask scheduler does ({type(exc).__name__});"
            " is it the scheduler's address (port 8786 by default)?"
        ) from None
    except BaseException:
        client.status = "closed"
        raise
    return client


class DaskWorkers:
    """Tasks on the cluster of the scheduler at ``address``.

    The build is cut into one slice per worker thread by default (each slice stores a partial
    filter as large as the whole filter: they OR-merge at load), the sweep and the clean into
    ``CLEAN_SLICES_PER_WORKER`` per thread; ``slices`` sets both.
    """

    outlives_client = True

    def __init__(self, address: str, slices: int | None = None) -> None:
        if slices is not None and slices < 1:
            raise UsageError("--slices must be at least 1")
        address, host_port = checked_address(address)
        _probe(address, host_port)
        self.client = _connect(address)
        try:
            self.client.wait_for_workers(1, timeout=WORKER_WAIT_S)
        except TimeoutError as exc:
            self.client.close()
            raise SchedulerUnavailable(
                f"the Dask scheduler at {address} has no worker (start 'dask worker {address}')"
            ) from exc
        # A worker started for this run gets ready now (its malloc setting; the compiled
        # filter kernels: milliseconds where compiled ahead of time, else numba's load, about
        # half a second, in the background while this client sizes or reads the filter)
        # instead of in its first task; a long-lived worker already is.
        prepared = self.client.run(_prepare_worker, on_error="return")  # returns at once
        nthreads = self.client.nthreads()
        busy = sum(1 for answer in prepared.values() if answer is True)
        self.advice: str | None = (
            f"{busy} of {len(prepared)} Dask workers run Dask's 20 ms event-loop tick or its"
            " 10 ms stack sampler, which make each slice 5-12% slower; start them with"
            " scripts/dask-worker.yaml (DASK_CONFIG, as deploy/dask-worker.service sets it)"
            if busy
            else None
        )
        #: slices that run at once: one per thread
        self.parallelism = sum(nthreads.values())
        self._slices = slices
        info = self.client.scheduler_info()
        self.dashboard: str | None = (
            self.client.dashboard_link if "dashboard" in info.get("services", {}) else None
        )
        self.description = (
            f"Dask scheduler {address}: {len(nthreads)} workers, {self.parallelism} threads"
        )
        self._run = secrets.token_hex(6)
        self._topic = _topic(self._run)
        self._lock = threading.Lock()
        #: (phase, slice label) → items done, as the task last reported
        self._done: dict[tuple[str, str], int] = {}
        self.client.subscribe_topic(self._topic, self._on_progress)
        #: the names of the run's rate semaphores (``sharers``), closed with the client
        self._semaphores: list[str] = []

    def slices(self, shard: Shard, purpose: str) -> list[Shard]:
        count = self._slices or default_slice_count(self.parallelism, purpose)
        return shard.split(count) if count > 1 else [shard]

    def map_shards(
        self,
        store: Store,
        shards: Sequence[Shard],
        task: ShardTask[R],
        phase: str,
        progress: Progress = no_progress,
    ) -> list[R]:
        futures = [
            self.client.submit(
                _one_phase,
                store.url,
                store.config_path,
                task,
                shard,
                self._run,
                phase,
                read_only=store.traits.read_only,
                key=self._key(phase, shard),
            )
            for shard in shards
        ]
        try:
            return self._collect(futures, shards, phase, progress)
        except BaseException:
            self._stop_tasks()
            raise
        finally:
            self.client.cancel(futures)

    def run_two_phases(
        self,
        store: Store,
        shards: Sequence[Shard],
        work: TwoPhaseWork[T, L, M, R],
        progress: Progress = no_progress,
    ) -> tuple[list[T], list[R]]:
        url, config_path, phases = store.url, store.config_path, work.phases
        # The first results (tally, kept) stay on the workers; only the tallies come here.
        kept = [
            self.client.submit(
                _one_phase,
                url,
                config_path,
                work.first,
                shard,
                self._run,
                phases[0],
                read_only=store.traits.read_only,
                key=self._key(phases[0], shard),
            )
            for shard in shards
        ]
        tally_futures = [
            self.client.submit(operator.itemgetter(0), k, key=self._key("tally", shard))
            for k, shard in zip(kept, shards, strict=True)
        ]
        second_futures: list[Any] = []
        try:
            tallies: list[T] = self._collect(tally_futures, shards, phases[0], progress)
            message = work.decide(tallies)
            [shared_message] = self.client.scatter([message], broadcast=True, hash=False)
            second_futures = [
                self.client.submit(
                    _second_phase,
                    url,
                    config_path,
                    work.second,
                    shard,
                    k,
                    shared_message,
                    self._run,
                    phases[1],
                    read_only=store.traits.read_only,
                    key=self._key(phases[1], shard),
                )
                for k, shard in zip(kept, shards, strict=True)
            ]
            results: list[R] = self._collect(
                second_futures,
                shards,
                phases[1],
                progress,
                work.on_second_done,
            )
        except BaseException:
            self._stop_tasks()
            raise
        finally:
            self.client.cancel([*kept, *tally_futures, *second_futures])
        return tallies, results

    def sharers(self) -> DaskSharers:
        """A semaphore of the run's, whose leases the scheduler counts (``dasksharing``)."""
        sharers = DaskSharers(f"dircleaner-{self._run}-rate-{len(self._semaphores)}")
        self._semaphores.append(sharers.name)
        return sharers

    def close(self) -> None:
        close_semaphores(self.client, self._semaphores)
        self.client.unsubscribe_topic(self._topic)
        self.client.close()

    def _stop_tasks(self) -> None:
        """Tell every worker to stop this run's tasks that are running (a cancel only drops
        their results: a running task's thread goes on), within a second or not at all."""
        signum = interrupt.requested() or signal.SIGTERM
        with contextlib.suppress(Exception):
            self.client.run(
                interrupt.stop_run,
                self._run,
                int(signum),
                on_error="ignore",
                callback_timeout=_STOP_TASKS_TIMEOUT_S,
            )

    def _key(self, phase: str, shard: Shard) -> str:
        return f"dircleaner-{self._run}-{phase}-{shard.index}of{shard.count}"

    def _on_progress(self, event: tuple[float, Any]) -> None:
        phase, label, done = event[1]
        with self._lock:
            self._done[(str(phase), str(label))] = int(done)

    def _progress_of(self, phase: str) -> int:
        with self._lock:
            return sum(done for (p, _label), done in self._done.items() if p == phase)

    def _collect(
        self,
        futures: Sequence[Any],
        shards: Sequence[Shard],
        phase: str,
        progress: Progress,
        on_done: Callable[[int, Any], None] | None = None,
    ) -> list[Any]:
        """Every future's result, in shard order; a slice that failed for good raises
        ``SliceFailed`` naming it. Without ``on_done`` the first failure is raised at once (the
        other tasks are cancelled by the caller); with it, the others are still waited for."""
        from distributed import wait
        from distributed.client import FIRST_COMPLETED as FIRST

        results: list[Any] = [None] * len(futures)
        pending = dict(enumerate(futures))
        error: SliceFailed | None = None
        while pending:
            progress(phase, self._progress_of(phase), None)
            finished = [i for i, future in pending.items() if future.done()]
            if not finished:
                # Back as soon as one finishes (a sleep here cost each phase up to its length,
                # 0.1 s on average, 2-4% of a 2M slice); the timeout only paces the progress.
                # A timeout, or a cancelled future, is looked at on the next round.
                with self.client.as_current(), contextlib.suppress(TimeoutError, CancelledError):
                    wait(list(pending.values()), timeout=_PROGRESS_EVERY_S, return_when=FIRST)
                continue
            for index in finished:
                future = pending.pop(index)
                if future.status == "finished":
                    results[index] = future.result()
                    if on_done is not None:
                        on_done(index, results[index])
                    continue
                failure = _slice_failed(phase, shards[index], future.exception())
                if on_done is None:
                    raise failure
                error = error or failure
        if error is not None:
            raise error
        progress(phase, self._progress_of(phase), None)
        return results


def _slice_failed(phase: str, shard: Shard, exc: BaseException | None) -> SliceFailed:
    """One line naming the slice; a dircleaner error keeps its exit code."""
    why = f"{type(exc).__name__}: {exc}" if exc is not None else "cancelled"
    lo, hi = shard.token_range()
    failed = SliceFailed(
        f"the {phase} of slice {shard.index}/{shard.count} (tokens {lo}..{hi}) failed: {why}"
    )
    if isinstance(exc, DircleanerError):
        failed.exit_code = exc.exit_code
    return failed


# --- what runs on the workers -------------------------------------------------------------

#: glibc's mallopt(3) parameter: a request of at least this many bytes gets a mapping of its own
_M_MMAP_THRESHOLD = -3
#: glibc's ceiling for that threshold on 64-bit, where its dynamic adjustment would take it
_MMAP_THRESHOLD_MAX = 32 << 20


def tune_malloc_under_nanny() -> None:
    """Give the heap back its large blocks where Dask's nanny fixed malloc's thresholds.

    The nanny starts each worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (so that freed memory
    goes back to the system at once). Any malloc threshold set in the environment also freezes
    glibc's mmap threshold at 128 KiB, so each batch's arrays and key buffers above that get a
    fresh mapping and its page faults, and are unmapped when freed: a build slice ran about 30%
    slower there than in a local worker (and as slow locally with the variable set). Raising the
    mmap threshold to glibc's own ceiling gives that back; the trim threshold stays as the nanny
    set it, so freed memory at the top of the heap still goes back. Idempotent (each task calls
    it; one library call); nothing where no threshold is set, where the operator set the mmap
    threshold, or off glibc.
    """
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)


def _prepare_worker() -> bool:
    """What a worker process needs once, before its first task (also sent when a client
    connects, so that a worker started for the run is ready by its first task). Returns whether
    the worker runs Dask's busy diagnostics (``busy_diagnostics``)."""
    tune_malloc_under_nanny()
    start_loading_kernels()
    return busy_diagnostics()


#: a worker's event-loop tick at least this far apart leaves a running slice alone
QUIET_TICK_S = 0.5


def busy_diagnostics() -> bool:
    """Whether this process's Dask settings wake its event loop often enough to slow a slice.

    The loop shares the GIL with the task's thread. Dask's defaults time the loop every 20 ms
    and sample the task's stack every 10 ms: ~250 GIL hand-overs a second, which made a 2M build
    slice 5-12% slower on a worker than in the local pool. ``scripts/dask-worker.yaml`` sets
    the tick to 1 s and turns the sampler off.
    """
    import dask
    from dask.utils import parse_timedelta

    tick_s = parse_timedelta(dask.config.get("distributed.admin.tick.interval"), default="ms")
    profiling = bool(dask.config.get("distributed.worker.profile.enabled"))
    return profiling or tick_s < QUIET_TICK_S


_gc_lock = threading.Lock()
_gc_tasks = 0
_gc_was_enabled = False


@contextlib.contextmanager
def _gc_paused_while_tasks_run() -> Iterator[None]:
    """The cyclic GC paused while any of this worker's tasks runs (as ``cyclic_gc_paused`` does
    for the local processes: a sweep churns millions of acyclic objects). Counted, since a
    worker's threads share the one collector."""
    global _gc_tasks, _gc_was_enabled
    with _gc_lock:
        if _gc_tasks == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_tasks += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_tasks -= 1
            if _gc_tasks == 0 and _gc_was_enabled:
                gc.enable()


@functools.cache
def weigh_held_candidates() -> None:
    """Have Dask weigh a clean's kept candidates (``spill.Candidates``) by what they hold, in
    memory or in their spill file: Dask runs a task where its inputs weigh most, and moves
    inputs only where that costs little, so a first phase's weight keeps its second phase on
    the worker that holds it (its own ``sys.getsizeof`` would say a few dozen bytes)."""
    from dask.sizeof import sizeof

    from dircleaner.pipeline.spill import Candidates

    sizeof.register(Candidates)(_weight)


def _weight(held: Any) -> int:
    return int(held.nbytes)


def _topic(run: str) -> str:
    """The Dask event topic a run's tasks report their progress on."""
    return f"dircleaner-progress-{run}"


def _one_phase(
    url: str,
    config_path: Path | None,
    task: Callable[[Store, Shard, Progress], R],
    shard: Shard,
    run: str,
    phase: str,
    read_only: bool = False,
) -> R:
    """A task on a worker: its own store connection, the task, progress sent as events; it
    stops when its client says so (``interrupt.stop_run``)."""
    # A worker process is no fork of the client: it loads the compiled filter kernels itself
    # (once; through numba, about half a second), or every build and sweep task hashes key by
    # key with mmh3.
    tune_malloc_under_nanny()
    load_kernels()
    weigh_held_candidates()
    store = open_store(url, config_path=config_path, read_only=read_only)
    report = _Reporter(_topic(run), phase, shard)
    try:
        with _gc_paused_while_tasks_run(), interrupt.obeying(run):
            interrupt.check()
            return task(store, shard, report)
    finally:
        report.flush()
        store.close()


def _second_phase(
    url: str,
    config_path: Path | None,
    second: Callable[[Store, Shard, Any, Any, Progress], R],
    shard: Shard,
    first_result: tuple[Any, Any],
    message: Any,
    run: str,
    phase: str,
    read_only: bool = False,
) -> R:
    """The second phase on the worker that holds the first phase's result (or recomputed it)."""
    tune_malloc_under_nanny()
    store = open_store(url, config_path=config_path, read_only=read_only)
    report = _Reporter(_topic(run), phase, shard)
    try:
        with _gc_paused_while_tasks_run(), interrupt.obeying(run):
            interrupt.check()
            return second(store, shard, first_result[1], message, report)
    finally:
        report.flush()
        store.close()


class _Reporter:
    """Progress as Dask events the client sums per phase (at most every ``REPORT_EVERY_S``,
    and once more when the task ends)."""

    def __init__(self, topic: str, phase: str, shard: Shard) -> None:
        from distributed import get_worker

        self._worker = get_worker()
        self._topic = topic
        self._phase = phase
        self._label = f"{shard.index}/{shard.count}"
        self._last = 0.0
        self._done: int | None = None

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        interrupt.check()  # a task stops after its batch in flight, like a local worker
        if phase != self._phase:
            return  # a step inside the task's phase (the sweep's re-check) counts other things
        self._done = done
        now = time.monotonic()
        if now - self._last >= REPORT_EVERY_S:
            self._last = now
            self.flush()

    def flush(self) -> None:
        if self._done is not None:
            self._worker.log_event(self._topic, [self._phase, self._label, self._done])
