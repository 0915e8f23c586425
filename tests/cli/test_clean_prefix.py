"""``clean --prefix`` end to end on both backends: ground truth, the race, markers, bad input.

Every test runs on a SQLite file and on the real Cassandra node (a bucket of its own in this
module's keyspace, forgotten afterwards), through the CLI where the CLI is the subject.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dircleaner.errors import GuardRefused
from dircleaner.job.prefix import PrefixCleanConfig, run_prefix_clean
from dircleaner.model import ActionKind
from dircleaner.paths import directories_of
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.prefix import FolderIndexLooksCyclic, normalise_prefix
from dircleaner.store import Store, open_store
from dircleaner.store.records import DeleteRequest, DirectoryReads
from dircleaner.timeutil import now_us
from tests.helpers import audit_entries, expected_dirs, invoke, said, write_lines

SESSION = secrets.token_hex(4)
PREFIX = "logs/2025/"


@dataclass
class Backend:
    """A store to test against: its URL, an open connection and the test's own bucket."""

    url: str
    store: Store
    bucket: str


@pytest.fixture(params=["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'meta.db'}"
        with open_store(url, create=True) as store:
            yield Backend(url, store, "b1")
        return
    from tests.test_cassandra_end_to_end import _init_keyspace, forget_bucket

    url = _init_keyspace(request.getfixturevalue("cassandra_url"), "prefix")
    bucket = f"{request.node.name}-{SESSION}".replace("[", "-").replace("]", "")
    with open_store(url) as store:
        try:
            yield Backend(url, store, bucket)
        finally:
            forget_bucket(store, bucket)


def mass_deleted_dataset() -> tuple[list[str], list[str]]:
    """(keys put, keys then deleted): ``logs/2025/`` emptied but for one object and a marker;
    look-alikes outside it emptied too (they must stay)."""
    put: list[str] = []
    for year in ("2024", "2025", "2025-old"):
        for m in range(1, 4):
            for d in range(1, 6):
                for h in range(4):
                    put.append(f"logs/{year}/m{m:02d}/d{d:02d}/h{h:02d}/part.json")
    put += [f"{PREFIX}wide/e{i:03d}/x" for i in range(40)]  # a partition of 40 empty siblings
    put += ["logs/2025/m02/d03/h01/keep.txt", "logs/2025/m03/d05/marker/", "logs/top.txt"]
    put += ["other/2025/a/b", "logs/2025x/y/z"]
    keep = {"logs/2025/m02/d03/h01/keep.txt", "logs/2025/m03/d05/marker/", "logs/top.txt"}
    dead = [key for key in put if key not in keep]
    return put, dead


def load(backend: Backend, tmp: Path, put: Sequence[str], dead: Sequence[str]) -> None:
    args = ("--bucket", backend.bucket)
    result = invoke(backend.url, "import-keys", str(write_lines(tmp / "put.txt", put)), *args)
    assert result.exit_code == 0, result.output
    result = invoke(backend.url, "delete-keys", str(write_lines(tmp / "dead.txt", dead)), *args)
    assert result.exit_code == 0, result.output


def listed(backend: Backend) -> set[str]:
    result = invoke(backend.url, "list-dirs", "--bucket", backend.bucket)
    assert result.exit_code == 0, result.output
    return set(result.stdout.splitlines())


def clean_prefix(backend: Backend, prefix: str, audit: Path, *extra: str) -> Any:
    result = invoke(
        backend.url,
        "clean",
        "--prefix",
        prefix,
        "--bucket",
        backend.bucket,
        "--min-age",
        "0",
        "--rate",
        "0",
        "--audit-log",
        str(audit),
        *extra,
    )
    return result


def summary_of(result: Any) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


# -- ground truth ---------------------------------------------------------------------------------


def test_a_mass_deleted_prefix_is_cleaned_in_one_run_and_nothing_outside(
    backend: Backend, tmp_path: Path
) -> None:
    put, dead = mass_deleted_dataset()
    load(backend, tmp_path, put, dead)
    every, live = expected_dirs(put, dead)
    empty_under = {d for d in every - live if d.startswith(PREFIX)}
    before = listed(backend)
    assert before == every
    audit = tmp_path / "audit.jsonl"
    summary = summary_of(clean_prefix(backend, PREFIX, audit, "--json"))
    after = listed(backend)
    # Every empty directory under the prefix went, in one run; nothing else moved.
    assert after == before - empty_under
    deleted = {e["dir"] for e in audit_entries(audit)}
    assert deleted == empty_under
    assert (
        summary["delete_requested_dirs"] == len(empty_under) == summary["walk"]["empty_directories"]
    )
    assert summary["plan"]["deferred"] == 0
    assert summary["plan"]["partition_deletes"] > 0  # empty subtrees collapsed
    # The one object and the marker keep their directories and every ancestor.
    for key in ("logs/2025/m02/d03/h01/keep.txt", "logs/2025/m03/d05/marker/"):
        assert set(directories_of(key)) <= after
    assert "logs/2025/m02/d03/h00/" not in after and "logs/2025/m01/" not in after
    # Look-alike siblings and other subtrees, empty as they are, are not the prefix's business.
    assert {"logs/2025-old/", "logs/2025x/", "logs/2024/m01/d01/h00/", "other/2025/a/"} <= after
    # A second run finds nothing left to do: it converges.
    again = summary_of(clean_prefix(backend, PREFIX, audit, "--json"))
    assert again["delete_requested_dirs"] == 0 and listed(backend) == after


def test_an_empty_prefix_goes_itself_but_never_its_parent(backend: Backend, tmp_path: Path) -> None:
    put, dead = mass_deleted_dataset()
    load(backend, tmp_path, put, dead)
    before = listed(backend)
    gone = {d for d in before if d.startswith("logs/2024/")}
    summary = summary_of(clean_prefix(backend, "logs/2024", tmp_path / "a.jsonl", "--json"))
    assert summary["prefix"] == "logs/2024/" and summary["walk"]["prefix_empty"]
    assert listed(backend) == before - gone
    assert "logs/2024/" in gone and "logs/" in listed(backend)


def test_a_whole_top_level_directory_goes_its_root_row_only(
    backend: Backend, tmp_path: Path
) -> None:
    load(backend, tmp_path, ["top/a/b/c", "top/d", "stay/x"], ["top/a/b/c", "top/d"])
    result = clean_prefix(backend, "top/", tmp_path / "a.jsonl")
    assert result.exit_code == 0, result.output
    assert listed(backend) == {"stay/"}


def test_an_object_put_during_the_walk_keeps_its_directory(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put = [f"{PREFIX}m{m:02d}/d{d:02d}/x" for m in range(1, 4) for d in range(1, 4)]
    load(backend, tmp_path, put, put)
    late = f"{PREFIX}m01/late.txt"
    read_directories = backend.store.read_directories

    def read_then_put(keys: Sequence[tuple[str, str]]) -> DirectoryReads:
        read = read_directories(keys)
        if any(d.startswith(f"{PREFIX}m01/d") for _, d in keys):
            # m01/ was probed (empty) a wave ago: the walk will call it empty.
            backend.store.put_objects(backend.bucket, [late], now_us())
        return read

    monkeypatch.setattr(backend.store, "read_directories", read_then_put)

    audit = tmp_path / "audit.jsonl"
    config = PrefixCleanConfig(
        prefix=PREFIX,
        bucket=backend.bucket,
        min_age_s=0,
        throttle=ThrottleConfig(rate=0),
        audit_log=audit,
    )
    report = run_prefix_clean(backend.store, config)
    deleted = {e["dir"] for e in audit_entries(audit)}
    # The race happened: the clean deleted m01/ (and its ancestors) as it saw them empty...
    assert {f"{PREFIX}m01/", PREFIX} <= deleted
    assert report.walk.prefix_empty
    # ...yet the put, later than T, keeps them and every ancestor listed.
    after = listed(backend)
    assert set(directories_of(late)) <= after
    assert f"{PREFIX}m02/" not in after and f"{PREFIX}m01/d01/" not in after


# -- guards and bad input -------------------------------------------------------------------------


def one_error_line(result: Any) -> str:
    """The one error line (after the line naming the store, once the clean opened it)."""
    lines = [line for line in said(result).splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and result.stdout == ""
    return str(lines[0])


@pytest.mark.parametrize(
    ("prefix", "code", "says"),
    [
        ("", 2, "empty --prefix"),
        ("logs/1999/", 2, "not in the folder index"),
        ("logs/2025/m01/d01/h00/part.json/", 2, "not in the folder index"),
        ("logs", 3, "more than 10 directories"),
        ("nul\0/", 2, "NUL"),
    ],
)
def test_bad_prefixes_are_refused_in_one_line_and_nothing_is_deleted(
    backend: Backend, tmp_path: Path, prefix: str, code: int, says: str
) -> None:
    put, dead = mass_deleted_dataset()
    load(backend, tmp_path, put, dead)
    before = listed(backend)
    audit = tmp_path / "audit.jsonl"
    result = clean_prefix(backend, prefix, audit, "--max-deletes", "10")
    assert result.exit_code == code, result.output
    assert says in one_error_line(result)
    assert listed(backend) == before
    assert not audit.exists()


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (("--shard", "0/2"), "--shard does not apply with --prefix"),
        (("--generation", "x"), "--generation does not apply with --prefix: no filter is read"),
        (("--max-filter-age", "1h"), "--max-filter-age does not apply with --prefix"),
        (("--force",), "--force does not apply with --prefix"),
        (("--max-delete-fraction", "1"), "--max-delete-fraction does not apply with --prefix"),
        (("--workers", "2"), "--workers does not apply with --prefix"),
        (("--scheduler", "tcp://127.0.0.1:1"), "--scheduler does not apply with --prefix"),
        (("--slices", "2"), "--slices does not apply with --prefix"),
        (("--no-verify",), "--no-verify does not apply with --prefix"),
        (("--verify",), "--verify does not apply with --prefix"),
    ],
)
def test_an_option_a_prefix_clean_does_not_use_is_refused_and_nothing_is_deleted(
    backend: Backend, tmp_path: Path, extra: tuple[str, ...], says: str
) -> None:
    put, dead = mass_deleted_dataset()
    load(backend, tmp_path, put, dead)
    before = listed(backend)
    audit = tmp_path / "a.jsonl"
    result = clean_prefix(backend, PREFIX, audit, *extra)
    assert result.exit_code == 2, result.output
    assert one_error_line(result).startswith(f"Error: {says}")
    assert listed(backend) == before
    assert not audit.exists()


def test_an_option_only_a_prefix_clean_uses_is_refused_without_it(
    backend: Backend, tmp_path: Path
) -> None:
    result = invoke(backend.url, "clean", "--max-deletes", "10", "--dry-run")
    assert (result.exit_code, result.output) == (
        2,
        "Error: --max-deletes does not apply without --prefix: it bounds a --prefix clean"
        " (the store-wide clean has --max-delete-fraction)\n",
    )


def test_dry_run_plans_and_deletes_nothing(backend: Backend, tmp_path: Path) -> None:
    put, dead = mass_deleted_dataset()
    load(backend, tmp_path, put, dead)
    before = listed(backend)
    summary = summary_of(clean_prefix(backend, PREFIX, tmp_path / "a.jsonl", "--dry-run", "--json"))
    assert summary["dry_run"] and summary["plan"]["directories"] > 0
    assert summary["delete_requested_dirs"] == 0 and listed(backend) == before


def test_a_wide_live_partition_over_budget_is_rewritten_in_one_run(
    backend: Backend, tmp_path: Path
) -> None:
    """The prefix clean shares the nightly planner: over its budget, a live partition is
    rewritten (no tombstone cell) rather than deferred."""
    # A live directory with 12 empty children, none adjacent to another (ranges cannot help).
    put = [f"{PREFIX}c{i:02d}/x" for i in range(24)] + [f"{PREFIX}own.txt"]
    dead = [f"{PREFIX}c{i:02d}/x" for i in range(0, 24, 2)]
    load(backend, tmp_path, put, dead)
    run = summary_of(
        clean_prefix(backend, PREFIX, tmp_path / "a.jsonl", "--max-tombstones-per-partition", "5",
                     "--json")
    )  # fmt: skip
    assert (run["delete_requested_dirs"], run["plan"]["deferred"], run["plan"]["rewrites"]) == (
        12,
        0,
        1,
    )
    assert not {f"{PREFIX}c{i:02d}/" for i in range(0, 24, 2)} & listed(backend)
    assert {f"{PREFIX}c{i:02d}/" for i in range(1, 24, 2)} <= listed(backend)


def test_the_budget_holds_across_runs_and_spends_again_after_the_grace_period(
    backend: Backend, tmp_path: Path
) -> None:
    """What resume means for a prefix clean under a binding budget: the same command again
    deletes what the ledger still allows, and nothing more until the grace period has passed."""
    put = [f"{PREFIX}c{i:02d}/x" for i in range(24)] + [f"{PREFIX}own.txt"]
    dead = [f"{PREFIX}c{i:02d}/x" for i in range(0, 24, 2)]
    load(backend, tmp_path, put, dead)
    audit = tmp_path / "audit.jsonl"
    # A short grace period (the charges' TTL): two runs inside it, then one after each expiry.
    grace_s = 8.0
    budget = ("--max-tombstones-per-partition", "5", "--max-rewrite-rows", "0", "--json",
              "--grace-period", f"{grace_s:g}s")  # fmt: skip
    within = [summary_of(clean_prefix(backend, PREFIX, audit, *budget)) for _ in range(2)]
    assert [r["delete_requested_dirs"] for r in within] == [5, 0]
    assert [r["plan"]["deferred"] for r in within] == [7, 7]
    after = []
    for _ in range(2):
        time.sleep(grace_s + 0.5)  # every charge so far has expired
        after.append(summary_of(clean_prefix(backend, PREFIX, audit, *budget)))
    assert [r["delete_requested_dirs"] for r in after] == [5, 2]
    assert not {f"{PREFIX}c{i:02d}/" for i in range(0, 24, 2)} & listed(backend)
    assert {f"{PREFIX}c{i:02d}/" for i in range(1, 24, 2)} <= listed(backend)


class Killed(BaseException):
    """Stands for a kill -9 in the middle of the deletes (nothing below catches it)."""


def test_a_clean_killed_mid_delete_is_finished_by_running_it_again(
    backend: Backend, tmp_path: Path
) -> None:
    put, dead = mass_deleted_dataset()
    load(backend, tmp_path, put, dead)
    every, live = expected_dirs(put, dead)
    uninterrupted = listed(backend) - {d for d in every - live if d.startswith(PREFIX)}
    store = backend.store
    real = store.delete_requests
    row_requests = []

    def dies_at_the_third_row_request(actions: Sequence[Any], timestamp_us: int) -> Any:
        requests = real(actions, timestamp_us)
        for i, request in enumerate(requests):
            if actions[request.members[0]].kind is ActionKind.ROW:
                row_requests.append(request)
                if len(row_requests) == 3:
                    requests[i] = DeleteRequest(request.members, dies)
        return requests

    def dies(done: Any) -> None:
        raise Killed

    config = PrefixCleanConfig(
        prefix=PREFIX,
        bucket=backend.bucket,
        min_age_s=0,
        throttle=ThrottleConfig(rate=0, concurrency=2),
        audit_log=tmp_path / "audit.jsonl",
    )
    store.delete_requests = dies_at_the_third_row_request  # type: ignore[method-assign]
    # Groups of ``concurrency`` actions on both backends, so the third row request comes
    # mid-delete (Cassandra takes concurrency × its partition deletes per request at once);
    # the second run below deletes in the store's own groups.
    traits = store.traits
    store.traits = dataclasses.replace(traits, deletes_per_request=1)
    try:
        with pytest.raises(Killed):
            run_prefix_clean(store, config)
    finally:
        del store.delete_requests
        store.traits = traits
    halfway = listed(backend)
    assert uninterrupted < halfway < every  # some deletes landed, not all
    report = run_prefix_clean(store, config)
    assert report.deleted is not None and report.deleted.directories > 0
    assert listed(backend) == uninterrupted


# -- the walk's own guards (library) --------------------------------------------------------------


def test_a_directory_listed_twice_looks_cyclic(backend: Backend, tmp_path: Path) -> None:
    load(backend, tmp_path, [f"{PREFIX}a/b/x"], [f"{PREFIX}a/b/x"])
    # A row whose name holds a '/' lists a/b/ a second time, from the prefix's partition.
    backend.store.write_folder_rows([(backend.bucket, PREFIX, "a/b")], now_us())
    before = listed(backend)
    config = PrefixCleanConfig(prefix=PREFIX, bucket=backend.bucket, min_age_s=0)
    with pytest.raises(FolderIndexLooksCyclic, match="twice"):
        run_prefix_clean(backend.store, config)
    assert listed(backend) == before


def test_a_walk_deeper_than_the_bound_is_refused(backend: Backend, tmp_path: Path) -> None:
    deep = PREFIX + "d/" * 6 + "x"
    load(backend, tmp_path, [deep], [deep])
    before = listed(backend)
    config = PrefixCleanConfig(prefix=PREFIX, bucket=backend.bucket, min_age_s=0, max_depth=4)
    with pytest.raises(FolderIndexLooksCyclic, match="deeper than 4 levels") as caught:
        run_prefix_clean(backend.store, config)
    assert isinstance(caught.value, GuardRefused)
    assert listed(backend) == before
    ok = PrefixCleanConfig(prefix=PREFIX, bucket=backend.bucket, min_age_s=0, max_depth=6)
    report = run_prefix_clean(backend.store, ok)
    assert report.deleted is not None and report.deleted.directories == 7


def test_rows_written_after_t_survive_the_partition_delete(
    backend: Backend, tmp_path: Path
) -> None:
    """--min-age: deletes go at walk start minus it, so a row rewritten since survives."""
    load(backend, tmp_path, [f"{PREFIX}a/x"], [f"{PREFIX}a/x"])
    config = PrefixCleanConfig(prefix=PREFIX, bucket=backend.bucket, min_age_s=3600)
    report = run_prefix_clean(backend.store, config)
    assert report.delete_timestamp_us == report.walk.started_us - 3_600_000_000
    # Written moments ago, after T: nothing is removed although the plan had it.
    assert report.plan.directories == 2
    assert report.deleted is not None and report.deleted.directories == 2
    assert {f"{PREFIX}a/", PREFIX, "logs/"} <= listed(backend)


# -- prefix normalisation (pure) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "meant"), [("logs/2025", "logs/2025/"), ("logs/2025/", "logs/2025/"), ("/", "/")]
)
def test_a_prefix_names_a_directory(given: str, meant: str) -> None:
    assert normalise_prefix(given) == meant


def test_the_spill_options_are_refused_with_prefix(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    assert invoke(url, "import-keys", "-", input="t/3/x\n").exit_code == 0
    result = invoke(url, "clean", "--prefix", "t/3", "--spill-dir", "x")
    assert result.exit_code == 2
    assert said(result).strip() == (
        "Error: --spill-dir does not apply with --prefix: the walk keeps its subtree"
        " (at most --max-deletes directories) in memory"
    )
