"""``journal add`` through the CLI on SQLite (the journaling delete-keys does:
cli/test_delete_keys.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dircleaner.journal import JOURNAL_SLOT_S, slot_of
from dircleaner.store import open_store
from tests.helpers import invoke, said
from tests.test_journal_events import AWS, CEPH, MINIO


@pytest.fixture()
def url(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path}/meta.db"
    keys = "a/b/x\na/b/y\na/c/z\ntop\n"
    assert invoke(store, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(store, "import-keys", "-", "--bucket", "photos", input="2026/q\n").exit_code == 0
    return store


def journaled(url: str) -> list[tuple[str, str, int]]:
    """Every journal row of the last two slots: (bucket, parent, keys deleted)."""
    now = slot_of(time.time_ns() // 1000)
    with open_store(url) as store:
        rows = [e for s in (now - JOURNAL_SLOT_S, now) for b in store.journal_read(s) for e in b]
    return sorted((e.bucket, e.parent, e.deleted) for e in rows)


def test_journal_add_keys(url: str) -> None:
    result = invoke(url, "journal", "add", "-", "--bucket", "photos", input="2026/q\n2026/r\n\n")
    assert result.exit_code == 1
    assert said(result) == "line 3: empty key; skipped\n"
    assert result.stdout == (
        "journaled 1 directories of 2 deleted keys; skipped 0 records of other events;"
        " rejected 1 lines\n"
    )
    assert journaled(url) == [("photos", "2026/", 2)]


def test_journal_add_events_of_every_shape(url: str, tmp_path: Path) -> None:
    put = dict(AWS, Records=[dict(AWS["Records"][0], eventName="ObjectCreated:Put")])
    lines = [json.dumps(m) for m in (AWS, MINIO, CEPH, put)] + ["", "{oops", "\xff"]
    path = tmp_path / "events.jsonl"
    path.write_bytes("\n".join(lines[:-1]).encode() + b"\n\xff\n")
    result = invoke(url, "journal", "add", "--events", str(path), "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {
        "ok": False,
        "keys": 3,
        "journaled_dirs": 1,
        "other_events": 1,
        "rejected_lines": 2,
        "error": "rejected 2 lines (see stderr)",
        "exit_code": 1,
    }
    assert said(result) == (
        "line 6: not JSON (Expecting property name enclosed in double quotes at column 2);"
        " skipped\nline 7: invalid UTF-8 at byte 0; skipped\n"
    )
    # One directory: the three deletes were all under photos/2026/ (decoded as each server
    # encodes its keys), merged into one row of three keys.
    assert journaled(url) == [("photos", "2026/", 3)]


def test_journal_add_refuses_bucket_with_events(url: str) -> None:
    result = invoke(url, "journal", "add", "--events", "-", "--bucket", "b", input="")
    assert result.exit_code == 2
    assert "--bucket does not apply with --events" in result.output
    assert journaled(url) == []


def test_journal_add_never_creates_a_store(tmp_path: Path) -> None:
    result = invoke(f"sqlite:///{tmp_path}/none.db", "journal", "add", "-", input="a/b\n")
    assert result.exit_code == 1
    assert not (tmp_path / "none.db").exists()
