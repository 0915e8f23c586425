"""Tests of the deleter: retries with backoff, failures, audit log, order."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from dircleaner.audit import (
    AuditLog,
    audit_log_lines,
    iter_audit_entries,
    open_audit_log,
    read_audit_log,
)
from dircleaner.errors import (
    DircleanerError,
    StoreUnavailable,
    TransientStoreError,
)
from dircleaner.model import (
    ActionKind,
    DeleteAction,
    FolderRange,
    FolderRow,
    PartitionFacts,
    PartitionKey,
)
from dircleaner.pipeline.budget import charged_so_far, ledger_charger
from dircleaner.pipeline.delete import DeleteFailed, ThrottleConfig, execute_plan
from dircleaner.pipeline.plan import DeletionPlan, plan_deletions
from dircleaner.store.records import murmur_token
from dircleaner.store.sqlite import SqliteStore

BUCKET = "bkt"
WRITE_TS = 1_000
DELETE_TS = 5_000
GENERATION = "gen-0001"


# -- a SQLite store that fails on purpose ----------------------------------------------------------


class FaultyStore(SqliteStore):
    """The real SQLite store, with injected per-row / per-partition failures and a call log."""

    def __init__(self, path: Path, conn: object) -> None:
        super().__init__(path, conn)  # type: ignore[arg-type]
        #: row or partition → how many more attempts fail with TransientStoreError
        self.transient: dict[object, int] = {}
        #: row or partition → the non-retryable error it fails with (every time)
        self.hard: dict[object, BaseException] = {}
        #: every item each call was given: ("rows" | "partitions", item)
        self.calls: list[tuple[str, object]] = []

    def _fail(self, item: object) -> BaseException | None:
        if self.transient.get(item, 0) > 0:
            self.transient[item] -= 1
            return TransientStoreError(f"timeout deleting {item}")
        return self.hard.get(item)

    def delete_folder_rows(
        self, rows: Sequence[FolderRow], timestamp_us: int
    ) -> list[BaseException | None]:
        self.calls.extend(("rows", r) for r in rows)
        errors = [self._fail(r) for r in rows]
        super().delete_folder_rows(
            [r for r, e in zip(rows, errors, strict=True) if e is None], timestamp_us
        )
        return errors

    def delete_folder_ranges(
        self, ranges: Sequence[FolderRange], timestamp_us: int
    ) -> list[BaseException | None]:
        self.calls.extend(("ranges", r) for r in ranges)
        errors = [self._fail(r) for r in ranges]
        super().delete_folder_ranges(
            [r for r, e in zip(ranges, errors, strict=True) if e is None], timestamp_us
        )
        return errors

    def delete_folder_partitions(
        self, partitions: Sequence[PartitionKey], timestamp_us: int
    ) -> list[BaseException | None]:
        self.calls.extend(("partitions", p) for p in partitions)
        errors = [self._fail(p) for p in partitions]
        super().delete_folder_partitions(
            [p for p, e in zip(partitions, errors, strict=True) if e is None], timestamp_us
        )
        return errors


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FaultyStore]:
    opened = FaultyStore.open("sqlite:///" + str(tmp_path / "meta.db"), create=True)
    assert isinstance(opened, FaultyStore)
    with opened:
        yield opened


def frow(parent: str, name: str) -> FolderRow:
    return FolderRow(murmur_token(BUCKET, parent), BUCKET, parent, name)


def pkey(parent: str) -> PartitionKey:
    return PartitionKey(murmur_token(BUCKET, parent), BUCKET, parent)


# Folder index used below: root lists a/ (live) and x/ (an empty subtree x/, x/y/, x/z/, x/y/q/);
# the live directory m/ lists 5 empty children m/c0/ … m/c4/.
INDEX = {
    "": ["a", "m", "x"],
    "a/": ["keep"],
    "x/": ["y", "z"],
    "x/y/": ["q"],
    "m/": ["c0", "c1", "c2", "c3", "c4"],
}


def populate(store: SqliteStore) -> None:
    store.write_folder_rows(
        [(BUCKET, parent, name) for parent, names in INDEX.items() for name in names], WRITE_TS
    )


def sweep_facts() -> list[PartitionFacts]:
    """What a perfect sweep reports for INDEX."""
    return [
        PartitionFacts(pkey(""), 3, (frow("", "x"),)),
        PartitionFacts(pkey("x/"), 2, (frow("x/", "y"), frow("x/", "z")), dir_absent=True),
        PartitionFacts(pkey("x/y/"), 1, (frow("x/y/", "q"),), dir_absent=True),
        PartitionFacts(pkey("m/"), 5, tuple(frow("m/", f"c{i}") for i in range(5))),
    ]


def make_plan(budget: int = 100) -> DeletionPlan:
    plan = plan_deletions(sweep_facts(), budget)
    # The plan the tests rely on: 2 partition deletes then 6 round-robin row deletes.
    assert (plan.deletes.partition, plan.deletes.row, plan.directories) == (2, 6, 9)
    return plan


def remaining(store: SqliteStore) -> set[tuple[str, str]]:
    return {(r.parent, r.name) for r in store.iter_folder_rows()}


def audit_entries(buffer: io.BytesIO) -> list[dict[str, object]]:
    data = buffer.getvalue()
    assert data == b"" or data.endswith(b"\n")
    return list(iter_audit_entries(audit_log_lines(io.BytesIO(data))))


def audited_rows(buffer: io.BytesIO) -> list[tuple[str, str]]:
    return [(str(e["parent"]), str(e["name"])) for e in audit_entries(buffer)]


def plan_rows(actions: Sequence[DeleteAction]) -> list[tuple[str, str]]:
    return [(r.parent, r.name) for a in actions for r in a.rows]


ALL_PLANNED = {
    ("", "x"),
    ("x/", "y"),
    ("x/", "z"),
    ("x/y/", "q"),
    *(("m/", f"c{i}") for i in range(5)),
}
SURVIVORS = {("", "a"), ("", "m"), ("a/", "keep")}


def fast(**overrides: object) -> ThrottleConfig:
    """Unlimited rate (no token-bucket sleeps) unless overridden."""
    fields: dict[str, object] = {"rate": 0.0, "concurrency": 32}
    fields.update(overrides)
    return ThrottleConfig(**fields)  # type: ignore[arg-type]


class SleepLog:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


# -- execute_plan ----------------------------------------------------------------------------------


def test_execute_deletes_the_plan_and_audits_every_entry_once(store: FaultyStore) -> None:
    populate(store)
    plan = make_plan()
    buffer = io.BytesIO()
    sleep = SleepLog()
    stats = execute_plan(
        store, plan, DELETE_TS, fast(), AuditLog(buffer, GENERATION, DELETE_TS), sleep=sleep
    )
    assert remaining(store) == SURVIVORS
    assert (stats.deletes.partition, stats.deletes.row, stats.directories) == (2, 6, 9)
    assert stats.retries == 0
    assert stats.failures == []
    assert sleep.calls == []
    assert audited_rows(buffer) == plan_rows(plan.actions)
    assert set(audited_rows(buffer)) == ALL_PLANNED
    entries = {(e["parent"], e["name"]): e for e in audit_entries(buffer)}
    assert entries[("x/", "y")] == {
        "bucket": BUCKET,
        "dir": "x/y/",
        "parent": "x/",
        "name": "y",
        "via": "partition",
        "delete_ts_us": DELETE_TS,
        "generation": GENERATION,
    }
    assert entries[("m/", "c3")]["via"] == "row"
    assert entries[("", "x")]["dir"] == "x/"  # derived: not written
    # Partitions x/ and x/y/ went with a partition deletion (no tombstone cell on reads), m/ got
    # 5 row tombstones.
    assert store.tombstones_in_partition(BUCKET, "x/") == 0
    assert store.tombstones_in_partition(BUCKET, "m/") == 5
    assert store.tombstones_in_partition(BUCKET, "") == 1


def test_execute_respects_the_plans_budget_and_leaves_deferred_rows(store: FaultyStore) -> None:
    populate(store)
    plan = plan_deletions(sweep_facts(), 2)
    execute_plan(store, plan, DELETE_TS, fast(), sleep=SleepLog())
    assert {(r.parent, r.name) for r in plan.deferred} == {("m/", "c2"), ("m/", "c3"), ("m/", "c4")}
    assert remaining(store) == SURVIVORS | {("m/", "c2"), ("m/", "c3"), ("m/", "c4")}
    assert store.tombstones_in_partition(BUCKET, "m/") == 2


def range_facts() -> list[PartitionFacts]:
    """The perfect sweep of INDEX with ordinals: m/'s five children are one run."""
    facts = sweep_facts()
    m = facts[-1]
    return [*facts[:-1], PartitionFacts(m.key, 5, m.candidates, ordinals=(0, 1, 2, 3, 4))]


def test_execute_deletes_a_run_with_one_range_and_audits_each_entry(store: FaultyStore) -> None:
    populate(store)
    plan = plan_deletions(range_facts(), 100)
    buffer = io.BytesIO()
    stats = execute_plan(
        store, plan, DELETE_TS, fast(), AuditLog(buffer, GENERATION, DELETE_TS), sleep=SleepLog()
    )
    assert remaining(store) == SURVIVORS
    assert (stats.deletes.partition, stats.deletes.row, stats.deletes.range) == (2, 1, 1)
    assert stats.directories == 9
    assert ("ranges", FolderRange(pkey("m/").token, BUCKET, "m/", "c0", "c4")) in store.calls
    entries = {(e["parent"], e["name"]): e for e in audit_entries(buffer)}
    assert [entries[("m/", f"c{i}")]["via"] for i in range(5)] == ["range"] * 5
    assert entries[("m/", "c2")] == {
        "bucket": BUCKET,
        "dir": "m/c2/",
        "parent": "m/",
        "name": "c2",
        "via": "range",
        "range": ["c0", "c4"],
        "delete_ts_us": DELETE_TS,
        "generation": GENERATION,
    }
    assert entries[("", "x")]["via"] == "row"
    # Five directories, one range: its two bound markers.
    assert store.tombstones_in_partition(BUCKET, "m/") == 2


def test_a_range_spares_a_run_member_rewritten_after_t(store: FaultyStore) -> None:
    populate(store)
    store.write_folder_rows([(BUCKET, "m/", "c2")], DELETE_TS + 1)
    execute_plan(store, plan_deletions(range_facts(), 100), DELETE_TS, fast(), sleep=SleepLog())
    assert remaining(store) == SURVIVORS | {("m/", "c2")}


def test_a_range_that_fails_transiently_is_retried(store: FaultyStore) -> None:
    populate(store)
    span = FolderRange(pkey("m/").token, BUCKET, "m/", "c0", "c4")
    store.transient[span] = 2
    stats = execute_plan(
        store, plan_deletions(range_facts(), 100), DELETE_TS, fast(), sleep=SleepLog()
    )
    assert remaining(store) == SURVIVORS
    assert stats.retries == 2
    assert store.calls.count(("ranges", span)) == 3
    assert stats.deletes.range == 1


def test_a_mixed_batch_goes_in_three_calls_results_in_order(store: FaultyStore) -> None:
    populate(store)
    plan = plan_deletions(range_facts(), 100)
    kinds = [a.kind for a in plan.actions]
    assert sorted(k.value for k in kinds[2:]) == ["range", "row"]  # in token order
    execute_plan(store, plan, DELETE_TS, fast(concurrency=32), sleep=SleepLog())
    assert [kind for kind, _ in store.calls] == ["partitions", "partitions", "rows", "ranges"]


def test_deletes_are_issued_at_the_plan_timestamp(store: FaultyStore) -> None:
    populate(store)
    # m/c1/ was re-written after T (an object was put under it): its tombstone must not win.
    store.write_folder_rows([(BUCKET, "m/", "c1")], DELETE_TS + 1)
    execute_plan(store, make_plan(), DELETE_TS, fast(), sleep=SleepLog())
    assert remaining(store) == SURVIVORS | {("m/", "c1")}


@pytest.mark.parametrize("concurrency", [1, 3, 32])
def test_actions_are_issued_in_plan_order(store: FaultyStore, concurrency: int) -> None:
    populate(store)
    plan = make_plan()
    execute_plan(store, plan, DELETE_TS, fast(concurrency=concurrency), sleep=SleepLog())
    expected = [
        ("partitions", a.partition) if a.kind is ActionKind.PARTITION else ("rows", a.rows[0])
        for a in plan.actions
    ]
    assert store.calls == expected


def test_progress_is_reported_per_chunk(store: FaultyStore) -> None:
    populate(store)
    calls: list[tuple[str, int, int | None]] = []
    plan = make_plan()
    execute_plan(
        store,
        plan,
        DELETE_TS,
        fast(concurrency=3),
        progress=lambda phase, done, total: calls.append((phase, done, total)),
        sleep=SleepLog(),
    )
    # Directories, as the summary counts them (a partition delete takes several).
    rows = [len(action.rows) for action in plan.actions]
    assert (len(rows), sum(rows)) == (8, 9)
    assert calls == [("clean", sum(rows[:3]), 9), ("clean", sum(rows[:6]), 9), ("clean", 9, 9)]


def test_transient_failures_are_retried_with_capped_jittered_backoff(store: FaultyStore) -> None:
    populate(store)
    plan = make_plan()
    store.transient[frow("m/", "c1")] = 3
    store.transient[frow("", "x")] = 1
    store.transient[pkey("x/y/")] = 2
    throttle = fast(base_backoff_s=1.0, max_backoff_s=3.0, max_retries=6)
    sleep = SleepLog()
    buffer = io.BytesIO()
    stats = execute_plan(
        store,
        plan,
        DELETE_TS,
        throttle,
        AuditLog(buffer, GENERATION, DELETE_TS),
        sleep=sleep,
        rng=random.Random(7),
    )
    assert remaining(store) == SURVIVORS
    # Round 1 fails 3 actions, round 2 fails 2, round 3 fails 1, round 4 succeeds.
    assert stats.retries == 3 + 2 + 1
    twin = random.Random(7)
    assert sleep.calls == [twin.uniform(0, 2.0), twin.uniform(0, 3.0), twin.uniform(0, 3.0)]
    assert all(0 <= s <= throttle.max_backoff_s for s in sleep.calls)
    # Each successfully deleted entry is audited exactly once, whatever the retries.
    assert sorted(audited_rows(buffer)) == sorted(ALL_PLANNED)
    assert (stats.deletes.partition, stats.deletes.row, stats.directories) == (2, 6, 9)
    # Only the failed actions were re-sent.
    assert store.calls.count(("rows", frow("m/", "c1"))) == 4
    assert store.calls.count(("rows", frow("", "x"))) == 2
    assert store.calls.count(("partitions", pkey("x/y/"))) == 3
    assert store.calls.count(("rows", frow("m/", "c0"))) == 1


def test_backoff_grows_exponentially_until_the_cap(store: FaultyStore) -> None:
    class MaxJitter(random.Random):
        def uniform(self, a: float, b: float) -> float:
            assert a == 0
            return b

    populate(store)
    store.transient[frow("m/", "c0")] = 6
    sleep = SleepLog()
    throttle = fast(base_backoff_s=0.5, max_backoff_s=10.0, max_retries=6)
    stats = execute_plan(store, make_plan(), DELETE_TS, throttle, sleep=sleep, rng=MaxJitter())
    assert sleep.calls == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert stats.retries == 6
    assert remaining(store) == SURVIVORS


def test_rate_halves_on_each_overloaded_round_and_recovers_additively(
    store: FaultyStore,
) -> None:
    populate(store)
    plan = make_plan()
    store.transient[frow("m/", "c0")] = 2
    # One chunk: two overloaded rounds halve 1e6 twice, the successful round adds 1e6/20.
    throttle = fast(rate=1e6, start_fraction=1.0, concurrency=32)
    stats = execute_plan(store, plan, DELETE_TS, throttle, sleep=SleepLog(), rng=random.Random(1))
    assert stats.final_rate == 1e6 / 4 + 1e6 / 20
    assert remaining(store) == SURVIVORS


def test_rate_recovers_per_successful_chunk(store: FaultyStore) -> None:
    populate(store)
    plan = make_plan()
    store.transient[frow("m/", "c0")] = 1
    # 8 single-action chunks: 7 clean successes and one overloaded round then a success.
    throttle = fast(rate=1e6, start_fraction=0.5, concurrency=1)
    stats = execute_plan(store, plan, DELETE_TS, throttle, sleep=SleepLog(), rng=random.Random(1))
    # 5e5 → (2 chunks) 6e5 → m/c0 overload 3e5 → success 3.5e5 → 5 more chunks → 6e5.
    index = next(i for i, a in enumerate(plan.actions) if a.rows[0] == frow("m/", "c0"))
    rate = 5e5
    for i in range(len(plan.actions)):
        if i == index:
            rate /= 2
        rate = min(1e6, rate + 5e4)
    assert stats.final_rate == rate
    assert stats.final_rate < 1e6  # the overload left a mark


def test_transient_failures_beyond_max_retries_raise_store_unavailable(
    store: FaultyStore,
) -> None:
    populate(store)
    plan = make_plan()
    stuck = frow("m/", "c2")
    store.transient[stuck] = 100
    buffer = io.BytesIO()
    sleep = SleepLog()
    with pytest.raises(StoreUnavailable, match="1 deletes still failing after 3 retries: timeout"):
        execute_plan(
            store,
            plan,
            DELETE_TS,
            fast(max_retries=3, max_backoff_s=0.5),
            AuditLog(buffer, GENERATION, DELETE_TS),
            sleep=sleep,
        )
    assert store.calls.count(("rows", stuck)) == 4  # the first attempt and 3 retries
    assert len(sleep.calls) == 3
    assert all(0 <= s <= 0.5 for s in sleep.calls)
    # Everything else went. The audit log is written ahead, so it also lists the stuck entry,
    # whose delete was issued (restoring an entry that was never deleted is a no-op).
    assert remaining(store) == SURVIVORS | {("m/", "c2")}
    assert sorted(audited_rows(buffer)) == sorted(ALL_PLANNED)


def test_exactly_max_retries_failures_still_succeed(store: FaultyStore) -> None:
    populate(store)
    store.transient[frow("m/", "c2")] = 3
    stats = execute_plan(store, make_plan(), DELETE_TS, fast(max_retries=3), sleep=SleepLog())
    assert stats.retries == 3
    assert remaining(store) == SURVIVORS


def test_a_non_transient_error_stops_the_run_with_delete_failed(store: FaultyStore) -> None:
    populate(store)
    plan = make_plan()
    broken = frow("m/", "c1")
    store.hard[broken] = ValueError("disk on fire")
    buffer = io.BytesIO()
    with pytest.raises(DeleteFailed, match=r"^delete failed: disk on fire$") as caught:
        execute_plan(
            store,
            plan,
            DELETE_TS,
            fast(concurrency=1),
            AuditLog(buffer, GENERATION, DELETE_TS),
            sleep=SleepLog(),
        )
    assert isinstance(caught.value, DircleanerError)
    assert not isinstance(caught.value, StoreUnavailable)
    assert store.calls.count(("rows", broken)) == 1  # never retried
    position = next(i for i, a in enumerate(plan.actions) if a.rows[0] == broken)
    done = plan.actions[:position]
    # Actions before the failure are deleted; the audit log, written ahead of each batch,
    # also lists the failed one; nothing after it was issued or audited.
    assert audited_rows(buffer) == plan_rows(plan.actions[: position + 1])
    assert len(store.calls) == position + 1
    assert remaining(store) == (SURVIVORS | ALL_PLANNED) - set(plan_rows(done))


def test_a_non_transient_error_in_a_batch_was_audited_ahead(
    store: FaultyStore,
) -> None:
    populate(store)
    plan = make_plan()
    store.hard[frow("m/", "c1")] = RuntimeError("bad request")
    store.transient[frow("m/", "c3")] = 1
    buffer = io.BytesIO()
    with pytest.raises(DeleteFailed, match="bad request"):
        execute_plan(
            store,
            plan,
            DELETE_TS,
            fast(),
            AuditLog(buffer, GENERATION, DELETE_TS),
            sleep=SleepLog(),
        )
    # One batch: everything but the broken and the (not yet retried) transient one went; the
    # whole batch was audited ahead of being issued.
    assert sorted(audited_rows(buffer)) == sorted(ALL_PLANNED)
    assert remaining(store) == SURVIVORS | {("m/", "c1"), ("m/", "c3")}


def test_an_empty_plan_issues_nothing(store: FaultyStore) -> None:
    populate(store)
    stats = execute_plan(store, DeletionPlan((), ()), DELETE_TS, fast(), sleep=SleepLog())
    assert store.calls == []
    assert (stats.deletes.partition, stats.deletes.row, stats.directories) == (0, 0, 0)
    assert len(remaining(store)) == sum(len(v) for v in INDEX.values())


# -- the audit log ---------------------------------------------------------------------------------


def test_audit_log_writes_a_header_and_one_json_line_per_row_keeping_unicode() -> None:
    buffer = io.BytesIO()
    log = AuditLog(buffer, "g1", 42)
    rows = (FolderRow(7, "bü", "ñ/", "q\"'\\\n"), FolderRow(7, "bü", "ñ/", "z"))
    log.record(DeleteAction(ActionKind.PARTITION, PartitionKey(7, "bü", "ñ/"), rows))
    lines = buffer.getvalue().decode("utf-8").split("\n")
    assert lines[-1] == ""
    assert len(lines) == 4
    assert json.loads(lines[0]) == {"format": 2, "delete_ts_us": 42, "generation": "g1"}
    assert "ñ/" in lines[1]  # ensure_ascii=False
    assert json.loads(lines[1]) == {
        "bucket": "bü",
        "parent": "ñ/",
        "name": "q\"'\\\n",
        "via": "partition",
    }
    assert json.loads(lines[2])["name"] == "z"


def test_open_audit_log_creates_directories_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "audit.jsonl"
    for gen in ("g1", "g2"):
        with open_audit_log(path) as stream:
            log = AuditLog(stream, gen, 1)
            log.record(DeleteAction(ActionKind.ROW, pkey(""), (frow("", "x"),)))
            log.flush()
    assert [e["generation"] for e in read_audit_log(path)] == ["g1", "g2"]


@pytest.mark.parametrize("kind", list(ActionKind))
def test_audit_lines_are_exactly_what_json_dumps_writes(kind: ActionKind) -> None:
    names = ["plain", "q\"'\\\n", "tab\there", "ü\u2028\x00", "😀", "a/b"]
    rows = tuple(FolderRow(3, bucket, "p/ä/", name) for bucket in ("b", "bü") for name in names)
    buffer = io.BytesIO()
    AuditLog(buffer, "gen-ü", 12345).record(DeleteAction(kind, PartitionKey(3, "b", "p/ä/"), rows))
    # A range's lines also carry its bounds, between "via" and the tail.
    bounds = {"range": [rows[0].name, rows[-1].name]} if kind is ActionKind.RANGE else {}
    header = {"format": 2, "delete_ts_us": 12345, "generation": "gen-ü"}
    expected = json.dumps(header, ensure_ascii=False) + "\n"
    expected += "".join(
        json.dumps(
            {
                "bucket": row.bucket,
                "parent": row.parent,
                "name": row.name,
                "via": kind.value,
                **bounds,
            },
            ensure_ascii=False,
        )
        + "\n"
        for row in rows
    )
    assert buffer.getvalue().decode("utf-8") == expected


def test_audit_lines_of_a_batch_mixing_kinds_are_each_what_json_dumps_writes() -> None:
    key = PartitionKey(3, "b", "p/")
    rows = tuple(FolderRow(3, "b", "p/", n) for n in ("a", 'q"', "z"))
    actions = [
        DeleteAction(ActionKind.RANGE, key, rows),
        DeleteAction(ActionKind.ROW, key, rows[:1]),
        DeleteAction(ActionKind.RANGE, key, rows[1:]),
        DeleteAction(ActionKind.PARTITION, key, rows[2:]),
    ]
    buffer = io.BytesIO()
    AuditLog(buffer, "g", 9).record_many(actions)
    lines = buffer.getvalue().decode("utf-8").splitlines()[1:]
    assert [json.loads(line).get("range") for line in lines] == [
        ["a", "z"],
        ["a", "z"],
        ["a", "z"],
        None,
        ['q"', "z"],
        ['q"', "z"],
        None,
    ]
    for line in lines:
        assert line == json.dumps(json.loads(line), ensure_ascii=False)


# -- the ledger: what a resumed run reads back of the budget an attempt spent ------------------


def test_the_ledger_is_charged_before_the_deletes_it_pays_for(store: FaultyStore) -> None:
    populate(store)
    plan = plan_deletions(range_facts(), 100)
    assert plan.row_tombstones
    real = ledger_charger(store, GENERATION, "run", 3600)
    charged: list[DeleteAction] = []

    def charge(actions: Sequence[DeleteAction]) -> None:
        left = remaining(store)  # none of the batch's rows is deleted when it is charged
        assert all((r.parent, r.name) in left for a in actions for r in a.rows)
        charged.extend(actions)
        real(actions)

    execute_plan(store, plan, DELETE_TS, fast(), sleep=SleepLog(), charge=charge)
    assert charged == list(plan.actions)
    assert charged_so_far(store, range_facts()) == dict(plan.row_tombstones)


def test_every_batch_is_charged_once_before_it_is_issued(
    store: FaultyStore,
) -> None:
    populate(store)
    plan = plan_deletions(range_facts(), 100)
    batches: list[int] = []
    execute_plan(
        store,
        plan,
        DELETE_TS,
        ThrottleConfig(rate=0, concurrency=3),
        sleep=SleepLog(),
        charge=lambda actions: batches.append(len(actions)),
    )
    assert sum(batches) == len(plan.actions)
    assert max(batches) == 3


def test_a_resumed_plan_stays_within_the_budget_an_attempt_spent_on_ranges(
    store: FaultyStore,
) -> None:
    populate(store)
    budget = 3
    first = plan_deletions(range_facts(), budget)
    # The attempt dies after its range delete: m/ has 2 of its 3 tombstones spent.
    (done,) = [a for a in first.actions if a.kind is ActionKind.RANGE]
    execute_plan(
        store,
        DeletionPlan((done,), ()),
        DELETE_TS,
        fast(),
        sleep=SleepLog(),
        charge=ledger_charger(store, GENERATION, "killed", 3600),
    )
    used = charged_so_far(store, range_facts())
    assert used == {(BUCKET, "m/"): 2}
    again = plan_deletions(range_facts(), budget, already_used=used)
    assert again.row_tombstones[(BUCKET, "m/")] == 1
    assert store.tombstones_in_partition(BUCKET, "m/") + 1 <= budget
