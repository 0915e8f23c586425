"""filters list|show|rm: the stored filter generations."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import click

from dircleaner.cli.context import emit, note, note_json, obj
from dircleaner.cli.options import json_option
from dircleaner.filter.generation import fresh_generation_id
from dircleaner.timeutil import format_duration, now_us

if TYPE_CHECKING:
    from dircleaner.filter.stored import GenerationInfo

# filter.stored (numpy) is imported in the commands that read filters: the other commands start
# without it.


def _describe(info: GenerationInfo, now_s: float) -> dict[str, object]:
    header = info.header
    sound = info.known_sound
    out: dict[str, object] = {
        "generation": info.generation,
        "complete": info.complete,
        # None: not known, the body not read (a listing reads headers and markers only)
        "corrupt": None if sound is None else not sound,
        "checked": "header, marker and body" if info.bodies_checked else "header and marker",
        "shards": f"{sum(s.complete for s in info.shards)}/{header.shard_count if header else '?'}",
    }
    if header is not None:
        age = now_s - header.snapshot_us / 1e6
        out.update(
            {
                "age": format_duration(max(age, 0.0)),
                "scope": header.scope,
                "engine": header.engine,
                "items": sum(s.header.items for s in info.shards if s.header is not None),
                "sized_for": header.expected_n,
                "fpr_target": header.target_p,
                "fill": _rounded(info.fill_ratio()),
                "fpr_estimated": _rounded(info.estimated_fpr()),
                "m": header.m,
                "k": header.k,
                "salt": f"{header.salt:08x}",
            }
        )
    if not info.complete:
        out["problem"] = info.describe_incompleteness()
    return out


def _rounded(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")


@click.group()
def filters() -> None:
    """Inspect and remove stored filter generations.

    \b
    Example:
      dircleaner --store sqlite:///meta.db filters list
    """


@filters.command("list")
@click.option(
    "--json", "as_json", is_flag=True, is_eager=True, callback=note_json, help="Print JSON."
)
@click.option(
    "--verify",
    is_flag=True,
    help="Also read every filter's body and check it, as a sweep does before using it (reads"
    " every stored filter whole).",
)
@click.pass_context
def list_cmd(ctx: click.Context, as_json: bool, verify: bool) -> None:
    """List every generation with its scope (the buckets it serves), age, size and
    completeness.

    Headers and completion markers are checked; a body only with --verify (or by 'filters
    show'): until then a generation's "corrupt" is null, unknown.

    \b
    Example:
      dircleaner filters list --verify --json
    """
    from dircleaner.filter.stored import check_bodies, list_generations
    from dircleaner.pipeline.build import describe_scope

    with obj(ctx).open() as store:
        infos = list_generations(store)
        if verify:
            infos = [check_bodies(store, info) for info in infos]
        rows = [_describe(info, time.time()) for info in infos]
        tables = store.scope_id()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no filters stored")
    for row in rows:
        state = "CORRUPT" if row["corrupt"] else "complete" if row["complete"] else "INCOMPLETE"
        scope = row.get("scope")
        covers = "scope ?" if scope is None else f"for {describe_scope(str(scope), tables)}"
        click.echo(
            f"{row['generation']}  {state:10}  {covers}  shards {row['shards']}"
            f"  age {_shown(row, 'age')}"
            f"  items {_shown(row, 'items')}  fill {_shown(row, 'fill')}"
            f"  fpr {_shown(row, 'fpr_estimated')} (target {_shown(row, 'fpr_target')})"
        )
    if any(row["corrupt"] is None and row["complete"] for row in rows):
        note(
            "headers and completion markers checked, bodies not read: 'filters list --verify'"
            " or 'filters show GENERATION' checks them too"
        )


def _shown(row: dict[str, object], key: str) -> object:
    """A field for people: '?' when it is absent or unknown."""
    value = row.get(key)
    return "?" if value is None else value


@filters.command("show")
@click.argument("generation")
@click.pass_context
def show_cmd(ctx: click.Context, generation: str) -> None:
    """Show one generation's header fields, its body checked as a sweep checks it.

    \b
    Example:
      dircleaner filters show 20261122T021500.000000Z-5f3a9c01
    """
    from dircleaner.filter.stored import check_bodies, find_generation

    with obj(ctx).open() as store:
        info = check_bodies(store, find_generation(store, generation))
    click.echo(json.dumps(_describe(info, time.time()), indent=2))


@filters.command("rm")
@click.argument("generation")
@json_option
@click.pass_context
def rm_cmd(ctx: click.Context, generation: str, as_json: bool) -> None:
    """Remove one generation.

    \b
    Example:
      dircleaner filters rm 20261122T021500.000000Z-5f3a9c01
    """
    from dircleaner.filter.stored import find_generation

    with obj(ctx).open(writes=True) as store:
        find_generation(store, generation)
        store.delete_filter_generation(generation)
    emit({"removed": generation}, [f"removed {generation}"], as_json)


@filters.command("new-id")
def new_id_cmd() -> None:
    """Print a fresh generation id (for hosts building shards of one generation).

    \b
    Example:
      G=$(dircleaner filters new-id)
      dircleaner build --shard 0/4 --generation "$G" --expected-dirs 30000000
    """
    click.echo(fresh_generation_id(now_us()))
