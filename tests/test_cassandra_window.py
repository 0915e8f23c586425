"""The Cassandra store's delete requests for the window, without a node: partition deletions
first (one request per ``IN`` request, naming every action it deletes), then one request per
row or range delete in the actions' order; each outcome reported once per member, an error
mapped as every request's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cassandra import OperationTimedOut

from dircleaner.errors import TransientStoreError
from dircleaner.model import ActionKind, DeleteAction, FolderRow, PartitionKey
from dircleaner.store.cassandra.window import delete_requests


class Future:
    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    def add_callbacks(self, ok: Callable[[Any], None], failed: Callable[[Any], None]) -> None:
        if self.error is None:
            ok([])
        else:
            failed(self.error)


class Session:
    def __init__(self, errors: dict[str, BaseException]) -> None:
        self.sent: list[tuple[Any, str]] = []
        self.errors = errors

    def execute_async(self, bound: Any, execution_profile: str) -> Future:
        self.sent.append((bound, execution_profile))
        return Future(self.errors.get(bound[0]))


def action(kind: ActionKind, parent: str, name: str = "") -> DeleteAction:
    key = PartitionKey(1, "b", parent)
    return DeleteAction(kind, key, (FolderRow(1, "b", parent, name or "x"),))


def partition_ins(parts: Sequence[PartitionKey], _ts: int) -> list[tuple[Any, tuple[int, ...]]]:
    # two partitions per IN request, as the deletes part groups them by ring range
    return [(("in", i), tuple(range(i, min(i + 2, len(parts))))) for i in range(0, len(parts), 2)]


class Statement:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def bind(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        return (self.kind, *values)


def test_partitions_go_first_and_every_outcome_reaches_its_members() -> None:
    actions = [
        action(ActionKind.ROW, "p/", "a"),
        action(ActionKind.PARTITION, "p/a/"),
        action(ActionKind.PARTITION, "p/b/"),
        action(ActionKind.REWRITE, "p/c/"),
        action(ActionKind.ROW, "p/", "b"),
    ]
    session = Session({"row": OperationTimedOut("slow")})
    requests = delete_requests(
        session,
        actions,
        7,
        partition_deletes=partition_ins,
        row_delete=Statement("row"),  # type: ignore[arg-type]
        range_delete=Statement("range"),  # type: ignore[arg-type]
        key_values=lambda bucket, parent: (bucket, parent),
    )
    # the whole-partition actions (1, 2, 3) in two IN requests, then the rows in order
    assert [r.members for r in requests] == [(1, 2), (3,), (0,), (4,)]
    outcomes: list[Any] = []
    for request in requests:
        request.send(outcomes.append)
    assert [bound[0] for bound, _ in session.sent] == ["in", "in", "row", "row"]
    assert {profile for _, profile in session.sent} == {"delete"}
    assert session.sent[2][0] == ("row", 7, "b", "p/", "a")
    assert outcomes[:2] == [[None, None], [None]]
    assert [type(e) for e in outcomes[2]] == [TransientStoreError]  # mapped, one per member
