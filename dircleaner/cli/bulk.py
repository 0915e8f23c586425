"""``--bulk`` on ``gen`` and ``import-keys``: a Cassandra store loaded through sstables."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from dircleaner.errors import UsageError
from dircleaner.store import Store

if TYPE_CHECKING:  # the loader (and the driver) are imported only when --bulk is given
    from dircleaner.store.cassandra.bulkjava import JavaHelper
    from dircleaner.store.cassandra.bulkload import BulkLoadReport, CassandraBulkLoad

F = TypeVar("F", bound=Callable[..., Any])

VIA_CHOICES = ("sstableloader", "nodetool-import")


def bulk_options(func: F) -> F:
    """``--bulk`` and ``--bulk-via``, declared once for the commands that load data."""
    func = click.option(
        "--bulk-via",
        type=click.Choice(VIA_CHOICES),
        default=None,
        help="With --bulk: how the sstables reach the cluster: sstableloader streams them to"
        " every replica (any cluster) [default]; nodetool-import has a one-node cluster on"
        " this machine adopt the files.",
    )(func)
    return click.option(
        "--bulk",
        is_flag=True,
        help="Cassandra only: write the rows as sstables with Cassandra's own writer (Java and"
        " Cassandra's jars needed) and load those, instead of inserting row by row.",
    )(func)


def bulk_helper(store_url: str, bulk: bool, via: str | None) -> JavaHelper | None:
    """Before the store is opened: None without ``--bulk``; a usage error where it does not
    apply; else the Java helper, compiled now if need be (one line if Java or Cassandra's jars
    are missing), so nothing is created or written when it cannot run."""
    if not bulk:
        return None  # --bulk-via without --bulk: refused before (the option table)
    if not store_url.startswith("cassandra://"):
        raise UsageError(
            "--bulk loads a Cassandra store (cassandra://...); this store inserts in bulk already"
        )
    from dircleaner.store.cassandra.bulkjava import java_helper

    return java_helper()


def bulk_loader(
    store: Store,
    helper: JavaHelper | None,
    via: str | None,
    on_rows: Callable[[int], None] | None = None,
) -> CassandraBulkLoad | None:
    """The loader for an open store (None without a helper: no ``--bulk``)."""
    if helper is None:
        return None
    from dircleaner.store.cassandra.bulkload import CassandraBulkLoad
    from dircleaner.store.cassandra.store import CassandraStore

    assert isinstance(store, CassandraStore)  # bulk_helper checked the URL
    return CassandraBulkLoad(
        store.config,
        store.requests.cluster.metadata,
        via=via or "sstableloader",
        helper=helper,
        on_rows=on_rows,
    )


def bulk_summary(report: BulkLoadReport) -> tuple[dict[str, Any], str]:
    """The ``bulk`` entry of a command's JSON summary and its line for people."""
    write = report.write
    rate = report.rows / write.seconds if write.seconds else 0.0
    summary = {
        "via": report.via,
        "rows": report.rows,
        "sstables": write.sstables,
        "sstable_bytes": write.sstable_bytes,
        "write_seconds": round(write.seconds, 3),
        "load_seconds": round(report.load_seconds, 3),
        "writer_peak_rss_bytes": write.peak_rss,
    }
    line = (
        f"bulk load: {report.rows:,} rows written as {write.sstables:,} sstables"
        f" ({write.sstable_bytes / 2**20:,.1f} MiB) in {write.seconds:.1f}s ({rate:,.0f} rows/s),"
        f" loaded by {report.via} in {report.load_seconds:.1f}s"
    )
    return summary, line
