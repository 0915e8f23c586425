"""Commands that only read write nothing to the store, and work where it cannot be written: a
read-only mount, or a file read-only by permission (as root, without CAP_DAC_OVERRIDE).

A command that writes, on such a file, says so in one line (exit 1) before it does anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from dircleaner.store.sqlite import SqliteStore
from dircleaner.timeutil import now_us
from tests.helpers import EAGER, invoke, said

#: as root: drop what lets root write a file whatever its mode (setpriv's bounding set; the
#: command's process then holds neither capability)
WITHOUT_DAC_OVERRIDE = ("setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--")


@contextmanager
def read_only(source: Path, where: Path) -> Iterator[Path]:
    """``source`` seen read-only at ``where``: a read-only bind mount as root (who may write
    anything a mode allows), else the same directory with its write permissions removed."""
    if os.geteuid() == 0:
        where.mkdir()
        subprocess.run(["mount", "--bind", str(source), str(where)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(where)], check=True)
            yield where
        finally:
            subprocess.run(["umount", "--lazy", str(where)], check=True)
        return
    for path in source.iterdir():
        path.chmod(0o444)
    source.chmod(0o555)
    try:
        yield source
    finally:
        source.chmod(0o755)


def unprivileged(argv: Sequence[str]) -> list[str]:
    """``argv`` as a process that file modes bind: as root, without CAP_DAC_OVERRIDE."""
    if os.geteuid() != 0:
        return list(argv)
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop root's CAP_DAC_OVERRIDE")
    return [*WITHOUT_DAC_OVERRIDE, *argv]


def run_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, bound by file modes."""
    argv = unprivileged([sys.executable, "-m", "dircleaner", "--store", url, *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def listing(directory: Path) -> dict[str, tuple[str, str]]:
    """The directory's own mode (as ``.``) and every file in it: its mode and its bytes' hash."""
    out = {".": (stat.filemode(directory.stat().st_mode), "")}
    for path in sorted(directory.iterdir()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        out[path.name] = (stat.filemode(path.stat().st_mode), digest)
    return out


@dataclass(frozen=True)
class Dataset:
    """A store that has had a real run (a filter, state rows, an audit log) and has empty
    directories again since."""

    directory: Path
    audit_log: Path
    generation: str

    @property
    def db(self) -> Path:
        return self.directory / "meta.db"

    @property
    def url(self) -> str:
        return f"sqlite:///{self.db}"

    def args(self, command: Sequence[str]) -> list[str]:
        return [a.format(audit=self.audit_log, generation=self.generation) for a in command]


@pytest.fixture
def dataset(tmp_path: Path) -> Dataset:
    directory = tmp_path / "store"
    url = f"sqlite:///{directory}/meta.db"
    keys = "".join(f"a/{i}/x\nb/{i}/c/y\n" for i in range(20))
    assert invoke(url, "import-keys", "-", input=keys).exit_code == 0
    first = "".join(f"a/{i}/x\n" for i in range(5))
    assert invoke(url, "delete-keys", "-", input=first).exit_code == 0
    audit = tmp_path / "audit.jsonl"
    ran = invoke(url, "run", *EAGER, "--audit-log", str(audit))
    assert ran.exit_code == 0, ran.output
    again = "".join(f"b/{i}/c/y\n" for i in range(3))
    assert invoke(url, "delete-keys", "-", input=again).exit_code == 0
    listed = invoke(url, "filters", "list", "--json")
    [generation] = [row["generation"] for row in json.loads(listed.stdout)]
    assert [p.name for p in directory.iterdir()] == ["meta.db"]  # the writers cleaned up
    return Dataset(directory, audit, generation)


#: every command that only reads, and every dry run
READS = {
    "run -n": ("run", "-n", *EAGER),
    "run -n, two workers": ("run", "-n", *EAGER, "--workers", "2"),
    "clean -n": ("clean", "-n", *EAGER),
    "clean -n --prefix": ("clean", "-n", "--prefix", "b/", "--min-age", "0"),
    "restore -n": ("restore", "-n", "{audit}"),
    "sweep": ("sweep",),
    "sweep, two workers": ("sweep", "--workers", "2"),
    "list-dirs": ("list-dirs",),
    "filters list": ("filters", "list"),
    "filters show": ("filters", "show", "{generation}"),
}


@pytest.mark.parametrize("command", READS.values(), ids=READS.keys())
def test_a_command_that_only_reads_writes_nothing(dataset: Dataset, command: Sequence[str]) -> None:
    """No state or key-value row, no lease, no -wal, -shm or -journal left: the same bytes,
    names and modes."""
    before = listing(dataset.directory)
    result = invoke(dataset.url, *dataset.args(command))
    assert result.exit_code == 0, result.output
    assert listing(dataset.directory) == before


#: run as the commands are: a write to the 0444 file must fail; says whether a file could be
#: created beside it
_PROBE = """
import os, sys
db = sys.argv[1]
try:
    open(db, "ab").close()
except PermissionError:
    pass
else:
    sys.exit("wrote to a 0444 file: the capability to override file modes is still held")
beside = db + "-probe"
try:
    open(beside, "x").close()
except PermissionError:
    print("created a file: False")
else:
    os.unlink(beside)
    print("created a file: True")
"""


@contextmanager
def read_only_by_permission(directory: Path, dir_mode: int) -> Iterator[None]:
    """The store's file 0444 in a directory of ``dir_mode``, checked to bind this test's
    processes: a write to the file fails (and, in a 0555 directory, creating a file)."""
    for path in directory.iterdir():
        path.chmod(0o444)
    directory.chmod(dir_mode)
    try:
        probe = subprocess.run(
            unprivileged([sys.executable, "-c", _PROBE, str(directory / "meta.db")]),
            capture_output=True,
            text=True,
            check=False,
        )
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout == f"created a file: {dir_mode & 0o200 != 0}\n"
        yield
    finally:
        directory.chmod(0o755)
        for path in directory.iterdir():
            path.chmod(0o644)


@pytest.mark.parametrize("dir_mode", [0o755, 0o555], ids=["writable directory", "0555 directory"])
@pytest.mark.parametrize("command", READS.values(), ids=READS.keys())
def test_a_command_that_only_reads_works_on_a_file_read_only_by_permission(
    dataset: Dataset, command: Sequence[str], dir_mode: int
) -> None:
    """As root without CAP_DAC_OVERRIDE: it succeeds and creates no file (a -shm or -wal made
    with the file's 0444 would stop the next writer)."""
    with read_only_by_permission(dataset.directory, dir_mode):
        before = listing(dataset.directory)
        result = run_cli(dataset.url, *dataset.args(command))
        assert result.returncode == 0, result.stderr
        assert listing(dataset.directory) == before


def test_the_next_writer_is_not_stopped_by_what_reads_of_a_read_only_file_left(
    dataset: Dataset,
) -> None:
    with read_only_by_permission(dataset.directory, 0o755):
        for command in (READS["list-dirs"], READS["sweep"], READS["run -n"]):
            assert run_cli(dataset.url, *command).returncode == 0
        dataset.db.chmod(0o644)
        ran = run_cli(dataset.url, "run", *EAGER, "--audit-log", str(dataset.audit_log))
        assert ran.returncode == 0, ran.stderr
    assert "b/0/c/" not in invoke(dataset.url, "list-dirs", "--bucket", "default").stdout


#: what a reader of an earlier release left beside a 0444 file: SQLite's plain ``mode=ro``
#: creates the -wal and -shm with the file's mode, and leaves them
_EARLIER_READER = """
import sqlite3, sys
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
conn.execute("SELECT count(*) FROM folders").fetchone()
conn.close()
"""


def test_what_an_earlier_release_left_beside_the_file_is_named_and_the_reads_still_work(
    dataset: Dataset,
) -> None:
    every = invoke(dataset.url, "list-dirs", "--bucket", "default").stdout
    with read_only_by_permission(dataset.directory, 0o755):
        left = subprocess.run(
            unprivileged([sys.executable, "-c", _EARLIER_READER, str(dataset.db)])
        )
        assert left.returncode == 0
        assert sorted(listing(dataset.directory)) == [".", "meta.db", "meta.db-shm", "meta.db-wal"]
        dataset.db.chmod(0o644)
        before = listing(dataset.directory)
        ran = run_cli(dataset.url, "run", *EAGER)
        assert (ran.returncode, ran.stderr) == (
            1,
            f"Error: {dataset.db} is read-only here (no write permission on meta.db-wal beside"
            " it: give it meta.db's owner and mode): this command writes to it; list-dirs,"
            " filters list|show, sweep and dry runs only read it\n",
        )
        listed = run_cli(dataset.url, "list-dirs", "--bucket", "default")
        assert (listed.returncode, listed.stdout) == (0, every), listed.stderr
        # The same files and bytes (SQLite itself gives an empty log it opens, if it may, the
        # database's mode: the reader repairs the -wal, not the -shm).
        after = listing(dataset.directory)
        assert {n: h for n, (_, h) in after.items()} == {n: h for n, (_, h) in before.items()}
        for name in ("meta.db-wal", "meta.db-shm"):
            (dataset.directory / name).chmod(0o644)
        ran = run_cli(dataset.url, "run", *EAGER, "--audit-log", str(dataset.audit_log))
        assert ran.returncode == 0, ran.stderr


#: every command that writes to an existing store
WRITES = {
    "run": ("run", *EAGER),
    "build": ("build",),
    "clean": ("clean", *EAGER),
    "clean --prefix": ("clean", "--prefix", "b/", "--min-age", "0"),
    "restore": ("restore", "{audit}"),
    "delete-keys": ("delete-keys", "{audit}"),
    "import-keys": ("import-keys", "{audit}"),
    "gen": ("gen", "--dirs", "10"),
    "filters rm": ("filters", "rm", "{generation}"),
}


@pytest.mark.parametrize("command", WRITES.values(), ids=WRITES.keys())
def test_a_command_that_writes_refuses_a_read_only_file_in_one_line_before_anything(
    dataset: Dataset, command: Sequence[str]
) -> None:
    with read_only_by_permission(dataset.directory, 0o755):
        before = listing(dataset.directory)
        result = run_cli(dataset.url, *dataset.args(command), "--json")
        assert listing(dataset.directory) == before
    assert result.returncode == 1
    line = (
        f"{dataset.db} is read-only here (no write permission on the file): this command writes"
        " to it; list-dirs, filters list|show, sweep and dry runs only read it"
    )
    assert result.stderr == f"Error: {line}\n"  # nothing before it: no store line, no progress
    assert json.loads(result.stdout)["error"] == line


def test_a_read_only_file_a_writer_has_open_is_read_with_its_log(dataset: Dataset) -> None:
    """A write committed to the log but not yet to the file is seen, through the log's index,
    and neither the log nor its index is changed."""
    with SqliteStore.open(dataset.url) as writer:
        writer.put_objects("default", ["late/k"], now_us())  # in the -wal, not checkpointed
        with read_only_by_permission(dataset.directory, 0o755):
            before = listing(dataset.directory)
            assert {"meta.db-wal", "meta.db-shm"} <= set(before)
            listed = run_cli(dataset.url, "list-dirs", "--bucket", "default")
            assert listing(dataset.directory) == before
    assert listed.returncode == 0, listed.stderr
    assert "late/\n" in listed.stdout.splitlines(keepends=True)


def test_a_read_only_mount_can_be_inspected_and_refuses_writes(tmp_path: Path) -> None:
    source = tmp_path / "src"
    url = f"sqlite:///{source}/meta.db"
    assert invoke(url, "import-keys", "-", input="a/b/x\na/c/y\n").exit_code == 0
    assert invoke(url, "delete-keys", "-", input="a/c/y\n").exit_code == 0
    assert invoke(url, "build", "--fpr", "0.0001").exit_code == 0
    with read_only(source, tmp_path / "ro") as mounted:
        ro = f"sqlite:///{mounted}/meta.db"
        why = "a read-only mount" if os.geteuid() == 0 else "no write permission on the file"
        refusal = (
            f"Error: {mounted}/meta.db is read-only here ({why}): this command writes to it;"
            " list-dirs, filters list|show, sweep and dry runs only read it\n"
        )
        listed = invoke(ro, "list-dirs", "--bucket", "default", "--sort")
        assert (listed.exit_code, listed.output) == (0, "a/\na/b/\na/c/\n")
        filters = invoke(ro, "filters", "list")
        assert (filters.exit_code, filters.output.count(" complete ")) == (0, 1)
        swept = invoke(ro, "sweep", "--out", "-")
        assert (swept.exit_code, swept.output) == (0, "default\ta/c/\n")
        written = invoke(ro, "import-keys", "-", input="z/q\n")
        assert (written.exit_code, said(written)) == (1, refusal)
        # A dry run deletes nothing: its plan can be seen too.
        args = ("clean", "--max-delete-fraction", "1", "--min-age", "0")
        planned = invoke(ro, *args, "--dry-run")
        assert planned.exit_code == 0, planned.output
        assert "plan    1 directories to delete = " in planned.output
        cleaned = invoke(ro, *args, "--audit-log", str(tmp_path / "a.jsonl"))
        assert (cleaned.exit_code, said(cleaned)) == (1, refusal)


# -- Cassandra: a dry run and a sweep write no row of dircleaner's own tables ---------------------


@pytest.mark.cassandra
def test_a_dry_run_and_a_sweep_write_no_row_on_cassandra(cassandra_url: str) -> None:
    import secrets

    from dircleaner.store import open_store
    from dircleaner.store.cassandra.store import CassandraStore
    from tests.test_cassandra_end_to_end import _init_keyspace, forget_bucket

    url = _init_keyspace(cassandra_url, "read_only")
    bucket = f"ro-{secrets.token_hex(4)}"
    args = ("--bucket", bucket)
    keys = "".join(f"d/{i}/x\n" for i in range(10))
    assert invoke(url, "import-keys", "-", *args, input=keys).exit_code == 0
    assert invoke(url, "delete-keys", "-", *args, input="d/1/x\nd/2/x\n").exit_code == 0
    assert invoke(url, "build", *args).exit_code == 0
    store = open_store(url)
    assert isinstance(store, CassandraStore)
    try:
        before = own_rows(store)
        for command in (("run", "-n", *EAGER), ("clean", "-n", *EAGER), ("sweep",)):
            result = invoke(url, *command, *args)
            assert result.exit_code == 0, result.output
            assert own_rows(store) == before, command
    finally:
        forget_bucket(store, bucket)
        store.close()


def own_rows(store: object) -> dict[str, object]:
    """dircleaner's own tables on Cassandra: how many rows, and each kv row's write time."""
    from dircleaner.store.cassandra.store import CassandraStore

    assert isinstance(store, CassandraStore)
    session, cfg = store.requests.session, store.config
    kv, ledger = (f'"{cfg.keyspace}"."{t}"' for t in (cfg.tables.kv, cfg.tables.ledger))
    written = session.execute(f"SELECT space, key, writetime(value) FROM {kv}")
    return {
        "kv": sorted((r[0], r[1], r[2]) for r in written),
        "ledger rows": session.execute(f"SELECT count(*) FROM {ledger}").one()[0],
    }
