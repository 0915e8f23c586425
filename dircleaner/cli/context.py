"""Shared CLI plumbing: the store to open, error mapping, progress on a terminal, output."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import sys
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from dircleaner.cli import progress_display
from dircleaner.cli.ending import Ending, check_writable, ending_of
from dircleaner.cli.interrupted import interrupted_line
from dircleaner.cli.metrics import RunMetrics, render, write_atomically
from dircleaner.cli.progress_display import TerminalProgress, quiet, set_quiet
from dircleaner.errors import DircleanerError
from dircleaner.errors import UsageError as DircleanerUsageError
from dircleaner.store import Store, open_store, shown_url, store_url
from dircleaner.store.base import missing_bucket
from dircleaner.store.sqlite import read_only_here
from dircleaner.workers.interrupt import Interrupted, stop_on_signals

__all__ = ["TerminalProgress", "announce_store"]

log = logging.getLogger("dircleaner")


class CliError(click.ClickException):
    """A library error shown as one line (exit code 1)."""


class CliUsageError(CliError):
    """Bad input (exit code 2)."""

    exit_code = 2


class CliRefused(CliError):
    """A safety guard refused (exit code 3)."""

    exit_code = 3


#: the exit code of output cut short by its reader (`| head`): 128 + SIGPIPE, as a shell reports
BROKEN_PIPE_EXIT = 141

_BY_EXIT_CODE: dict[int, type[CliError]] = {1: CliError, 2: CliUsageError, 3: CliRefused}


#: ``ctx.meta`` key set when the command was asked for ``--json``
JSON_REQUESTED = "dircleaner.json"
#: ``ctx.meta`` key: the ``--metrics-file`` not written yet (a failure writes it)
METRICS_FILE = "dircleaner.metrics_file"
#: ``ctx.meta`` key: what the command line asks of every ending (``ending.Ending``)
ENDING = "dircleaner.ending"


def note_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """Callback of the eager ``--json``: an error, even in a later option, is then reported
    as JSON on stdout too."""
    if value:
        ctx.meta[JSON_REQUESTED] = True
    return value


def note_metrics_file(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """Callback of the eager ``--metrics-file``: a file that could not be written is refused
    before the command does anything (exit 2); from here on, whatever ends the command writes
    it (an ending before this callback writes the one the command line names, ``ending``)."""
    if value is not None and not ctx.resilient_parsing:
        ctx.meta[METRICS_FILE] = value
        check_writable(Path(value))


def write_metrics(
    ctx: click.Context, metrics: RunMetrics, *, success: bool, refused: bool = False
) -> None:
    """The run's Prometheus textfile metrics, if asked for; written once (what happens after
    the command's own figures were written does not replace them)."""
    path = ctx.meta.pop(METRICS_FILE, None)
    if path is not None:
        ending: Ending = ctx.meta.get(ENDING, Ending())
        text = render(
            metrics,
            success=success,
            finished_at=time.time(),
            refused=refused,
            labels=ending.labels,
        )
        write_atomically(Path(path), text)


class DircleanerGroup(click.Group):
    """Turns library errors into one-line messages and their exit codes (the one mapping)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """The context, with what the command line asks of every ending: a command line the
        group itself refuses (a --config that does not exist, a bad --log-level) still writes
        the metrics file it names, and prints the error as JSON when --json was given."""
        ending = ending_of(self, args) if parent is None else Ending()
        try:
            ctx = super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            if ending.as_json:
                _echo_json_failure(exc.format_message(), type(exc).__name__, exc.exit_code)
            if ending.metrics_file is not None:
                with suppress(OSError):
                    text = render(
                        RunMetrics(), success=False, finished_at=time.time(), labels=ending.labels
                    )
                    write_atomically(Path(ending.metrics_file), text)
            raise
        if parent is None:
            ctx.meta[ENDING] = ending
            if ending.as_json:
                ctx.meta[JSON_REQUESTED] = True
            if ending.metrics_file is not None:
                ctx.meta[METRICS_FILE] = ending.metrics_file
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return self._invoke_mapped(ctx)
        except click.exceptions.Exit as exc:
            if exc.exit_code != 0:
                _failed_run_metrics(ctx)
            raise
        except BaseException as exc:
            # Every way out but success (an error, a refusal, a bad option, Ctrl-C, SIGTERM, a
            # bug) tells monitoring the run failed: an old ``last_run_success 1`` must not stay.
            # A refusal keeps what the run had found (the sweep's counts, in its details).
            refused = isinstance(exc, CliRefused)
            _failed_run_metrics(ctx, refused=refused, found=_details_of(exc) if refused else {})
            raise

    def _invoke_mapped(self, ctx: click.Context) -> Any:
        progress_display.forget()
        try:
            with stop_on_signals():
                return super().invoke(ctx)
        except click.UsageError as exc:
            if ctx.meta.get(JSON_REQUESTED):
                _echo_json_failure(exc.format_message(), type(exc).__name__, exc.exit_code)
            raise
        except Interrupted as exc:
            shown = progress_display.latest()
            reached = shown.stopped() if shown is not None else None
            message = interrupted_line(ctx.invoked_subcommand, exc, reached)
            raise fail(ctx, message, exc.exit_code, type(exc).__name__) from exc
        except DircleanerError as exc:
            raise fail(ctx, str(exc), exc.exit_code, type(exc).__name__, exc.details) from exc
        except sqlite3.Error as exc:
            log.debug("the SQLite metastore failed", exc_info=True)
            app = ctx.find_object(AppContext)
            where = app.store_url if app else "the SQLite metastore"
            if app is not None and read_only_here(app.store_url):
                # Opened read-only (a read-only mount), and this command writes.
                message = (
                    f"the SQLite metastore {where} is read-only here: this command writes to it"
                )
            else:
                message = (
                    f"the SQLite metastore {where} failed: {exc}; fix that (free space?) and"
                    " rerun: nothing is lost, the next run resumes"
                )
            raise fail(ctx, message, 1, type(exc).__name__) from exc
        except BrokenPipeError:
            # The reader stopped early (`| head`): nothing more to say, and nobody to say it
            # to. Exit as a tool killed by SIGPIPE would, and keep Python's final flush quiet.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise click.exceptions.Exit(BROKEN_PIPE_EXIT) from None
        except OSError as exc:
            log.debug("an operating-system call failed", exc_info=True)
            what = f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc)
            message = f"{what}; fix that and rerun: nothing is lost, the next run resumes"
            raise fail(ctx, message, 1, type(exc).__name__) from exc


def _failed_run_metrics(
    ctx: click.Context, *, refused: bool = False, found: dict[str, object] | None = None
) -> None:
    metrics = RunMetrics.of_refusal(found or {})
    with suppress(OSError):  # the original error is the one to report
        write_metrics(ctx, metrics, success=False, refused=refused)


def _details_of(exc: BaseException) -> dict[str, object]:
    """The details of the library error behind a one-line error (what a refused run found)."""
    cause = exc.__cause__
    return dict(cause.details) if isinstance(cause, DircleanerError) else {}


def refused_without_json(message: str) -> CliError:
    """The one line (exit 3) of a dry run a real run would refuse; its JSON summary says so."""
    return _error_class(3)(f"a real run would be refused: {message}")


def verdict_keys(verdict: str | None) -> dict[str, object]:
    """What a dry run's JSON summary adds when a real run would be refused: the keys of every
    other refusal (``"error"``, ``"exit_code"``), so that monitoring reads one shape."""
    if verdict is None:
        return {}
    return {"error": f"a real run would be refused: {verdict}", "exit_code": 3}


def fail(
    ctx: click.Context,
    message: str,
    exit_code: int,
    kind: str,
    details: dict[str, object] | None = None,
) -> CliError:
    """Log the failure, print it as JSON if ``--json`` was asked for, and return the one-line
    error to raise (click prints it on stderr and exits with its code)."""
    verdict = "refused" if exit_code == 3 else "failed"
    log.info("%s %s: %s", ctx.invoked_subcommand or "command", verdict, message)
    if ctx.meta.get(JSON_REQUESTED):
        _echo_json_failure(message, kind, exit_code, details)
    return _error_class(exit_code)(message)


def _echo_json_failure(
    message: str, kind: str, exit_code: int, details: dict[str, object] | None = None
) -> None:
    report: dict[str, object] = {
        "ok": False,
        "error": message,
        "error_type": kind,
        "exit_code": exit_code,
    }
    if details:
        report["details"] = details
    click.echo(json.dumps(report, indent=2, sort_keys=True))


def _error_class(exit_code: int) -> type[CliError]:
    """The one-line error class of an exit code (a new code gets its class on first use)."""
    if exit_code not in _BY_EXIT_CODE:
        _BY_EXIT_CODE[exit_code] = type(
            f"CliError{exit_code}", (CliError,), {"exit_code": exit_code}
        )
    return _BY_EXIT_CODE[exit_code]


@dataclass(frozen=True)
class AppContext:
    """Global options every command shares."""

    store_url: str
    config_path: str | None

    def __post_init__(self) -> None:
        # A plain path names an SQLite file: from here on, every message shows the URL.
        object.__setattr__(self, "store_url", store_url(self.store_url))

    def config(self) -> Path | None:
        """The --config file, checked as a Cassandra store loads it (TOML, no unknown key, every
        value of its type) whatever the store: an SQLite store reads nothing from it, but a
        broken or typo'd file must not pass unnoticed until the day it is used."""
        if self.config_path is None:
            return None
        from dircleaner.store.cassandra.config import check_config_file

        path = Path(self.config_path)
        check_config_file(path)
        return path

    def open(self, *, writes: bool = False, create: bool = False, force: bool = False) -> Store:
        """The store; a command that ``writes`` to it (or may ``create`` it) names it first
        on stderr, and says what it created."""
        store = open_store(self.store_url, config_path=self.config(), create=create, force=force)
        if writes or create:
            announce_store(self.store_url, store.created)
        return store


def announce_store(url: str, created: Sequence[str] = ()) -> None:
    """The first line of a command that writes: which store (never a credential), then what
    it created there, if anything (``-q`` drops both: errors only)."""
    note(f"store: {shown_url(url)}")
    for name in created:
        note(f"created {name}")


#: --log-level's choices, most verbose first (-v steps towards the first, -q goes to the last)
LOG_LEVELS = ("debug", "info", "warning", "error")
_handler: logging.Handler | None = None
_level = "warning"


#: the one line of ``-v`` given with ``-q``, before or after the command
VERBOSE_AND_QUIET = "-v and -q contradict each other: give one of them"


def set_verbosity(level: str | None, verbose: int, be_quiet: bool) -> None:
    """--log-level, then ``-v`` (once per step towards debug) or ``-q`` (errors only, and no
    progress or notes on stderr)."""
    if verbose and be_quiet:
        raise DircleanerUsageError(VERBOSE_AND_QUIET)
    set_quiet(be_quiet)
    if be_quiet:
        configure_logging("error")
    elif level is not None or verbose:
        start = LOG_LEVELS.index(level if level is not None else _level)
        configure_logging(LOG_LEVELS[max(start - verbose, 0)])


def note(text: str) -> None:
    """A note for whoever watches stderr (what runs where, a harmless oddity); ``-q`` drops it."""
    if not quiet():
        click.echo(text, err=True)


def configure_logging(level: str) -> None:
    """Timestamped lines on stderr from our loggers (and the driver's, at info or debug)."""
    global _handler, _level
    _level = level
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("dircleaner", "cassandra"):
        logger = logging.getLogger(name)
        if _handler is not None:
            logger.removeHandler(_handler)
        if name == "dircleaner" or level in ("debug", "info"):
            logger.addHandler(handler)
            logger.setLevel(level.upper())
        else:
            # The driver warns about routine things (protocol version negotiation) on every
            # connection; an operator sees its errors, and everything with --log-level info.
            logger.setLevel(logging.ERROR)
    _handler = handler


def emit(summary: dict[str, Any], lines: list[str], as_json: bool, *, ok: bool = True) -> None:
    """Print a summary: JSON for machines, aligned lines for people."""
    if as_json:
        click.echo(json.dumps({"ok": ok, **summary}, indent=2, sort_keys=True))
    else:
        for line in lines:
            click.echo(line)


def warn_if_bucket_missing(store: Store, bucket: str | None) -> None:
    """A --bucket the store holds nothing of is most likely a typo: a command that only reads
    says so on stderr, naming the buckets there are, and goes on (commands that delete refuse,
    with ``require_bucket``)."""
    problem = missing_bucket(store, bucket)
    if problem is not None:
        click.echo(f"warning: {problem}", err=True)


def obj(ctx: click.Context) -> AppContext:
    app = ctx.find_object(AppContext)
    if app is None:  # pragma: no cover - click always sets it through the group
        raise click.UsageError("internal: no application context")
    return app
