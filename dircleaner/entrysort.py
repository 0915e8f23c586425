"""Directory entries sorted and made unique, the last of each winning, in bounded memory.

A restore reads an audit log of any length (a backlog night deletes millions of directories) and
must write each entry back once, saying how it had gone — its *last* entry's ``via``. Entries
are added in log order; every ``CHUNK_ENTRIES`` of them are sorted (stably, so equal entries
keep their log order) and spilled to a file of their own in a private temporary directory; the
unique rows come back by merging the files, ``heapq.merge`` taking equal keys in the order of
the files (log order), so the last entry of each row is the last one merged. Past ``FAN_IN``
files, the files are merged into one: the merge never holds more than ``FAN_IN`` blocks of
``BLOCK_ENTRIES``. A log of one chunk never touches the disk.
"""

from __future__ import annotations

import heapq
import pickle
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from operator import itemgetter
from pathlib import Path
from typing import BinaryIO

from dircleaner.errors import DircleanerError

#: ``(bucket, parent, name)``: a folder row
Row = tuple[str, str, str]
#: a row and how it had gone
Entry = tuple[str, str, str, str]

CHUNK_ENTRIES = 65_536
BLOCK_ENTRIES = 1_024
FAN_IN = 64

_row = itemgetter(0, 1, 2)


class SpillFailed(DircleanerError):
    """The entries could not be spilled to the temporary directory; nothing was written."""


class EntrySort:
    """Add ``(bucket, parent, name, via)`` in log order; read each row once, sorted, with the
    ``via`` of its last entry. Iterable any number of times once the adding is over; ``close``
    removes its files (also as a context manager)."""

    def __init__(
        self,
        chunk_entries: int = CHUNK_ENTRIES,
        fan_in: int = FAN_IN,
        block_entries: int = BLOCK_ENTRIES,
    ) -> None:
        self._chunk_entries = max(1, chunk_entries)
        self._fan_in = max(2, fan_in)
        self._block = max(1, block_entries)
        self._chunk: list[Entry] = []
        #: sorted runs on disk, in log order
        self._runs: list[Path] = []
        self._dir: Path | None = None
        self._serial = 0
        #: one object per distinct bucket, via and (consecutive) parent: entries share them
        self._shared: dict[str, str] = {}
        self._parent = ""
        self._sealed = False

    def add(self, bucket: str, parent: str, name: str, via: str) -> None:
        if self._sealed:
            raise RuntimeError("entries added after reading began")
        shared = self._shared
        if parent == self._parent:
            parent = self._parent
        else:
            self._parent = parent
        bucket = shared.setdefault(bucket, bucket)
        via = shared.setdefault(via, via)
        self._chunk.append((bucket, parent, name, via))
        if len(self._chunk) >= self._chunk_entries:
            self._chunk.sort(key=_row)  # stable: equal rows keep their log order
            self._spill(_last_of_each(self._chunk))
            self._chunk = []

    def __iter__(self) -> Iterator[tuple[Row, str]]:
        """Each row once, in order, with its last entry's ``via``."""
        if not self._sealed:
            self._chunk.sort(key=_row)
            self._chunk = list(_last_of_each(self._chunk))
            self._sealed = True
        sources: list[Iterable[Entry]] = [self._read(run) for run in self._runs]
        sources.append(self._chunk)
        for entry in _last_of_each(heapq.merge(*sources, key=_row)):
            yield entry[:3], entry[3]

    @property
    def spilled_files(self) -> int:
        """Sorted runs on disk now."""
        return len(self._runs)

    def close(self) -> None:
        self._chunk = []
        self._runs = []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> EntrySort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the files ------------------------------------------------------------------------------
    def _spill(self, entries: Iterable[Entry]) -> None:
        if len(self._runs) + 1 >= self._fan_in:
            runs, self._runs = self._runs, []
            merged = _last_of_each(heapq.merge(*(self._read(r) for r in runs), key=_row))
            self._runs.append(self._write(merged))
            for run in runs:
                run.unlink()
        self._runs.append(self._write(entries))

    def _write(self, entries: Iterable[Entry]) -> Path:
        try:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="dircleaner-restore-"))
            self._serial += 1
            path = self._dir / f"run-{self._serial:06d}"
            with path.open("wb") as out:
                _dump_blocks(entries, out, self._block)
        except OSError as exc:
            where = self._dir or tempfile.gettempdir()
            raise SpillFailed(
                f"cannot spill the audit log's entries to {where}: {exc.strerror or exc};"
                " nothing was written; free space there or set TMPDIR to a roomier directory"
            ) from exc
        return path

    @staticmethod
    def _read(path: Path) -> Iterator[Entry]:
        with path.open("rb") as stream:
            while True:
                try:
                    block: list[Entry] = pickle.load(stream)
                except EOFError:
                    return
                yield from block


def _dump_blocks(entries: Iterable[Entry], out: BinaryIO, size: int) -> None:
    block: list[Entry] = []
    for entry in entries:
        block.append(entry)
        if len(block) >= size:
            pickle.dump(block, out, protocol=pickle.HIGHEST_PROTOCOL)
            block = []
    if block:
        pickle.dump(block, out, protocol=pickle.HIGHEST_PROTOCOL)


def _last_of_each(entries: Iterable[Entry]) -> Iterator[Entry]:
    """Of entries sorted by row (equal rows in log order), the last of each row."""
    held: Entry | None = None
    for entry in entries:
        if held is not None and entry[:3] != held[:3]:
            yield held
        held = entry
    if held is not None:
        yield held
