"""The global options (--store, --config, --log-level), accepted after the command name too.

``dircleaner list-dirs --store URL`` works like ``dircleaner --store URL list-dirs``, as users of
``aws``, ``kubectl`` and ``nodetool`` expect. Given after the command, an option wins over the
same option before it and over its environment variable.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from dircleaner.cli.context import AppContext, configure_logging

LOG_LEVELS = ("debug", "info", "warning", "error")


def _set_store(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.obj = replace(_app(ctx), store_url=value)


def _set_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.obj = replace(_app(ctx), config_path=value)


def _set_log_level(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        configure_logging(value)


def _app(ctx: click.Context) -> AppContext:
    app = ctx.find_object(AppContext)
    if app is None:  # pragma: no cover - the group always sets it first
        raise click.UsageError("internal: no application context")
    return app


def _trailing_options() -> list[click.Option]:
    common: dict[str, Any] = {"expose_value": False, "is_eager": True}
    return [
        click.Option(
            ["--store"], callback=_set_store, help="Same as the global --store.", **common
        ),
        click.Option(
            ["--config"],
            type=click.Path(dir_okay=False, exists=True),
            callback=_set_config,
            help="Same as the global --config.",
            **common,
        ),
        click.Option(
            ["--log-level"],
            type=click.Choice(LOG_LEVELS),
            callback=_set_log_level,
            help="Same as the global --log-level.",
            **common,
        ),
    ]


def accept_global_options(command: click.Command) -> None:
    """Give every (sub)command of ``command`` the global options too."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            accept_global_options(sub)
        return
    command.params.extend(_trailing_options())
