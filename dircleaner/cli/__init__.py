"""The command line: a thin click layer over the library (parse, call one function, print)."""

from __future__ import annotations

import click

from dircleaner import __version__
from dircleaner.cli.context import LOG_LEVELS, AppContext, DircleanerGroup, set_verbosity
from dircleaner.cli.data_commands import (
    delete_keys,
    gen,
    import_keys,
    init_schema,
    list_dirs,
    restore_cmd,
)
from dircleaner.cli.filter_commands import filters
from dircleaner.cli.global_options import accept_global_options
from dircleaner.cli.job_commands import build, clean, run, sweep_cmd
from dircleaner.cli.journal_commands import journal
from dircleaner.store import DEFAULT_STORE_URL


@click.group(cls=DircleanerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "store_url",
    envvar="DIRCLEANER_STORE",
    default=DEFAULT_STORE_URL,
    show_default=True,
    help="Metastore: an SQLite file (meta.db, or sqlite:///path/meta.db) or"
    " cassandra://host1,host2:9042/keyspace?dc=DC (env DIRCLEANER_STORE). Only gen, import-keys"
    " and init-schema create one.",
)
@click.option(
    "--config",
    "config_path",
    envvar="DIRCLEANER_CONFIG",
    type=click.Path(dir_okay=False, exists=True),
    help="TOML file with the Cassandra mapping, consistency, auth and TLS (env DIRCLEANER_CONFIG);"
    " an SQLite store uses none of it, but refuses a file a Cassandra store would.",
)
@click.option(
    "--log-level",
    envvar="DIRCLEANER_LOG_LEVEL",
    type=click.Choice(LOG_LEVELS),
    default="warning",
    show_default=True,
    help="Log what the job is doing (info) to stderr; credentials are never logged.",
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log more: -v is --log-level info, -vv debug (one step per v from --log-level).",
)
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="Errors only: log errors, and no progress or notes on stderr (the summary stays).",
)
@click.version_option(__version__, prog_name="dircleaner")
@click.pass_context
def cli(
    ctx: click.Context,
    store_url: str,
    config_path: str | None,
    log_level: str,
    verbose: int,
    quiet: bool,
) -> None:
    """Find and delete empty directory entries in an S3 metastore's folder index.

    \b
    The nightly job:
      dircleaner --store sqlite:///meta.db run
    Step by step:
      dircleaner build && dircleaner sweep && dircleaner clean --dry-run

    The global options are accepted after the command too (dircleaner list-dirs --store URL).

    Exit codes: 0 success, 1 error, 2 usage, 3 refused by a safety guard
    (or a dry run a real run would refuse), 130 Ctrl-C, 141 output cut short by its reader
    (| head), 143 SIGTERM.
    """
    set_verbosity(log_level, verbose, quiet)
    ctx.obj = AppContext(store_url, config_path)


for command in (
    import_keys,
    delete_keys,
    list_dirs,
    gen,
    restore_cmd,
    init_schema,
    build,
    sweep_cmd,
    clean,
    run,
    filters,
    journal,
):
    cli.add_command(command)
accept_global_options(cli)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="dircleaner")
