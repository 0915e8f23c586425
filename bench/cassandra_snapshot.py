"""A loaded Cassandra dataset kept beside the benchmark and restored in seconds.

After a load (through the driver or the bulk loader), ``keep`` flushes the keyspace, takes a
``nodetool snapshot`` of its two index tables and links the snapshot's files under the cache
directory (``bench/.cache/``, git-ignored: hard links where the node's data directory is on
the same filesystem, copies where it is not; sstables are never changed in place, so a link is
a copy), then writes ``manifest.json`` last: a copy without it is incomplete and unused. The
snapshot itself is then cleared from the node.

``restore`` puts the dataset back: ``TRUNCATE`` of both index tables and the key-value table
(the clean's tombstones, filters, ledger and lease go with it), the snapshots the truncation
took cleared, and ``nodetool import --copy-data`` of the kept files (the node copies them in;
the cache stays as it is). The snapshot holds every row the load wrote, the generator's few
store-protocol writes included, each with its write time.

The node must be on this machine (``nodetool import`` reads the files by path): the local node
``scripts/cassandra`` runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from cassandra.query import SimpleStatement

from dircleaner.store.cassandra.bulkjava import java_helper
from dircleaner.store.cassandra.bulkload import import_sstables, table_targets
from dircleaner.store.cassandra.store import CassandraStore

REPO = Path(__file__).resolve().parent.parent
MANIFEST = "manifest.json"


def nodetool(*args: str) -> None:
    """The local node's nodetool (``scripts/cassandra nodetool``); raise on failure."""
    done = subprocess.run(
        [str(REPO / "scripts" / "cassandra"), "nodetool", *args],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"nodetool {' '.join(args)} failed: {done.stderr.strip()[-300:]}")


def data_directories(store: CassandraStore) -> list[Path]:
    """The node's data directories, as it reports them (``system_views.settings``)."""
    row = store.requests.session.execute(
        "SELECT value FROM system_views.settings WHERE name = 'data_file_directories'"
    ).one()
    if row is None:
        raise RuntimeError("the node does not report its data_file_directories")
    return [Path(p.strip()) for p in row[0].strip("[]").split(",") if p.strip()]


def _table_dir_name(store: CassandraStore, table: str) -> str:
    """``<table>-<id without dashes>``: the table's directory under its keyspace's."""
    row = store.requests.session.execute(
        "SELECT id FROM system_schema.tables WHERE keyspace_name = %s AND table_name = %s",
        (store.config.keyspace, table),
    ).one()
    if row is None:
        raise RuntimeError(f"no table {store.config.keyspace}.{table}")
    return f"{table}-{row[0].hex}"


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def read_manifest(dest: Path) -> dict[str, Any] | None:
    """The kept copy's manifest, or None where there is no complete copy."""
    try:
        data: dict[str, Any] = json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data


def keep(store: CassandraStore, dest: Path, manifest: dict[str, Any]) -> float:
    """Snapshot the index tables into ``dest`` (replacing what was there); the seconds it took."""
    started = time.perf_counter()
    cfg = store.config
    shutil.rmtree(dest, ignore_errors=True)
    tag = f"dcbench-{int(time.time())}"
    tables = [cfg.tables.objects, cfg.tables.folders]
    nodetool("flush", cfg.keyspace, *tables)
    nodetool("snapshot", "-t", tag, "-kt", ",".join(f"{cfg.keyspace}.{t}" for t in tables))
    try:
        for table in tables:
            name = _table_dir_name(store, table)
            found = [
                d / cfg.keyspace / name / "snapshots" / tag
                for d in data_directories(store)
                if (d / cfg.keyspace / name / "snapshots" / tag).is_dir()
            ]
            if not found:
                raise RuntimeError(f"snapshot {tag} of {cfg.keyspace}.{table} not found")
            target = dest / cfg.keyspace / table
            target.mkdir(parents=True)
            for snapshot in found:
                for f in snapshot.iterdir():
                    if f.is_file() and f.name not in ("manifest.json", "schema.cql"):
                        _link_or_copy(f, target / f.name)
    finally:
        nodetool("clearsnapshot", "-t", tag, "--", cfg.keyspace)
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return time.perf_counter() - started


def restore(store: CassandraStore, dest: Path) -> float:
    """Empty the keyspace's tables and import the kept copy; the seconds it took."""
    started = time.perf_counter()
    cfg = store.config
    for table in (cfg.tables.objects, cfg.tables.folders, cfg.tables.kv):
        store.requests.session.execute(
            SimpleStatement(f'TRUNCATE "{cfg.keyspace}"."{table}"'), timeout=600.0
        )
    nodetool("clearsnapshot", "--all", "--", cfg.keyspace)  # what each TRUNCATE kept
    targets = table_targets(cfg, store.requests.cluster.metadata)
    import_sstables(java_helper(), cfg, targets, dest, copy=True)
    return time.perf_counter() - started
