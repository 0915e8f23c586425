"""No guard is switched off by a typo: every float option of every command refuses nan and the
infinities (``--max-delete-fraction nan`` once passed every comparison the guard made and the
run deleted 12.6% of the store), in one line, exit 2, before the store is touched. The tests
walk the command tree, so an option added without the check fails here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from dircleaner.cli import cli
from dircleaner.cli.values import FiniteFloat
from tests.helpers import invoke


def leaf_commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    """Every command that runs (not a group), by the words that invoke it."""
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaf_commands(command, f"{prefix}{name} ")
        else:
            yield prefix + name, command


def options_where(wanted: type[click.ParamType]) -> list[tuple[str, str]]:
    """(command, long option) of every option of every command whose type is a ``wanted``."""
    return [
        (name, max(param.opts, key=len))
        for name, command in leaf_commands(cli)
        for param in command.params
        if isinstance(param, click.Option) and isinstance(param.type, wanted)
    ]


FLOAT_OPTIONS = options_where(click.types.FloatParamType)


def test_the_walk_finds_the_float_options() -> None:
    assert {
        ("run", "--max-delete-fraction"),
        ("run", "--rate"),
        ("run", "--fpr"),
        ("build", "--scan-rate"),
        ("clean", "--rate"),
        ("sweep", "--scan-rate"),
        ("gen", "--empty-fraction"),
    } <= set(FLOAT_OPTIONS)
    assert options_where(FiniteFloat) == FLOAT_OPTIONS


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store with a filter and a quarter of its directories empty: a run that ignored its
    guard would delete them."""
    url = f"sqlite:///{tmp_path_factory.mktemp('values')}/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(40))
    assert invoke(url, "import-keys", "-", input=keys).exit_code == 0
    gone = "".join(f"d/{i}/x\n" for i in range(10))
    assert invoke(url, "delete-keys", "-", input=gone).exit_code == 0
    assert invoke(url, "build").exit_code == 0
    return url


def directories(url: str) -> list[str]:
    result = invoke(url, "list-dirs", "--sort")
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


@pytest.mark.parametrize(("command", "option"), FLOAT_OPTIONS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "+Infinity"])
def test_every_float_option_refuses_nan_and_infinities(
    store: str, tmp_path: Path, command: str, option: str, value: str
) -> None:
    before = directories(store)
    audit = str(tmp_path / "audit.jsonl")
    extra = ["--audit-log", audit, "--min-age", "0"] if command in ("run", "clean") else []
    result = invoke(store, *command.split(), option, value, *extra)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: {option} {value}: not a finite number; give ")
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert directories(store) == before
    assert not Path(audit).exists()


def test_the_refusal_says_what_the_option_takes(store: str) -> None:
    result = invoke(store, "run", "--max-delete-fraction", "nan")
    assert result.stderr == (
        "Error: --max-delete-fraction nan: not a finite number; give one from 0 to 1\n"
    )
    result = invoke(store, "run", "--rate", "inf")
    assert result.stderr == "Error: --rate inf: not a finite number; give one of at least 0\n"
