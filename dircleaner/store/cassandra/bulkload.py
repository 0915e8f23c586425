"""Bulk loading a Cassandra metastore: index rows become sstables, the sstables go in whole.

The driver writes about ten thousand rows a second into a node; a 30M-directory dataset is
65M rows. Here the rows are streamed, in a compact binary form, through a pipe to a Java helper
(``java/DircleanerBulk.java``, compiled on first use, see ``bulkjava``) that hands them to
Cassandra's own ``CQLSSTableWriter`` — one writer per table, each fed by its own thread, each
buffering ``buffer_mib`` of rows before it sorts them and writes an sstable — with the same
``INSERT … USING TIMESTAMP ?`` the driver path prepares, so every row keeps its write time (a
delete at T relies on it). The sstables are then loaded by ``sstableloader`` (Cassandra's
``BulkLoader``, run in the helper: it streams each sstable to the replicas of its token ranges,
on any cluster) or by ``nodetool import`` (the node adopts the files; only on a one-node cluster
whose host sees this directory). Memory is bounded on both sides: Python holds one frame, the
helper a few frames per table and two buffers per table.

The mapping (keyspace, table and column names, the optional bucket column, the root's stored
form) is the store's: the tables' key columns and types are read from the cluster's schema.

A frame (big-endian): ``u8 table``, ``i32 rows``, ``u8 flags`` (1: one bucket for all rows,
2: one timestamp for all rows), then each text column (bucket if mapped, parent, name) as
``i32 bytes`` of UTF-8 values each ended by a 0 byte — keys and buckets never hold one — where
an empty parent repeats the previous row's, then ``i32 bytes`` of little-endian ``i64``
timestamps (µs). ``u8 255`` ends the stream.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dircleaner.errors import DircleanerError, UsageError
from dircleaner.paths import directories_of, folder_row_of, split_key
from dircleaner.store.cassandra.bulkjava import MAIN_CLASS, JavaHelper, java_helper
from dircleaner.store.cassandra.config import ENV_PASSWORD, ENV_USERNAME, CassandraConfig
from dircleaner.store.cassandra.mapping import _q

#: (token, bucket, parent, name, write time µs): the generator's row; the token is not used
Row = tuple[int, str, str, str, int]
#: the index tables the loader writes, by role
TABLES = ("objects", "folders")
#: MiB of rows (as Cassandra accounts them: about their serialized size) each table's writer
#: buffers before it sorts them and writes an sstable; 2.2M rows of the synthetic dataset make
#: about 80 MB of sstables at 16
DEFAULT_BUFFER_MIB = 16
#: the helper's heap per table and MiB of buffer: two buffers per table (one filling, one being
#: written), each taking about eight times its accounted size on the heap (measured: 512 MiB
#: holds two tables at 16 MiB, 384 MiB does not), and room for the frames in flight
HEAP_PER_BUFFER_MIB = 20
MIN_HEAP_MIB = 256
#: the storage (internode) port sstableloader streams to
DEFAULT_STORAGE_PORT = 7000
#: the JMX port nodetool import talks to
DEFAULT_JMX_PORT = 7199
VIA = ("sstableloader", "nodetool-import")
#: folder rows ``put_objects`` remembers having sent (then forgets them all and starts again)
RECENT_FOLDER_ROWS = 200_000
_END = b"\xff"
_ONE_BUCKET = 1
_ONE_TIMESTAMP = 2


class BulkLoadFailed(DircleanerError):
    """The helper failed (its one-line error is the message): nothing was loaded by this run,
    or, when loading had started, some sstables may have been."""


# -- the tables, as the cluster has them ---------------------------------------------------------


@dataclass(frozen=True)
class TableTarget:
    """One index table: what the sstable writer is told about it."""

    role: str
    keyspace: str
    table: str
    #: the table's key columns and types, as CREATE TABLE (enough for the writer's sstables)
    create_cql: str
    #: the driver path's statement: key columns and name, ``USING TIMESTAMP ?``
    insert_cql: str
    #: text values per row: bucket (if mapped), parent, name
    text_columns: int

    @property
    def directory(self) -> str:
        """Where its sstables go under the output directory (``keyspace/table``)."""
        return f"{self.keyspace}/{self.table}"


def table_targets(cfg: CassandraConfig, metadata: Any) -> list[TableTarget]:
    """Both index tables of ``cfg``'s mapping, their key columns read from the cluster's schema
    (``metadata``: the driver's ``cluster.metadata``; the store has checked the mapping)."""
    keyspace = metadata.keyspaces[cfg.keyspace]
    key = [*((cfg.columns.bucket,) if cfg.columns.bucket else ()), cfg.columns.parent]
    marks = ", ".join("?" for _ in range(len(key) + 1))
    targets = []
    for role in TABLES:
        name = getattr(cfg.tables, role)
        table = keyspace.tables[name]
        clustering = [c.name for c in table.clustering_key]
        if clustering != [cfg.columns.name]:
            raise UsageError(
                f"table {cfg.keyspace}.{name} is clustered by {', '.join(clustering)}: the bulk"
                f" loader writes rows keyed by ({', '.join(key)}) and {cfg.columns.name} only"
            )
        columns = [*table.partition_key, *table.clustering_key]
        types = ", ".join(f"{_q(c.name)} {c.cql_type}" for c in columns)
        partition = ", ".join(_q(c.name) for c in table.partition_key)
        order = ", ".join(
            f"{_q(c.name)} {'DESC' if c.is_reversed else 'ASC'}" for c in table.clustering_key
        )
        ref = f"{_q(cfg.keyspace)}.{_q(name)}"
        targets.append(
            TableTarget(
                role=role,
                keyspace=cfg.keyspace,
                table=name,
                create_cql=(
                    f"CREATE TABLE {ref} ({types}, PRIMARY KEY (({partition}),"
                    f" {_q(cfg.columns.name)})) WITH CLUSTERING ORDER BY ({order})"
                ),
                insert_cql=(
                    f"INSERT INTO {ref} ({', '.join(_q(c) for c in key)}, {_q(cfg.columns.name)})"
                    f" VALUES ({marks}) USING TIMESTAMP ?"
                ),
                text_columns=len(key) + 1,
            )
        )
    return targets


# -- frames --------------------------------------------------------------------------------------


def encode_frame(index: int, rows: Sequence[Row], cfg: CassandraConfig) -> bytes:
    """One frame of ``rows`` for table ``index`` (see the module's docstring)."""
    n = len(rows)
    _tokens, buckets, parents, names, stamps = zip(*rows, strict=True)
    flags = 0
    columns: list[Sequence[str]] = []
    if cfg.columns.bucket is not None:
        if buckets.count(buckets[0]) == n:
            flags |= _ONE_BUCKET
            columns.append(buckets[:1])
        else:
            columns.append(buckets)
    elif buckets.count(cfg.bucket_name) != n:
        other = next(b for b in buckets if b != cfg.bucket_name)
        raise UsageError(
            f"this metastore has no bucket column; its only bucket is {cfg.bucket_name!r},"
            f" not {other!r}"
        )
    root, prefix = cfg.root_parent, cfg.parent_prefix
    # mapping.stored_parent, inlined: this runs once per row loaded
    if prefix:
        stored = [prefix + p if p else root for p in parents]
    else:
        stored = [(root + p if p.startswith(root) else p) if p else root for p in parents]
    previous = [None, *stored[:-1]]
    columns.append(["" if p == q else p for p, q in zip(stored, previous, strict=True)])
    columns.append(names)
    if stamps.count(stamps[0]) == n:
        flags |= _ONE_TIMESTAMP
        stamps = stamps[:1]
    times = array("q", stamps)
    if sys.byteorder == "big":
        times.byteswap()
    parts = [struct.pack(">BiB", index, n, flags)]
    for column in columns:
        block = ("\0".join(column) + "\0").encode("utf-8")
        parts += [struct.pack(">i", len(block)), block]
    stamp_bytes = times.tobytes()
    parts += [struct.pack(">i", len(stamp_bytes)), stamp_bytes]
    return b"".join(parts)


# -- the writer process ----------------------------------------------------------------------------


@dataclass
class WriteReport:
    """What the sstable writer did."""

    rows: dict[str, int] = field(default_factory=dict)
    sstables: int = 0
    sstable_bytes: int = 0
    seconds: float = 0.0
    #: the helper's peak resident set, bytes (None where the OS does not say)
    peak_rss: int | None = None


class SSTableWriter:
    """The helper's ``write`` run: frames in on its stdin, sstables out under ``out_dir``."""

    def __init__(
        self,
        helper: JavaHelper,
        cfg: CassandraConfig,
        targets: Sequence[TableTarget],
        out_dir: Path,
        buffer_mib: int = DEFAULT_BUFFER_MIB,
    ) -> None:
        self.cfg = cfg
        self.out_dir = out_dir
        self._index = {t.role: i for i, t in enumerate(targets)}
        self._started = time.perf_counter()
        self._logs = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close or abort)
        heap = max(MIN_HEAP_MIB, HEAP_PER_BUFFER_MIB * buffer_mib * len(targets))
        args = ["write", str(out_dir), str(buffer_mib), str(len(targets))]
        for t in targets:
            args += [t.directory, t.create_cql, t.insert_cql, str(t.text_columns)]
        self._proc = subprocess.Popen(
            helper.command(heap, *args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._logs,
        )
        assert self._proc.stdin is not None
        self._stdin: IO[bytes] = self._proc.stdin

    def add(self, role: str, rows: Sequence[Row]) -> None:
        """Send ``rows`` of table ``role`` (``objects`` or ``folders``)."""
        if not rows:
            return
        frame = encode_frame(self._index[role], rows, self.cfg)
        try:
            self._stdin.write(frame)
        except BrokenPipeError:
            self._proc.wait()
            raise self._failure() from None

    def close(self) -> WriteReport:
        """End the stream, wait for the last sstables; the rows written per table."""
        try:
            self._stdin.write(_END)
            self._stdin.close()
        except BrokenPipeError:
            pass
        assert self._proc.stdout is not None
        out = self._proc.stdout.read().decode("utf-8", "replace")
        if self._proc.wait() != 0:
            raise self._failure()
        report = WriteReport(seconds=time.perf_counter() - self._started)
        for line in out.splitlines():
            word, *values = line.split()
            if word == "rows":
                report.rows[values[0]] = int(values[1])
            elif word == "peak_rss_kib" and int(values[0]) >= 0:
                report.peak_rss = int(values[0]) * 1024
        data = list(self.out_dir.rglob("*-Data.db"))
        report.sstables = len(data)
        report.sstable_bytes = sum(f.stat().st_size for f in self.out_dir.rglob("*") if f.is_file())
        self._logs.close()
        return report

    def abort(self) -> None:
        """Stop the helper (after a failure on this side)."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        self._logs.close()

    def _failure(self) -> BulkLoadFailed:
        return BulkLoadFailed(f"writing sstables failed: {_error_line(self._logs)}")


def _error_line(logs: IO[bytes]) -> str:
    """The helper's ``error: …`` line, or its last line of output."""
    logs.seek(0)
    lines = [ln.strip() for ln in logs.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    errors = [ln[len("error: ") :] for ln in lines if ln.startswith("error: ")]
    if errors:
        return errors[-1]
    return lines[-1] if lines else "the Java helper exited without saying why"


# -- loading the sstables ---------------------------------------------------------------------


def _helper_env(cfg: CassandraConfig) -> dict[str, str]:
    """The helper's environment: credentials go here, never on its command line."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV_USERNAME, ENV_PASSWORD)}
    if cfg.auth.username is not None and cfg.auth.password is not None:
        env[ENV_USERNAME] = cfg.auth.username
        env[ENV_PASSWORD] = cfg.auth.password
    return env


def _start_helper(
    command: list[str], env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """Start the helper (or nodetool), its output into a temporary file."""
    logs = tempfile.TemporaryFile()  # noqa: SIM115 (closed by _finish_helper)
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=logs, stderr=logs, env=env)
    return proc, logs


def _finish_helper(proc: subprocess.Popen[bytes], logs: IO[bytes], what: str) -> None:
    """Wait for it; its one-line error if it failed, or if it says that something failed
    (nodetool import exits 0 when a directory failed to import)."""
    with logs:
        try:
            code = proc.wait()
        except BaseException:  # stopped (a signal): the helper goes too
            proc.kill()
            proc.wait()
            raise
        logs.seek(0)
        said_failed = b"failed to import" in logs.read()
        if code != 0 or said_failed:
            raise BulkLoadFailed(f"{what} failed: {_error_line(logs)}")


def stream_sstables(
    helper: JavaHelper,
    cfg: CassandraConfig,
    targets: Sequence[TableTarget],
    sstable_dir: Path,
    storage_port: int = DEFAULT_STORAGE_PORT,
) -> None:
    """sstableloader: stream every table's sstables to the replicas of their token ranges."""
    if cfg.tls.enabled:
        raise UsageError(
            "the bulk loader does not speak TLS; load the sstables it writes with your"
            " cluster's own sstableloader (and its TLS settings)"
        )
    args = ["load", ",".join(cfg.hosts), str(cfg.port), str(storage_port), cfg.keyspace]
    for t in targets:
        if any((sstable_dir / t.directory).glob("*-Data.db")):
            args += [str(sstable_dir / t.directory), t.table]
    if len(args) > 5:
        proc, logs = _start_helper(helper.command(MIN_HEAP_MIB, *args), _helper_env(cfg))
        _finish_helper(proc, logs, "sstableloader")


def import_sstables(
    helper: JavaHelper,
    cfg: CassandraConfig,
    targets: Sequence[TableTarget],
    sstable_dir: Path,
    *,
    copy: bool = False,
    jmx_port: int = DEFAULT_JMX_PORT,
) -> None:
    """nodetool import on the first host, every table at once: the node adopts the files
    (moved, or copied with ``copy``). The node must see ``sstable_dir`` at this path: the same
    machine."""
    env = _helper_env(cfg)
    runs = []
    for t in targets:
        directory = sstable_dir / t.directory
        if not any(directory.glob("*-Data.db")):
            continue
        args = ["-h", cfg.hosts[0], "-p", str(jmx_port), "import"]
        if copy:
            args.append("--copy-data")
        command = helper.command(MIN_HEAP_MIB, *args, t.keyspace, t.table, str(directory.resolve()))
        command[command.index(MAIN_CLASS)] = "org.apache.cassandra.tools.NodeTool"
        runs.append((directory, t, _start_helper(command, env)))
    failures = []
    for directory, t, (proc, logs) in runs:
        try:
            _finish_helper(proc, logs, f"nodetool import of {t.keyspace}.{t.table}")
        except BulkLoadFailed as exc:
            failures.append(exc)
        if not copy and any(directory.glob("*-Data.db")):
            failures.append(
                BulkLoadFailed(
                    f"nodetool import left sstables in {directory}: the node could not adopt"
                    " them (is it on this machine, and may it write there?)"
                )
            )
    if failures:
        raise failures[0]


# -- the loader --------------------------------------------------------------------------------


@dataclass
class BulkLoadReport:
    """What a bulk load did, phase by phase."""

    via: str
    write: WriteReport = field(default_factory=WriteReport)
    load_seconds: float = 0.0
    sstable_dir: Path | None = None

    @property
    def rows(self) -> int:
        return sum(self.write.rows.values())


class CassandraBulkLoad:
    """A ``BulkLoader`` (``dircleaner.store.base``) for a Cassandra store: inside
    ``bulk_loading()`` the rows go to the sstable writer (``bulk_insert``: the generator's rows;
    ``put_objects``: keys, as S3 puts); leaving it closes the writer and loads the sstables
    ``via`` sstableloader or nodetool import. The sstables are written to a temporary
    directory under ``scratch_dir`` (default: the system's), removed afterwards, unless
    ``sstable_dir`` is given (then kept: ``import_sstables(copy=True)`` loads them again).
    ``on_rows`` is told the rows sent so far, every frame."""

    def __init__(
        self,
        cfg: CassandraConfig,
        metadata: Any,
        *,
        via: str = "sstableloader",
        sstable_dir: Path | None = None,
        scratch_dir: Path | None = None,
        buffer_mib: int = DEFAULT_BUFFER_MIB,
        helper: JavaHelper | None = None,
        on_rows: Callable[[int], None] | None = None,
    ) -> None:
        if via not in VIA:
            raise UsageError(f"unknown bulk load method {via!r} (one of {', '.join(VIA)})")
        if via == "nodetool-import" and len(metadata.all_hosts()) > 1:
            raise UsageError(
                "nodetool-import loads into one node only; this cluster has"
                f" {len(metadata.all_hosts())}: use sstableloader"
            )
        self.cfg = cfg
        self.via = via
        self.targets = table_targets(cfg, metadata)
        self.keep_dir = sstable_dir
        self.scratch_dir = scratch_dir
        self.buffer_mib = buffer_mib
        self.helper = helper if helper is not None else java_helper()
        self.report = BulkLoadReport(via=via, sstable_dir=sstable_dir)
        self.writer: SSTableWriter | None = None
        self.on_rows = on_rows
        self.rows_sent = 0
        #: folder rows sent lately: the ancestors keys share are sent once, not once per key
        self._recent_folders: set[tuple[str, str, str]] = set()

    def bulk_insert(self, table: str, rows: Sequence[Row]) -> None:
        if self.writer is None:
            raise RuntimeError("bulk_insert outside bulk_loading()")
        self.writer.add(table, rows)
        self.rows_sent += len(rows)
        if self.on_rows is not None:
            self.on_rows(self.rows_sent)

    def put_objects(self, bucket: str, keys: Sequence[str], timestamp_us: int) -> None:
        """Keys as S3 puts make them (``Store.put_objects``): each object row and a folder row
        for every ancestor directory, all at ``timestamp_us``."""
        recent = self._recent_folders
        if len(recent) > RECENT_FOLDER_ROWS:
            recent.clear()
        folders: list[Row] = []
        for key in keys:
            for directory in directories_of(key):
                row = (bucket, *folder_row_of(directory))
                if row not in recent:
                    recent.add(row)
                    folders.append((0, *row, timestamp_us))
        self.bulk_insert("folders", folders)
        self.bulk_insert("objects", [(0, bucket, *split_key(key), timestamp_us) for key in keys])

    @contextmanager
    def bulk_loading(self) -> Iterator[None]:
        if self.keep_dir is not None:
            _require_empty(self.keep_dir)
            out = self.keep_dir
        else:
            out = Path(tempfile.mkdtemp(prefix="dircleaner-sstables-", dir=self.scratch_dir))
        try:
            self.writer = SSTableWriter(self.helper, self.cfg, self.targets, out, self.buffer_mib)
            try:
                yield
            except BaseException:
                self.writer.abort()
                raise
            self.report.write = self.writer.close()
            started = time.perf_counter()
            if self.via == "sstableloader":
                stream_sstables(self.helper, self.cfg, self.targets, out)
            else:
                import_sstables(
                    self.helper, self.cfg, self.targets, out, copy=self.keep_dir is not None
                )
            self.report.load_seconds = time.perf_counter() - started
        finally:
            self.writer = None
            if self.keep_dir is None:
                shutil.rmtree(out, ignore_errors=True)


def _require_empty(directory: Path) -> None:
    if directory.exists() and any(directory.iterdir()):
        raise UsageError(f"{directory} is not empty: sstables are written into an empty directory")
    directory.mkdir(parents=True, exist_ok=True)
