"""Commands that write or read the metastore's data: keys, directories, datasets, restores."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import click

from dircleaner.audit import AuditSelection, decoded_lines, plan_restore, restore
from dircleaner.cli.context import TerminalProgress, announce_store, obj
from dircleaner.cli.keyfile import LineEndings, read_key_lines
from dircleaner.paths import DEFAULT_BUCKET, dir_of_row, validate_bucket
from dircleaner.store import Store, backend_class
from dircleaner.timeutil import now_us

KEY_BATCH = 5000

bucket_option = click.option(
    "--bucket", default=DEFAULT_BUCKET, show_default=True, help="Bucket the keys belong to."
)
force_option = click.option(
    "--force",
    is_flag=True,
    help="Add dircleaner's tables to an SQLite file that holds tables of its own.",
)


def _apply_keys(
    stream: BinaryIO, bucket: str, write: Callable[[Sequence[str]], int | None], verb: str
) -> None:
    """Feed valid keys to ``write`` in batches; report bad lines; exit 1 if there were any.

    ``write`` returns how many keys it found (a delete of a key that does not exist is no
    delete), or None where the store cannot tell."""
    validate_bucket(bucket)
    batch: list[str] = []
    done = rejected = 0
    found: int | None = 0

    def flush(keys: list[str]) -> None:
        nonlocal found
        hit = write(keys)
        found = None if hit is None or found is None else found + hit

    endings = LineEndings()
    progress = TerminalProgress()
    for line in read_key_lines(stream, endings):
        if line.key is None:
            rejected += 1
            click.echo(f"line {line.number}: {line.error}; skipped", err=True)
            continue
        batch.append(line.key)
        if len(batch) >= KEY_BATCH:
            flush(batch)
            done += len(batch)
            batch = []
            progress(verb, done, None)
    if batch:
        flush(batch)
        done += len(batch)
    progress(verb, done, None)
    progress.close()
    if endings.crlf:
        click.echo(
            f"CRLF line endings (a Windows file): stripped the carriage return of"
            f" {endings.stripped:,} lines",
            err=True,
        )
    missing = "" if found is None else f" ({done - found:,} did not exist)"
    count = done if found is None else found
    click.echo(f"{verb} {count:,} keys in bucket {bucket!r}{missing}; rejected {rejected:,} lines")
    if rejected:
        sys.exit(1)


@click.command("import-keys")
@click.argument("path", type=click.File("rb"))
@bucket_option
@force_option
@click.pass_context
def import_keys(ctx: click.Context, path: BinaryIO, bucket: str, force: bool) -> None:
    """Write each key of PATH (one per line, '-' for stdin) as an S3 put.

    A put upserts the object row and a folder row for every ancestor directory. Invalid lines
    (bad UTF-8, empty, over 1024 bytes) are reported with their line number and skipped.
    Creates the store if it does not exist (and says so).

    \b
    Example:
      dircleaner --store meta.db import-keys keys.txt
    """
    with obj(ctx).open(create=True, force=force) as store:
        _apply_keys(path, bucket, lambda keys: _put(store, bucket, keys), "put")


def _put(store: Store, bucket: str, keys: Sequence[str]) -> None:
    store.put_objects(bucket, keys, now_us())


@click.command("delete-keys")
@click.argument("path", type=click.File("rb"))
@bucket_option
@click.pass_context
def delete_keys(ctx: click.Context, path: BinaryIO, bucket: str) -> None:
    """Delete each key of PATH lazily: object rows only, the folder index is left as it is.

    \b
    Example:
      dircleaner --store sqlite:///meta.db delete-keys expired.txt
    """
    with obj(ctx).open(writes=True) as store:
        _apply_keys(
            path, bucket, lambda keys: store.delete_objects(bucket, keys, now_us()), "deleted"
        )


@click.command("list-dirs")
@click.option("--bucket", help="Only this bucket, paths without it (default: every bucket).")
@click.option("--sort", "sort_output", is_flag=True, help="Sort (holds every path in memory).")
@click.pass_context
def list_dirs(ctx: click.Context, bucket: str | None, sort_output: bool) -> None:
    """Print every directory in the folder index, one per line: BUCKET<TAB>PATH, or only the
    full PATH (ending in '/') with --bucket. Like run, it covers every bucket unless told.

    \b
    Example:
      dircleaner --store sqlite:///meta.db list-dirs --bucket photos --sort > dirs.txt
    """
    if bucket is not None:
        validate_bucket(bucket)
    with obj(ctx).open() as store:
        rows = store.iter_folder_rows(bucket)
        paths = (
            dir_of_row(r.parent, r.name)
            if bucket is not None
            else f"{r.bucket}\t{dir_of_row(r.parent, r.name)}"
            for r in rows
        )
        for path in sorted(paths) if sort_output else paths:
            sys.stdout.write(path + "\n")


@click.command()
@click.option("--dirs", type=click.IntRange(min=10), required=True, help="Directories to create.")
@click.option("--seed", type=int, default=0, show_default=True, help="Dataset seed.")
@click.option("--truth", type=click.Path(dir_okay=False), help="Write every empty directory here.")
@click.option(
    "--empty-fraction",
    type=click.FloatRange(0, 0.5),
    default=0.05,
    show_default=True,
    help="Share of directories left empty.",
)
@bucket_option
@force_option
@click.pass_context
def gen(
    ctx: click.Context,
    dirs: int,
    seed: int,
    truth: str | None,
    empty_fraction: float,
    bucket: str,
    force: bool,
) -> None:
    """Generate a synthetic metastore with known ground truth (deterministic by seed).

    Creates the store if it does not exist (and says so).

    \b
    Example:
      dircleaner --store sqlite:///demo.db gen --dirs 200000 --seed 1 --truth truth.txt
    """
    from dircleaner.synth import SynthSpec, generate  # the generator is only needed here

    spec = SynthSpec(dirs=dirs, seed=seed, bucket=bucket, empty_fraction=empty_fraction)
    progress = TerminalProgress()
    with obj(ctx).open(create=True, force=force) as store:
        result = generate(
            store,
            spec,
            Path(truth) if truth else None,
            lambda done: progress("generate", done, dirs),
        )
    progress.close()
    click.echo(
        f"generated {result.dirs:,} directories ({result.empty_dirs:,} empty) and"
        f" {result.objects:,} objects in {result.seconds:.1f}s"
    )


@click.command("restore")
@click.argument("audit_log", type=click.File("rb"))
@click.option("--generation", help="Only the entries of this filter generation (one night).")
@click.option(
    "--since", type=click.DateTime(), help="Only entries deleted at or after this time (UTC)."
)
@click.option("--until", type=click.DateTime(), help="Only entries deleted before this time (UTC).")
@click.option(
    "--dry-run", is_flag=True, help="Count what would be restored, per via; write nothing."
)
@click.pass_context
def restore_cmd(
    ctx: click.Context,
    audit_log: BinaryIO,
    generation: str | None,
    since: datetime | None,
    until: datetime | None,
    dry_run: bool,
) -> None:
    """Put back the directory entries an audit log says were deleted (all, or one night's).

    \b
    Example:
      dircleaner restore ~/.local/state/dircleaner/audit.jsonl --generation G --dry-run
    """
    selection = AuditSelection(generation, _utc_us(since), _utc_us(until))
    plan = plan_restore(decoded_lines(audit_log, audit_log.name), selection)
    vias = ", ".join(f"{n:,} {via}" for via, n in sorted(plan.by_via.items())) or "none"
    of = f" (by {vias}; generations: {', '.join(plan.generations) or 'none'})"
    # A restore writes: the store it writes to is named before anything else is said.
    with contextlib.nullcontext() if dry_run else obj(ctx).open(writes=True) as store:
        if not plan.rows and selection != AuditSelection() and plan.logged_generations:
            logged = plan.logged_generations
            shown = ", ".join(logged[-5:]) + (
                f" (and {len(logged) - 5:,} more)" if len(logged) > 5 else ""
            )
            click.echo(
                f"warning: no entry of {audit_log.name} matches --generation/--since/--until;"
                f" the generations in it: {shown}",
                err=True,
            )
        if store is None:
            click.echo(f"would restore {len(set(plan.rows)):,} directory entries{of}")
            return
        result = restore(store, plan.rows, now_us())
    click.echo(f"restored {result.restored:,} directory entries{of}")


def _utc_us(moment: datetime | None) -> int | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1_000_000)


@click.command("init-schema")
@force_option
@click.pass_context
def init_schema(ctx: click.Context, force: bool) -> None:
    """Create the reference schema (keyspace, objects, folders, filters) if missing: an SQLite
    file too (refused if it holds tables of its own, unless --force).

    \b
    Example:
      dircleaner --store cassandra://127.0.0.1:9042/meta init-schema
    """
    app = obj(ctx)
    config = Path(app.config_path) if app.config_path else None
    created = backend_class(app.store_url).init_schema(
        app.store_url, config_path=config, force=force
    )
    announce_store(app.store_url)
    for name in created:
        click.echo(f"created {name}")
    click.echo("schema ready" + ("" if created else " (nothing to create)"))
