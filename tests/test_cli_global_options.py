"""The global options are accepted after the command name too."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dircleaner.cli import cli


def test_store_after_the_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    runner = CliRunner()
    put = runner.invoke(cli, ["import-keys", "-", "--store", url], input="a/b/c\n")
    assert (put.exit_code, put.stdout) == (0, "put 1 key in bucket 'default'; rejected 0 lines\n")
    listed = runner.invoke(cli, ["list-dirs", "--bucket", "default", "--sort", "--store", url])
    assert (listed.exit_code, listed.output) == (0, "a/\na/b/\n")


def test_after_the_command_wins_over_before_and_env(tmp_path: Path) -> None:
    runner = CliRunner(env={"DIRCLEANER_STORE": f"sqlite:///{tmp_path}/env.db"})
    url = f"sqlite:///{tmp_path}/after.db"
    args = ["--store", f"sqlite:///{tmp_path}/before.db", "import-keys", "-", "--store", url]
    assert runner.invoke(cli, args, input="k\n").exit_code == 0
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["after.db"]


def test_nested_commands_take_them_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    runner = CliRunner()
    assert runner.invoke(cli, ["import-keys", "-", "--store", url], input="k\n").exit_code == 0
    result = runner.invoke(cli, ["filters", "list", "--store", url, "--log-level", "error"])
    assert (result.exit_code, result.output) == (0, "no filters stored\n")


def test_every_command_lists_them() -> None:
    def leaves(group: click.Group) -> list[click.Command]:
        out: list[click.Command] = []
        for command in group.commands.values():
            out += leaves(command) if isinstance(command, click.Group) else [command]
        return out

    for command in leaves(cli):
        names = {opt for param in command.params for opt in param.opts}
        assert {"--store", "--config", "--log-level"} <= names, command.name


@pytest.mark.parametrize(
    "args",
    [
        ("-v", "-q", "list-dirs"),
        ("list-dirs", "-v", "-q"),
        ("list-dirs", "-q", "-vv"),
        ("-v", "list-dirs", "-q"),
        ("-q", "list-dirs", "--verbose"),
        ("-q", "filters", "list", "-v"),
        ("run", "-n", "--quiet", "-v"),
    ],
)
def test_v_with_q_is_refused_wherever_each_is_given(tmp_path: Path, args: tuple[str, ...]) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    runner = CliRunner()
    assert runner.invoke(cli, ["--store", url, "import-keys", "-"], input="a/b\n").exit_code == 0
    result = runner.invoke(cli, ["--store", url, *args])
    assert (result.exit_code, result.stderr, result.stdout) == (
        2,
        "Error: -v and -q contradict each other: give one of them\n",
        "",
    )
    alone = runner.invoke(
        cli, ["--store", url, *(a for a in args if a not in ("-v", "-vv", "--verbose"))]
    )
    assert alone.exit_code == 0, alone.output
