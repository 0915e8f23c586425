"""A store on a read-only mount can still be listed, inspected and swept."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import invoke, said


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


def test_a_read_only_store_can_be_inspected(tmp_path: Path) -> None:
    source = tmp_path / "src"
    url = f"sqlite:///{source}/meta.db"
    assert invoke(url, "import-keys", "-", input="a/b/x\na/c/y\n").exit_code == 0
    assert invoke(url, "delete-keys", "-", input="a/c/y\n").exit_code == 0
    assert invoke(url, "build", "--fpr", "0.0001").exit_code == 0
    with read_only(source, tmp_path / "ro") as mounted:
        ro = f"sqlite:///{mounted}/meta.db"
        listed = invoke(ro, "list-dirs", "--bucket", "default", "--sort")
        assert (listed.exit_code, listed.output) == (0, "a/\na/b/\na/c/\n")
        filters = invoke(ro, "filters", "list")
        assert (filters.exit_code, filters.output.count(" complete ")) == (0, 1)
        swept = invoke(ro, "sweep", "--out", "-")
        assert (swept.exit_code, swept.output) == (0, "default\ta/c/\n")
        written = invoke(ro, "import-keys", "-", input="z/q\n")
        assert (written.exit_code, said(written)) == (
            1,
            f"Error: {mounted}/meta.db is read-only here: this command writes to it\n",
        )
        # A dry run deletes nothing: its plan can be seen too.
        args = ("clean", "--max-delete-fraction", "1", "--min-age", "0")
        planned = invoke(ro, *args, "--dry-run")
        assert planned.exit_code == 0, planned.output
        assert "plan    1 directories to delete = " in planned.output
        # A real clean says why it cannot, not "free space?".
        cleaned = invoke(ro, *args, "--audit-log", str(tmp_path / "a.jsonl"))
        assert (cleaned.exit_code, said(cleaned)) == (
            1,
            f"Error: the SQLite metastore {ro} is read-only here: this command writes to it\n",
        )
