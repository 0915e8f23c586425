"""The command line: a thin click layer over the library (parse, call one function, print)."""

from __future__ import annotations

import click

from dircleaner import __version__
from dircleaner.cli.context import AppContext, DircleanerGroup, set_verbosity
from dircleaner.cli.data_commands import (
    delete_keys,
    gen,
    import_keys,
    init_schema,
    list_dirs,
    restore_cmd,
)
from dircleaner.cli.filter_commands import filters
from dircleaner.cli.global_options import accept_global_options, global_options
from dircleaner.cli.job_commands import build, clean, run, sweep_cmd
from dircleaner.cli.journal_commands import journal
from dircleaner.cli.option_table import refuse_what_does_not_apply


@click.group(cls=DircleanerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@global_options
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
refuse_what_does_not_apply(cli)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="dircleaner")
