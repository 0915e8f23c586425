"""The global options (--store, --config, --log-level, -v, -q), accepted after the command name
too; and the conventions every command follows (``-n`` for ``--dry-run``).

``dircleaner list-dirs --store URL`` works like ``dircleaner --store URL list-dirs``, as users of
``aws``, ``kubectl`` and ``nodetool`` expect. Given after the command, an option wins over the
same option before it and over its environment variable.
"""

from __future__ import annotations

from dataclasses import replace

import click

from dircleaner.cli.context import (
    LOG_LEVELS,
    VERBOSE_AND_QUIET,
    AppContext,
    configure_logging,
    set_verbosity,
)
from dircleaner.errors import UsageError


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


def _trailing_options() -> list[click.Option]:
    return [
        click.Option(
            ["--store"],
            callback=_set_store,
            help="Same as the global --store.",
            expose_value=False,
            is_eager=True,
        ),
        click.Option(
            ["--config"],
            type=click.Path(dir_okay=False, exists=True),
            callback=_set_config,
            help="Same as the global --config.",
            expose_value=False,
            is_eager=True,
        ),
        click.Option(
            ["--log-level"],
            type=click.Choice(LOG_LEVELS),
            callback=_set_log_level,
            help="Same as the global --log-level.",
            expose_value=False,
            is_eager=True,
        ),
        click.Option(
            ["-v", "--verbose"],
            count=True,
            callback=_set_verbose,
            help="Same as the global -v.",
            expose_value=False,
            is_eager=True,
        ),
        click.Option(
            ["-q", "--quiet"],
            is_flag=True,
            callback=_set_quiet,
            help="Same as the global -q.",
            expose_value=False,
            is_eager=True,
        ),
    ]


def accept_global_options(command: click.Command) -> None:
    """Give every (sub)command of ``command`` the global options too, and ``-n`` for its
    ``--dry-run``."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            accept_global_options(sub)
        return
    command.params.extend(_trailing_options())
    for param in command.params:
        if "--dry-run" in param.opts and "-n" not in param.opts:
            param.opts.insert(0, "-n")
