"""Serialized form of a filter: a checksummed little-endian header followed by the raw bits.

Header layout (all little-endian)::

    magic "DCBLOOM\\0" | version u16 | header length u16
    | engine (u8 length + UTF-8) | hash name (u8 length + UTF-8) | salt u32 | m u64 | k u32
    | expected n u64 | target p f64 | snapshot µs i64 | shard index u32 | shard count u32
    | items u64 | scope (u16 length + UTF-8) | body length u64 | body crc32 u32 | header crc32 u32

The header CRC32 covers every header byte before it; the body CRC32 covers the body. A filter
built in shards writes one header+body per shard; ``merge_shards`` ORs a complete set together.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from dircleaner.errors import FilterCorrupt, FilterMismatch
from dircleaner.filter.engines import Filter, engine_class

MAGIC = b"DCBLOOM\x00"
FORMAT_VERSION = 1

_PREFIX = struct.Struct("<8sHH")  # magic, version, header length
_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_PARAMS = struct.Struct("<IQIQdqIIQ")  # salt, m, k, n, p, snapshot_us, shard idx/count, items
_TAIL = struct.Struct("<QI")  # body length, body crc32
_MAX_HEADER = 0xFFFF


@dataclass(frozen=True, slots=True)
class FilterHeader:
    """Everything needed to rebuild, validate and merge one serialized filter (or shard)."""

    engine: str
    hash_name: str
    salt: int
    m: int
    k: int
    expected_n: int
    target_p: float
    snapshot_us: int
    shard_index: int
    shard_count: int
    items: int
    scope: str
    body_len: int
    body_crc: int


def _short_str(text: str, what: str) -> bytes:
    """A u8-length-prefixed UTF-8 field."""
    raw = text.encode("utf-8")
    if len(raw) > 0xFF:
        raise ValueError(f"{what} is {len(raw)} UTF-8 bytes, over 255")
    return _U8.pack(len(raw)) + raw


def encode_header(h: FilterHeader) -> bytes:
    """Pack a header, including its length and trailing CRC32."""
    scope = h.scope.encode("utf-8")
    try:
        fields = b"".join(
            (
                _short_str(h.engine, "engine name"),
                _short_str(h.hash_name, "hash name"),
                _PARAMS.pack(
                    h.salt,
                    h.m,
                    h.k,
                    h.expected_n,
                    h.target_p,
                    h.snapshot_us,
                    h.shard_index,
                    h.shard_count,
                    h.items,
                ),
                _U16.pack(len(scope)),
                scope,
                _TAIL.pack(h.body_len, h.body_crc),
            )
        )
    except struct.error as exc:
        raise ValueError(f"header field out of range: {exc}") from exc
    length = _PREFIX.size + len(fields) + _U32.size
    if length > _MAX_HEADER:
        raise ValueError(f"header would be {length} bytes, over {_MAX_HEADER} (scope too long)")
    head = _PREFIX.pack(MAGIC, FORMAT_VERSION, length) + fields
    return head + _U32.pack(zlib.crc32(head))


class _Reader:
    """Sequential unpacking of a header whose CRC already matched."""

    def __init__(self, data: bytes, offset: int) -> None:
        self.data = data
        self.offset = offset

    def take(self, size: int) -> bytes:
        end = self.offset + size
        if end > len(self.data):
            raise FilterCorrupt("malformed header: fields overrun the header length")
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        return fmt.unpack(self.take(fmt.size))

    def text(self, prefix: struct.Struct) -> str:
        (size,) = self.unpack(prefix)
        try:
            return self.take(size).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FilterCorrupt("malformed header: a text field is not UTF-8") from exc


def decode_header(data: bytes) -> FilterHeader:
    """Parse and verify a header (``data`` may continue with the body); FilterCorrupt if bad."""
    version, length = _read_prefix(data)
    if version != FORMAT_VERSION:
        raise FilterCorrupt(f"unsupported format version {version}")
    if length < _PREFIX.size + _U32.size or len(data) < length:
        raise FilterCorrupt("truncated header")
    (stored_crc,) = _U32.unpack_from(data, length - _U32.size)
    if zlib.crc32(data[: length - _U32.size]) != stored_crc:
        raise FilterCorrupt("header checksum mismatch")
    reader = _Reader(bytes(data[: length - _U32.size]), _PREFIX.size)
    engine = reader.text(_U8)
    hash_name = reader.text(_U8)
    salt, m, k, n, p, snapshot_us, shard_index, shard_count, items = reader.unpack(_PARAMS)
    scope = reader.text(_U16)
    body_len, body_crc = reader.unpack(_TAIL)
    if reader.offset != len(reader.data):
        raise FilterCorrupt("malformed header: trailing bytes after the last field")
    return FilterHeader(
        engine=engine,
        hash_name=hash_name,
        salt=salt,
        m=m,
        k=k,
        expected_n=n,
        target_p=p,
        snapshot_us=snapshot_us,
        shard_index=shard_index,
        shard_count=shard_count,
        items=items,
        scope=scope,
        body_len=body_len,
        body_crc=body_crc,
    )


def _read_prefix(data: bytes) -> tuple[int, int]:
    """(format version, header length) from the fixed prefix; FilterCorrupt if not a header."""
    if len(data) < _PREFIX.size:
        raise FilterCorrupt("truncated header")
    magic, version, length = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise FilterCorrupt("bad magic")
    return int(version), int(length)


def serialize(
    filt: Filter,
    *,
    expected_n: int,
    target_p: float,
    snapshot_us: int,
    shard_index: int,
    shard_count: int,
    items: int,
    scope: str,
) -> tuple[FilterHeader, bytes, bytes]:
    """Return (header, header bytes, body) for one filter or shard."""
    if not 0 <= shard_index < shard_count:
        raise ValueError(f"shard index {shard_index} not in [0, {shard_count})")
    for name, stated, known in (("n", expected_n, filt.n), ("p", target_p, filt.p)):
        if known is not None and stated != known:
            raise ValueError(f"filter was sized for {name}={known!r}, header would say {stated!r}")
    body = filt.bits_bytes()
    header = FilterHeader(
        engine=filt.engine,
        hash_name=filt.hash_name,
        salt=filt.salt,
        m=filt.m,
        k=filt.k,
        expected_n=expected_n,
        target_p=target_p,
        snapshot_us=snapshot_us,
        shard_index=shard_index,
        shard_count=shard_count,
        items=items,
        scope=scope,
        body_len=len(body),
        body_crc=zlib.crc32(body),
    )
    return header, encode_header(header), body


def check_body(header: FilterHeader, body: bytes) -> None:
    """FilterCorrupt unless ``body`` has the length and checksum ``header`` records."""
    if len(body) != header.body_len:
        problem = "truncated body" if len(body) < header.body_len else "oversized body"
        raise FilterCorrupt(f"{problem}: expected {header.body_len} bytes, got {len(body)}")
    crc = zlib.crc32(body)
    if crc != header.body_crc:
        raise FilterCorrupt(
            f"body checksum mismatch (crc32 expected {header.body_crc:08x}, got {crc:08x})"
        )


def deserialize(header_bytes: bytes, body: bytes) -> tuple[FilterHeader, Filter]:
    """Verify header and body, then rebuild the filter with the engine the header names."""
    header = decode_header(header_bytes)
    check_body(header, body)
    try:
        cls = engine_class(header.engine)
    except ValueError as exc:
        raise FilterMismatch(str(exc)) from None
    if cls.hash_name != header.hash_name:
        raise FilterMismatch(
            f"engine {header.engine} hashes with {cls.hash_name}, filter says {header.hash_name}"
        )
    try:
        filt = cls.from_bits(
            header.m, header.k, header.salt, body, n=header.expected_n, p=header.target_p
        )
    except ValueError as exc:
        raise FilterMismatch(f"filter does not fit engine {header.engine}: {exc}") from None
    return header, filt


#: header fields every shard of a generation shares, so that the shards OR-merge
MERGE_FIELDS = (
    "engine",
    "hash_name",
    "m",
    "k",
    "salt",
    "scope",
    "shard_count",
    "snapshot_us",
    "expected_n",
    "target_p",
)


def merge_params(header: FilterHeader) -> tuple[object, ...]:
    """The header's values of ``MERGE_FIELDS``: equal for the shards of one generation."""
    return tuple(getattr(header, name) for name in MERGE_FIELDS)


def _check_shard_set(parts: Sequence[tuple[FilterHeader, Filter]]) -> None:
    """FilterMismatch unless ``parts`` are the complete, consistent shards of one generation."""
    first = parts[0][0]
    seen: set[int] = set()
    for header, filt in parts:
        for field in MERGE_FIELDS:
            mine, theirs = getattr(header, field), getattr(first, field)
            if mine != theirs:
                raise FilterMismatch(
                    f"shard {header.shard_index} differs from shard {first.shard_index} "
                    f"in {field}: {mine!r} != {theirs!r}"
                )
        for field in ("engine", "m", "k", "salt"):
            if getattr(filt, field) != getattr(header, field):
                raise FilterMismatch(
                    f"shard {header.shard_index}: filter {field} {getattr(filt, field)!r} "
                    f"does not match its header ({getattr(header, field)!r})"
                )
        if not 0 <= header.shard_index < header.shard_count:
            raise FilterMismatch(
                f"shard index {header.shard_index} out of range for {header.shard_count} shards"
            )
        if header.shard_index in seen:
            raise FilterMismatch(f"duplicate shard index {header.shard_index}")
        seen.add(header.shard_index)
    if len(seen) != first.shard_count:
        have = ",".join(str(i) for i in sorted(seen))
        raise FilterMismatch(f"incomplete shard set: have {have} of {first.shard_count}")


def merge_shards(parts: Sequence[tuple[FilterHeader, Filter]]) -> tuple[FilterHeader, Filter]:
    """OR together the complete shard set of one generation into a single-shard filter.

    The inputs are not modified. The merged header has shard 0 of 1, the summed item count
    and the merged body's length and CRC.
    """
    if not parts:
        raise ValueError("merge_shards needs at least one shard")
    _check_shard_set(parts)
    ordered = sorted(parts, key=lambda part: part[0].shard_index)
    merged = ordered[0][1].copy()
    for _header, filt in ordered[1:]:
        merged |= filt
    body = merged.bits_bytes()
    header = replace(
        ordered[0][0],
        shard_index=0,
        shard_count=1,
        items=sum(h.items for h, _ in parts),
        body_len=len(body),
        body_crc=zlib.crc32(body),
    )
    return header, merged
