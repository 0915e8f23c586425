"""No guard is switched off by a typo: every float option of every command refuses nan and the
infinities (``--max-delete-fraction nan`` once passed every comparison the guard made and the
run deleted 12.6% of the store), and every duration option a number without its unit
(``--min-age 10`` was 10 seconds), in one line, exit 2, before the store is touched. The tests
walk the command tree, so an option added without the check fails here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from dircleaner.cli import cli
from dircleaner.cli.values import Duration, FiniteFloat
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


# -- durations ------------------------------------------------------------------------------------

DURATION_OPTIONS = options_where(Duration)
#: words that make an option a duration: one so named must take a Duration
DURATION_WORDS = ("age", "ttl", "period", "timeout", "interval", "delay", "grace", "wait")


def test_the_walk_finds_the_duration_options() -> None:
    assert {
        ("run", "--min-age"),
        ("run", "--lease-ttl"),
        ("run", "--grace-period"),
        ("clean", "--min-age"),
        ("clean", "--max-filter-age"),
        ("clean", "--lease-ttl"),
        ("clean", "--grace-period"),
        ("sweep", "--max-filter-age"),
    } <= set(DURATION_OPTIONS)
    for name, command in leaf_commands(cli):
        for param in command.params:
            option = max(param.opts, key=len)
            if any(word in option for word in DURATION_WORDS):
                assert isinstance(param.type, Duration), f"{name} {option}: not a Duration"


@pytest.mark.parametrize(("command", "option"), DURATION_OPTIONS)
@pytest.mark.parametrize("value", ["10", "1.5", "600"])
def test_every_duration_option_refuses_a_number_without_its_unit(
    store: str, command: str, option: str, value: str
) -> None:
    before = directories(store)
    result = invoke(store, *command.split(), option, value)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"Error: {option}: duration {value!r} has no unit: write e.g. {value}m (minutes) or"
        f" {value}s (seconds)\n"
    )
    assert result.stdout == ""
    assert directories(store) == before


@pytest.mark.parametrize(("command", "option"), DURATION_OPTIONS)
@pytest.mark.parametrize("value", ["-10m", "-1", "nan", "inf", "-inf", "10x"])
def test_every_duration_option_refuses_negative_and_nan(
    store: str, command: str, option: str, value: str
) -> None:
    result = invoke(store, *command.split(), f"{option}={value}")
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"Error: {option}: invalid duration {value!r} (use e.g. 0, 90s, 10m, 2h, 1d)\n"
    )
    assert result.stdout == ""


def test_a_duration_with_its_unit_and_a_bare_zero_are_taken(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    assert invoke(url, "import-keys", "-", input="a/b/x\nc/d/y\n").exit_code == 0
    assert invoke(url, "delete-keys", "-", input="c/d/y\n").exit_code == 0
    audit = str(tmp_path / "audit.jsonl")
    args = ("--audit-log", audit, "--force", "--lease-ttl", "1m", "--grace-period", "10d")
    result = invoke(url, "run", "--min-age", "0", "--max-delete-fraction", "1", *args)
    assert result.exit_code == 0, result.output
    assert "(build start - --min-age 0)" in result.stdout
    assert "2 directories removed" in result.stdout
    result = invoke(url, "clean", "--min-age", "1h", "--max-filter-age", " 2h ", *args)
    assert result.exit_code == 0, result.output
