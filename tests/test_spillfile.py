"""The spill file: unlinked (nothing to find in its directory, its room gone with its holder),
checked as it is read back, and a write that fails for want of room is one ``SpillFailed``."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from dircleaner.errors import SpillFailed
from dircleaner.pipeline.spillfile import SPILL_DIR_ENV, SpillConfig, SpillFile, spill_directory

ROOT = Path(__file__).resolve().parents[1]


def held_in(directory: Path) -> list[str]:
    """What this process holds open in ``directory`` (unlinked files included)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory) + "/"):
            out.append(target)
    return out


def test_blocks_come_back_by_kind_and_the_file_is_never_in_its_directory(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "spill")
    spill.append(1, b"first")
    spill.append(2, b"other kind")
    spill.append(1, os.urandom(100_000))
    assert [len(b) for b in spill.blocks(1)] == [5, 100_000]
    assert list(spill.blocks(2)) == [b"other kind"]
    assert spill.raw_size == 5 + 10 + 100_000 < spill.size + 100
    # Held open, unlinked: no name in the directory, gone from the disk once let go.
    assert list((tmp_path / "spill").iterdir()) == []
    assert [t.endswith("(deleted)") for t in held_in(tmp_path / "spill")] == [True]
    assert oct((tmp_path / "spill").stat().st_mode & 0o777) == oct(0o700)
    spill.close()
    assert held_in(tmp_path / "spill") == []
    with pytest.raises(SpillFailed, match="let go"):
        list(spill.blocks(1))


def test_a_damaged_block_stops_the_read(tmp_path: Path) -> None:
    spill = SpillFile(tmp_path)
    spill.append(1, b"x" * 1000)
    assert spill._file is not None
    os.pwrite(spill._file.fileno(), b"\xff", spill.size - 3)
    with pytest.raises(SpillFailed, match="damaged"):
        list(spill.blocks(1))


def test_the_directory_is_the_option_then_the_environment_then_the_state_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv(SPILL_DIR_ENV, raising=False)
    assert spill_directory(SpillConfig()) == tmp_path / "state" / "dircleaner" / "spill"
    monkeypatch.setenv(SPILL_DIR_ENV, str(tmp_path / "env"))
    assert spill_directory(SpillConfig()) == tmp_path / "env"
    assert spill_directory(SpillConfig(tmp_path / "given")) == tmp_path / "given"


#: a process limited to files of 64 KiB writes a spill file of 1 MiB, then reserves as much
_OVER_THE_LIMIT = """
import os, resource, sys
from pathlib import Path
from dircleaner.errors import SpillFailed
from dircleaner.pipeline.spillfile import SpillFile
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
directory = Path(sys.argv[1])
spill = SpillFile(directory)
try:
    for _ in range(16):
        spill.append(1, os.urandom(65536))
except SpillFailed as exc:
    print("write:", exc)
try:
    SpillFile(directory, reserve=1 << 20)
except SpillFailed as exc:
    print("reserve:", exc)
"""


def test_a_write_over_the_file_size_limit_is_one_spill_failure(tmp_path: Path) -> None:
    """RLIMIT_FSIZE stands in for a full disk: the write (or the reservation) that would pass
    it fails, and the failure is one SpillFailed saying where and why."""
    if resource.getrlimit(resource.RLIMIT_FSIZE)[1] not in (resource.RLIM_INFINITY,):
        pytest.skip("this process's file size limit cannot be set")
    proc = subprocess.run(
        [sys.executable, "-c", _OVER_THE_LIMIT, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines == [
        f"write: cannot write to the spill file in {tmp_path}: File too large"
        " (--spill-dir: a writable directory on a filesystem with room)",
        f"reserve: cannot create the spill file in {tmp_path}: File too large"
        " (--spill-dir: a writable directory on a filesystem with room)",
    ]
