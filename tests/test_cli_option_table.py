"""cli/option_table.py: which option applies to which command and mode, declared once, checked
against every command's signature; the refusals derived from it, and the values that do not go
together, each one line (exit 2) before the store is opened."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from dircleaner.cli import cli
from dircleaner.cli.global_options import GLOBAL_OPTIONS
from dircleaner.cli.option_table import (
    EVERYWHERE,
    OPTION_TABLE,
    CommandOptions,
    Conflict,
    Mode,
    Said,
    leaf_commands,
    only,
    plain,
    refusal,
)
from tests.helpers import invoke

#: the options every command takes after its name, declared once with the group's
AFTER_EVERY_COMMAND = {option.for_command().name for option in GLOBAL_OPTIONS}


def own_options(command: click.Command) -> set[str]:
    """The parameter names of a command's options, the global ones left out."""
    return {
        param.name
        for param in command.params
        if isinstance(param, click.Option)
        and param.name is not None
        and param.name not in AFTER_EVERY_COMMAND
    }


def table_problems(group: click.Group, table: Mapping[str, CommandOptions]) -> list[str]:
    """What the table and the commands' signatures disagree on, and what in the table does not
    hold together (an unknown mode, an option no mode takes, a refusal without a reason)."""
    problems: list[str] = []
    commands = dict(leaf_commands(group))
    problems += [f"{path}: in the table, not a command" for path in table.keys() - commands]
    for path, command in commands.items():
        if path not in table:
            problems.append(f"{path}: a command the table lacks")
            continue
        entry = table[path]
        options = own_options(command)
        problems += [f"{path}: {name} is in the table, not the command" for name in
                     sorted(entry.options.keys() - options)]  # fmt: skip
        problems += [f"{path}: option {name} is missing from the table" for name in
                     sorted(options - entry.options.keys())]  # fmt: skip
        problems += mode_problems(path, entry, options)
    return problems


def mode_problems(path: str, entry: CommandOptions, options: set[str]) -> list[str]:
    problems: list[str] = []
    names = [mode.name for mode in entry.modes]
    if entry.modes[-1].chosen_by is not None or any(m.chosen_by is None for m in entry.modes[:-1]):
        problems.append(f"{path}: the plain mode is not the last one")
    problems += [f"{path}: mode {m.name} is chosen by {m.chosen_by}, not an option"
                 for m in entry.modes if m.chosen_by not in (None, *options)]  # fmt: skip
    problems += [f"{path}: conflicts of an unknown mode {name}"
                 for name in entry.conflicts.keys() - set(names)]  # fmt: skip
    for name, applies in entry.options.items():
        if applies.modes is not None:
            problems += [f"{path}: {name} applies in an unknown mode {mode}"
                         for mode in sorted(applies.modes - set(names))]  # fmt: skip
            if not applies.modes & set(names):
                problems.append(f"{path}: {name} applies in no mode")
        for position, mode in enumerate(entry.modes):
            # An option that chooses an earlier mode cannot be given in this one.
            unreachable = any(m.chosen_by == name for m in entry.modes[:position])
            if not applies.takes(mode.name) and not unreachable and not applies.why(mode.name):
                problems.append(f"{path}: {name} is refused in {mode.name} with no reason")
    return problems


def test_the_table_names_every_option_of_every_command_and_nothing_else() -> None:
    assert table_problems(cli, OPTION_TABLE) == []


def test_the_check_catches_a_missing_option_an_extra_one_and_a_missing_command() -> None:
    @click.command()
    @click.option("--rate", type=float, default=1.0)
    @click.option("--fresh", is_flag=True)
    def job(rate: float, fresh: bool) -> None:
        """A command."""

    @click.command()
    def other() -> None:
        """Another."""

    group = click.Group(commands={"job": job, "other": other})
    table = {
        "job": plain("job", "rate", "stale"),
        "gone": plain("gone"),
    }
    assert table_problems(group, table) == [
        "gone: in the table, not a command",
        "job: stale is in the table, not the command",
        "job: option fresh is missing from the table",
        "other: a command the table lacks",
    ]


def test_the_check_catches_a_table_that_does_not_hold_together() -> None:
    @click.command()
    @click.option("--fast", is_flag=True)
    @click.option("--rate", type=float, default=1.0)
    @click.option("--depth", type=int, default=1)
    def job(fast: bool, rate: float, depth: int) -> None:
        """A command."""

    fast = Mode("job --fast", "fast")
    table = {
        "job": CommandOptions(
            {
                "fast": only("job --fast", why_not=""),  # chooses the first mode: no reason
                "rate": only("job", why_not=""),
                "depth": only("job --slow", why_not="x"),
            },
            (fast, Mode("job")),
            {"job --slow": ()},
        )
    }
    assert table_problems(click.Group(commands={"job": job}), table) == [
        "job: conflicts of an unknown mode job --slow",
        "job: rate is refused in job --fast with no reason",
        "job: depth applies in an unknown mode job --slow",
        "job: depth applies in no mode",
    ]


# -- the refusals, derived ------------------------------------------------------------------------

A = Mode("cmd -a", "a")
B = Mode("cmd -b", "b")
TOY = CommandOptions(
    {
        "a": only(A.name, why_not="a is alone"),
        "b": only(B.name, why_not="b is alone"),
        "both": only(A.name, B.name, why_not="only with -a or -b"),
        "plain_only": only("cmd", why_not={A.name: "not with a", B.name: Said("b says no")}),
        "anywhere": EVERYWHERE,
        "n": EVERYWHERE,
    },
    (A, B, Mode("cmd")),
    {"cmd": (Conflict("n {n} is odd", lambda v: v["n"] % 2 == 1),)},
)


def toy_refusal(**given: Any) -> str | None:
    values = {"a": False, "b": None, "both": None, "plain_only": None, "anywhere": None, "n": 0}
    values.update(given)
    return refusal(TOY, values, given.__contains__, lambda name: f"--{name}")


@pytest.mark.parametrize(
    ("given", "line"),
    [
        ({}, None),
        ({"a": True, "anywhere": 1}, None),
        ({"a": True, "plain_only": 1}, "--plain_only does not apply with --a: not with a"),
        ({"b": "x", "plain_only": 1}, "b says no"),
        ({"a": True, "b": "x"}, "--b does not apply with --a: b is alone"),
        # passed over: an option only that mode (and none after it) takes
        ({"b": "x", "both": 1}, None),
        ({"both": 1}, "--both does not apply without --b: only with -a or -b"),
        # the first refused option in the table's order wins, whatever the command line's order
        ({"plain_only": 1, "a": True, "b": "x"}, "--b does not apply with --a: b is alone"),
        # conflicts: only in their mode, after the options
        ({"n": 3}, "n 3 is odd"),
        ({"n": 3, "both": 1}, "--both does not apply without --b: only with -a or -b"),
        ({"a": True, "n": 3}, None),
    ],
)
def test_refusals_follow_the_modes_in_order(given: dict[str, Any], line: str | None) -> None:
    assert toy_refusal(**given) == line


def test_a_value_not_given_on_the_command_line_is_never_refused() -> None:
    values = {"a": True, "b": None, "both": None, "plain_only": 7, "anywhere": None, "n": 0}
    assert refusal(TOY, values, lambda name: False, str) is None


def test_the_defaults_of_every_command_conflict_with_nothing() -> None:
    for path, command in leaf_commands(cli):
        ctx = command.make_context(path, [], resilient_parsing=True)
        defaults = {name: ctx.params.get(name) for name in own_options(command)}
        assert refusal(OPTION_TABLE[path], defaults, lambda name: False, str) is None, path


# -- through the command line ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("clean", "--changed", "--max-deletes", "5"),
            "--max-deletes does not apply with --changed: it bounds a --prefix clean",
        ),
        (
            ("clean", "--prefix", "x/", "--settle", "5m"),
            "--settle does not apply without --changed: it says which journal slots a"
            " --changed night reads",
        ),
        (
            ("clean", "--changed", "--scan-rate", "5"),
            "--scan-rate does not apply with --changed: the night scans nothing: it reads the"
            " partitions the journal names",
        ),
        (
            ("clean", "--changed", "--generation", "g", "--shard", "0/2"),
            "--generation does not apply with --changed: no filter is read",
        ),
        (
            ("clean", "--prefix", "x/", "--shard", "0/2", "--force"),
            "--force does not apply with --prefix: no guard of the store-wide clean runs;"
            " --max-deletes bounds the subtree",
        ),
        (
            ("run", "-n", "--slices", "2"),
            "--slices needs --scheduler (locally, --workers sets the slices)",
        ),
        (
            ("sweep", "--workers", "2", "--scheduler", "tcp://127.0.0.1:9"),
            "--workers is for local processes; with --scheduler the cluster's run",
        ),
        (
            ("build", "--slices", "2"),
            "--slices needs --scheduler (locally, --workers sets the slices)",
        ),
        (("import-keys", "-", "--bulk-via", "sstableloader"), "--bulk-via needs --bulk"),
        (
            ("journal", "add", "-", "--events", "--bucket", "b"),
            "--bucket does not apply with --events: each record names its bucket",
        ),
    ],
)
def test_a_refusal_is_one_line_before_the_store_is_opened(
    tmp_path: Path, args: tuple[str, ...], line: str
) -> None:
    """On a store that does not exist: the refusal comes first (exit 2), not the missing store
    (exit 1), and nothing is created."""
    db = tmp_path / "absent.db"
    result = invoke(f"sqlite:///{db}", *args, input="")
    assert (result.exit_code, result.stderr, result.stdout) == (2, f"Error: {line}\n", "")
    assert not db.exists()


def test_a_dry_run_with_the_environments_cluster_and_slices_is_refused(tmp_path: Path) -> None:
    runner = CliRunner(env={"DIRCLEANER_SCHEDULER": "tcp://127.0.0.1:9"})
    result = runner.invoke(cli, ["--store", str(tmp_path / "a.db"), "run", "-n", "--slices", "2"])
    assert (result.exit_code, result.stderr) == (
        2,
        "Error: run --dry-run keeps its filter in memory, where a cluster's workers cannot load"
        " it: run it without --scheduler (and DIRCLEANER_SCHEDULER)\n",
    )
