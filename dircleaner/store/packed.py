"""Batches of filter keys laid out as one byte buffer plus offsets, as the scans hand them over.

The build and the sweep hash every key they read with the compiled filter kernels, which take
keys packed: one buffer and each key's start and end. A store that can lay the keys out itself
(SQLite concatenates ``bucket || char(0) || parent || name || '/'`` in C) hands them over this
way, and the per-row Python work is a join and a few ``fromiter`` calls per batch; any other
store gets the same batches from its rows (``ObjectKeys.of_partitions``,
``FolderKeys.of_rows``).

A filter key is ``bucket + "\\0" + directory`` in UTF-8 (``dircleaner.paths.filter_key``). A
folder row's key is its directory's, ``parent + name + "/"``; the part up to the end of
``parent`` is its partition's key, the filter key of the partition's own directory.

numpy is imported here; the commands that never build nor sweep do not import this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from dircleaner.model import FolderRow, PartitionKey

Bytes = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]


def _pack(keys: Sequence[bytes]) -> tuple[Bytes, Ints]:
    """``keys`` as one buffer and ``len(keys) + 1`` offsets."""
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, keys), dtype=np.int64, count=len(keys)), out=offsets[1:])
    return np.frombuffer(b"".join(keys), dtype=np.uint8), offsets


@dataclass(frozen=True, slots=True)
class ObjectKeys:
    """A batch of objects partitions, each as its filter key ``bucket + "\\0" + parent`` (the
    root partition's key is ``bucket + "\\0"``): key ``i`` is ``buf[offsets[i]:offsets[i + 1]]``."""

    buf: Bytes
    offsets: Ints

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def of_keys(cls, keys: Sequence[bytes]) -> ObjectKeys:
        return cls(*_pack(keys))

    @classmethod
    def of_partitions(cls, batch: Sequence[PartitionKey]) -> ObjectKeys:
        return cls.of_keys([f"{key.bucket}\0{key.parent}".encode() for key in batch])


@dataclass(frozen=True, slots=True)
class FolderKeys:
    """A batch of folder rows in scan order (token, then clustering), packed.

    Row ``i``'s filter key is ``buf[offsets[i]:offsets[i + 1]]``; its partition's key (``bucket
    + "\\0" + parent``) is the same bytes up to ``prefix_ends[i]``, and its name lies between
    that and the key's final "/". ``tokens[i]`` is its partition's token.
    """

    tokens: Ints
    buf: Bytes
    offsets: Ints
    prefix_ends: Ints

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def of_columns(
        cls, tokens: Sequence[int], keys: Sequence[bytes], name_lens: Sequence[int]
    ) -> FolderKeys:
        """From each row's token, filter key and name length in UTF-8 bytes."""
        n = len(keys)
        buf, offsets = _pack(keys)
        names = np.fromiter(name_lens, dtype=np.int64, count=n)
        return cls(
            np.fromiter(tokens, dtype=np.int64, count=n), buf, offsets, offsets[1:] - 1 - names
        )

    @classmethod
    def of_tokens(
        cls,
        prefix_ends: Callable[[Ints, Bytes, Ints], Ints],
        tokens: Sequence[int],
        keys: Sequence[bytes],
    ) -> FolderKeys | None:
        """From each row's token and filter key, where ``prefix_ends`` finds each partition
        key's end from the token; None if it finds none for some row."""
        buf, offsets = _pack(keys)
        token_array = np.fromiter(tokens, dtype=np.int64, count=len(keys))
        ends = prefix_ends(token_array, buf, offsets)
        if len(ends) and int(ends.min()) < 0:
            return None
        return cls(token_array, buf, offsets, ends)

    @classmethod
    def of_rows(cls, batch: Sequence[FolderRow]) -> FolderKeys:
        """From rows as a store reads them (the generic path: one encode per row)."""
        keys = [f"{b}\0{p}{nm}/".encode() for _, b, p, nm in batch]
        # An ASCII name's length in bytes is its length (a flag check, no encode).
        names = [len(nm) if nm.isascii() else len(nm.encode()) for _, _, _, nm in batch]
        return cls.of_columns(list(map(itemgetter(0), batch)), keys, names)

    def prefix(self, i: int) -> tuple[str, str]:
        """``(bucket, parent)`` of row ``i``'s partition, decoded."""
        bucket, _, parent = self.raw(self.offsets[i], self.prefix_ends[i]).partition("\0")
        return bucket, parent

    def name(self, i: int) -> str:
        """Row ``i``'s name, decoded."""
        return self.raw(self.prefix_ends[i], self.offsets[i + 1] - 1)

    def raw(self, lo: int, hi: int) -> str:
        return self.buf[lo:hi].tobytes().decode()
