"""The window of deletes in flight: its bound, the next sent as one completes, the barrier
behind a partition deletion, and the stop; through the deleter, on the fake store of
``test_delete_window`` whose requests complete on other threads.
"""

from __future__ import annotations

from typing import cast

import pytest

from dircleaner.errors import DircleanerError
from dircleaner.model import ActionKind, DeleteAction, PartitionKey
from dircleaner.pipeline import deletewindow
from dircleaner.pipeline.delete import DeleteFailed
from dircleaner.pipeline.plan import DeletionPlan
from tests.test_delete_window import WindowStore, row, row_plan, run, self_attributes


@pytest.mark.parametrize("concurrency", [1, 3, 16])
def test_never_more_than_concurrency_requests_in_flight(concurrency: int) -> None:
    store = WindowStore()
    total = 120
    # No request completes before the window is full (or everything was sent): the window
    # must fill up to its bound and never past it.
    for i in range(total):
        store.hold[row(i)] = lambda: store.in_flight >= concurrency or store.sent == total
    stats, _ = run(store, row_plan(total), concurrency=concurrency)
    assert stats.directories == total
    assert store.held_ok
    assert store.max_in_flight == concurrency


def test_the_next_request_starts_as_one_completes_not_after_the_slowest() -> None:
    """A request that completes only after three groups' worth of others did: batches would
    wait for it before sending anything of the next batch; the window keeps sending."""
    store = WindowStore()
    concurrency = 4
    store.hold[row(0)] = lambda: store.completed >= 3 * concurrency
    stats, _ = run(store, row_plan(40), concurrency=concurrency)
    assert store.held_ok, "the window waited for its slowest request"
    assert stats.directories == 40
    assert store.max_in_flight <= concurrency


def test_no_row_request_is_sent_while_an_earlier_partition_deletion_is_in_flight() -> None:
    """Children's partition deletions land before the row deletes of their parents: a run
    killed at any point leaves no child partition that its parent's rows no longer name."""
    store = WindowStore()
    store.patience = 1.0  # with the barrier, nothing else is sent while the partitions wait
    rows = list(map(row, range(24)))
    kinds = [ActionKind.PARTITION] * 3 + [ActionKind.ROW] * 9
    kinds += [ActionKind.PARTITION] * 2 + [ActionKind.ROW] * 4 + [ActionKind.PARTITION]
    kinds += [ActionKind.ROW] * 5
    actions = []
    for r, kind in zip(rows, kinds, strict=True):
        actions.append(DeleteAction(kind, PartitionKey(r.token, r.bucket, r.parent), (r,)))
        if kind is ActionKind.PARTITION:
            store.partitions.add(r)
            # Each partition deletion completes only once the window is full, or after the
            # patience: without the barrier, the rows after it would go meanwhile.
            store.hold[r] = lambda: store.in_flight >= 8
    stats, _ = run(store, DeletionPlan(tuple(actions), ()), concurrency=8)
    assert stats.directories == len(rows)
    assert sorted(store.deleted) == sorted(rows)
    assert store.overtaken == []
    assert store.max_in_flight <= 8


@pytest.mark.parametrize("error", [KeyboardInterrupt(), DircleanerError("no connection")])
def test_a_send_that_raises_stops_the_window_and_nothing_more_goes(error: BaseException) -> None:
    store = WindowStore()
    store.send_raises[row(9)] = error
    with pytest.raises(type(error) if not isinstance(error, Exception) else DeleteFailed):
        run(store, row_plan(400), concurrency=4)
    assert store.in_flight == 0  # what was in flight was waited for
    sent = [what for kind, what in store.events if kind == "send"]
    assert row(9) not in sent
    assert len(sent) < 20  # nothing after the stop but what was already in flight
    audited = {r for kind, what in store.events if kind == "audit" for r in cast(list, what)}
    assert set(sent) <= audited


def test_the_window_states_only_what_cannot_be_derived() -> None:
    """The requests in flight keep the driver's size: at most ten attributes (every ``self.x =``
    in the class)."""
    attributes = self_attributes(deletewindow, "_Window")
    assert 0 < len(attributes) <= 10, sorted(attributes)
