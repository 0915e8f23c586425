"""``init-schema`` on SQLite: it creates the file and dircleaner's tables once, and says so
(Cassandra's keyspace and tables: test_cassandra_end_to_end.py; a file of someone else's:
test_cli_store.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import invoke


def test_init_schema_creates_an_empty_metastore_once(tmp_path: Path) -> None:
    db = tmp_path / "meta.db"
    url = f"sqlite:///{db}"
    made = invoke(url, "init-schema")
    assert (made.exit_code, made.stdout) == (0, f"created SQLite metastore {db}\nschema ready\n")
    assert made.stderr == f"store: {url}\n"
    again = invoke(url, "init-schema", "--json")
    assert (again.exit_code, json.loads(again.stdout)) == (0, {"created": [], "ok": True})
    listed = invoke(url, "list-dirs")
    assert (listed.exit_code, listed.stdout) == (0, "")
