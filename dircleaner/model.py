"""The shared types of the pipeline: ring slices, index rows, partition facts, plan actions.

Every step speaks these: the stores yield them, the sweep and the prefix walk describe what they
saw with them, the planner plans from them. Plain data, no IO.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any, NamedTuple

MIN_TOKEN = -(2**63)


MAX_TOKEN = 2**63 - 1


class PartitionKey(NamedTuple):
    """One partition of an index table, with its ring token."""

    token: int
    bucket: str
    parent: str


class FolderRow(NamedTuple):
    """One folders-index row: directory ``parent + name + "/"`` in ``bucket``."""

    token: int
    bucket: str
    parent: str
    name: str


class FolderRange(NamedTuple):
    """The folders-index rows of one partition whose names lie between two bounds, inclusive.

    ``first`` and ``last`` are the range's first and last names in the order the scan returned
    them (the table's clustering order). A store deletes ``min(first, last) <= name <=
    max(first, last)``, so the range means the same whether the clustering order is ascending or
    descending.
    """

    token: int
    bucket: str
    parent: str
    first: str
    last: str

    @property
    def low(self) -> str:
        """The smaller bound (names compare by code point, which is UTF-8 byte order)."""
        return min(self.first, self.last)

    @property
    def high(self) -> str:
        """The larger bound."""
        return max(self.first, self.last)


@dataclass(frozen=True, slots=True)
class Shard:
    """Slice ``index`` of ``count`` equal slices of the token ring."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"invalid shard {self.index}/{self.count}")

    def token_range(self) -> tuple[int, int]:
        """Inclusive [lo, hi] token bounds of this slice (the whole ring for 1 slice)."""
        span = 2**64
        lo = MIN_TOKEN + span * self.index // self.count
        hi = MIN_TOKEN + span * (self.index + 1) // self.count - 1
        return lo, hi

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def split(self, parts: int) -> list[Shard]:
        """This slice cut into ``parts`` nested sub-slices (slice i of n → (i·p + j) of n·p)."""
        return [Shard(self.index * parts + j, self.count * parts) for j in range(parts)]


BucketDir = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PartitionFacts:
    """What the sweep saw of one folders partition that holds candidates."""

    key: PartitionKey
    total_rows: int
    candidates: tuple[FolderRow, ...]
    #: the partition's own directory was absent from the filter (so every row is a candidate)
    dir_absent: bool = False
    #: each candidate's position (0-based) among all the partition's rows in clustering order,
    #: parallel to ``candidates``; empty when unknown (then no two candidates count as adjacent)
    ordinals: tuple[int, ...] = ()
    #: the partition's parent directory was absent from the filter, so the partition's own
    #: directory is empty even if it is a false positive (its row in the parent's partition, a
    #: candidate, may sit in another worker's slice: this keeps the decision local)
    parent_dir_absent: bool = False

    def __post_init__(self) -> None:
        if len(self.candidates) > self.total_rows:
            raise ValueError(f"partition {self.key.parent!r}: more candidates than rows")
        if self.ordinals and (
            len(self.ordinals) != len(self.candidates)
            or self.ordinals[0] < 0
            or self.ordinals[-1] >= self.total_rows
        ):
            raise ValueError(f"partition {self.key.parent!r}: ordinals do not fit the candidates")

    def __reduce__(self) -> tuple[type[PartitionFacts], tuple[object, ...]]:
        # Sweep workers send facts back pickled; the dataclass default for frozen slots classes
        # (``fields()`` and a setattr per field on every load) was a visible cost at scale.
        return (
            PartitionFacts,
            (
                self.key,
                self.total_rows,
                self.candidates,
                self.dir_absent,
                self.ordinals,
                self.parent_dir_absent,
            ),
        )


def unchecked_facts(
    key: PartitionKey,
    total_rows: int,
    candidates: tuple[FolderRow, ...],
    dir_absent: bool,
    ordinals: tuple[int, ...],
    parent_dir_absent: bool,
) -> PartitionFacts:
    """``PartitionFacts(...)`` without its checks and the frozen class's ``object.__setattr__``
    per field (about a third of the time): for the sweep, whose facts fit by construction and
    which makes one for every partition with a candidate. Its parameters are the class's fields,
    in field order: the import checks that (``_field_setters``)."""
    fact: PartitionFacts = object.__new__(PartitionFacts)
    _PUT_KEY(fact, key)
    _PUT_TOTAL(fact, total_rows)
    _PUT_CANDIDATES(fact, candidates)
    _PUT_ABSENT(fact, dir_absent)
    _PUT_ORDINALS(fact, ordinals)
    _PUT_PARENT_ABSENT(fact, parent_dir_absent)
    return fact


def _field_setters(
    cls: type[Any], build: Callable[..., object]
) -> tuple[Callable[[object, object], None], ...]:
    """The setters of slots dataclass ``cls``'s fields in field order, once ``build`` is checked
    to take exactly those fields as its parameters, in that order: a field added to the class,
    renamed or moved fails here (at import) instead of being left unset or set from another."""
    names = tuple(field.name for field in fields(cls))
    code = build.__code__
    params = code.co_varnames[: code.co_argcount]
    if params != names:
        raise TypeError(f"{build.__name__}{params} does not take {cls.__name__}'s fields {names}")
    return tuple(getattr(cls, name).__set__ for name in names)


# One name per setter (not a loop over them: that made ``unchecked_facts`` 70% slower).
_PUT_KEY, _PUT_TOTAL, _PUT_CANDIDATES, _PUT_ABSENT, _PUT_ORDINALS, _PUT_PARENT_ABSENT = (
    _field_setters(PartitionFacts, unchecked_facts)
)


#: what a range delete costs against a partition's budget: Cassandra writes it as two bound
#: markers, and a read of the partition counts each as a tombstone
RANGE_TOMBSTONES = 2


class ActionKind(Enum):
    """How one delete is issued."""

    PARTITION = "partition"
    ROW = "row"
    #: the rows between a run's first and last name, inclusive (the run's rows and no others)
    RANGE = "range"
    #: a live partition rewritten: every row but these copied at T+1, then the partition
    #: deleted at T (a partition-level deletion: no tombstone cell)
    REWRITE = "rewrite"


@dataclass(frozen=True, slots=True)
class KindTally:
    """A count per kind of action (of actions, or of the directory entries they remove): the
    one shape the plan, the deletes and the slices' sums count in, added field by field."""

    partition: int = 0
    row: int = 0
    range: int = 0
    rewrite: int = 0

    @classmethod
    def of(cls, actions: Iterable[DeleteAction], *, entries: bool = False) -> KindTally:
        """``actions`` counted by kind, or with ``entries`` the directory entries they remove."""
        counts = dict.fromkeys(ActionKind, 0)
        for action in actions:
            counts[action.kind] += len(action.rows) if entries else 1
        return cls(**{kind.value: n for kind, n in counts.items()})

    def plus(self, kind: ActionKind, n: int = 1) -> KindTally:
        return replace(self, **{kind.value: self[kind] + n})

    def __getitem__(self, kind: ActionKind) -> int:
        return int(getattr(self, kind.value))

    def __add__(self, other: KindTally) -> KindTally:
        return KindTally(**{kind.value: self[kind] + other[kind] for kind in ActionKind})

    @property
    def total(self) -> int:
        return sum(self[kind] for kind in ActionKind)


@dataclass(frozen=True, slots=True)
class DeleteAction:
    """One delete statement and the directory entries it removes."""

    kind: ActionKind
    partition: PartitionKey
    #: the entries removed; a RANGE's rows in clustering order, its bounds the first and last
    rows: tuple[FolderRow, ...]

    @property
    def tombstones(self) -> int:
        """What the delete costs against its partition's budget (a partition delete: none)."""
        return _COST[self.kind]

    def folder_range(self) -> FolderRange:
        """A RANGE action as the store's range: its partition, first and last name."""
        key = self.partition
        return FolderRange(key.token, key.bucket, key.parent, self.rows[0].name, self.rows[-1].name)


_COST = {
    ActionKind.PARTITION: 0,
    ActionKind.ROW: 1,
    ActionKind.RANGE: RANGE_TOMBSTONES,
    ActionKind.REWRITE: 0,
}
