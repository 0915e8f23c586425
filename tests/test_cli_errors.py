"""Bad input: one clear line, the documented exit code, and nothing deleted."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import click
import pytest

from dircleaner.cli import cli
from tests.helpers import invoke, one_line_error, small_store


@pytest.fixture()
def store(tmp_path: Path) -> str:
    return small_store(tmp_path)


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("nosuch://x/y", "unknown store scheme 'nosuch'"),
        ("sqlite://host/meta.db", "malformed SQLite URL"),
        ("sqlite:///", "no database file named"),
    ],
)
def test_malformed_store_url_is_a_usage_error(url: str, fragment: str) -> None:
    result = invoke(url, "list-dirs")
    assert result.exit_code == 2
    assert fragment in one_line_error(result.output)


@pytest.mark.parametrize("command", [["list-dirs"], ["run"], ["clean"], ["delete-keys", "-"]])
def test_missing_store_is_never_created_by_a_reading_command(
    tmp_path: Path, command: list[str]
) -> None:
    url = f"sqlite:///{tmp_path}/absent.db"
    result = invoke(url, *command, input=b"x\n")
    assert result.exit_code == 1
    assert "no metastore at" in one_line_error(result.output)
    assert not (tmp_path / "absent.db").exists()


def test_a_sqlite_file_that_is_not_a_metastore_is_refused(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.close()
    result = invoke(f"sqlite:///{tmp_path}/other.db", "run")
    assert result.exit_code == 2
    assert "not a dircleaner metastore" in one_line_error(result.output)


def test_invalid_options_are_usage_errors(store: str) -> None:
    assert invoke(store, "run", "--min-age", "ten minutes").exit_code == 2
    assert invoke(store, "build", "--fpr", "2").exit_code == 2
    assert invoke(store, "clean", "--shard", "4/4").exit_code == 2
    assert invoke(store, "run", "--max-delete-fraction", "1.5").exit_code == 2


def _walk(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out = []
    for name, command in sorted(group.commands.items()):
        out.append((prefix + name, command))
        if isinstance(command, click.Group):
            out.extend(_walk(command, prefix + name + " "))
    return out


@pytest.mark.parametrize(("name", "command"), _walk(cli))
def test_every_command_has_help_with_an_example(name: str, command: click.Command) -> None:
    assert command.help, name
    assert "Example:" in command.help, name
    assert "dircleaner" in command.help.split("Example:")[1], name


def test_every_summary_is_available_as_json(store: str, tmp_path: Path) -> None:
    result = invoke(
        store,
        "run",
        "--min-age",
        "0",
        "--max-delete-fraction",
        "1",
        "--json",
        "--audit-log",
        str(tmp_path / "a.jsonl"),
    )
    summary = json.loads(result.stdout)
    assert summary["clean"]["delete_requested_dirs"] == 9
    assert summary["clean"]["sweep"]["swept_dirs"] == 68
    # Every live leaf partition inserts its own key and its two ancestors (data/N/, data/).
    assert summary["build"]["keys_inserted"] == 51 * 3
