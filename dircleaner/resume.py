"""Resuming an interrupted run: which generation it was using, and what it already deleted.

The run records its generation and phase in the store's state table. A run killed at any point
is picked up by the next ``run``: a complete generation is reused while it is fresh (same salt,
so the same candidates), missing shards of a partial build are built with the generation's own
parameters, and the clean charges what the killed attempt already deleted (read back from the
audit log) against each partition's budget, so no partition gets more than its budget per
generation. Deletes are idempotent, so repeating any of them is harmless.

Only a generation that has begun deleting before has anything to charge: the store remembers the
last few such generations, so a nightly run on a new generation never reads the audit log, which
grows with every night's deletes.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from dircleaner.plan import RANGE_TOMBSTONES
from dircleaner.restore import iter_audit_entries
from dircleaner.store.base import Store

PHASE_BUILD = "build"
PHASE_CLEAN = "clean"
PHASE_DONE = "done"


#: a clean whose re-check found more non-empty directories than this is not checkpointed by
#: slice (they would all have to be stored); a resumed run then cleans every slice again
MAX_CHECKPOINTED_NONEMPTY = 10_000
#: generations remembered as having begun deleting; far more than are ever kept (the filters of
#: older ones are garbage-collected, so they can no longer be cleaned with)
REMEMBERED_DELETING = 16


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


def row_deletes_already_made(audit_log: Path | None, generation: str) -> Counter[tuple[str, str]]:
    """Tombstones per (bucket, parent) that earlier attempts at ``generation`` issued.

    In the planner's units: 1 per row delete, ``RANGE_TOMBSTONES`` per range delete. A range
    writes one line per directory, each with the range's bounds, and is charged once (an attempt
    killed before its delete ran and a later one issuing the same range again still leave one
    range behind).
    """
    used: Counter[tuple[str, str]] = Counter()
    if audit_log is None or not audit_log.exists():
        return used
    ranges: set[tuple[str, str, str, str]] = set()
    with audit_log.open(encoding="utf-8") as stream:
        for entry in iter_audit_entries(stream):
            if entry.get("generation") != generation:
                continue
            partition = (entry["bucket"], entry["parent"])
            via = entry.get("via")
            if via == "row":
                used[partition] += 1
            elif via == "range":
                first, last = entry["range"]
                if (*partition, first, last) not in ranges:
                    ranges.add((*partition, first, last))
                    used[partition] += RANGE_TOMBSTONES
    return used


def _deleting_key(scope: str) -> str:
    return f"deleting|{scope}"


def _deleting(store: Store, scope: str) -> list[str]:
    raw = store.get_state(_deleting_key(scope))
    try:
        known = json.loads(raw) if raw is not None else []
    except ValueError:
        known = None
    if not isinstance(known, list):
        # Unreadable: assume any generation may have deleted (the audit log then decides).
        return ["*"]
    return [str(g) for g in known]


def deletes_began(store: Store, scope: str, generation: str) -> bool:
    """Whether a clean of ``generation`` may already have deleted something."""
    known = _deleting(store, scope)
    return generation in known or "*" in known


def note_deletes_begin(store: Store, scope: str, generation: str) -> None:
    """Remember, before its first delete, that a clean of ``generation`` is deleting."""
    known = [g for g in _deleting(store, scope) if g != "*"]
    if generation not in known:
        known = [*known, generation][-REMEMBERED_DELETING:]
        store.put_state(_deleting_key(scope), json.dumps(known))
