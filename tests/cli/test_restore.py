"""dircleaner restore through the CLI: only this store's entries, times as issued, and the
summary forms (-n, --json, --metrics-file) every other command has."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from dircleaner.paths import dir_of_row
from dircleaner.store import open_store
from dircleaner.store.cassandra.config import parse_cassandra_url
from dircleaner.timeutil import now_us
from tests.helpers import (
    EAGER,
    audit_entries,
    invoke,
    one_line_error,
    said,
    samples_of,
    small_store,
)


def store_with_deletes(
    tmp_path: Path, name: str, dead: list[str], *audit: str, stem: str = "d"
) -> str:
    """A SQLite store ``name`` of ten directories ``d0/ .. d9/`` (``stem`` for ``d``, in bucket
    ``default``) whose ``dead`` keys were deleted and cleaned by one run; its URL."""
    url = f"sqlite:///{tmp_path}/{name}"
    keys = "".join(f"{stem}{i}/x\n" for i in range(10))
    assert invoke(url, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(url, "delete-keys", "-", input="".join(k + "\n" for k in dead)).exit_code == 0
    result = invoke(url, "run", *EAGER, *audit)
    assert result.exit_code == 0, result.output
    return url


def audit_log_of(run_output: str) -> Path:
    (line,) = [line for line in run_output.splitlines() if "audit log:" in line]
    return Path(line.split("audit log:", 1)[1].strip())


def default_logs() -> list[Path]:
    import os

    return sorted((Path(os.environ["XDG_STATE_HOME"]) / "dircleaner").glob("audit-*.jsonl.gz"))


def scope_of(tmp_path: Path, name: str) -> str:
    return f"sqlite:objects,folders@{tmp_path.resolve()}/{name}"


def dirs(url: str) -> list[str]:
    return invoke(url, "list-dirs").output.splitlines()


# -- the store an audit log belongs to ------------------------------------------------------------


def test_each_store_gets_its_own_default_log_whose_records_name_it(tmp_path: Path) -> None:
    store_with_deletes(tmp_path, "a.db", ["d1/x", "d2/x"])
    store_with_deletes(tmp_path, "b.db", ["d3/x"])
    log_a, log_b = default_logs()
    assert "a.db" in log_a.name and "b.db" in log_b.name
    (b_entry,) = audit_entries(log_b)
    assert b_entry["scope"] == scope_of(tmp_path, "b.db")
    assert b_entry["dir"] == "d3/"
    # the run it belongs to: its generation, when it started and when the batch was issued (UTC)
    assert b_entry["generation"]
    assert b_entry["run_started"].endswith("Z") and b_entry["issued"].endswith("Z")
    assert b_entry["run_started"] <= b_entry["issued"]
    # `run` began with its build, whose start the generation id carries (to the µs)
    built = datetime.strptime(b_entry["generation"][:15], "%Y%m%dT%H%M%S")
    assert b_entry["run_started"] <= built.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert {e["scope"] for e in audit_entries(log_a)} == {scope_of(tmp_path, "a.db")}


def test_restore_into_another_store_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    a = store_with_deletes(tmp_path, "a.db", ["d1/x", "d2/x"])
    b = store_with_deletes(tmp_path, "b.db", [])
    (log_a,) = default_logs()
    before = dirs(b)
    for extra in ((), ("-n",), ("--json",)):
        result = invoke(b, "restore", str(log_a), *extra)
        assert result.exit_code == 3, result.output
        assert said(result) == (
            f"Error: {log_a} holds the deletes of store {scope_of(tmp_path, 'a.db')!r}, not of"
            f" this store {scope_of(tmp_path, 'b.db')!r}: restored nothing; give this store's"
            " audit log, or --store the one it was written for\n"
        )
    assert dirs(b) == before
    assert "default\td1/" not in dirs(a)
    restored = invoke(a, "restore", str(log_a))
    assert restored.exit_code == 0, restored.output
    assert {"default\td1/", "default\td2/"} <= set(dirs(a))


def test_a_log_shared_by_two_stores_restores_only_this_stores_entries(tmp_path: Path) -> None:
    shared = tmp_path / "shared.jsonl"
    a = store_with_deletes(tmp_path, "a.db", ["d1/x", "d2/x"], "--audit-log", str(shared))
    b_dead = ["b3/x", "b4/x", "b5/x"]
    b = store_with_deletes(tmp_path, "b.db", b_dead, "--audit-log", str(shared), stem="b")
    result = invoke(a, "restore", str(shared))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"restoring into {scope_of(tmp_path, 'a.db')} from {shared}"
    assert lines[1].startswith("restored 2 directory entries (by 2 ")
    assert lines[2:] == [f"  skipped 3 entries of another store: {scope_of(tmp_path, 'b.db')}"]
    assert {"default\td1/", "default\td2/"} <= set(dirs(a))
    assert not [d for d in dirs(a) if d.startswith("default\tb")]
    assert not {"default\tb3/", "default\tb4/", "default\tb5/"} & set(dirs(b))


def test_a_moved_store_restores_its_own_log_with_force(tmp_path: Path) -> None:
    """The default log records the file's location: after a move it is another store's log.
    The refusal says how (--force), and --force restores it and says so."""
    before = tmp_path / "before"
    before.mkdir()
    url = store_with_deletes(before, "meta.db", ["d1/x", "d2/x"])
    (log,) = default_logs()
    after = tmp_path / "after"
    before.rename(after)
    moved = f"sqlite:///{after}/meta.db"
    old, new = scope_of(before, "meta.db"), scope_of(after, "meta.db")
    assert url != moved
    refused = invoke(moved, "restore", str(log))
    assert refused.exit_code == 3
    assert said(refused) == (
        f"Error: {log} holds the deletes of store {old!r}, not of this store {new!r}: restored"
        " nothing; give this store's audit log, or --store the one it was written for; if this"
        " store was moved from there, rerun with --force\n"
    )
    forced = invoke(moved, "restore", str(log), "--force")
    assert forced.exit_code == 0, forced.output
    lines = forced.stdout.splitlines()
    assert lines[1].startswith("restored 2 directory entries (by ")
    assert lines[2:] == [
        f"  --force: the entries of store {old}, the same tables elsewhere (a moved store),"
        " taken as this store's"
    ]
    assert {"default\td1/", "default\td2/"} <= set(dirs(moved))


def test_force_never_restores_the_log_of_a_store_still_in_its_place(tmp_path: Path) -> None:
    a = store_with_deletes(tmp_path, "a.db", ["d1/x", "d2/x"])
    b = store_with_deletes(tmp_path, "b.db", [])
    (log_a,) = default_logs()
    before = dirs(b)
    result = invoke(b, "restore", str(log_a), "--force")
    assert result.exit_code == 3, result.output
    assert "rerun with --force" not in result.stderr
    assert dirs(b) == before
    assert "default\td1/" not in dirs(a)


def store_on(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, str]:
    """A store on ``backend`` (URL, bucket) whose ``d1/`` lost its only object an hour ago."""
    if backend == "sqlite":
        url, bucket = f"sqlite:///{tmp_path}/on.db", "default"
    else:
        base: str = request.getfixturevalue("cassandra_url")
        keyspace = parse_cassandra_url(base).keyspace or "dircleaner_test"
        url, bucket = base.rsplit("/", 1)[0] + f"/{keyspace}_restore", f"r{uuid.uuid4().hex}"
    hour_ago = now_us() - 3_600_000_000
    with open_store(url, create=True) as store:
        store.put_objects(bucket, ["d0/x", "d1/x", "d2/x"], hour_ago)
        store.delete_objects(bucket, ["d1/x"], hour_ago)
    return url, bucket


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)]
)
def test_each_backend_names_its_store_and_refuses_a_log_of_another(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    url, bucket = store_on(backend, tmp_path, request)
    log = tmp_path / "audit.jsonl"
    result = invoke(url, "run", *EAGER, "--bucket", bucket, "--audit-log", str(log))
    assert result.exit_code == 0, result.output
    (entry,) = audit_entries(log)
    scope = entry["scope"]
    assert scope.startswith(f"{backend}:")
    other = store_with_deletes(tmp_path, "other.db", [])
    before = dirs(other)
    refused = invoke(other, "restore", str(log))
    assert refused.exit_code == 3, refused.output
    assert f"holds the deletes of store {scope!r}, not of this store" in refused.stderr
    assert dirs(other) == before
    restored = invoke(url, "restore", str(log))
    assert restored.exit_code == 0, restored.output
    assert restored.stdout.splitlines()[0] == f"restoring into {scope} from {log}"
    with open_store(url) as store:
        assert "d1/" in {dir_of_row(r.parent, r.name) for r in store.iter_folder_rows(bucket)}


def strip_scope(log: Path) -> Path:
    """The log as a dircleaner that did not record the store wrote it."""
    old = log.with_name("old.jsonl")
    entries = audit_entries(log)
    for entry in entries:
        for key in ("scope", "run_started", "issued"):
            del entry[key]
    old.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return old


def test_an_old_log_without_its_store_is_refused_unless_forced(tmp_path: Path) -> None:
    a = store_with_deletes(tmp_path, "a.db", ["d1/x", "d2/x"])
    (log_a,) = default_logs()
    old = strip_scope(log_a)
    refused = invoke(a, "restore", str(old))
    assert refused.exit_code == 3, refused.output
    assert said(refused) == (
        f"Error: {old} does not record its store (an older dircleaner wrote it): it may hold"
        " another store's deletes; restored nothing; if it is this store's"
        f" ({scope_of(tmp_path, 'a.db')!r}), rerun with --force\n"
    )
    assert "default\td1/" not in dirs(a)
    forced = invoke(a, "restore", str(old), "--force")
    assert forced.exit_code == 0, forced.output
    assert forced.stdout.splitlines()[1].startswith("restored 2 directory entries")
    assert {"default\td1/", "default\td2/"} <= set(dirs(a))


# -- --since/--until: when the deletes were issued -------------------------------------------------

ISSUED = {
    # night: (when the batch was issued, T: the run's build start - --min-age, in µs)
    1: ("2026-11-25T07:28:40Z", 1795591120000000),  # 2026-11-25T07:18:40Z
    2: ("2026-11-26T07:28:40Z", 1795677520000000),  # 2026-11-26T07:18:40Z
}


@pytest.fixture
def two_nights(tmp_path: Path) -> tuple[str, Path]:
    """A store and its log of two nights, one directory each, issued at ISSUED's times."""
    log = tmp_path / "audit.jsonl"
    url = store_with_deletes(tmp_path, "meta.db", ["d1/x"], "--audit-log", str(log))
    assert invoke(url, "delete-keys", "-", input="d2/x\n").exit_code == 0
    assert invoke(url, "run", *EAGER, "--audit-log", str(log)).exit_code == 0
    entries = audit_entries(log)
    assert [e["dir"] for e in entries] == ["d1/", "d2/"]
    for night, entry in enumerate(entries, start=1):
        entry["issued"], entry["delete_ts_us"] = ISSUED[night]
    log.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return url, log


def selected(url: str, log: Path, *options: str) -> list[str]:
    result = invoke(url, "restore", str(log), "-n", "--json", *options)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    first, last = summary["issued_first"], summary["issued_last"]
    return [first] if first == last else [first, last] if first else []


@pytest.mark.parametrize(
    "since",
    [
        "2026-11-26T07:28:00Z",
        "2026-11-26T09:28:00+02:00",
        "2026-11-26 07:28",
        "2026-11-26 07:28:00",
        # a minute after night 2's T (07:18:40), before its deletes were issued
        "2026-11-26T07:19:40Z",
    ],
)
def test_since_selects_by_the_time_the_deletes_were_issued(
    two_nights: tuple[str, Path], since: str
) -> None:
    url, log = two_nights
    assert selected(url, log, "--since", since) == ["2026-11-26T07:28:40Z"]


def test_until_is_the_issue_time_too_and_excludes_its_bound(
    two_nights: tuple[str, Path],
) -> None:
    url, log = two_nights
    assert selected(url, log, "--until", "2026-11-26 07:28:40") == ["2026-11-25T07:28:40Z"]
    assert selected(url, log, "--until", "2026-11-26T07:28:41Z") == [
        "2026-11-25T07:28:40Z",
        "2026-11-26T07:28:40Z",
    ]


def test_a_bad_time_is_one_line_with_an_example(two_nights: tuple[str, Path]) -> None:
    url, log = two_nights
    result = invoke(url, "restore", str(log), "--since", "07:28 yesterday")
    assert (result.exit_code, result.output) == (
        2,
        "Error: --since: invalid time '07:28 yesterday' (use e.g. 2026-11-26T07:28:00Z,"
        " 2026-11-26T09:28:00+02:00 or '2026-11-26 07:28' (UTC))\n",
    )


@pytest.mark.parametrize(
    ("since", "until"),
    [
        ("2026-11-26 07:28", "2026-11-25 07:28"),
        ("2026-11-26T07:28:00Z", "2026-11-26T09:28:00+02:00"),  # the same moment
    ],
)
def test_since_not_before_until_is_refused(
    two_nights: tuple[str, Path], tmp_path: Path, since: str, until: str
) -> None:
    """It only warned that nothing matched, and exited 0 with nothing restored."""
    url, log = two_nights
    metrics = tmp_path / "restore.prom"
    before = dirs(url)
    result = invoke(
        url, "restore", str(log), "--since", since, "--until", until, "--metrics-file", str(metrics)
    )
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"Error: --since {since} is not before --until {until}: no delete was issued in between"
        " (are they the wrong way round?)\n"
    )
    assert dirs(url) == before
    assert samples_of(metrics.read_text(encoding="utf-8"))["dircleaner_last_run_success"] == 0


def test_the_help_shows_an_example_time_not_a_pattern() -> None:
    text = " ".join(invoke("sqlite:///x.db", "restore", "--help").output.split())
    assert "2026-11-26T07:28:00Z" in text
    assert "%Y" not in text


# -- -n, --json, --metrics-file, --bucket ----------------------------------------------------------


def test_dry_run_parts_add_up_to_its_total_when_entries_repeat(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    url = store_with_deletes(tmp_path, "meta.db", ["d1/x", "d2/x", "d3/x"], "--audit-log", str(log))
    log.write_text(log.read_text(encoding="utf-8") * 2, encoding="utf-8")  # copied in twice
    dry = invoke(url, "restore", str(log), "--dry-run")
    assert dry.exit_code == 0, dry.output
    first, *rest = dry.stdout.splitlines()
    assert first.startswith(
        f"would restore 3 directory entries into {scope_of(tmp_path, 'meta.db')} (by 3 "
    )
    assert rest == ["  3 more entries named a directory already counted"]
    summary = json.loads(invoke(url, "restore", str(log), "-n", "--json").stdout)
    assert summary["directories"] == sum(summary["by_via"].values()) == 3
    assert summary["repeated_entries"] == 3


def test_restore_json_and_metrics_file(tmp_path: Path) -> None:
    shared = tmp_path / "shared.jsonl"
    a = store_with_deletes(tmp_path, "a.db", ["d1/x", "d2/x"], "--audit-log", str(shared))
    store_with_deletes(tmp_path, "b.db", ["d3/x"], "--audit-log", str(shared))
    metrics = tmp_path / "restore.prom"
    result = invoke(a, "restore", str(shared), "--json", "--metrics-file", str(metrics))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # one JSON object, nothing else on stdout
    assert summary["ok"] is True
    assert (summary["dry_run"], summary["directories"], summary["restored"]) == (False, 2, 2)
    assert summary["store"] == scope_of(tmp_path, "a.db")
    assert summary["skipped_other_stores"] == {scope_of(tmp_path, "b.db"): 1}
    assert summary["skipped"] == 1
    values = samples_of(metrics.read_text(encoding="utf-8"))
    assert values["dircleaner_last_run_success"] == 1
    assert values["dircleaner_restore_selected_directories"] == 2
    assert values["dircleaner_restored_directories"] == 2
    assert values["dircleaner_restore_skipped_entries"] == 1
    dry = invoke(a, "restore", str(shared), "-n", "--json", "--metrics-file", str(metrics))
    assert json.loads(dry.stdout)["restored"] is None
    assert samples_of(metrics.read_text(encoding="utf-8"))["dircleaner_restored_directories"] == 0


def test_a_refusal_writes_a_failed_metrics_file(tmp_path: Path) -> None:
    store_with_deletes(tmp_path, "a.db", ["d1/x"])
    b = store_with_deletes(tmp_path, "b.db", [])
    (log_a,) = default_logs()
    metrics = tmp_path / "restore.prom"
    result = invoke(b, "restore", str(log_a), "--json", "--metrics-file", str(metrics))
    assert result.exit_code == 3
    assert json.loads(result.stdout)["ok"] is False
    assert samples_of(metrics.read_text(encoding="utf-8"))["dircleaner_last_run_success"] == 0


def test_a_bucket_in_no_entry_is_refused_naming_the_buckets(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    url = store_with_deletes(tmp_path, "meta.db", ["d1/x"], "--audit-log", str(log))
    before = dirs(url)
    result = invoke(url, "restore", str(log), "--bucket", "photos")
    assert (result.exit_code, said(result)) == (
        3,
        f"Error: --bucket 'photos' is in no entry of {log} for this store; its buckets:"
        " 'default'; restored nothing\n",
    )
    assert dirs(url) == before
    ok = invoke(url, "restore", str(log), "--bucket", "default")
    assert ok.exit_code == 0 and "default\td1/" in dirs(url)


@pytest.fixture()
def store(tmp_path: Path) -> str:
    return small_store(tmp_path)


def test_restore_refuses_a_bad_audit_log_and_writes_nothing(store: str, tmp_path: Path) -> None:
    before = dirs(store)
    log = tmp_path / "bad.jsonl"
    log.write_text('{"bucket": "default", "parent": "", "name": "new"}\nnot json\n')
    result = invoke(store, "restore", str(log))
    assert result.exit_code == 2
    assert "line 2" in one_line_error(result.stderr)
    assert dirs(store) == before
