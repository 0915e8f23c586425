"""Resuming an interrupted run: which generation it was using, and what it already deleted.

The run records its generation and phase in the store's run state. A run killed at any point
is picked up by the next ``run``: a complete generation is reused while it is fresh (same salt,
so the same candidates) and missing shards of a partial build are built with the generation's own
parameters. What the killed attempt spent of each partition's tombstone budget is in the store's
ledger (charged before the deletes, see ``budget``), which the resumed run reads like any other
run: no local file is needed, so a run resumed on another host keeps the budget too. Deletes are
idempotent, so repeating any of them is harmless.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from dircleaner.store.base import Store

PHASE_BUILD = "build"
PHASE_CLEAN = "clean"
PHASE_DONE = "done"
#: a guard (or the filter's checks) refused the clean before it deleted anything: nothing was
#: interrupted, and the next run starts afresh (a new build, a new T), as after a done one
PHASE_REFUSED = "refused"


#: a clean whose re-check found more non-empty directories than this is not checkpointed by
#: slice (they would all have to be stored); a resumed run then cleans every slice again
MAX_CHECKPOINTED_NONEMPTY = 10_000


@dataclass(frozen=True)
class CleanProgress:
    """How far the clean of a generation got, by slice of the ring (one slice per worker)."""

    slices: int
    #: slices whose deletes all finished
    done: frozenset[int]
    #: what the re-check found non-empty in any slice: the slices still to clean must keep these
    #: and their ancestors, as the interrupted run would have
    nonempty: frozenset[tuple[str, str]]


@dataclass(frozen=True)
class RunState:
    """Where the last run of a scope got to."""

    generation: str
    phase: str
    clean: CleanProgress | None = None


def _key(scope: str) -> str:
    return f"run|{scope}"


def load_run_state(store: Store, scope: str) -> RunState | None:
    """The last run's generation and phase, if any."""
    raw = store.get_state(_key(scope))
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return RunState(str(data["generation"]), str(data["phase"]), _clean_progress(data))
    except (ValueError, KeyError, TypeError):
        return None  # an unreadable record only costs a fresh build


def _clean_progress(data: dict[str, object]) -> CleanProgress | None:
    clean = data.get("clean")
    if not isinstance(clean, dict):
        return None
    nonempty = frozenset((str(b), str(d)) for b, d in clean["nonempty"])
    return CleanProgress(int(clean["slices"]), frozenset(map(int, clean["done"])), nonempty)


def save_run_state(store: Store, scope: str, state: RunState) -> None:
    """Record the run's generation and phase (and the clean's progress by slice)."""
    data: dict[str, object] = {"generation": state.generation, "phase": state.phase}
    if state.clean is not None:
        data["clean"] = {
            "slices": state.clean.slices,
            "done": sorted(state.clean.done),
            "nonempty": sorted(state.clean.nonempty),
        }
    store.put_state(_key(scope), json.dumps(data))


@dataclass(frozen=True)
class CleanCheckpoint:
    """Where an interrupted clean of this generation got to, and how to record progress."""

    previous: CleanProgress | None
    save: Callable[[CleanProgress], None]
