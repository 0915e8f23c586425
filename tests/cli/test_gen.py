"""``dircleaner gen``: --empty-fraction and --shape through the command line, on SQLite and on a
Cassandra node, and a night on the backlog shape with precision exactly 1.0."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from dircleaner.cli.data_commands import SHAPE_NAMES
from dircleaner.store.cassandra.config import parse_cassandra_url
from dircleaner.store.cassandra.store import CassandraStore
from dircleaner.synth import SHAPES
from tests.helpers import audit_entries, invoke, run_eagerly, said
from tests.test_cassandra_end_to_end import forget_bucket, keyspace_url

SESSION = secrets.token_hex(4)


def gen(url: str, truth: Path, *args: str) -> dict[str, int]:
    made = invoke(url, "gen", "--truth", str(truth), "--json", *args)
    assert made.exit_code == 0, made.output
    summary: dict[str, int] = json.loads(made.stdout)
    assert len(truth.read_text(encoding="utf-8").splitlines()) == summary["empty_dirs"]
    return summary


def listed(url: str, bucket: str = "default") -> set[str]:
    result = invoke(url, "list-dirs", "--bucket", bucket)
    assert result.exit_code == 0, result.output
    return set(result.stdout.splitlines())


def test_the_presets_are_the_talks_clusters() -> None:
    assert tuple(SHAPES) == SHAPE_NAMES
    assert round(SHAPES["steady"] * 31_500_000) == 352
    assert round(SHAPES["backlog"] * 25_000_000) == 16_000_000


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--shape", "backlog", "--empty-fraction", "0.3"],
            "Error: give --shape or --empty-fraction, not both",
        ),
        (["--empty-fraction", "0.95"], "0.95 is not in the range 0<=x<=0.9"),
        (["--shape", "busy"], "'busy' is not one of 'steady', 'backlog'"),
    ],
)
def test_a_bad_share_is_refused_and_creates_nothing(
    tmp_path: Path, args: list[str], error: str
) -> None:
    result = invoke(f"sqlite:///{tmp_path}/meta.db", "gen", "--dirs", "1000", *args)
    assert result.exit_code == 2, result.output
    assert error in said(result)
    assert not (tmp_path / "meta.db").exists()


@pytest.mark.parametrize(
    ("args", "fraction"),
    [
        (["--shape", "backlog"], 0.64),
        (["--empty-fraction", "0.9"], 0.9),
        ([], 0.05),  # the default
    ],
)
def test_gen_leaves_the_share_asked_for_empty(
    tmp_path: Path, args: list[str], fraction: float
) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    summary = gen(url, tmp_path / "truth.txt", "--dirs", "20000", "--seed", "2", *args)
    assert summary["dirs"] == len(listed(url))
    assert abs(summary["empty_dirs"] / summary["dirs"] - fraction) <= 0.01


def test_the_summary_line_says_the_share(tmp_path: Path) -> None:
    made = invoke(f"sqlite:///{tmp_path}/meta.db", "gen", "--dirs", "20000", "--shape", "backlog")
    assert made.exit_code == 0, made.output
    line = made.stdout.strip()
    said_ = re.fullmatch(
        r"generated ([\d,]+) directories \(([\d,]+) empty: ([.\d]+) of them\).*", line
    )
    assert said_ is not None, line
    dirs, empty, share = (float(g.replace(",", "")) for g in said_.groups())
    assert share == float(f"{empty / dirs:.3g}") and abs(share - 0.64) <= 0.01


def night_on_the_backlog(url: str, tmp: Path, bucket: str = "default") -> None:
    """One night on a backlog: nothing that holds an object is deleted (precision exactly 1.0),
    most of the empties go in one night."""
    truth = set((tmp / "truth.txt").read_text(encoding="utf-8").splitlines())
    before = listed(url, bucket)
    audit = tmp / "audit.jsonl"
    ran = run_eagerly(url, audit, "--bucket", bucket, "--fpr", "0.001", "--json")
    assert ran.exit_code == 0, ran.output
    deleted = {e["dir"] for e in audit_entries(audit)}
    assert deleted and deleted <= truth  # precision 1.0
    assert before - listed(url, bucket) == deleted
    assert len(deleted) >= 0.9 * len(truth)  # the rest deferred by the tombstone budget


def test_a_night_on_the_backlog_deletes_only_empty_directories(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    gen(url, tmp_path / "truth.txt", "--dirs", "20000", "--seed", "3", "--shape", "backlog")
    night_on_the_backlog(url, tmp_path)


# -- on Cassandra -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cassandra_ks(cassandra_url: str) -> str:
    base = parse_cassandra_url(cassandra_url).keyspace or "dircleaner_test"
    url = keyspace_url(cassandra_url, f"{base}_gen")
    made = invoke(url, "init-schema")
    assert made.exit_code == 0, made.output
    return url


@pytest.fixture()
def cassandra_bucket(cassandra_ks: str) -> Iterator[str]:
    name = f"gen-{SESSION}"
    yield name
    with CassandraStore.open(cassandra_ks) as store:
        forget_bucket(store, name)


@pytest.mark.cassandra
def test_gen_on_cassandra_writes_the_same_backlog_as_on_sqlite(
    cassandra_ks: str, cassandra_bucket: str, tmp_path: Path
) -> None:
    args = ("--dirs", "10000", "--seed", "4", "--shape", "backlog", "--bucket", cassandra_bucket)
    (tmp_path / "sqlite").mkdir()
    sqlite_url = f"sqlite:///{tmp_path}/sqlite/meta.db"
    on_sqlite = gen(sqlite_url, tmp_path / "sqlite" / "truth.txt", *args)
    on_cassandra = gen(cassandra_ks, tmp_path / "truth.txt", *args)
    assert on_cassandra == {**on_sqlite, "seconds": on_cassandra["seconds"]}
    assert listed(cassandra_ks, cassandra_bucket) == listed(sqlite_url, cassandra_bucket)
    assert (tmp_path / "truth.txt").read_bytes() == (tmp_path / "sqlite" / "truth.txt").read_bytes()
    assert abs(on_cassandra["empty_dirs"] / on_cassandra["dirs"] - 0.64) <= 0.01
    night_on_the_backlog(cassandra_ks, tmp_path, cassandra_bucket)
