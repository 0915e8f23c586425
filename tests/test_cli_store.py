"""The global --store: a plain path is an SQLite file; only gen, import-keys and init-schema
create a store (and say so); a file of someone else's keeps its tables unless --force; every
command that writes names its store first."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from dircleaner.cli import cli
from tests.helpers import EAGER, invoke, write_lines

KEYS = ["a/b/x", "a/c/y", "d/e/z"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def someone_elses(path: Path) -> Path:
    """An SQLite file of another application: one table, one row."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices VALUES (1, 9.5)")
    conn.close()
    return path


def tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    conn.close()
    return sorted(names)


def test_a_plain_path_is_an_sqlite_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    keys = str(write_lines(tmp_path / "k.txt", KEYS))
    put = invoke("meta.db", "import-keys", keys)
    assert put.exit_code == 0, put.output
    assert put.stderr.splitlines() == [
        f"store: sqlite:///{tmp_path}/meta.db",
        f"created SQLite metastore {tmp_path}/meta.db",
    ]
    assert (tmp_path / "meta.db").is_file()
    again = invoke("meta.db", "import-keys", keys)  # there now: nothing created
    assert again.stderr.splitlines() == [f"store: sqlite:///{tmp_path}/meta.db"]
    listed = invoke(str(tmp_path / "meta.db"), "list-dirs", "--bucket", "default", "--sort")
    assert (listed.exit_code, listed.output) == (0, "a/\na/b/\na/c/\nd/\nd/e/\n")
    after = CliRunner().invoke(cli, ["list-dirs", "--store", "meta.db"])  # after it, too
    assert after.exit_code == 0, after.output


@pytest.mark.parametrize(
    "command",
    [
        ["import-keys", "KEYS"],
        ["gen", "--dirs", "20"],
        ["init-schema"],
    ],
)
def test_a_file_with_tables_of_its_own_is_refused_unless_forced(
    tmp_path: Path, command: list[str]
) -> None:
    other = someone_elses(tmp_path / "other.db")
    before = digest(other)
    args = [str(write_lines(tmp_path / "k.txt", KEYS)) if a == "KEYS" else a for a in command]
    refused = invoke(str(other), *args)
    assert refused.exit_code == 2
    assert refused.output == (
        f"Error: {other} holds tables of its own (invoices); dircleaner adds its tables next to"
        " them only with --force (or name a file of its own)\n"
    )
    assert digest(other) == before  # not a byte changed (not even its journal mode)
    forced = invoke(str(other), *args, "--force")
    assert forced.exit_code == 0, forced.output
    assert f"created dircleaner's tables in {other} (next to its own: invoices)" in forced.output
    assert "invoices" in tables(other)
    with sqlite3.connect(other) as conn:
        assert conn.execute("SELECT id, total FROM invoices").fetchall() == [(1, 9.5)]
    conn.close()


#: every command that opens an existing store (the loading commands are tested above)
OPENING = [
    ["list-dirs"],
    ["build"],
    ["sweep"],
    ["clean", *EAGER],
    ["run", *EAGER],
    ["run", "-n", *EAGER],
    ["clean", "--prefix", "a/", "--min-age", "0"],
    ["delete-keys", "-"],
    ["restore", "AUDIT"],
    ["filters", "list"],
    ["filters", "show", "20261122T021500.000000Z-5f3a9c01"],
    ["filters", "rm", "20261122T021500.000000Z-5f3a9c01"],
]


@pytest.mark.parametrize("command", OPENING)
def test_a_command_on_a_file_of_someone_elses_changes_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    """Exit 2, as the loading commands refuse it: the store named is the wrong file."""
    other = someone_elses(tmp_path / "other.db")
    before = digest(other)
    audit = write_lines(tmp_path / "audit.jsonl", [])
    result = invoke(str(other), *[str(audit) if a == "AUDIT" else a for a in command], input="k\n")
    assert result.exit_code == 2
    assert result.output == (
        f"Error: {other} holds tables of its own (invoices), not a dircleaner metastore: name"
        " the metastore's file (gen, import-keys and init-schema add dircleaner's tables to"
        " this one only with --force)\n"
    )
    assert digest(other) == before
    assert tables(other) == ["invoices"]


#: the commands that create a store
LOADING = [["import-keys", "-"], ["gen", "--dirs", "20"], ["init-schema"]]


@pytest.mark.parametrize("command", OPENING + LOADING)
def test_a_directory_is_named_as_one(tmp_path: Path, command: list[str]) -> None:
    """Not 'create one with gen', which then failed 'unable to open database file'."""
    where = tmp_path / "stores"
    where.mkdir()
    audit = write_lines(tmp_path / "audit.jsonl", [])
    result = invoke(str(where), *[str(audit) if a == "AUDIT" else a for a in command], input="k\n")
    assert (result.exit_code, result.output) == (
        2,
        f"Error: {where} is a directory, not an SQLite file: name the file, e.g."
        f" --store {where}/meta.db\n",
    )
    assert list(where.iterdir()) == []


def test_a_file_without_tables_is_no_metastore(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    result = invoke(str(empty), "list-dirs")
    assert (result.exit_code, result.output) == (
        1,
        f"Error: {empty} is not a dircleaner metastore (missing table objects)\n",
    )


@pytest.mark.parametrize(
    "command",
    [
        ["list-dirs"],
        ["build"],
        ["sweep"],
        ["clean", *EAGER],
        ["run", *EAGER],
        ["clean", "--prefix", "a/", "--min-age", "0"],
        ["delete-keys", "-"],
        ["restore", "AUDIT"],
        ["filters", "list"],
        ["filters", "rm", "20261122T021500.000000Z-5f3a9c01"],
    ],
)
def test_only_the_loading_commands_create_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    audit = write_lines(tmp_path / "audit.jsonl", [])
    args = [str(audit) if a == "AUDIT" else a for a in command]
    result = invoke("absent.db", *args, input="a/b/x\n")
    assert (result.exit_code, result.output) == (
        1,
        "Error: no metastore at absent.db (create one with 'dircleaner gen' or 'import-keys')\n",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.jsonl"]


def test_every_command_that_writes_names_its_store_first(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    shown = f"store: sqlite:///{tmp_path}/meta.db"
    audit = tmp_path / "audit.jsonl"
    commands = [
        ["init-schema"],
        ["import-keys", str(write_lines(tmp_path / "k.txt", KEYS))],
        ["delete-keys", str(write_lines(tmp_path / "d.txt", KEYS[1:2]))],
        ["build"],
        ["clean", *EAGER, "--audit-log", str(audit)],
        ["run", *EAGER, "--audit-log", str(audit)],
        ["clean", "--prefix", "a/", "--min-age", "0", "--audit-log", str(audit)],
        ["restore", str(audit)],
    ]
    for command in commands:
        result = invoke(url, *command)
        assert result.exit_code == 0, (command, result.output)
        assert result.stderr.splitlines()[0] == shown, command
    listed = invoke(url, "filters", "list", "--json")
    assert (listed.exit_code, listed.stderr) == (0, "")  # it only reads: no store line
    newest = json.loads(listed.stdout)[-1]["generation"]
    removed = invoke(url, "filters", "rm", newest)
    assert removed.exit_code == 0, removed.output
    assert removed.stderr.splitlines()[0] == shown
    fresh = invoke(f"sqlite:///{tmp_path}/gen.db", "gen", "--dirs", "20")
    assert fresh.exit_code == 0, fresh.output
    assert fresh.stderr.splitlines()[:2] == [
        f"store: sqlite:///{tmp_path}/gen.db",
        f"created SQLite metastore {tmp_path}/gen.db",
    ]


@pytest.mark.parametrize("command", LOADING)
def test_q_drops_what_a_loading_command_created_too(tmp_path: Path, command: list[str]) -> None:
    """-q is errors only: the line saying what was created is a note like the store line."""
    result = invoke(f"sqlite:///{tmp_path}/new.db", "-q", *command, input="a/b\n")
    assert (result.exit_code, result.stderr) == (0, ""), result.output
    assert (tmp_path / "new.db").is_file()
    other = someone_elses(tmp_path / "other.db")
    forced = invoke(str(other), *command, "--force", "-q", input="a/b\n")
    assert (forced.exit_code, forced.stderr) == (0, ""), forced.output
