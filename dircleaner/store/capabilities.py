"""A store's optional capabilities: small protocols beyond the store's primitives, each
checked with ``isinstance`` (``IndexWriter``: the S3 front-end's index writes; ``BulkLoader``:
the generator's bulk rows; ``TombstoneCounter``: the tombstones a partition's read meets).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable


@runtime_checkable
class TombstoneCounter(Protocol):
    """Optional capability: the tombstones a read of one folders partition meets, as Cassandra
    counts them (tests and benchmarks check the live budget with it)."""

    def tombstones_in_partition(self, bucket: str, parent: str) -> int:
        """Tombstone cells a read of folders partition ``(bucket, parent)`` scans now."""


@runtime_checkable
class IndexWriter(Protocol):
    """Optional capability: the index writes an S3 front-end makes (the generator, ``put`` and
    ``delete``, restore and tests write through it; the job itself never does)."""

    def write_object_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        """Upsert ``(bucket, parent, name)`` object rows at ``timestamp_us``."""

    def write_folder_rows(self, rows: Sequence[tuple[str, str, str]], timestamp_us: int) -> None:
        """Upsert ``(bucket, parent, name)`` folder rows at ``timestamp_us`` (newer wins)."""

    def delete_object_rows(
        self, rows: Sequence[tuple[str, str, str]], timestamp_us: int
    ) -> int | None:
        """Delete ``(bucket, parent, name)`` object rows (the folder index is not touched).

        Returns how many rows existed and were removed, or None where the store cannot tell
        (Cassandra deletes blindly)."""


def index_writer(store: object) -> IndexWriter:
    """``store`` as an ``IndexWriter``; TypeError if it takes no index writes."""
    if not isinstance(store, IndexWriter):
        raise TypeError(f"{type(store).__name__} takes no index writes")
    return store


@runtime_checkable
class BulkLoader(Protocol):
    """Optional capability: pre-tokenised index rows in bulk (the generator's fast path).

    A store without it is loaded through ``IndexWriter``.
    """

    def bulk_insert(self, table: str, rows: Sequence[tuple[int, str, str, str, int]]) -> None:
        """Insert ``(token, bucket, parent, name, ts)`` rows into ``objects`` or ``folders``."""

    def bulk_loading(self) -> AbstractContextManager[None]:
        """A context in which bulk inserts may trade durability for speed."""
