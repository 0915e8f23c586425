"""End to end on a real Cassandra node: ground truth, tombstones as Cassandra counts them, the race.

The SQLite versions are test_cli_end_to_end.py, test_clean_race.py and test_cli_errors.py.

DDL is slow, so the module uses two keyspaces, created once by ``dircleaner init-schema`` (which is
idempotent; they are kept between sessions). Each test works in a bucket of its own, named with a
per-session token so that earlier or concurrent sessions never see each other's rows, and forgets
that bucket afterwards: its partitions deleted at a timestamp (no TRUNCATE), its filter
generations and state removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dircleaner.cli import cli
from dircleaner.filter.stored import list_generations
from dircleaner.job.clean import CleanConfig, run_clean
from dircleaner.job.sweep import SweepConfig, run_sweep
from dircleaner.model import ActionKind, PartitionKey, Shard
from dircleaner.paths import dir_of_row, directories_of
from dircleaner.pipeline.build import BuildConfig, build_filter, scope_of, swept_count_key
from dircleaner.pipeline.delete import ThrottleConfig, execute_plan
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.pipeline.plan import plan_deletions
from dircleaner.store.bookkeeping import STATE_SPACE
from dircleaner.store.cassandra.config import parse_cassandra_url
from dircleaner.store.cassandra.store import CassandraStore
from dircleaner.timeutil import now_us
from tests.helpers import (
    EAGER,
    audit_entries,
    expected_dirs,
    invoke,
    row_tombstones_per_partition,
    said,
    tombstones_per_partition,
    write_lines,
)
from tests.test_cli_end_to_end import adversarial_dataset

pytestmark = pytest.mark.cassandra

#: distinguishes this session's buckets from those of earlier or concurrent sessions
SESSION = secrets.token_hex(4)
BUDGET = 100


# -- keyspaces, buckets ---------------------------------------------------------------------------


def keyspace_url(base: str, keyspace: str) -> str:
    """``base`` with its keyspace replaced."""
    parts = parse_cassandra_url(base)
    return f"cassandra://{','.join(parts.hosts)}:{parts.port}/{keyspace}"


def _init_keyspace(cassandra_url: str, suffix: str) -> str:
    base = parse_cassandra_url(cassandra_url).keyspace or "dircleaner_test"
    url = keyspace_url(cassandra_url, f"{base}_{suffix}")
    result = invoke(url, "init-schema")
    assert result.exit_code == 0, result.output
    assert "schema ready" in result.output
    return url


@pytest.fixture(scope="module")
def ks_url(cassandra_url: str) -> str:
    """The module's keyspace, created through the CLI."""
    return _init_keyspace(cassandra_url, "e2e")


@pytest.fixture(scope="module")
def other_url(cassandra_url: str) -> str:
    """A second keyspace (a filter of the first must be refused there)."""
    return _init_keyspace(cassandra_url, "e2e_other")


@pytest.fixture(scope="module")
def store(ks_url: str) -> Iterator[CassandraStore]:
    """The module's own connection (setting up data, traced reads)."""
    opened = CassandraStore.open(ks_url)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture()
def bucket(request: pytest.FixtureRequest, store: CassandraStore) -> Iterator[str]:
    """A bucket of this test alone; forgotten afterwards."""
    name = f"{request.node.name}-{SESSION}"
    yield name
    forget_bucket(store, name)


def forget_bucket(store: CassandraStore, bucket: str) -> None:
    """Delete a bucket's partitions (at now: later writes are not shadowed), filters and state."""
    cfg = store.config
    cutoff = now_us()
    where = " AND ".join(f'"{c}" = ?' for c in (cfg.columns.bucket, cfg.columns.parent) if c)
    delete_objects = store.requests.session.prepare(
        f'DELETE FROM "{cfg.keyspace}"."{cfg.tables.objects}" USING TIMESTAMP ? WHERE {where}'
    )
    objects = [k for batch in store.scan_object_partitions(Shard(), bucket) for k in batch]
    params = [(cutoff, *store.requests.key_values(k.bucket, k.parent)) for k in objects]
    assert all(
        r is None
        for r in store.requests.outcomes(store.requests.run_many(delete_objects, params, "write"))
    )
    folders = {
        (r.bucket, r.parent): PartitionKey(r.token, r.bucket, r.parent)
        for r in store.iter_folder_rows(bucket)
    }
    assert all(r is None for r in store.delete_folder_partitions(list(folders.values()), cutoff))
    for info in list_generations(store):
        if info.header is not None and info.header.scope.endswith(f"|bucket={bucket}"):
            store.delete_filter_generation(info.generation)
    store.kv_write(STATE_SPACE, swept_count_key(scope_of(store, bucket)), None)


# -- the CLI --------------------------------------------------------------------------------------


def listed(url: str, bucket: str) -> set[str]:
    result = invoke(url, "list-dirs", "--bucket", bucket)
    assert result.exit_code == 0, result.output
    return set(result.stdout.splitlines())


def run(url: str, bucket: str, audit: Path, *extra: str) -> dict[str, Any]:
    """``dircleaner run`` as the nightly job, on one bucket; its JSON summary."""
    result = invoke(
        url,
        "run",
        "--bucket",
        bucket,
        "--min-age",
        "0",
        "--max-delete-fraction",
        "1",
        "--rate",
        "0",
        "--audit-log",
        str(audit),
        "--json",
        *extra,
    )
    assert result.exit_code == 0, result.output
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


#: a record of ``--log-level`` logging on stderr ("2026-04-11 03:00:00,123 WARNING name: ...")
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")


def one_line_error(result: Result) -> str:
    """The error: one line on stderr besides log records (and the line naming the store, of
    a command that writes), nothing on stdout."""
    lines = [
        line for line in said(result).splitlines() if line.strip() and not LOG_RECORD.match(line)
    ]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: "), result.output
    assert result.stdout == "", result.output
    return lines[0]


def import_dataset(url: str, bucket: str, tmp: Path, put: list[str], dead: list[str]) -> None:
    result = invoke(url, "import-keys", str(write_lines(tmp / "put.txt", put)), "--bucket", bucket)
    assert result.exit_code == 0, result.output
    result = invoke(
        url, "delete-keys", str(write_lines(tmp / "dead.txt", dead)), "--bucket", bucket
    )
    assert result.exit_code == 0, result.output


# -- 1. ground truth through the CLI --------------------------------------------------------------


@pytest.mark.parametrize("workers", ["1", "2"])
def test_adversarial_dataset_is_cleaned_with_perfect_precision_within_budget(
    ks_url: str, bucket: str, tmp_path: Path, workers: str
) -> None:
    put, dead = adversarial_dataset()
    import_dataset(ks_url, bucket, tmp_path, put, dead)
    every, live = expected_dirs(put, dead)
    empty = every - live
    assert listed(ks_url, bucket) == every
    recall = 0.0
    for attempt in range(6):
        audit = tmp_path / f"audit{attempt}.jsonl"
        budget = ("--max-tombstones-per-partition", str(BUDGET))
        run(ks_url, bucket, audit, "--fpr", "0.001", *budget, "--workers", workers)
        remaining = listed(ks_url, bucket)
        assert live <= remaining, f"non-empty directories lost: {sorted(live - remaining)[:5]}"
        entries = audit_entries(audit)
        assert entries
        assert {e["dir"] for e in entries} <= empty
        assert {e["bucket"] for e in entries} == {bucket}
        assert max(tombstones_per_partition(entries).values()) <= BUDGET
        recall = len(empty - remaining) / len(empty)
        if recall >= 0.99:
            break
    assert recall >= 0.99


# -- 2. tombstones as Cassandra's tracing counts them ---------------------------------------------


def test_a_wide_parent_holds_at_most_the_budget_over_all_runs_of_the_grace_period(
    ks_url: str, store: CassandraStore, bucket: str, tmp_path: Path
) -> None:
    """Without rewrites, the first run spends the budget and the next runs of the grace period
    (10 days here) find it spent in the ledger: the partition never holds more than N."""
    # Empty children in pairs between live ones: runs of two, too short for a range.
    children = [f"wide/c{i:03d}/obj" for i in range(300)]
    between = [f"wide/c{i:03d}k/obj" for i in range(1, 300, 2)]
    store.put_objects(bucket, [*children, *between, "wide/live/obj"], now_us())
    store.delete_objects(bucket, children, now_us())
    traced: list[int] = []
    budget = ("--max-tombstones-per-partition", "100", "--max-rewrite-rows", "0")
    for attempt in range(3):
        audit = tmp_path / f"a{attempt}.jsonl"
        summary = run(ks_url, bucket, audit, "--fpr", "0.0001", *budget)
        assert summary["clean"]["plan"]["range_deletes"] == 0
        assert summary["clean"]["budget"]["grace_source"] == "gc_grace_seconds"
        spent = row_tombstones_per_partition(audit_entries(audit))
        assert spent == ({(bucket, "wide/"): 100} if attempt == 0 else {})
        traced.append(store.tombstones_in_partition(bucket, "wide/"))
    assert traced == [100, 100, 100]
    assert store.tombstones_charged([(bucket, "wide/")]) == {(bucket, "wide/"): 100}


def test_a_run_of_adjacent_empty_children_costs_two_tombstones(
    ks_url: str, store: CassandraStore, bucket: str, tmp_path: Path
) -> None:
    """300 empty children next to each other: one range delete, two markers, one run."""
    children = [f"wide/c{i:03d}/obj" for i in range(300)]
    store.put_objects(bucket, [*children, "wide/live/obj", "wide/zz/obj"], now_us())
    store.delete_objects(bucket, [*children, "wide/zz/obj"], now_us())
    audit = tmp_path / "a.jsonl"
    # --fpr 1e-6: a false positive among the 301 empties would split the run.
    budget = ("--max-tombstones-per-partition", "100")
    summary = run(ks_url, bucket, audit, "--fpr", "0.000001", *budget)
    clean = summary["clean"]
    assert (clean["plan"]["range_deletes"], clean["plan"]["row_deletes"]) == (1, 1)
    assert clean["plan"]["deferred"] == 0
    assert (clean["range_tombstones"], clean["row_tombstones"]) == (1, 1)
    entries = audit_entries(audit)
    assert tombstones_per_partition(entries) == {(bucket, "wide/"): 3}
    assert {e["range"][0] for e in entries if e["via"] == "range"} == {"c000"}
    # Cassandra 5.0 tracing: "Read 1 live rows and 3 tombstone cells" (wide/live/ is left).
    assert store.tombstones_in_partition(bucket, "wide/") == 3
    assert listed(ks_url, bucket) == {"wide/", "wide/live/"}


def test_a_sweep_below_quorum_deletes_a_run_row_by_row(
    ks_url: str, store: CassandraStore, bucket: str, tmp_path: Path
) -> None:
    """At sweep consistency ONE a replica may lack a row between a run's bounds, which a range
    would take unseen: the plan falls back to row deletes (the test above gets one range)."""
    children = [f"wide/c{i:03d}/obj" for i in range(300)]
    store.put_objects(bucket, [*children, "wide/live/obj"], now_us())
    store.delete_objects(bucket, children, now_us())
    config = tmp_path / "one.toml"
    # The build at a quorum: the job refuses both scans below one.
    config.write_text(
        '[cassandra.consistency]\nsweep = "ONE"\nbuild = "LOCAL_QUORUM"\n', encoding="utf-8"
    )
    audit = tmp_path / "a.jsonl"
    args = ["--config", str(config), "--store", ks_url, "run", "--bucket", bucket, *EAGER]
    args += ["--fpr", "0.000001", "--max-tombstones-per-partition", "100"]
    result = CliRunner().invoke(cli, [*args, "--audit-log", str(audit), "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["clean"]["plan"]
    assert (plan["range_deletes"], plan["row_deletes"], plan["deferred"]) == (0, 100, 200)
    assert tombstones_per_partition(audit_entries(audit)) == {(bucket, "wide/"): 100}


def test_an_empty_subtree_costs_its_live_parent_one_row_tombstone(
    ks_url: str, store: CassandraStore, bucket: str, tmp_path: Path
) -> None:
    # Two empty subtrees of 316 directories each: one under the root, one under live keep/.
    gone = [
        f"{top}gone/a{i:02d}/b{j:02d}/obj"
        for top in ("", "keep/")
        for i in range(15)
        for j in range(20)
    ]
    store.put_objects(bucket, [*gone, "rootfile", "keep/live.txt"], now_us())
    store.delete_objects(bucket, gone, now_us())
    audit = tmp_path / "a.jsonl"
    summary = run(ks_url, bucket, audit, "--fpr", "0.0001")
    clean = summary["clean"]
    assert clean["delete_requested_dirs"] == 2 * 316
    assert clean["row_tombstones"] == 2
    # gone/ and its 15 a*/ partitions, twice; the b*/ directories have no folders partition.
    assert clean["partition_tombstones"] == 2 * 16
    rows = [e for e in audit_entries(audit) if e["via"] == "row"]
    assert sorted((e["parent"], e["name"]) for e in rows) == [("", "gone"), ("keep/", "gone")]
    assert listed(ks_url, bucket) == {"keep/"}
    # Cassandra 5.0 tracing: "Read 1 live rows and 1 tombstone cells" (root keeps keep/).
    assert store.tombstones_in_partition(bucket, "") == 1
    assert store.tombstones_in_partition(bucket, "keep/") == 1
    # Partition deletions: "Read 0 live rows and 0 tombstone cells".
    for parent in ("gone/", "gone/a00/", "gone/a14/", "keep/gone/", "keep/gone/a07/"):
        assert store.tombstones_in_partition(bucket, parent) == 0, parent


# -- 3. the race ----------------------------------------------------------------------------------

N = 1000


def seed_empty_dirs(store: CassandraStore, bucket: str, n: int) -> None:
    """``r/0000/`` … with an empty ``sub/`` each, written an hour ago, under a live ``r/``."""
    keys = [f"r/{i:04d}/sub/obj" for i in range(n)] + ["r/keep"]
    long_ago = now_us() - 3_600_000_000
    store.put_objects(bucket, keys, long_ago)
    store.delete_objects(bucket, keys[:-1], long_ago + 1)


def folder_dirs(store: CassandraStore, bucket: str) -> set[str]:
    return {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows(bucket)}


#: puts the writer lands between the plan and the first delete
RACED_PUTS = 200


class Writer(threading.Thread):
    """Puts objects into (empty) directories through its own connection until told to stop.

    It starts putting when the clean issues its first delete, and that delete waits for its
    first RACED_PUTS puts (see ``racing``): the race is forced into the window between the plan
    and the deletes, whatever the scheduler does with the threads, and goes on while the
    deletes run. (Started freely, it could put most of its keys before the re-check dropped
    them from the plan, or too few before the deletes were done.)
    """

    def __init__(self, url: str, bucket: str) -> None:
        super().__init__(daemon=True)
        self.url, self.bucket = url, bucket
        self.order = list(range(N))
        random.Random(7).shuffle(self.order)
        self.put: list[str] = []
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.deleting = threading.Event()
        self.raced = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            store = CassandraStore.open(self.url)
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            self.raced.set()
            raise
        try:
            self.ready.set()
            self.deleting.wait(timeout=120)
            for i in self.order:
                if self.stop.is_set():
                    return
                key = f"r/{i:04d}/sub/new"
                store.put_objects(self.bucket, [key], now_us())
                self.put.append(key)
                if len(self.put) == RACED_PUTS:
                    self.raced.set()
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.raced.set()
            store.close()


@contextlib.contextmanager
def racing(store: CassandraStore, writer: Writer) -> Iterator[None]:
    """The store's first delete of any kind lets the writer put RACED_PUTS objects first."""

    def first_waits(real: Callable[..., Any]) -> Callable[..., Any]:
        def delete(*args: Any, **kwargs: Any) -> Any:
            if not writer.deleting.is_set():
                writer.deleting.set()
                assert writer.raced.wait(timeout=120), "the writer never put its objects"
            return real(*args, **kwargs)

        return delete

    names = [
        "delete_requests",
        "delete_folder_rows",
        "delete_folder_ranges",
        "delete_folder_partitions",
        "rewrite_folder_partition",
    ]
    for name in names:
        setattr(store, name, first_waits(getattr(store, name)))
    try:
        yield
    finally:
        for name in names:
            delattr(store, name)


@pytest.mark.parametrize("verify", [True, False], ids=["verify", "no-verify"])
def test_puts_during_a_clean_keep_their_directories(
    ks_url: str,
    store: CassandraStore,
    bucket: str,
    verify: bool,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    if not verify:
        # --no-verify needs a build at a quorum (on one node, LOCAL_ONE reads the same rows).
        traits = dataclasses.replace(store.traits, build_sees_every_write=True)
        monkeypatch.setattr(store, "traits", traits)
    seed_empty_dirs(store, bucket, N)
    build_filter(store, BuildConfig(fpr=0.001, bucket=bucket))
    writer = Writer(ks_url, bucket)
    writer.start()
    assert writer.ready.wait(30)
    assert writer.error is None
    config = CleanConfig(
        sweep=SweepConfig(bucket=bucket, guards=GuardConfig(force=True)),
        min_age_s=0,
        verify=verify,
        throttle=ThrottleConfig(rate=2000, concurrency=8),
        max_tombstones_per_partition=N,
        audit_log=tmp_path / "audit.jsonl",
    )
    try:
        with racing(store, writer):
            report = run_clean(store, config)
    finally:
        writer.stop.set()
        writer.deleting.set()  # a clean that failed before its first delete: let it end
        writer.join(30)
    assert writer.error is None
    assert report.deleted is not None and report.deleted.directories > 0
    remaining = folder_dirs(store, bucket)
    # What the clean set out to delete: every delete is audited before it is issued.
    planned = {e["dir"] for e in audit_entries(tmp_path / "audit.jsonl")}
    written = {d for key in writer.put for d in directories_of(key)}
    raced = written & planned
    # The race really happened: directories the clean set out to delete received objects.
    assert len(raced) > 50, len(raced)
    assert sorted(written - remaining) == []
    # ... and exactly those survived of what the plan deleted: the rest really went.
    assert planned & remaining == raced


def test_deletes_stamped_after_the_puts_would_lose_them(store: CassandraStore, bucket: str) -> None:
    """Negative control: the protection above comes from Cassandra's delete-at-T semantics."""
    seed_empty_dirs(store, bucket, 20)
    build_filter(store, BuildConfig(fpr=0.001, bucket=bucket))
    swept = run_sweep(store, SweepConfig(bucket=bucket, guards=GuardConfig(force=True)))
    # Without ordinals the run r/0000/ … r/0019/ goes row by row (the range version is below).
    facts = [dataclasses.replace(f, ordinals=()) for f in swept.result.facts]
    plan = plan_deletions(facts, 100)
    store.put_objects(bucket, ["r/0001/sub/new", "r/0002/sub/new"], now_us())
    stamps = {"r/0001/": swept.loaded.header.snapshot_us, "r/0002/": now_us() + 1}
    for top, stamp in stamps.items():
        mine = [
            a for a in plan.actions if dir_of_row(a.rows[0].parent, a.rows[0].name).startswith(top)
        ]
        assert len(mine) == 2  # r/000i/ in r/, and the dead partition r/000i/
        execute_plan(
            store, dataclasses.replace(plan, actions=tuple(mine)), stamp, ThrottleConfig(rate=0)
        )
    remaining = folder_dirs(store, bucket)
    assert {"r/0001/", "r/0001/sub/"} <= remaining  # deleted at T, before the put: survives
    assert not {"r/0002/", "r/0002/sub/"} & remaining  # deleted after the put: lost


def test_a_range_spares_a_put_after_t_and_a_range_stamped_after_it_would_not(
    store: CassandraStore, bucket: str
) -> None:
    """The same control for a range delete: it removes only rows written at or before its
    timestamp, including the one directory inside it that gained an object."""
    seed_empty_dirs(store, bucket, 20)
    build_filter(store, BuildConfig(fpr=0.000001, bucket=bucket))
    swept = run_sweep(store, SweepConfig(bucket=bucket, guards=GuardConfig(force=True)))
    plan = plan_deletions(swept.result.facts, 100)
    (span,) = [a for a in plan.actions if a.kind is ActionKind.RANGE]
    assert [r.name for r in span.rows] == [f"{i:04d}" for i in range(20)]
    store.put_objects(bucket, ["r/0003/sub/new"], now_us())
    only = dataclasses.replace(plan, actions=(span,))
    execute_plan(store, only, swept.loaded.header.snapshot_us, ThrottleConfig(rate=0))
    inside = {f"r/{i:04d}/" for i in range(20)}
    assert folder_dirs(store, bucket) & inside == {"r/0003/"}  # rewritten after T: survives
    execute_plan(store, only, now_us() + 1, ThrottleConfig(rate=0))
    assert not folder_dirs(store, bucket) & inside  # a range stamped after the put: lost


# -- 4. bad input through the CLI -----------------------------------------------------------------


def test_an_unreachable_node_is_one_line_and_bounded_in_time() -> None:
    started = time.monotonic()
    result = invoke("cassandra://127.0.0.1:1/ks", "list-dirs")
    elapsed = time.monotonic() - started
    assert result.exit_code == 1
    assert one_line_error(result).startswith("Error: cannot reach Cassandra ")
    assert elapsed < 20


def test_a_missing_keyspace_is_named(cassandra_url: str) -> None:
    url = keyspace_url(cassandra_url, "dircleaner_e2e_no_such_keyspace")
    result = invoke(url, "run", "--min-age", "0")
    assert result.exit_code == 1
    assert "keyspace 'dircleaner_e2e_no_such_keyspace' does not exist" in one_line_error(result)


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ('[cassandra.tables]\nfolders = "no_such_folders"\n', "no_such_folders"),
        ('[cassandra.columns]\nname = "no_such_name"\n', "'no_such_name' does not exist"),
    ],
    ids=["table", "column"],
)
def test_a_mapping_naming_what_does_not_exist_is_named(
    ks_url: str, tmp_path: Path, toml: str, named: str
) -> None:
    config = tmp_path / "mapping.toml"
    config.write_text(toml, encoding="utf-8")
    result = invoke(ks_url, "--config", str(config), "list-dirs")
    assert result.exit_code == 1
    assert named in one_line_error(result)


def test_a_filter_built_for_another_keyspace_is_refused(
    ks_url: str, other_url: str, store: CassandraStore, bucket: str
) -> None:
    keys = [f"d/{i}/obj" for i in range(20)]
    store.put_objects(bucket, keys, now_us())
    store.delete_objects(bucket, keys[:5], now_us())
    result = invoke(ks_url, "build", "--bucket", bucket, "--json")
    assert result.exit_code == 0, result.output
    generation = json.loads(result.stdout)["generation"]
    with CassandraStore.open(other_url) as other:
        assert isinstance(other, CassandraStore)
        try:
            other.put_objects(bucket, keys, now_us())
            other.delete_objects(bucket, keys[:5], now_us())
            # Copy the generation cell by cell, header first and completion marker last.
            for gen, shard in store.list_filter_parts():
                if gen == generation:
                    cells = store.get_filter_cells(gen, shard)
                    for seq in sorted(cells, key=lambda s: (s == -2, s)):
                        other.put_filter_cell(gen, shard, seq, cells[seq])
            before = listed(other_url, bucket)
            result = invoke(
                other_url,
                "clean",
                "--generation",
                generation,
                "--bucket",
                bucket,
                "--min-age",
                "0",
                "--max-delete-fraction",
                "1",
            )
            assert result.exit_code == 3, result.output
            assert "was built for" in one_line_error(result)
            assert listed(other_url, bucket) == before
        finally:
            forget_bucket(other, bucket)
            other.delete_filter_generation(generation)


# -- 5. dry run -----------------------------------------------------------------------------------


def test_dry_run_deletes_nothing(
    ks_url: str, store: CassandraStore, bucket: str, tmp_path: Path
) -> None:
    put, dead = adversarial_dataset()
    import_dataset(ks_url, bucket, tmp_path, put, dead)
    every, _ = expected_dirs(put, dead)
    audit = tmp_path / "a.jsonl"
    result = invoke(
        ks_url,
        "run",
        "--bucket",
        bucket,
        "--dry-run",
        "--min-age",
        "0",
        "--max-delete-fraction",
        "1",
        "--audit-log",
        str(audit),
    )
    assert result.exit_code == 0, result.output
    assert "dry run: nothing deleted" in result.output
    assert listed(ks_url, bucket) == every
    assert not audit.exists()
    # And Cassandra agrees: not a single tombstone where the plan would have put 312.
    assert store.tombstones_in_partition(bucket, "wide/2026-04-11/") == 0


# -- 5. the budget over a (short) grace period -----------------------------------------------------


@pytest.fixture(scope="module")
def grace_url(cassandra_url: str) -> str:
    """A keyspace whose folders table keeps tombstones 60 s (gc_grace_seconds)."""
    url = _init_keyspace(cassandra_url, "grace")
    with CassandraStore.open(url) as opened:
        cfg = opened.config
        opened.requests.session.execute(
            f'ALTER TABLE "{cfg.keyspace}"."{cfg.tables.folders}" WITH gc_grace_seconds = 60'
        )
    return url


def test_runs_inside_the_grace_period_never_exceed_the_budget_and_spend_again_after(
    grace_url: str, tmp_path: Path
) -> None:
    bucket = f"grace-{SESSION}"
    children = [f"wide/c{i:03d}/obj" for i in range(300)]
    between = [f"wide/c{i:03d}k/obj" for i in range(1, 300, 2)]
    with CassandraStore.open(grace_url) as store:
        store.put_objects(bucket, [*children, *between, "wide/live/obj"], now_us())
        store.delete_objects(bucket, children, now_us())
        budget = ("--fpr", "0.0001", "--max-tombstones-per-partition", "100")
        budget += ("--max-rewrite-rows", "0")
        spent: list[int] = []
        for attempt in range(3):
            summary = run(grace_url, bucket, tmp_path / f"a{attempt}.jsonl", *budget)
            assert summary["clean"]["budget"]["grace_seconds"] == 60
            spent.append(summary["clean"]["row_tombstones"])
            # Cassandra's tracing: never more than N of our tombstones in the live partition.
            assert store.tombstones_in_partition(bucket, "wide/") <= 100
        assert spent == [100, 0, 0]
        # After the grace period the charges have expired: the next run may spend again.
        deadline = time.monotonic() + 180
        while store.tombstones_charged([(bucket, "wide/")]):
            assert time.monotonic() < deadline, "the ledger's charges never expired"
            time.sleep(1)
        after = run(grace_url, bucket, tmp_path / "after.jsonl", *budget)
        assert after["clean"]["row_tombstones"] == 100
