"""The refusal over --max-delete-fraction tells a backlog from a broken filter: a real backlog
(``gen --shape backlog``) against the same store with a filter that misses directories (bits
cleared; built for another dataset). The refusal says which it looks like, with the sample's
figures, the plan's size and what to run; --json and the metrics carry the same; nothing is
deleted either way."""

from __future__ import annotations

import json
import sqlite3
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from dircleaner.filter.format import decode_header, encode_header
from dircleaner.filter.generation import new_generation_id
from dircleaner.filter.stored import latest_complete, read_filter_part, save_filter_part
from dircleaner.pipeline.build import scope_of
from dircleaner.store import open_store
from tests.helpers import audit_entries, invoke, samples_of, write_lines

DIRS = 20_000


@pytest.fixture(scope="module")
def backlog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A backlog: about 64% of 20,000 directories empty, as the seed's 16M of 25M."""
    tmp = tmp_path_factory.mktemp("backlog")
    url = f"sqlite:///{tmp / 'meta.db'}"
    truth = str(tmp / "t")
    result = invoke(url, "gen", "--dirs", str(DIRS), "--shape", "backlog", "--truth", truth)
    assert result.exit_code == 0, result.output
    return tmp


def copy(backlog: Path, tmp_path: Path) -> tuple[str, Path]:
    db = tmp_path / "meta.db"
    db.write_bytes((backlog / "meta.db").read_bytes())
    return f"sqlite:///{db}", db


def folder_rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        (count,) = conn.execute("SELECT count(*) FROM folders").fetchone()
    conn.close()
    return int(count)


def truly_empty(backlog: Path) -> set[str]:
    return {line.split("\t")[-1] for line in (backlog / "t").read_text().splitlines()}


def refused(url: str, tmp_path: Path, *args: str) -> tuple[str, dict[str, object]]:
    """The one error line of a refused clean and its --json details."""
    common = ["--min-age", "0", "--audit-log", str(tmp_path / "a.jsonl"), *args]
    text = invoke(url, "clean", *common)
    assert text.exit_code == 3, text.output
    [line] = [x for x in text.stderr.splitlines() if x.startswith("Error: ")]
    assert text.stdout == ""
    as_json = invoke(url, "clean", *common, "--json", "--metrics-file", str(tmp_path / "m.prom"))
    assert as_json.exit_code == 3, as_json.output
    failure = json.loads(as_json.stdout)
    assert failure["error_type"] == "TooManyCandidates"
    details: dict[str, object] = failure["details"]
    return line, details


def verdicts(tmp_path: Path) -> dict[str, float]:
    samples = samples_of((tmp_path / "m.prom").read_text())
    name = "dircleaner_candidates_look_like"
    return {v: samples[f'{name}{{verdict="{v}"}}'] for v in ("backlog", "unclear", "broken_filter")}


def damage_filter(url: str, transform: object) -> None:
    """Store the newest filter again, as a newer generation, after ``transform(header, body)``."""
    with open_store(url) as store:
        info = latest_complete(store, scope_of(store, None))
        for part in info.shards:
            header_bytes, body = read_filter_part(store, info.generation, part.shard)
            header, body = transform(decode_header(header_bytes), body)  # type: ignore[operator]
            header = replace(header, body_len=len(body), body_crc=zlib.crc32(body))
            generation = new_generation_id(header.snapshot_us + 1, header.salt)
            save_filter_part(store, generation, header, encode_header(header), body)


def test_a_backlog_is_refused_as_a_backlog_with_what_clearing_it_takes(
    backlog: Path, tmp_path: Path
) -> None:
    url, db = copy(backlog, tmp_path)
    before = folder_rows(db)
    assert invoke(url, "build").exit_code == 0
    line, details = refused(url, tmp_path)
    assert "would be deleted, over --max-delete-fraction 0.1. It looks like a backlog" in line
    assert " of 4,096 candidates sampled hold an object" in line
    assert "The plan: " in line and "at --rate 1000" in line
    assert "rerun with --max-delete-fraction 0.7 and the night's window" in line
    sample = details["sample"]
    assert isinstance(sample, dict)
    assert sample["sampled"] == 4096 and sample["holding_objects"] == 0
    assert details["looks_like"] == "backlog"
    assert details["suggested_max_delete_fraction"] == 0.7
    plan = details["plan"]
    assert isinstance(plan, dict) and plan["directories"] > 0.6 * DIRS
    assert verdicts(tmp_path) == {"backlog": 1.0, "unclear": 0.0, "broken_filter": 0.0}
    metrics = samples_of((tmp_path / "m.prom").read_text())
    assert metrics["dircleaner_planned_directories"] == plan["directories"]
    assert metrics["dircleaner_candidates_sampled"] == 4096
    assert metrics["dircleaner_candidates_sampled_holding_objects"] == 0
    assert metrics["dircleaner_last_run_refused"] == 1
    assert folder_rows(db) == before  # nothing deleted
    # Cleared on purpose, as the refusal says: every empty directory goes, none that is not.
    cleared = invoke(
        url, "clean", "--min-age", "0", "--max-delete-fraction", "0.7", "--rate", "0",
        "--audit-log", str(tmp_path / "a.jsonl"), "--json",
    )  # fmt: skip
    assert cleared.exit_code == 0, cleared.output
    deleted = {str(e["dir"]) for e in audit_entries(tmp_path / "a.jsonl")}
    assert deleted <= truly_empty(backlog)  # precision 1.0
    assert len(deleted) > 0.95 * len(truly_empty(backlog))


def test_a_filter_with_bits_cleared_is_refused_as_a_broken_filter(
    backlog: Path, tmp_path: Path
) -> None:
    url, db = copy(backlog, tmp_path)
    assert invoke(url, "build").exit_code == 0
    # A third of the filter's bytes cleared: most directories, most of them live, are missed.
    damage_filter(url, lambda h, b: (h, bytes(x if i % 3 else 0 for i, x in enumerate(b))))
    before = folder_rows(db)
    line, details = refused(url, tmp_path)
    assert "It looks like a broken filter, not a backlog: " in line
    assert "Do not raise --max-delete-fraction for this" in line
    assert "--max-run-time" not in line
    sample = details["sample"]
    assert isinstance(sample, dict) and sample["holding_objects"] > 0.2 * 4096
    assert details["suggested_max_delete_fraction"] is None
    assert verdicts(tmp_path) == {"backlog": 0.0, "unclear": 0.0, "broken_filter": 1.0}
    assert folder_rows(db) == before


def test_a_filter_built_for_another_dataset_is_refused_as_a_broken_filter(
    backlog: Path, tmp_path: Path
) -> None:
    url, db = copy(backlog, tmp_path)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    keys = write_lines(tmp_path / "keys", (f"elsewhere/{i}/o" for i in range(DIRS)))
    assert invoke(other, "import-keys", str(keys)).exit_code == 0
    assert invoke(other, "build").exit_code == 0
    with open_store(other) as source:
        info = latest_complete(source, scope_of(source, None))
        parts = [read_filter_part(source, info.generation, s.shard) for s in info.shards]
    with open_store(url) as target:
        scope = scope_of(target, None)
        for header_bytes, body in parts:
            header = replace(decode_header(header_bytes), scope=scope)
            generation = new_generation_id(header.snapshot_us, header.salt)
            save_filter_part(target, generation, header, encode_header(header), body)
    before = folder_rows(db)
    line, details = refused(url, tmp_path, "--no-verify")  # the sample is read by itself
    assert "It looks like a broken filter, not a backlog: " in line
    assert details["looks_like"] == "broken filter"
    assert folder_rows(db) == before


def test_a_dry_run_says_the_same(backlog: Path, tmp_path: Path) -> None:
    url, _db = copy(backlog, tmp_path)
    result = invoke(url, "run", "--dry-run", "--min-age", "0", "--json")
    assert result.exit_code == 3, result.output
    clean = json.loads(result.stdout)["clean"]
    assert "It looks like a backlog, not a broken filter" in clean["would_be_refused"]
    assert clean["sample"]["looks_like"] == "backlog" and clean["sample"]["sampled"] == 4096
