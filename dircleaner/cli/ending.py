"""What every ending of a command owes monitoring: the ``--metrics-file`` and ``--json`` it was
given, and the labels of its series, found in the raw arguments before click parses them.

A command line that click refuses (an unknown option, one that does not apply, a ``--config``
that does not exist, ``-v`` with ``-q``) never reaches the options' callbacks; the metrics file
it names must still say ``last_run_success 0``, and ``--json`` must still print the error.
So the arguments are read once up front, with click's own parser for each command (unknown
options skipped), and what they name is kept for whatever ends the command.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import click

from dircleaner.errors import DircleanerError
from dircleaner.errors import UsageError as DircleanerUsageError
from dircleaner.store import DEFAULT_STORE_URL, shown_url

#: the label naming the kind of run a metrics file describes (not ``job``: Prometheus sets
#: ``job`` on every scraped series itself, and would rename ours ``exported_job``)
COMMAND_LABEL = "command"
#: the label naming the store the run was for (as shown to operators: never a credential)
STORE_LABEL = "store"
#: the kind of run of ``clean --prefix`` (its own series, beside the store-wide ``clean``'s)
PREFIX_CLEAN = "clean --prefix"
#: the kind of run of ``clean --changed``, the churn night (its own series too)
CHANGED_CLEAN = "clean --changed"


@dataclass(frozen=True)
class Ending:
    """What a command line asks of its ending, whatever that ending is."""

    metrics_file: str | None = None
    as_json: bool = False
    #: the labels every sample of the metrics file carries (one series per kind of run and store)
    labels: Mapping[str, str] = field(default_factory=dict)


def ending_of(group: click.Command, args: Sequence[str]) -> Ending:
    """What ``args`` (the command line after the program's name) ask of the ending: read with
    each command's own parser, unknown options skipped, nothing validated or called back."""
    found: dict[str, object] = {}
    command: click.Command | None = group
    path: list[str] = []
    rest = list(args)
    while isinstance(command, click.Group):
        opts, rest = _parse(command, rest)
        found.update((k, v) for k, v in opts.items() if v is not None)
        name = next((arg for arg in rest if not arg.startswith("-")), None)
        if name is None:
            return Ending()
        rest = rest[rest.index(name) + 1 :]
        command = command.commands.get(name)
        path.append(name)
    if command is None:
        return Ending()
    opts, _ = _parse(command, rest)
    found.update((k, v) for k, v in opts.items() if v is not None)
    metrics_file = _value_of(command, opts, "--metrics-file")
    as_json = bool(_value_of(command, opts, "--json"))
    if metrics_file is None:
        return Ending(None, as_json)
    kind = " ".join(path)
    if path == ["clean"] and opts.get("changed"):
        kind = CHANGED_CLEAN
    elif path == ["clean"] and opts.get("prefix") is not None:
        kind = PREFIX_CLEAN
    store = found.get("store", found.get("store_url", os.environ.get("DIRCLEANER_STORE")))
    labels = {COMMAND_LABEL: kind, STORE_LABEL: _shown_store(str(store or DEFAULT_STORE_URL))}
    return Ending(str(metrics_file), as_json, labels)


def _parse(command: click.Command, args: list[str]) -> tuple[dict[str, object], list[str]]:
    """``command``'s options in ``args`` (by parameter name) and the arguments left over."""
    ctx = click.Context(command, ignore_unknown_options=True, resilient_parsing=True)
    try:
        opts, rest, _order = command.make_parser(ctx).parse_args(args=list(args))
    except click.ClickException:
        return {}, []  # an option without its value: click reports it; nothing to go on
    return opts, rest


def _value_of(command: click.Command, opts: Mapping[str, object], option: str) -> object:
    param = next((p for p in command.params if option in getattr(p, "opts", ())), None)
    return None if param is None or param.name is None else opts.get(param.name)


def _shown_store(value: str) -> str:
    try:
        return shown_url(value)
    except DircleanerError:
        return value  # a malformed URL: refused later, and its series still names what was given


def check_writable(path: Path) -> None:
    """Refuse (exit 2) a metrics file that could not be written, before the command does
    anything: its directory is created if missing (as the write would), and a file is
    created and removed there, the one test that sees permissions, ACLs, read-only mounts and
    systemd's sandboxing alike; in a sticky directory (``chmod +t``), the file must be ours to
    replace."""
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.probe"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise DircleanerUsageError(
            f"--metrics-file {path}: cannot write in {directory} ({exc.strerror}); let the user"
            " running dircleaner write to that directory (docs/operations.md, 'Metrics and"
            " alerts'), or give another path"
        ) from exc
    os.close(fd)
    with suppress(OSError):
        probe.unlink()
    owner = _owner_if_not_replaceable(path)
    if owner is not None:
        raise DircleanerUsageError(
            f"--metrics-file {path}: cannot replace it: it belongs to uid {owner} in a sticky"
            f" directory; remove it (or chown it to uid {os.geteuid()}) and rerun"
        )


def _owner_if_not_replaceable(path: Path) -> int | None:
    """The owner of ``path`` when a sticky directory keeps us from renaming over it (the
    atomic write does): only the file's owner, the directory's, or root may."""
    try:
        mine, directory, target = os.geteuid(), path.parent.stat(), path.stat()
    except OSError:
        return None  # no file yet: creating one was just shown to work
    if not directory.st_mode & stat.S_ISVTX or mine in (0, target.st_uid, directory.st_uid):
        return None
    return target.st_uid
