"""The store's key–value primitive: what the job's own bookkeeping is built on.

A store keeps small values (and filter cells of up to ``MAX_VALUE_BYTES``) by ``(space, key)``:
a space is read by key prefix, a value may expire after a TTL, and a write may be a
compare-and-set. Cassandra keeps one partition per space (clustered by key) and makes the
compare-and-set a lightweight transaction; SQLite keeps one table with an expiry column and
compares and sets in one ``BEGIN IMMEDIATE`` transaction. The lease, the run state and the filter
cells are built on it once (``dircleaner.store.bookkeeping``).
"""

from __future__ import annotations

import enum
from typing import Literal, NamedTuple, Protocol

#: the largest value a store keeps (a filter cell: its chunks are at most this long)
MAX_VALUE_BYTES = 1 << 20


class _Any(enum.Enum):
    ANY = "any"


#: ``kv_write``'s ``expect`` when the write is unconditional (the default)
ANY: Literal[_Any.ANY] = _Any.ANY

#: what a compare-and-set expects to find: ``ANY`` (no condition), ``None`` (the key must not
#: exist or have expired) or the bytes the current value must equal
Expect = bytes | None | Literal[_Any.ANY]


class Entry(NamedTuple):
    """One live ``(key, value)`` of a space."""

    key: str
    value: bytes


class KeyValue(Protocol):
    """The primitive as the bookkeeping sees it (``Store`` declares it abstract)."""

    def kv_read(self, space: str, prefix: str = "", *, fresh: bool = False) -> list[Entry]: ...

    def kv_write(
        self,
        space: str,
        key: str,
        value: bytes | None,
        *,
        ttl_s: float | None = None,
        expect: Expect = ANY,
    ) -> bool: ...

    def kv_clear(self, space: str) -> None: ...


def check_write(space: str, key: str, value: bytes | None, expect: Expect) -> None:
    """ValueError for a write no store takes: an empty space or key, a value over
    ``MAX_VALUE_BYTES``, or a delete that expects the key to be absent (nothing to do)."""
    if not space or not key:
        raise ValueError("a key-value space and key cannot be empty")
    if value is not None and len(value) > MAX_VALUE_BYTES:
        raise ValueError(f"a value of {len(value)} bytes exceeds 1 MiB")
    if value is None and expect is None:
        raise ValueError("a delete that expects the key to be absent has nothing to do")


def prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix`` (UTF-8 byte order is
    code point order, so it bounds a clustering or SQLite range); None when there is none."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            nxt = last + 1
            if 0xD800 <= nxt <= 0xDFFF:  # surrogates are no characters: skip them
                nxt = 0xE000
            return "".join(chars) + chr(nxt)
    return None
