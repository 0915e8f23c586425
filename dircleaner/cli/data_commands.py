"""Commands that write or read the metastore's data: keys, directories, datasets, restores."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from dircleaner.audit import audit_log_lines, audit_scope
from dircleaner.cli.bulk import bulk_helper, bulk_loader, bulk_options, bulk_summary
from dircleaner.cli.context import (
    TerminalProgress,
    announce_store,
    emit,
    note,
    obj,
    warn_if_bucket_missing,
    write_metrics,
)
from dircleaner.cli.keyfile import LineEndings, read_key_lines
from dircleaner.cli.metrics import RunMetrics
from dircleaner.cli.options import bucket_option, json_option, metrics_option
from dircleaner.cli.report import counted
from dircleaner.cli.values import FiniteFloat, UtcTime
from dircleaner.errors import SchemaError
from dircleaner.journal import record_deletes
from dircleaner.paths import DEFAULT_BUCKET, dir_of_row, validate_bucket
from dircleaner.restore import AuditSelection, RestorePlan, plan_restore, restore
from dircleaner.store import Store, backend_class
from dircleaner.store.base import require_bucket
from dircleaner.timeutil import format_utc, now_us, parse_utc_time

if TYPE_CHECKING:
    from dircleaner.store.cassandra.bulkload import BulkLoadReport

KEY_BATCH = 5000

keys_bucket_option = bucket_option("Bucket the keys belong to.", DEFAULT_BUCKET)
force_option = click.option(
    "--force",
    is_flag=True,
    help="Add dircleaner's tables to an SQLite file that holds tables of its own.",
)


@dataclass(frozen=True)
class KeysApplied:
    """What import-keys or delete-keys did."""

    verb: str
    bucket: str
    #: valid keys sent to the store
    keys: int
    #: of those, the ones the store found (None where it cannot tell)
    found: int | None
    rejected_lines: int
    crlf_lines_stripped: int


def _apply_keys(
    stream: BinaryIO, bucket: str, write: Callable[[Sequence[str]], int | None], verb: str
) -> KeysApplied:
    """Feed valid keys to ``write`` in batches and report bad lines on stderr.

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
        note(
            f"CRLF line endings (a Windows file): stripped the carriage return of"
            f" {counted(endings.stripped, 'line')}"
        )
    return KeysApplied(verb, bucket, done, found, rejected, endings.stripped)


def _report_keys(applied: KeysApplied, as_json: bool, bulk: BulkLoadReport | None = None) -> None:
    """The summary (one line, or JSON); exit 1 if any line was rejected."""
    found, done = applied.found, applied.keys
    if not done:
        missing = " (the file holds no valid key)"
    else:
        missing = "" if found is None else f" ({done - found:,} did not exist)"
    count = done if found is None else found
    line = (
        f"{applied.verb} {counted(count, 'key')} in bucket {applied.bucket!r}{missing};"
        f" rejected {counted(applied.rejected_lines, 'line')}"
    )
    summary: dict[str, object] = {
        "bucket": applied.bucket,
        "keys": done,
        applied.verb: count,
        "rejected_lines": applied.rejected_lines,
        "crlf_lines_stripped": applied.crlf_lines_stripped,
    }
    if found is not None:
        summary["did_not_exist"] = done - found
    lines = [line]
    if bulk is not None:
        summary["bulk"], bulk_line = bulk_summary(bulk)
        lines.append(bulk_line)
    if applied.rejected_lines:
        rejected = counted(applied.rejected_lines, "line")
        summary.update(error=f"rejected {rejected} (see stderr)", exit_code=1)
    emit(summary, lines, as_json, ok=not applied.rejected_lines)
    if applied.rejected_lines:
        sys.exit(1)


@click.command("import-keys")
@click.argument("path", type=click.File("rb"))
@keys_bucket_option
@bulk_options
@json_option
@force_option
@click.pass_context
def import_keys(
    ctx: click.Context,
    path: BinaryIO,
    bucket: str,
    bulk: bool,
    bulk_via: str | None,
    as_json: bool,
    force: bool,
) -> None:
    """Write each key of PATH (one per line, '-' for stdin) as an S3 put.

    A put upserts the object row and a folder row for every ancestor directory. Invalid lines
    (bad UTF-8, empty, over 1024 bytes) are reported with their line number and skipped.
    Creates the store if it does not exist (and says so). With --bulk (Cassandra), the rows
    are written as sstables and loaded at the end: nothing is in the store before that.

    \b
    Example:
      dircleaner --store meta.db import-keys keys.txt
      dircleaner --store cassandra://10.0.0.5/s3meta import-keys --bulk keys.txt
    """
    helper = bulk_helper(obj(ctx).store_url, bulk, bulk_via)
    with obj(ctx).open(create=True, force=force) as store:
        loader = bulk_loader(store, helper, bulk_via)
        if loader is None:
            applied = _apply_keys(path, bucket, lambda keys: _put(store, bucket, keys), "put")
        else:
            with loader.bulk_loading():
                applied = _apply_keys(
                    path, bucket, lambda keys: loader.put_objects(bucket, keys, now_us()), "put"
                )
    _report_keys(applied, as_json, loader.report if loader is not None else None)


def _put(store: Store, bucket: str, keys: Sequence[str]) -> None:
    store.put_objects(bucket, keys, now_us())


@click.command("delete-keys")
@click.argument("path", type=click.File("rb"))
@keys_bucket_option
@json_option
@click.pass_context
def delete_keys(ctx: click.Context, path: BinaryIO, bucket: str, as_json: bool) -> None:
    """Delete each key of PATH lazily: object rows only, the folder index is left as it is;
    the keys' parent directories are journaled for the next 'clean --changed'.

    \b
    Example:
      dircleaner --store sqlite:///meta.db delete-keys expired.txt
    """
    validate_bucket(bucket)
    with obj(ctx).open(writes=True) as store:
        require_bucket(store, bucket)
        journaled = _Journaling(store, bucket)
        applied = _apply_keys(path, bucket, journaled.delete, "deleted")
    _report_keys(applied, as_json)


@dataclass
class _Journaling:
    """Lazy deletes as the metastore's delete path makes them: a batch's object rows, then a
    journal row per parent directory (a crash between the two loses only a hint). A store
    without the journal's table (a keyspace made before it) deletes all the same, once told."""

    store: Store
    bucket: str
    journal: bool = True

    def delete(self, keys: Sequence[str]) -> int | None:
        found = self.store.delete_objects(self.bucket, keys, now_us())
        if self.journal:
            try:
                record_deletes(self.store, self.bucket, keys)
            except SchemaError as exc:
                self.journal = False
                click.echo(f"warning: deletes not journaled: {exc}", err=True)
        return found


@click.command("list-dirs")
@bucket_option("Only this bucket, paths without it (default: every bucket).")
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
        warn_if_bucket_missing(store, bucket)
        rows = store.iter_folder_rows(bucket)
        paths = (
            dir_of_row(r.parent, r.name)
            if bucket is not None
            else f"{r.bucket}\t{dir_of_row(r.parent, r.name)}"
            for r in rows
        )
        for path in sorted(paths) if sort_output else paths:
            sys.stdout.write(path + "\n")


#: the presets of ``dircleaner.synth.SHAPES`` (named here so that --help does not import it)
SHAPE_NAMES = ("steady", "backlog")


@click.command()
@click.option("--dirs", type=click.IntRange(min=10), required=True, help="Directories to create.")
@click.option("--seed", type=int, default=0, show_default=True, help="Dataset seed.")
@click.option("--truth", type=click.Path(dir_okay=False), help="Write every empty directory here.")
@click.option(
    "--empty-fraction",
    type=FiniteFloat(0, 0.9),
    help="The share F of the directories left empty, with no object in their subtree (the"
    " --truth file lists exactly these) [default: 0.05]. It comes out within 0.4 percentage"
    " points of F from 10,000 directories on, 0.01 from 100,000 on; a share of a few"
    " directories in millions within a few directories of F times the directories (--shape"
    " steady at 31.5M: 352).",
)
@click.option(
    "--shape",
    type=click.Choice(SHAPE_NAMES),
    help="A cluster of the talk this tool comes from, instead of --empty-fraction: steady is"
    " 352 empty in 31.5M (F = 0.0000112), backlog 16M empty in 25M (F = 0.64: days emptied by"
    " lazy deletes under live parents, whole expired subtrees, wide parents).",
)
@keys_bucket_option
@bulk_options
@json_option
@force_option
@click.pass_context
def gen(
    ctx: click.Context,
    dirs: int,
    seed: int,
    truth: str | None,
    empty_fraction: float | None,
    shape: str | None,
    bucket: str,
    bulk: bool,
    bulk_via: str | None,
    as_json: bool,
    force: bool,
) -> None:
    """Generate a synthetic metastore with known ground truth (deterministic by seed).

    Creates the store if it does not exist (and says so).

    \b
    Example:
      dircleaner --store sqlite:///demo.db gen --dirs 200000 --seed 1 --truth truth.txt
      dircleaner --store sqlite:///backlog.db gen --dirs 25000000 --shape backlog
      dircleaner --store cassandra://127.0.0.1/bench30m gen --dirs 30000000 --bulk
    """
    from dircleaner.synth import SHAPES, SynthSpec, generate  # only needed here

    fraction = SHAPES[shape] if shape is not None else empty_fraction
    spec = SynthSpec(
        dirs=dirs, seed=seed, bucket=bucket, empty_fraction=0.05 if fraction is None else fraction
    )
    progress = TerminalProgress()
    helper = bulk_helper(obj(ctx).store_url, bulk, bulk_via)
    with obj(ctx).open(create=True, force=force) as store:
        loader = bulk_loader(
            store, helper, bulk_via, lambda rows: progress("bulk load (rows)", rows, None)
        )
        result = generate(
            store,
            spec,
            Path(truth) if truth else None,
            lambda done: progress("generate", done, dirs),
            bulk=loader,
        )
    progress.close()
    summary: dict[str, Any] = {
        "dirs": result.dirs,
        "empty_dirs": result.empty_dirs,
        "objects": result.objects,
        "seconds": round(result.seconds, 3),
    }
    line = (
        f"generated {result.dirs:,} directories ({result.empty_dirs:,} empty:"
        f" {result.empty_fraction:.3g} of them) and {result.objects:,} objects"
        f" in {result.seconds:.1f}s"
    )
    lines = [line]
    if loader is not None:
        summary["bulk"], bulk_line = bulk_summary(loader.report)
        lines.append(bulk_line)
    emit(summary, lines, as_json)


@click.command("restore")
@click.argument("audit_log", type=click.File("rb"))
@click.option("--generation", help="Only the entries of this filter generation (one night).")
@click.option(
    "--since",
    type=UtcTime(),
    help="Only deletes issued (wall clock) at or after this time, e.g. 2026-11-26T07:28:00Z,"
    " 2026-11-26T09:28:00+02:00 or '2026-11-26 07:28' (UTC).",
)
@click.option(
    "--until", type=UtcTime(), help="Only deletes issued before this time (same forms as --since)."
)
@bucket_option("Only the entries of this bucket (default: every bucket).")
@click.option(
    "-n", "--dry-run", is_flag=True, help="Count what would be restored, per via; write nothing."
)
@click.option(
    "--force",
    is_flag=True,
    help="Also restore the entries of an old log that does not record its store, or of a log"
    " holding only the deletes of this store's tables at another location (a moved file).",
)
@json_option
@metrics_option
@click.pass_context
def restore_cmd(
    ctx: click.Context,
    audit_log: BinaryIO,
    generation: str | None,
    since: str | None,
    until: str | None,
    bucket: str | None,
    dry_run: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Put back the directory entries an audit log says were deleted (all, or one night's).

    Only the entries of this store (--store) are restored: a log of another store is refused
    (exit 3), and another store's entries in a shared log are skipped and counted.

    \b
    Example:
      dircleaner --store sqlite:///meta.db restore \\
        ~/.local/state/dircleaner/audit-<store>.jsonl.gz --since '2026-11-26 07:00' --dry-run
    """
    if bucket is not None:
        validate_bucket(bucket)
    since_us = None if since is None else parse_utc_time(since)
    until_us = None if until is None else parse_utc_time(until)
    selection = AuditSelection(generation, since_us, until_us, bucket)
    name = audit_log.name
    progress = TerminalProgress()
    with obj(ctx).open(writes=not dry_run) as store:
        scope = audit_scope(store)
        plan = plan_restore(
            audit_log_lines(audit_log, name),
            selection,
            scope,
            force=force,
            name=name,
            moved_from=_vacated_file if store.traits.scheme == "sqlite" else None,
            progress=progress,
        )
        with plan:
            if not plan.rows and selection != AuditSelection() and plan.logged_generations:
                _warn_nothing_selected(name, plan.logged_generations)
            restored = None
            if not dry_run:
                if not as_json:
                    click.echo(f"restoring into {scope} from {name}")
                restored = restore(store, plan.rows, now_us(), progress).restored
    progress.close()
    write_metrics(ctx, RunMetrics.of_restore(len(plan.rows), restored, plan.skipped), success=True)
    emit(
        restore_summary(plan, scope, name, restored),
        restore_lines(plan, scope, restored),
        as_json,
    )


def _vacated_file(scope: str) -> bool:
    """Whether an SQLite store's recorded location holds no file any more: this store may be
    that file, moved (a path where a store still is names another store)."""
    return not Path(scope.partition("@")[2]).exists()


def _warn_nothing_selected(name: str, logged: list[str]) -> None:
    shown = ", ".join(logged[-5:]) + (f" (and {len(logged) - 5:,} more)" if len(logged) > 5 else "")
    click.echo(
        f"warning: no entry of {name} matches --generation/--since/--until/--bucket;"
        f" the generations in it: {shown}",
        err=True,
    )


def restore_summary(
    plan: RestorePlan, scope: str, name: str, restored: int | None
) -> dict[str, object]:
    """A restore's JSON summary: ``restored`` is null in a dry run, whose count is
    ``directories`` (the sum of ``by_via``)."""
    issued = plan.issued_us
    return {
        "store": scope,
        "audit_log": name,
        "dry_run": restored is None,
        "directories": len(plan.rows),
        "restored": restored,
        "by_via": dict(sorted(plan.by_via.items())),
        "repeated_entries": plan.repeated,
        "generations": plan.generations,
        "issued_first": None if issued is None else format_utc(issued[0]),
        "issued_last": None if issued is None else format_utc(issued[1]),
        "skipped_other_stores": dict(sorted(plan.other_scopes.items())),
        "skipped_no_store": plan.unscoped,
        "skipped": plan.skipped,
        "adopted_store": plan.adopted_scope,
    }


def restore_lines(plan: RestorePlan, scope: str, restored: int | None) -> list[str]:
    """A restore's lines for people (the first one, of a real restore, is printed before)."""
    vias = ", ".join(f"{n:,} {via}" for via, n in sorted(plan.by_via.items())) or "none"
    issued = plan.issued_us
    when = ""
    if issued is not None:
        first, last = format_utc(issued[0]), format_utc(issued[1])
        when = f"; deletes issued {first}" + ("" if first == last else f" to {last}")
    of = f"(by {vias}; generations: {', '.join(plan.generations) or 'none'}{when})"
    entries = "directory entry", "directory entries"
    if restored is None:
        lines = [f"would restore {counted(len(plan.rows), *entries)} into {scope} {of}"]
    else:
        lines = [f"restored {counted(restored, *entries)} {of}"]
    if plan.adopted_scope is not None:
        lines.append(
            f"  --force: the entries of store {plan.adopted_scope}, the same tables elsewhere"
            " (a moved store), taken as this store's"
        )
    if plan.repeated:
        more = counted(plan.repeated, "more entry", "more entries")
        lines.append(f"  {more} named a directory already counted")
    for other, count in sorted(plan.other_scopes.items()):
        lines.append(f"  skipped {counted(count, 'entry', 'entries')} of another store: {other}")
    if plan.unscoped:
        lines.append(
            f"  skipped {counted(plan.unscoped, 'entry', 'entries')} that record no store"
            " (--force restores them)"
        )
    return lines


@click.command("init-schema")
@json_option
@force_option
@click.pass_context
def init_schema(ctx: click.Context, as_json: bool, force: bool) -> None:
    """Create the reference schema (keyspace, objects, folders, filters) if missing: an SQLite
    file too (refused if it holds tables of its own, unless --force).

    \b
    Example:
      dircleaner --store cassandra://127.0.0.1:9042/meta init-schema
    """
    app = obj(ctx)
    created = backend_class(app.store_url).init_schema(
        app.store_url, config_path=app.config(), force=force
    )
    announce_store(app.store_url)
    lines = [f"created {name}" for name in created]
    lines.append("schema ready" + ("" if created else " (nothing to create)"))
    emit({"created": created}, lines, as_json)
