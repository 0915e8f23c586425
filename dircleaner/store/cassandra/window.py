"""The Cassandra store's delete requests for the deleter's window: one ``execute_async`` each.

Self-contained: it takes the session and what builds the bound statements, and returns
``DeleteRequest`` values (``store/base.py``) that the deleter sends, at most ``--concurrency``
in flight, the next as one completes. The partition deletions come first, as the store's own
``IN`` requests (``FolderDeletes.partition_deletes``), then one request per row or range
delete, in the actions' order.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

from cassandra.query import PreparedStatement

from dircleaner.model import ActionKind, DeleteAction, PartitionKey
from dircleaner.store.cassandra.requests import let_go
from dircleaner.store.cassandra.session import map_error
from dircleaner.store.records import DeleteOutcome, DeleteRequest

#: the actions that end with a partition deletion (a rewrite's, after its copy)
WHOLE_PARTITION = frozenset({ActionKind.PARTITION, ActionKind.REWRITE})

#: ``(partitions, timestamp_us)`` -> the bound ``IN`` deletes, each with the indexes it deletes
PartitionDeletes = Callable[[Sequence[PartitionKey], int], list[tuple[Any, tuple[int, ...]]]]


def delete_requests(
    session: Any,
    actions: Sequence[DeleteAction],
    timestamp_us: int,
    *,
    partition_deletes: PartitionDeletes,
    row_delete: PreparedStatement,
    range_delete: PreparedStatement,
    key_values: Callable[[str, str], tuple[Any, ...]],
    profile: str = "delete",
) -> list[DeleteRequest]:
    """One request per ``IN`` request of partition deletions, then one per row or range delete.

    ``row_delete`` binds ``(timestamp, *key, name)``, ``range_delete`` ``(timestamp, *key,
    low, high)``, where ``key_values(bucket, parent)`` gives the partition key's values.
    """
    whole = [i for i, a in enumerate(actions) if a.kind in WHOLE_PARTITION]
    requests = [
        DeleteRequest(tuple(whole[i] for i in taken), _sender(session, bound, len(taken), profile))
        for bound, taken in partition_deletes([actions[i].partition for i in whole], timestamp_us)
    ]
    for index, action in enumerate(actions):
        if action.kind is ActionKind.ROW:
            row = action.rows[0]
            key = key_values(row.bucket, row.parent)
            bound = row_delete.bind((timestamp_us, *key, row.name))
        elif action.kind is ActionKind.RANGE:
            span = action.folder_range()
            key = key_values(span.bucket, span.parent)
            bound = range_delete.bind((timestamp_us, *key, span.low, span.high))
        else:
            continue
        requests.append(DeleteRequest((index,), _sender(session, bound, 1, profile)))
    return requests


def _sender(
    session: Any, bound: Any, members: int, profile: str
) -> Callable[[Callable[[DeleteOutcome], None]], None]:
    """``send`` of one delete request: ``execute_async``, its outcome from the driver's
    callbacks (the error, mapped as every request's, for each of its ``members``). The future
    is let go once it has called back (``let_go``: it would otherwise live until the clean's
    GC pause ends); the callbacks hold it weakly, or they would close a cycle of their own."""

    def send(done: Callable[[DeleteOutcome], None]) -> None:
        def failed(exc: BaseException) -> None:
            done([map_error(exc)] * members)

        try:
            future = session.execute_async(bound, execution_profile=profile)
        except Exception as exc:  # the request never left: its outcome all the same
            failed(exc)
            return
        sent = weakref.ref(future)

        def finished(outcome: DeleteOutcome) -> None:
            held = sent()
            if held is not None:
                let_go(held)
            done(outcome)

        future.add_callbacks(
            lambda _rows: finished([None] * members),
            lambda exc: finished([map_error(exc)] * members),
        )

    return send
