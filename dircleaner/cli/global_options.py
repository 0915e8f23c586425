"""The global options (--store, --config, --log-level, -v, -q), each declared once: taken by the
group before the command, and by every command after its name; and the conventions every
command follows (``-n`` for ``--dry-run``).

``dircleaner list-dirs --store URL`` works like ``dircleaner --store URL list-dirs``, as users of
``aws``, ``kubectl`` and ``nodetool`` expect. Given after the command, an option wins over the
same option before it and over its environment variable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import click

from dircleaner.cli.context import (
    LOG_LEVELS,
    VERBOSE_AND_QUIET,
    AppContext,
    configure_logging,
    set_verbosity,
)
from dircleaner.errors import UsageError
from dircleaner.store import DEFAULT_STORE_URL

F = TypeVar("F", bound=Callable[..., Any])
Callback = Callable[[click.Context, click.Parameter, Any], None]


def _set_store(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.obj = replace(_app(ctx), store_url=value)


def _set_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.obj = replace(_app(ctx), config_path=value)


def _set_log_level(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        set_verbosity(value, 0, False)


def _set_verbose(ctx: click.Context, _param: click.Parameter, value: int) -> None:
    if value:
        _refuse_both(ctx, "-v")
        set_verbosity(None, value, False)


def _set_quiet(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        _refuse_both(ctx, "-q")
        set_verbosity(None, 0, True)


@dataclass(frozen=True)
class GlobalOption:
    """One global option: its spelling, type and help, declared once. Before the command the
    group takes it with its environment variable and default; after the command's name,
    every command takes it with no default (only a value given there counts), and
    ``after_command`` applies it over what the group set."""

    decls: tuple[str, ...]
    help: str
    after_command: Callback
    #: click's keyword arguments for both places: the type, ``count`` or ``is_flag``
    kind: dict[str, Any] = field(default_factory=dict)
    #: click's keyword arguments for the group only: the environment variable, the default
    group_only: dict[str, Any] = field(default_factory=dict)

    @property
    def spelling(self) -> str:
        """How the help names it: its first option (``--store``, ``-v``)."""
        return next(decl for decl in self.decls if decl.startswith("-"))

    def for_group(self) -> Callable[[F], F]:
        """The option as the group takes it (a decorator)."""
        return click.option(*self.decls, help=self.help, **self.kind, **self.group_only)

    def for_command(self) -> click.Option:
        """The option as a command takes it after its name."""
        return click.Option(
            [decl for decl in self.decls if decl.startswith("-")],
            help=f"Same as the global {self.spelling}.",
            callback=self.after_command,
            expose_value=False,
            is_eager=True,
            **self.kind,
        )


GLOBAL_OPTIONS = (
    GlobalOption(
        ("--store", "store_url"),
        "Metastore: an SQLite file (meta.db, or sqlite:///path/meta.db) or"
        " cassandra://host1,host2:9042/keyspace?dc=DC (env DIRCLEANER_STORE). Only gen,"
        " import-keys and init-schema create one.",
        _set_store,
        group_only={
            "envvar": "DIRCLEANER_STORE",
            "default": DEFAULT_STORE_URL,
            "show_default": True,
        },
    ),
    GlobalOption(
        ("--config", "config_path"),
        "TOML file with the Cassandra mapping, consistency, auth and TLS (env DIRCLEANER_CONFIG);"
        " an SQLite store uses none of it, but refuses a file a Cassandra store would.",
        _set_config,
        kind={"type": click.Path(dir_okay=False, exists=True)},
        group_only={"envvar": "DIRCLEANER_CONFIG"},
    ),
    GlobalOption(
        ("--log-level",),
        "Log what the job is doing (info) to stderr; credentials are never logged.",
        _set_log_level,
        kind={"type": click.Choice(LOG_LEVELS)},
        group_only={
            "envvar": "DIRCLEANER_LOG_LEVEL",
            "default": "warning",
            "show_default": True,
        },
    ),
    GlobalOption(
        ("-v", "--verbose"),
        "Log more: -v is --log-level info, -vv debug (one step per v from --log-level).",
        _set_verbose,
        kind={"count": True},
    ),
    GlobalOption(
        ("-q", "--quiet"),
        "Errors only: log errors, and no progress or notes on stderr (the summary stays).",
        _set_quiet,
        kind={"is_flag": True},
    ),
)


def global_options(func: F) -> F:
    """The group's global options (a decorator): ``store_url``, ``config_path``,
    ``log_level``, ``verbose`` and ``quiet``."""
    for option in reversed(GLOBAL_OPTIONS):
        func = option.for_group()(func)
    return func


#: ``ctx.meta`` key: which of -v and -q the command line gave after the command
_VERBOSITY_GIVEN = "dircleaner.verbosity_given"


def _refuse_both(ctx: click.Context, flag: str) -> None:
    """-v and -q contradict each other wherever each is given: before the command (the
    group's own options), after it, or one on each side."""
    given: set[str] = ctx.meta.setdefault(_VERBOSITY_GIVEN, set())
    given.add(flag)
    before = ctx.find_root().params
    if before.get("verbose"):
        given.add("-v")
    if before.get("quiet"):
        given.add("-q")
    if {"-v", "-q"} <= given:
        configure_logging("warning")  # the one given first must not log the refusal too
        raise UsageError(VERBOSE_AND_QUIET)


def _app(ctx: click.Context) -> AppContext:
    app = ctx.find_object(AppContext)
    if app is None:  # pragma: no cover - the group always sets it first
        raise click.UsageError("internal: no application context")
    return app


def accept_global_options(command: click.Command) -> None:
    """Give every (sub)command of ``command`` the global options too, and ``-n`` for its
    ``--dry-run``."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            accept_global_options(sub)
        return
    command.params.extend(option.for_command() for option in GLOBAL_OPTIONS)
    for param in command.params:
        if "--dry-run" in param.opts and "-n" not in param.opts:
            param.opts.insert(0, "-n")
