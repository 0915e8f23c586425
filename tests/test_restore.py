"""Tests of audit-log replay: validation before any write, exact rows back, idempotence."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pytest

from dircleaner import restore as restore_module
from dircleaner.audit import AuditLog, BadAuditLog, audit_log_lines, iter_audit_entries
from dircleaner.errors import UsageError
from dircleaner.model import ActionKind, DeleteAction, FolderRow, PartitionFacts, PartitionKey
from dircleaner.pipeline.delete import ThrottleConfig, execute_plan
from dircleaner.pipeline.plan import plan_deletions
from dircleaner.restore import (
    AuditSelection,
    RestoreRefused,
    RestoreResult,
    plan_restore,
    restore,
)
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.records import murmur_token
from dircleaner.store.sqlite import SqliteStore

BUCKET = "bkt"


def entry(parent: str, name: str, bucket: str = BUCKET, **extra: object) -> str:
    fields: dict[str, object] = {
        "bucket": bucket,
        "dir": parent + name + "/",
        "parent": parent,
        "name": name,
        "via": "row",
        "delete_ts_us": 5,
        "generation": "g",
    }
    fields.update(extra)
    return json.dumps(fields, ensure_ascii=False) + "\n"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store("sqlite:///" + str(tmp_path / "meta.db"), create=True) as opened:
        yield opened


def folder_rows(store: Store) -> set[FolderRow]:
    return set(store.iter_folder_rows())


# -- reading the log -------------------------------------------------------------------------------


def entries(lines: Iterable[str]) -> list[tuple[str, str, str]]:
    """Each entry's ``(bucket, parent, name)``, in the order the restore's plan reads them."""
    return [(e["bucket"], e["parent"], e["name"]) for e in iter_audit_entries(lines)]


def test_reads_every_entry_in_order() -> None:
    lines = [entry("", "x"), entry("x/", "y"), entry("ñ/", 'q"\\\n', bucket="bü")]
    assert entries(lines) == [
        (BUCKET, "", "x"),
        (BUCKET, "x/", "y"),
        ("bü", "ñ/", 'q"\\\n'),
    ]


def test_blank_lines_are_skipped_but_counted() -> None:
    lines = [entry("", "x"), "\n", "   \n", "{broken\n"]
    with pytest.raises(BadAuditLog) as caught:
        entries(lines)
    assert str(caught.value) == "audit log line 4: not a dircleaner audit entry"
    assert entries([entry("", "x"), "\n", ""]) == [(BUCKET, "", "x")]


def test_an_empty_log_has_no_entries() -> None:
    assert entries([]) == []


@pytest.mark.parametrize(
    "bad",
    [
        "not json\n",
        '{"bucket": "b", "parent": "", "name": "x"\n',  # truncated
        "[1, 2]\n",
        "null\n",
        "5\n",
        '"a string"\n',
        '{"parent": "", "name": "x"}\n',  # no bucket
        '{"bucket": "b", "name": "x"}\n',  # no parent
        '{"bucket": "b", "parent": ""}\n',  # no name
    ],
)
def test_a_line_that_is_not_an_entry_names_its_line_number(bad: str) -> None:
    with pytest.raises(BadAuditLog) as caught:
        entries([entry("", "a"), entry("", "b"), bad, entry("", "c")])
    assert str(caught.value) == "audit log line 3: not a dircleaner audit entry"


@pytest.mark.parametrize(
    "bad",
    [
        entry("a/", "b", dir="a/c/"),  # dir disagrees with parent + name
        entry("a/", "b", dir="a/b"),  # missing the trailing slash
        entry("a/", "b", dir=5),
        json.dumps({"bucket": "b", "parent": 5, "name": "x"}) + "\n",
        json.dumps({"bucket": None, "parent": "", "name": "x"}) + "\n",
        json.dumps({"bucket": "b", "parent": "", "name": ["x"]}) + "\n",
    ],
)
def test_an_inconsistent_entry_names_its_line_number(bad: str) -> None:
    with pytest.raises(BadAuditLog) as caught:
        entries([entry("", "a"), bad])
    assert str(caught.value) == "audit log line 2: inconsistent entry"


def test_dir_is_optional_but_checked_when_present() -> None:
    lines = [
        json.dumps({"bucket": "b", "parent": "a/", "name": "c"}),
        json.dumps({"bucket": "b", "parent": "a/", "name": "d", "dir": None}),
        json.dumps({"bucket": "b", "parent": "", "name": "", "dir": "/"}),
    ]
    assert entries(lines) == [("b", "a/", "c"), ("b", "a/", "d"), ("b", "", "")]


def test_bad_audit_log_is_a_usage_error() -> None:
    assert issubclass(BadAuditLog, UsageError)
    assert BadAuditLog.exit_code == 2


def test_a_bad_line_anywhere_means_nothing_is_written(store: Store) -> None:
    # Validation reads the whole log before restore sees any row: a bad last line must stop
    # the good lines before it from being written.
    lines = [entry("", "x"), entry("x/", "y"), '{"bucket": "bkt"}\n']
    with pytest.raises(BadAuditLog, match="line 3"):
        restore(store, plan_restore(lines, AuditSelection()).rows, 10)
    assert folder_rows(store) == set()


# -- restore ---------------------------------------------------------------------------------------


def test_restore_writes_the_rows_back_with_their_tokens(store: Store) -> None:
    rows = [(BUCKET, "", "x"), (BUCKET, "x/", "y"), ("other", "ñ/", "é")]
    result = restore(store, rows, 10)
    assert result == RestoreResult(3)
    assert folder_rows(store) == {FolderRow(murmur_token(b, p), b, p, n) for b, p, n in rows}


def test_restore_is_idempotent_and_writes_each_entry_once(store: Store) -> None:
    lines = [entry("", "x"), entry("x/", "y"), entry("", "x")]
    with plan_restore(lines, AuditSelection()) as plan:
        assert (len(plan.rows), plan.repeated) == (2, 1)
        assert restore(store, plan.rows, 10) == RestoreResult(2)
        first = folder_rows(store)
        assert restore(store, plan.rows, 20) == RestoreResult(2)
    assert folder_rows(store) == first
    assert len(first) == 2


def test_restore_writes_sorted_unique_rows_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Recording(SqliteStore):
        batches: list[list[tuple[str, str, str]]]

        def write_folder_rows(
            self, rows: Sequence[tuple[str, str, str]], timestamp_us: int
        ) -> None:
            self.batches.append(list(rows))
            assert timestamp_us == 77
            super().write_folder_rows(rows, timestamp_us)

    monkeypatch.setattr(restore_module, "RESTORE_BATCH", 2)
    rec = Recording.open("sqlite:///" + str(tmp_path / "m.db"), create=True)
    assert isinstance(rec, Recording)
    rec.batches = []
    rows = [("b", "", "e"), ("b", "", "a"), ("a", "z/", "q"), ("b", "", "a"), ("b", "c/", "d")]
    lines = [entry(parent, name, bucket) for bucket, parent, name in rows]
    try:
        with plan_restore(lines, AuditSelection(), chunk_entries=2) as plan:
            assert restore(rec, plan.rows, 77) == RestoreResult(4)
    finally:
        rec.close()
    assert rec.batches == [
        [("a", "z/", "q"), ("b", "", "a")],
        [("b", "", "e"), ("b", "c/", "d")],
    ]


def test_an_empty_restore_writes_nothing(store: Store) -> None:
    assert restore(store, [], 10) == RestoreResult(0)
    assert folder_rows(store) == set()


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_clean_then_restore_round_trips_through_the_audit_log(
    store: Store, compressed: bool
) -> None:
    index = {"": ["a", "x"], "x/": ["y", "z"], "x/y/": ["q"], "a/": ["k", "m"]}
    store.write_folder_rows([(BUCKET, p, n) for p, names in index.items() for n in names], 1_000)
    before = folder_rows(store)

    def key(parent: str) -> PartitionKey:
        return PartitionKey(murmur_token(BUCKET, parent), BUCKET, parent)

    def frow(parent: str, name: str) -> FolderRow:
        return FolderRow(murmur_token(BUCKET, parent), BUCKET, parent, name)

    facts = [
        PartitionFacts(key(""), 2, (frow("", "x"),)),
        PartitionFacts(key("x/"), 2, (frow("x/", "y"), frow("x/", "z")), dir_absent=True),
        PartitionFacts(key("x/y/"), 1, (frow("x/y/", "q"),), dir_absent=True),
        PartitionFacts(key("a/"), 2, (frow("a/", "k"),)),
    ]
    log = io.BytesIO()
    execute_plan(
        store,
        plan_deletions(facts, 10),
        2_000,
        ThrottleConfig(rate=0.0),
        AuditLog(log, "g", 2_000, compressed=compressed),
        sleep=lambda _s: None,
    )
    assert folder_rows(store) == {frow("", "a"), frow("a/", "m")}
    log.seek(0)
    with plan_restore(audit_log_lines(log), AuditSelection()) as plan:
        result = restore(store, plan.rows, 3_000)
    assert result == RestoreResult(5)
    assert folder_rows(store) == before


def test_a_final_line_torn_by_a_kill_is_skipped() -> None:
    torn = entry("", "c")[:20]  # no newline: the write was cut off
    assert entries([entry("", "a"), entry("", "b"), torn]) == [
        (BUCKET, "", "a"),
        (BUCKET, "", "b"),
    ]


def test_an_unterminated_bad_line_followed_by_more_is_still_an_error() -> None:
    torn = entry("", "c")[:20]
    with pytest.raises(BadAuditLog, match="line 2: not a dircleaner audit entry"):
        entries([entry("", "a"), torn, entry("", "d")])


def test_a_record_torn_by_a_killed_worker_and_continued_by_another_is_skipped() -> None:
    # Two workers append to one log; one was killed mid-write, the other's next record follows
    # its fragment on the same line.
    torn = entry("", "c")[:30]
    lines = [entry("", "a"), torn + entry("", "d"), entry("", "e")]
    assert entries(lines) == [(BUCKET, "", "a"), (BUCKET, "", "d"), (BUCKET, "", "e")]


@pytest.mark.parametrize(
    "bad",
    [
        "garbage" + entry("", "d"),  # not one of our records before the record
        entry("", "c")[:30] + "garbage\n",  # nothing whole after the fragment
        entry("", "c")[:30] + entry("", "d")[:-8] + "\n",  # the continuation is broken too
    ],
)
def test_a_bad_line_that_is_not_a_torn_record_is_still_an_error(bad: str) -> None:
    with pytest.raises(BadAuditLog, match="line 2"):
        entries([entry("", "a"), bad, entry("", "e")])


def test_a_name_that_looks_like_a_record_start_is_no_split_point() -> None:
    tricky = entry("", 'x{"bucket": "y')
    assert entries([tricky]) == [(BUCKET, "", 'x{"bucket": "y')]


def test_restore_replays_a_log_whose_last_write_was_torn(store: Store, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    log.write_text(entry("", "x") + entry("x/", "y") + entry("", "z")[:15], encoding="utf-8")
    with log.open(encoding="utf-8") as stream, plan_restore(stream, AuditSelection()) as plan:
        restore(store, plan.rows, 10)
    assert {(r.parent, r.name) for r in folder_rows(store)} == {("", "x"), ("x/", "y")}


# -- range deletes ---------------------------------------------------------------------------------


def test_range_entries_are_replayed_like_any_other() -> None:
    lines = [
        entry("m/", "c0", via="range", range=["c0", "c2"]),
        entry("m/", "c1", via="range", range=["c0", "c2"]),
        entry("m/", "c2", via="range", range=["c0", "c2"]),
        entry("d/", "b", via="range", range=["c", "a"]),  # a descending table's bounds
    ]
    assert entries(lines) == [
        (BUCKET, "m/", "c0"),
        (BUCKET, "m/", "c1"),
        (BUCKET, "m/", "c2"),
        (BUCKET, "d/", "b"),
    ]


@pytest.mark.parametrize(
    "bounds",
    [["d", "f"], ["a", "b"], ["a"], ["a", "b", "c"], "a..f", [1, 2], None],
    ids=["above", "below", "one", "three", "string", "ints", "missing"],
)
def test_a_range_entry_must_name_a_directory_within_its_range(bounds: object) -> None:
    fields: dict[str, object] = {"via": "range"}
    if bounds is not None:
        fields["range"] = bounds
    with pytest.raises(BadAuditLog, match="line 2: a range entry outside its range"):
        entries([entry("m/", "a"), entry("m/", "c", **fields)])


def test_clean_with_a_range_then_restore_round_trips(store: Store) -> None:
    names = [f"c{i}" for i in range(6)]
    store.write_folder_rows([(BUCKET, "m/", n) for n in names], 1_000)
    before = folder_rows(store)
    key = PartitionKey(murmur_token(BUCKET, "m/"), BUCKET, "m/")
    cands = tuple(FolderRow(key.token, BUCKET, "m/", n) for n in names[1:5])
    plan = plan_deletions([PartitionFacts(key, 6, cands, ordinals=(1, 2, 3, 4))], 10)
    assert plan.deletes.range == 1
    log = io.BytesIO()
    audit = AuditLog(log, "g", 2_000)
    execute_plan(store, plan, 2_000, ThrottleConfig(rate=0.0), audit, sleep=lambda _s: None)
    assert {r.name for r in folder_rows(store)} == {"c0", "c5"}
    log.seek(0)
    with plan_restore(audit_log_lines(log), AuditSelection()) as replayed:
        assert restore(store, replayed.rows, 3_000) == RestoreResult(4)
    assert folder_rows(store) == before


# -- the store and run each record names -----------------------------------------------------------


@pytest.mark.parametrize("kind", list(ActionKind))
def test_batches_name_their_store_and_run_exactly_as_json_dumps_would(kind: ActionKind) -> None:
    rows = tuple(FolderRow(3, BUCKET, "p/", name) for name in ("a", 'q"ü'))
    buffer = io.BytesIO()
    clock = iter([1_795_677_820_000_000, 1_795_677_821_000_000])
    log = AuditLog(
        buffer,
        "g",
        5,
        scope='sqlite:objects,folders@/tmp/"ü".db',
        run_started_us=1_795_677_800_000_000,
        clock=lambda: next(clock),
    )
    log.record(DeleteAction(kind, PartitionKey(3, BUCKET, "p/"), rows[:1]))
    log.record(DeleteAction(kind, PartitionKey(3, BUCKET, "p/"), rows[1:]))
    bounds = (
        ({"range": ["a", "a"]}, {"range": ['q"ü', 'q"ü']}) if kind is ActionKind.RANGE else ({}, {})
    )
    expected = "".join(
        json.dumps(
            {
                "format": 2,
                "issued": issued,
                "delete_ts_us": 5,
                "generation": "g",
                "run_started": "2026-11-26T07:23:20Z",
                "scope": 'sqlite:objects,folders@/tmp/"ü".db',
            },
            ensure_ascii=False,
        )
        + "\n"
        + json.dumps(
            {"bucket": BUCKET, "parent": "p/", "name": row.name, "via": kind.value, **bound},
            ensure_ascii=False,
        )
        + "\n"
        for row, bound, issued in zip(
            rows, bounds, ["2026-11-26T07:23:40Z", "2026-11-26T07:23:41Z"], strict=True
        )
    )
    assert buffer.getvalue().decode("utf-8") == expected
    buffer.seek(0)
    assert [e["issued"] for e in iter_audit_entries(audit_log_lines(buffer))] == [
        "2026-11-26T07:23:40Z",
        "2026-11-26T07:23:41Z",
    ]


def test_plan_restore_takes_only_the_entries_of_its_scope() -> None:
    lines = [
        entry("", "a", scope="s1"),
        entry("", "b", scope="s2"),
        entry("", "c"),
        entry("", "a", scope="s1", via="range", range=["a", "a"]),
    ]
    plan = plan_restore(lines, AuditSelection(), "s1")
    assert (list(plan.rows), plan.by_via, plan.repeated) == ([(BUCKET, "", "a")], {"range": 1}, 1)
    assert (plan.other_scopes, plan.unscoped, plan.skipped) == ({"s2": 1}, 1, 2)
    forced = plan_restore(lines, AuditSelection(), "s1", force=True)
    assert list(forced.rows) == [(BUCKET, "", "a"), (BUCKET, "", "c")]
    with pytest.raises(RestoreRefused, match="holds the deletes of store 's2'"):
        plan_restore(lines[1:2], AuditSelection(), "s1")
    with pytest.raises(RestoreRefused, match="does not record its store"):
        plan_restore(lines[2:3], AuditSelection(), "s1")
    assert plan_restore(lines, AuditSelection(), None).skipped == 0  # no scope: every entry


OLD = "sqlite:objects,folders@/old/meta.db"
NEW = "sqlite:objects,folders@/new/meta.db"


def vacated(scope: str) -> bool:
    """As the CLI's check on SQLite: no file at the recorded path (here: the old one)."""
    return scope == OLD


def test_force_takes_a_moved_stores_log_as_this_stores() -> None:
    """A moved SQLite file is the same tables at another location: its own log is refused
    with a hint, and restored with --force (and said to be)."""
    lines = [entry("", "a", scope=OLD), entry("", "b", scope=OLD, via="range", range=["b", "b"])]
    with pytest.raises(RestoreRefused) as refused:
        plan_restore(lines, AuditSelection(), NEW, moved_from=vacated)
    assert str(refused.value).endswith("; if this store was moved from there, rerun with --force")
    forced = plan_restore(lines, AuditSelection(), NEW, force=True, moved_from=vacated)
    assert list(forced.rows) == [(BUCKET, "", "a"), (BUCKET, "", "b")]
    assert (forced.adopted_scope, forced.other_scopes, forced.skipped) == (OLD, {}, 0)
    assert forced.by_via == {"row": 1, "range": 1}
    with pytest.raises(RestoreRefused, match="--bucket 'other' is in no entry"):
        plan_restore(lines, AuditSelection(bucket="other"), NEW, force=True, moved_from=vacated)


@pytest.mark.parametrize(
    "lines",
    [
        # this store's entries too: the other store's stay another store's
        [entry("", "a", scope=OLD), entry("", "c", scope=NEW)],
        # two other stores: which one moved here cannot be told
        [entry("", "a", scope=OLD), entry("", "c", scope="sqlite:objects,folders@/x/m.db")],
        # other tables: not this store, wherever it is
        [entry("", "a", scope="cassandra:objects,folders@cluster c1")],
        # a store still where it was: another store, not this one moved
        [entry("", "a", scope="sqlite:objects,folders@/still/there.db")],
    ],
    ids=["with-own-entries", "two-stores", "other-tables", "still-there"],
)
def test_force_takes_no_other_stores_entries_but_a_moved_stores(lines: list[str]) -> None:
    try:
        plan = plan_restore(lines, AuditSelection(), NEW, force=True, moved_from=vacated)
    except RestoreRefused as refused:
        assert "rerun with --force" not in str(refused)
        return
    assert plan.adopted_scope is None
    assert list(plan.rows) == [(BUCKET, "", "c")]


# -- a long log ------------------------------------------------------------------------------------


def long_log(entries: int) -> Iterator[str]:
    """``entries`` directory entries of store S in batches of 50, then a tenth of them again
    as range deletes (the last entry wins), then 1,000 entries of another store."""
    header = '{"format": 2, "issued": "2026-11-27T14:06:58Z", "delete_ts_us": 5, "generation": '
    for i in range(entries):
        if i % 50 == 0:
            yield header + '"g1", "scope": "S"}\n'
        via = "row" if i % 3 else "partition"
        parent = f"logs/{i // 400:05d}/"
        yield f'{{"bucket": "b", "parent": "{parent}", "name": "d{i:06d}", "via": "{via}"}}\n'
    yield header + '"g2", "scope": "S"}\n'
    for i in range(0, entries, 10):
        name = f"d{i:06d}"
        yield (
            f'{{"bucket": "b", "parent": "logs/{i // 400:05d}/", "name": "{name}",'
            f' "via": "range", "range": ["{name}", "{name}"]}}\n'
        )
    yield header + '"g2", "scope": "OTHER"}\n'
    for i in range(1000):
        yield f'{{"bucket": "b", "parent": "o/", "name": "x{i}", "via": "row"}}\n'


def test_a_long_log_is_planned_in_bounded_memory_with_exact_counts() -> None:
    """200,000 entries: the old plan held them all (70 MB traced at its peak for this log);
    the sort holds one chunk, whatever the log's length."""
    import tracemalloc

    tracemalloc.start()
    try:
        with plan_restore(long_log(200_000), AuditSelection(), "S") as plan:
            unique = sum(1 for _ in plan.rows)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert peak < 25_000_000
            assert unique == len(plan.rows) == 200_000
            assert plan.repeated == 20_000
            assert plan.by_via == {"range": 20_000, "partition": 60_000, "row": 120_000}
            assert (plan.other_scopes, plan.skipped) == ({"OTHER": 1000}, 1000)
            assert plan.generations == ["g1", "g2"]
            rows = list(plan.rows)
    finally:
        tracemalloc.stop()
    assert rows == sorted(rows) and rows[0] == ("b", "logs/00000/", "d000000")
    assert len(set(rows)) == 200_000
