"""Which option applies to which command, and in which of its modes, declared once; every refusal
of an option given where it does not apply, or of values that do not go together, is derived
from it and made before the command runs (one line, exit 2, nothing opened).

A command's modes are told apart in order, each chosen by one option (``clean``: ``--changed``,
then ``--prefix``, else the store-wide clean). Where the command line passes a mode over, an
option that only it takes (and no mode after it) is refused "without" the mode's option; in the
mode it chooses, any other option the mode does not take is refused "with" the mode's option.
Options are checked in the order of the table. An option counts as given only on the command
line: a default, or a host-wide environment variable such as DIRCLEANER_SCHEDULER, is never
refused (an option that is accepted and then ignored misleads whoever reads the command line).

Then the chosen mode's conflicts, values that do not go together (``--slices`` without a
scheduler), are checked in their order. ``tests/test_cli_option_table.py`` checks the table
against every command's signature.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import click

from dircleaner.errors import UsageError
from dircleaner.timeutil import parse_utc_time

Values = Mapping[str, Any]


@dataclass(frozen=True)
class Mode:
    """One way a command runs, chosen by one of its options (``clean --prefix``)."""

    name: str
    #: the parameter whose value chooses it (None: the command's plain mode, chosen last)
    chosen_by: str | None = None

    def chosen(self, values: Values) -> bool:
        if self.chosen_by is None:
            return True
        value = values[self.chosen_by]
        return value is not None and value is not False


@dataclass(frozen=True)
class Said:
    """A refusal's whole line, where "--x does not apply with --y: why" would not say it."""

    line: str


Why = str | Said


@dataclass(frozen=True)
class Applies:
    """Where one option applies: the modes of its command that take it (None: all of them), and
    why the others do not (one reason for all, or one per mode)."""

    modes: frozenset[str] | None = None
    why_not: Why | Mapping[str, Why] = ""

    def takes(self, mode: str) -> bool:
        return self.modes is None or mode in self.modes

    def why(self, mode: str) -> Why:
        return self.why_not[mode] if isinstance(self.why_not, Mapping) else self.why_not


#: an option every mode of its command takes
EVERYWHERE = Applies()


def only(*modes: str, why_not: Why | Mapping[str, Why]) -> Applies:
    """An option only ``modes`` take, and why the others do not."""
    return Applies(frozenset(modes), why_not)


@dataclass(frozen=True)
class Conflict:
    """Values that do not go together, and the line that refuses them (formatted with the
    values, by parameter name)."""

    line: str
    when: Callable[[Values], bool]


@dataclass(frozen=True)
class CommandOptions:
    """A command's options, which of its modes take each, and what each mode refuses besides."""

    #: each option by parameter name, in the order refusals are checked
    options: Mapping[str, Applies]
    #: the modes in the order they are told apart, the plain one last
    modes: tuple[Mode, ...]
    #: mode name → the values it refuses together, in the order they are checked
    conflicts: Mapping[str, tuple[Conflict, ...]] = field(default_factory=dict)


def plain(command: str, *options: str, conflicts: tuple[Conflict, ...] = ()) -> CommandOptions:
    """A command of one mode, which takes every one of its options."""
    return CommandOptions(
        {name: EVERYWHERE for name in options}, (Mode(command),), {command: conflicts}
    )


# -- the refusals ---------------------------------------------------------------------------------


def refusal(
    table: CommandOptions,
    values: Values,
    given: Callable[[str], bool],
    spelled: Callable[[str], str],
) -> str | None:
    """The line refusing this command line, or None. ``given(name)``: whether the option was
    given on the command line; ``spelled(name)``: how the command line spells it."""
    chosen = next(mode for mode in table.modes if mode.chosen(values))
    before = table.modes[: table.modes.index(chosen)]
    for position, passed in enumerate(before):
        later = table.modes[position + 1 :]
        for name, applies in table.options.items():
            if (
                given(name)
                and applies.takes(passed.name)
                and not any(applies.takes(mode.name) for mode in later)
            ):
                return _line(name, f"without {spelled(_chooser(passed))}", applies, chosen, spelled)
    for name, applies in table.options.items():
        if given(name) and not applies.takes(chosen.name):
            where = f"with {spelled(_chooser(chosen))}" if chosen.chosen_by else "here"
            return _line(name, where, applies, chosen, spelled)
    for conflict in table.conflicts.get(chosen.name, ()):
        if conflict.when(values):
            return conflict.line.format_map(values)
    return None


def _chooser(mode: Mode) -> str:
    assert mode.chosen_by is not None  # only the plain mode is chosen by nothing
    return mode.chosen_by


def _line(
    name: str, where: str, applies: Applies, mode: Mode, spelled: Callable[[str], str]
) -> str:
    why = applies.why(mode.name)
    if isinstance(why, Said):
        return why.line
    return f"{spelled(name)} does not apply {where}: {why}"


def given(ctx: click.Context, name: str) -> bool:
    """Whether the option ``name`` was given on the command line (a default, or a host-wide
    environment variable such as DIRCLEANER_SCHEDULER, is not refused)."""
    return ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE


def spelled(ctx: click.Context, name: str) -> str:
    """How the command line spells parameter ``name`` (its long option; ``--no-verify`` for
    the ``--verify/--no-verify`` switch given off)."""
    for param in ctx.command.params:
        if param.name == name:
            if isinstance(param, click.Option) and param.is_flag and param.secondary_opts:
                opts = param.opts if ctx.params.get(name) else param.secondary_opts
                return max(opts, key=len)
            return max(param.opts, key=len)
    return f"--{name.replace('_', '-')}"


def refuse_what_does_not_apply(group: click.Group) -> None:
    """Have every command of ``group`` refuse, before it runs, what the table refuses."""
    for path, command in leaf_commands(group):
        if path not in OPTION_TABLE:
            raise KeyError(f"command {path!r} is not in the option table (cli/option_table.py)")
        command.callback = _checked(command.callback, OPTION_TABLE[path])


def leaf_commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    """Every command under ``group`` that runs (not a group), by the name it is invoked with."""
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from leaf_commands(command, f"{prefix}{name} ")
        else:
            yield prefix + name, command


def _checked(
    callback: Callable[..., Any] | None, table: CommandOptions
) -> Callable[..., Any] | None:
    if callback is None:  # pragma: no cover - every command has one
        return None

    @functools.wraps(callback)
    def checked(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        line = refusal(
            table,
            ctx.params,
            functools.partial(given, ctx),
            functools.partial(spelled, ctx),
        )
        if line is not None:
            raise UsageError(line)
        return callback(*args, **kwargs)

    return checked


# -- the table ------------------------------------------------------------------------------------

SLICES_NEED_A_SCHEDULER = Conflict(
    "--slices needs --scheduler (locally, --workers sets the slices)",
    lambda v: v["slices"] is not None and v["scheduler"] is None,
)
WORKERS_ARE_LOCAL = Conflict(
    "--workers is for local processes; with --scheduler the cluster's run",
    lambda v: v["workers"] != 1 and v["scheduler"] is not None,
)
#: the local processes or the cluster's tasks a command's slices run as
WORKERS = (SLICES_NEED_A_SCHEDULER, WORKERS_ARE_LOCAL)

#: a dry run of ``run`` keeps its filter in memory (DIRCLEANER_SCHEDULER alone is only noted)
DRY_RUN_ON_A_CLUSTER = (
    "run --dry-run keeps its filter in memory, where a cluster's workers cannot load it: run it"
    " without --scheduler (and DIRCLEANER_SCHEDULER)"
)
BULK_VIA_NEEDS_BULK = Conflict(
    "--bulk-via needs --bulk", lambda v: v["bulk_via"] is not None and not v["bulk"]
)

CHANGED = Mode("clean --changed", "changed")
PREFIX = Mode("clean --prefix", "prefix")
STORE_WIDE = Mode("clean")
#: the store-wide clean's sweep and deletes, and why the other cleans do without them
BY_SLICES = {
    PREFIX.name: "the walk runs in this process",
    CHANGED.name: "the night runs in this process",
}
NO_FILTER = "no filter is read"
SUBTREE_OR_JOURNAL = "--prefix cleans one subtree; --changed the journal's directories"
IN_MEMORY = {
    PREFIX.name: "the walk keeps its subtree (at most --max-deletes directories) in memory",
    CHANGED.name: "the churn night keeps the directories its journal names in memory",
}

#: the night's end (--deadline, --max-run-time), and why the other cleans do without it
NIGHT_WINDOW = {
    PREFIX.name: "a --prefix clean is bounded by --max-deletes; stop it with Ctrl-C",
    CHANGED.name: "a churn night is as short as the churn; the full night has the window",
}

CLEAN = CommandOptions(
    {
        "generation": only(STORE_WIDE.name, why_not=NO_FILTER),
        "max_filter_age": only(STORE_WIDE.name, why_not=NO_FILTER),
        "max_delete_fraction": only(
            STORE_WIDE.name, CHANGED.name, why_not="--max-deletes bounds the subtree instead"
        ),
        "force": only(
            STORE_WIDE.name,
            CHANGED.name,
            why_not="no guard of the store-wide clean runs; --max-deletes bounds the subtree",
        ),
        "verify": only(
            STORE_WIDE.name,
            why_not={
                PREFIX.name: "the walk checks every directory's objects itself",
                CHANGED.name: "the night checks every directory's objects itself",
            },
        ),
        "max_rewrite_rows": only(
            STORE_WIDE.name,
            PREFIX.name,
            why_not="the churn night never rewrites a partition (it reads none whole)",
        ),
        "prefix": only(PREFIX.name, why_not=SUBTREE_OR_JOURNAL),
        "max_deletes": only(
            PREFIX.name,
            why_not={
                STORE_WIDE.name: "it bounds a --prefix clean (the store-wide clean has"
                " --max-delete-fraction)",
                CHANGED.name: "it bounds a --prefix clean",
            },
        ),
        "workers": only(STORE_WIDE.name, why_not=BY_SLICES),
        "scheduler": only(STORE_WIDE.name, why_not=BY_SLICES),
        "slices": only(STORE_WIDE.name, why_not=BY_SLICES),
        "shard": only(
            STORE_WIDE.name,
            why_not={
                PREFIX.name: "the walk covers its subtree, not a slice of the ring",
                CHANGED.name: "the night reads the journal, not a slice of the ring",
            },
        ),
        "spill_dir": only(STORE_WIDE.name, why_not=IN_MEMORY),
        "spill_after": only(STORE_WIDE.name, why_not=IN_MEMORY),
        "max_run_time": only(STORE_WIDE.name, why_not=NIGHT_WINDOW),
        "deadline": only(STORE_WIDE.name, why_not=NIGHT_WINDOW),
        "scan_rate": only(
            STORE_WIDE.name,
            PREFIX.name,
            why_not="the night scans nothing: it reads the partitions the journal names",
        ),
        "changed": only(CHANGED.name, why_not=SUBTREE_OR_JOURNAL),
        "settle": only(CHANGED.name, why_not="it says which journal slots a --changed night reads"),
        "min_age": EVERYWHERE,
        "max_tombstones_per_partition": EVERYWHERE,
        "grace_period": EVERYWHERE,
        "dry_run": EVERYWHERE,
        "rate": EVERYWHERE,
        "concurrency": EVERYWHERE,
        "audit_log": EVERYWHERE,
        "lease_ttl": EVERYWHERE,
        "bucket": EVERYWHERE,
        "as_json": EVERYWHERE,
        "metrics_file": EVERYWHERE,
    },
    (CHANGED, PREFIX, STORE_WIDE),
    {STORE_WIDE.name: WORKERS},
)

DRY_RUN = Mode("run -n", "dry_run")
RUN = CommandOptions(
    {
        "scheduler": only("run", why_not=Said(DRY_RUN_ON_A_CLUSTER)),
        **{
            name: EVERYWHERE
            for name in (
                "fpr",
                "expected_dirs",
                "engine",
                "min_age",
                "max_tombstones_per_partition",
                "max_rewrite_rows",
                "grace_period",
                "max_delete_fraction",
                "verify",
                "dry_run",
                "rate",
                "concurrency",
                "audit_log",
                "force",
                "spill_dir",
                "spill_after",
                "lease_ttl",
                "max_run_time",
                "deadline",
                "bucket",
                "workers",
                "scan_rate",
                "slices",
                "as_json",
                "metrics_file",
            )
        },
    },
    (DRY_RUN, Mode("run")),
    {
        # DIRCLEANER_SCHEDULER names the nightly job's cluster; a dry run runs here instead,
        # unless --slices asks for the cluster's slices.
        DRY_RUN.name: (
            Conflict(
                DRY_RUN_ON_A_CLUSTER,
                lambda v: v["scheduler"] is not None and v["slices"] is not None,
            ),
            SLICES_NEED_A_SCHEDULER,
        ),
        "run": WORKERS,
    },
)

EVENTS = Mode("journal add --events", "events")
JOURNAL_ADD = CommandOptions(
    {
        "bucket": only("journal add", why_not="each record names its bucket"),
        "events": EVERYWHERE,
        "as_json": EVERYWHERE,
    },
    (EVENTS, Mode("journal add")),
)

SWEEP_OUT_AND_JSON = Conflict(
    "--json and --out - both write to stdout: give --out a file",
    lambda v: v["out"] == "-" and v["as_json"],
)
SHAPE_OR_FRACTION = Conflict(
    "give --shape or --empty-fraction, not both",
    lambda v: v["shape"] is not None and v["empty_fraction"] is not None,
)
SINCE_BEFORE_UNTIL = Conflict(
    "--since {since} is not before --until {until}: no delete was issued in between"
    " (are they the wrong way round?)",
    lambda v: (
        v["since"] is not None
        and v["until"] is not None
        and parse_utc_time(v["since"]) >= parse_utc_time(v["until"])
    ),
)

#: every command by the name it is invoked with
OPTION_TABLE: Mapping[str, CommandOptions] = {
    "import-keys": plain(
        "import-keys",
        "bucket",
        "bulk",
        "bulk_via",
        "as_json",
        "force",
        conflicts=(BULK_VIA_NEEDS_BULK,),
    ),
    "delete-keys": plain("delete-keys", "bucket", "as_json"),
    "list-dirs": plain("list-dirs", "bucket", "sort_output"),
    "gen": plain(
        "gen",
        "dirs",
        "seed",
        "truth",
        "empty_fraction",
        "shape",
        "bucket",
        "bulk",
        "bulk_via",
        "as_json",
        "force",
        conflicts=(SHAPE_OR_FRACTION, BULK_VIA_NEEDS_BULK),
    ),
    "restore": plain(
        "restore",
        "generation",
        "since",
        "until",
        "bucket",
        "dry_run",
        "force",
        "as_json",
        "metrics_file",
        conflicts=(SINCE_BEFORE_UNTIL,),
    ),
    "init-schema": plain("init-schema", "as_json", "force"),
    "build": plain(
        "build",
        "fpr",
        "expected_dirs",
        "engine",
        "bucket",
        "workers",
        "scan_rate",
        "scheduler",
        "slices",
        "shard",
        "build_generation",
        "as_json",
        "metrics_file",
        conflicts=WORKERS,
    ),
    "sweep": plain(
        "sweep",
        "generation",
        "max_filter_age",
        "bucket",
        "workers",
        "scan_rate",
        "scheduler",
        "slices",
        "shard",
        "out",
        "as_json",
        "metrics_file",
        conflicts=(SWEEP_OUT_AND_JSON, *WORKERS),
    ),
    "clean": CLEAN,
    "run": RUN,
    "filters list": plain("filters list", "as_json", "verify"),
    "filters show": plain("filters show"),
    "filters rm": plain("filters rm", "as_json"),
    "filters new-id": plain("filters new-id"),
    "journal add": JOURNAL_ADD,
}
