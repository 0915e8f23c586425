"""Where a slice spills what it cannot keep in memory, and the file it spills to.

A spill file is an unlinked temporary file in the spill directory: it takes room there while
the process that wrote it holds it, shows in ``df`` (not in ``ls``), and is gone when that
process closes it or exits, however it exits (``kill -9`` included): no run leaves one behind,
and none is ever read by another run. The directory is ``SpillConfig.directory`` (``--spill-dir``)
or, on the host that runs the slice, ``$DIRCLEANER_SPILL_DIR``, else
``$XDG_STATE_HOME/dircleaner/spill`` (``~/.local/state/dircleaner/spill``).

The file is a sequence of blocks, each a header (its kind, stored and raw length, CRC32) and its
bytes, compressed with zlib at its fastest level: a block is checked as it is read back, so a
damaged file stops the slice instead of deleting what it did not hold. Writing is by offset
(``pwrite``), reading too (``pread``), so readers never share a file position. A write error
(a full disk, ``RLIMIT_FSIZE``) is ``SpillFailed``: one line.

The memory budget (``MemoryBudget``) is per process: the candidates that all the slices a process
holds keep in memory, together, before the next one to grow spills.
"""

from __future__ import annotations

import os
import struct
import tempfile
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dircleaner.errors import SpillFailed

#: candidates one process keeps in memory (about 350 bytes each as Python objects, planned)
#: over all the slices it holds, before a slice that grows spills to its file
DEFAULT_MEMORY_CANDIDATES = 1_000_000
#: a spilled slice is planned this many candidates at a time (its facts and plan in memory,
#: about 90 MB; a chunk reads the ledger once)
DEFAULT_PLAN_CHUNK = 250_000
#: the spill directory on the host that runs a slice, when --spill-dir is not given
SPILL_DIR_ENV = "DIRCLEANER_SPILL_DIR"

#: a block's header: its kind, its stored bytes, its bytes before compression, their CRC32
_HEADER = struct.Struct("<BIII")
#: zlib's fastest level: a third to a half of the raw size, at a few hundred MB/s
_LEVEL = 1


@dataclass(frozen=True)
class SpillConfig:
    """Where a clean spills its candidates, and how many a process keeps in memory."""

    #: None: ``$DIRCLEANER_SPILL_DIR`` or the state directory of the host that runs the slice
    directory: Path | None = None
    #: candidates one process keeps in memory before a slice spills (0: every slice spills)
    memory_candidates: int = DEFAULT_MEMORY_CANDIDATES
    #: a spilled slice is planned this many candidates at a time, in whole partitions
    plan_chunk: int = DEFAULT_PLAN_CHUNK

    def __post_init__(self) -> None:
        if self.memory_candidates < 0 or self.plan_chunk < 1:
            raise ValueError("a spill's memory budget must be >= 0 and its plan chunk >= 1")


def spill_directory(config: SpillConfig) -> Path:
    """The directory the slice spills to on this host (see the module's docstring)."""
    if config.directory is not None:
        return config.directory
    if given := os.environ.get(SPILL_DIR_ENV):
        return Path(given)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "dircleaner" / "spill"


class SpillFile:
    """Blocks appended to an unlinked temporary file, read back by kind in the order written.

    ``reserve``: bytes allocated on disk up front (``posix_fallocate``), so that writing that
    much later cannot fail for want of room.
    """

    def __init__(self, directory: Path, reserve: int = 0) -> None:
        self.directory = directory
        #: bytes written, and the same blocks' bytes before compression
        self.size = 0
        self.raw_size = 0
        #: bytes allocated on disk up front
        self.reserved = max(0, reserve)
        self._lock = threading.Lock()
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            # Held open for the file's whole life (closed by ``close``), never by a block.
            self._file: IO[bytes] | None = tempfile.TemporaryFile(  # noqa: SIM115
                dir=directory, prefix="dircleaner-spill-"
            )
            if reserve > 0:
                os.posix_fallocate(self._file.fileno(), 0, reserve)
        except OSError as exc:
            self.close()
            raise _failed("create", directory, exc) from exc

    def append(self, kind: int, raw: bytes) -> None:
        """Write one block of ``kind``."""
        stored = zlib.compress(raw, _LEVEL)
        block = _HEADER.pack(kind, len(stored), len(raw), zlib.crc32(stored)) + stored
        fd = self._fd()
        with self._lock:
            offset = self.size
            try:
                view = memoryview(block)
                while view:
                    written = os.pwrite(fd, view, offset)
                    if written <= 0:  # pragma: no cover - the kernel reports an error instead
                        raise OSError("no progress writing the spill file")
                    view, offset = view[written:], offset + written
            except OSError as exc:
                raise _failed("write to", self.directory, exc) from exc
            self.size = offset
            self.raw_size += len(raw)

    def blocks(self, kind: int) -> Iterator[bytes]:
        """The raw bytes of every block of ``kind``, in the order written, checked."""
        fd, offset, end = self._fd(), 0, self.size
        while offset < end:
            head = self._read(fd, _HEADER.size, offset)
            block_kind, stored_len, raw_len, crc = _HEADER.unpack(head)
            offset += _HEADER.size
            if block_kind == kind:
                stored = self._read(fd, stored_len, offset)
                raw = zlib.decompress(stored) if zlib.crc32(stored) == crc else b""
                if len(raw) != raw_len:
                    raise SpillFailed(
                        f"the spill file in {self.directory} is damaged: a block fails its checksum"
                    )
                yield raw
            offset += stored_len

    def contents(self) -> bytes:
        """Every block as written (to carry the file to another process: ``from_contents``)."""
        return self._read(self._fd(), self.size, 0)

    @classmethod
    def from_contents(cls, directory: Path, contents: bytes, raw_size: int) -> SpillFile:
        """A new spill file in ``directory`` holding ``contents`` (another file's)."""
        spill = cls(directory)
        try:
            if contents:
                view, offset = memoryview(contents), 0
                while view:
                    written = os.pwrite(spill._fd(), view, offset)
                    view, offset = view[written:], offset + written
        except OSError as exc:
            spill.close()
            raise _failed("write to", directory, exc) from exc
        spill.size, spill.raw_size = len(contents), raw_size
        return spill

    def close(self) -> None:
        """Let the file go (its room on disk with it)."""
        file, self._file = getattr(self, "_file", None), None
        if file is not None:
            file.close()

    @property
    def closed(self) -> bool:
        return self._file is None

    def _fd(self) -> int:
        if self._file is None:
            raise SpillFailed(f"the spill file in {self.directory} was already let go")
        return self._file.fileno()

    def _read(self, fd: int, length: int, offset: int) -> bytes:
        try:
            data = os.pread(fd, length, offset)
            while len(data) < length:
                more = os.pread(fd, length - len(data), offset + len(data))
                if not more:
                    break
                data += more
        except OSError as exc:
            raise _failed("read from", self.directory, exc) from exc
        if len(data) != length:
            raise SpillFailed(f"the spill file in {self.directory} ends early")
        return data


def _failed(what: str, directory: Path, exc: OSError) -> SpillFailed:
    reason = exc.strerror or str(exc)
    return SpillFailed(
        f"cannot {what} the spill file in {directory}: {reason}"
        " (--spill-dir: a writable directory on a filesystem with room)"
    )


class MemoryBudget:
    """The candidates a process's slices keep in memory, together (threads share it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.held = 0

    def take(self, candidates: int, limit: int) -> bool:
        """Hold ``candidates`` more, if that stays within ``limit``."""
        with self._lock:
            if self.held + candidates > limit:
                return False
            self.held += candidates
            return True

    def give_back(self, candidates: int) -> None:
        with self._lock:
            self.held -= candidates


#: this process's budget (a forked worker starts from its parent's, which holds none then)
PROCESS_BUDGET = MemoryBudget()
